"""Wall-clock timing of jitted calls, one way for every benchmark (harness, round split,
DDTree selection, the CLI): `time.perf_counter` around the call with
`jax.block_until_ready` inside the timed region and no garbage-collector pause in it."""

from __future__ import annotations

import gc
import statistics
import time

import jax


def timed_call(run, *args):
    """(output, seconds) of one call `run(*args)`, its outputs ready on the device."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        start = time.perf_counter()
        out = jax.block_until_ready(run(*args))
        return out, time.perf_counter() - start
    finally:
        if enabled:
            gc.enable()


def median_seconds(run, *args, repeats: int) -> float:
    """Median seconds of `repeats` timed calls `run(*args)` (no warm-up: compile first)."""
    return statistics.median(timed_call(run, *args)[1] for _ in range(repeats))
