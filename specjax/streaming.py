"""Per-round streaming out of the jitted decode loops: the tokens each round commits, on the host.

`generate(..., on_round=f)` / `generate_ar(..., on_round=f)` call ``f(tokens)`` on the host after the
prefill and after every round (every step for `generate_ar`), in order: ``tokens`` is a list with
one int32 array per row, the tokens that row committed since the previous call (empty for a row
that has finished). The loop itself stays one compiled program: each round ends with an ordered
`jax.experimental.io_callback` to `emit`, compiled in only when streaming (a static flag, so the
program does not depend on which `f` is listening), and `emit` hands the new tokens to the
listener of the call that produced them: `listening` registers the call's listener under a fresh
integer id, which the call passes into its jitted loop as a traced int32 scalar, and every `emit`
sends that id along with the tokens. Any number of generations may stream at once, from any
threads: each listener receives only its own call's rounds. Streaming synchronises the host once
per round; without a listener nothing is transferred.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from typing import Callable, Iterator

import jax
import numpy as np
from jax.experimental import io_callback

__all__ = ["listening", "emit"]

_LISTENERS: dict[int, Callable[[list[np.ndarray]], None]] = {}  # listener id -> the running call's listener
_IDS = itertools.count(1)
_LOCK = threading.Lock()


@contextlib.contextmanager
def listening(on_round: Callable[[list[np.ndarray]], None] | None) -> Iterator[int | None]:
    """Route the streamed rounds of the generation run inside the block to `on_round`: yields the
    listener's id, which the call passes to its loop for `emit` (None: nothing to route). The caller
    blocks on the output before leaving (rounds arrive while it runs)."""
    if on_round is None:
        yield None
        return
    if not callable(on_round):
        raise TypeError(f"on_round must be callable as on_round(tokens per row), got {type(on_round).__name__}")
    with _LOCK:
        listener = next(_IDS) % 2**31  # an int32 on the device
        _LISTENERS[listener] = on_round
    try:
        yield listener
    finally:
        with _LOCK:
            _LISTENERS.pop(listener, None)


def _deliver(listener, start, count, out) -> None:
    listener, start, count, out = int(np.asarray(listener)), np.asarray(start), np.asarray(count), np.asarray(out)
    with _LOCK:
        on_round = _LISTENERS.get(listener)
    if on_round is not None:
        on_round([out[b, start[b]:count[b]] for b in range(len(count))])


def emit(listener: jax.Array, start: jax.Array, count: jax.Array, out: jax.Array) -> None:
    """Inside a jitted loop: hand row b's tokens out[b, start[b]:count[b]] to the listener with id
    `listener` (an int32 scalar, traced: one program serves every listener), in order.
    start, count: int32[B]; out: int32[B, M] the output buffer."""
    io_callback(_deliver, None, listener, start, count, out, ordered=True)
