"""Per-round streaming out of the jitted decode loops: the tokens each round commits, on the host.

`generate(..., on_round=f)` / `generate_ar(..., on_round=f)` call ``f(tokens)`` on the host after the
prefill and after every round (every step for `generate_ar`), in order: ``tokens`` is a list with
one int32 array per row, the tokens that row committed since the previous call (empty for a row
that has finished). The loop itself stays one compiled program: each round ends with an ordered
`jax.experimental.io_callback` to `emit`, compiled in only when streaming (a static flag, so the
program does not depend on which `f` is listening), and `emit` hands the new tokens to the
listener of the call that is running (`listening`). Streaming synchronises the host once per
round; without a listener nothing is transferred.
"""

from __future__ import annotations

import contextlib
from typing import Callable, Iterator

import jax
import numpy as np
from jax.experimental import io_callback

__all__ = ["listening", "emit"]

_LISTENERS: list[Callable[[list[np.ndarray]], None]] = []  # the running call's listener (innermost last)


@contextlib.contextmanager
def listening(on_round: Callable[[list[np.ndarray]], None] | None) -> Iterator[None]:
    """Route the streamed rounds of the generation run inside the block to `on_round` (None: nothing
    to route); the caller blocks on the output before leaving (rounds arrive while it runs)."""
    if on_round is None:
        yield
        return
    if not callable(on_round):
        raise TypeError(f"on_round must be callable as on_round(tokens per row), got {type(on_round).__name__}")
    _LISTENERS.append(on_round)
    try:
        yield
    finally:
        _LISTENERS.pop()


def _deliver(start, count, out) -> None:
    start, count, out = np.asarray(start), np.asarray(count), np.asarray(out)
    if _LISTENERS:
        _LISTENERS[-1]([out[b, start[b]:count[b]] for b in range(len(count))])


def emit(start: jax.Array, count: jax.Array, out: jax.Array) -> None:
    """Inside a jitted loop: hand row b's tokens out[b, start[b]:count[b]] to the listener, in order.
    start, count: int32[B]; out: int32[B, M] the output buffer."""
    io_callback(_deliver, None, start, count, out, ordered=True)
