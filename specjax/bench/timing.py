"""Wall-clock timing of jitted calls, one way for every benchmark (harness, round split, the device benchmark,
DDTree selection, the CLI): `time.perf_counter` around the call with
`jax.block_until_ready` inside the timed region and no garbage-collector pause in it; and
`compile_totals`, the seconds jax itself reports spending on tracing and compiling."""

from __future__ import annotations

import gc
import statistics
import time

import jax

__all__ = ["compile_totals", "fastest_pair_s", "format_figure", "interleaved_medians", "median_seconds", "timed_call",
           "warm_median_s", "warm_times_s"]


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


def format_figure(x, spec: str, scale: float = 1.0) -> str:
    """x * scale formatted with `spec`, or "-" for a figure that was not measured or could not be (None)."""
    return "-" if x is None else format(x * scale, spec)


def median_seconds(run, *args, repeats: int) -> float:
    """Median seconds of `repeats` timed calls `run(*args)` (no warm-up: compile first)."""
    return statistics.median(timed_call(run, *args)[1] for _ in range(repeats))


def warm_times_s(fn, reps: int) -> list[float]:
    """Wall seconds of each of `reps` calls of fn() (blocked), after one excluded warm-up call."""
    jax.block_until_ready(fn())
    return [timed_call(fn)[1] for _ in range(reps)]


def warm_median_s(fn, reps: int) -> float:
    """Median wall seconds of `reps` calls of fn() (blocked), after one excluded warm-up call."""
    return statistics.median(warm_times_s(fn, reps))


def fastest_pair_s(fn_a, fn_b, reps: int) -> tuple[float, float]:
    """Fastest wall seconds of `reps` calls each of fn_a() and fn_b() (blocked), called in
    alternation after one excluded warm-up call of each. A difference of two timings is what
    the caller wants (ar: N steps minus 1): load from other processes only ever adds time, so
    the minima, taken over the same stretch of wall time, keep the difference from going
    negative on a busy machine where medians of separate runs could."""
    jax.block_until_ready(fn_a()), jax.block_until_ready(fn_b())
    times_a, times_b = [], []
    for _ in range(reps):
        for fn, times in ((fn_a, times_a), (fn_b, times_b)):
            times.append(timed_call(fn)[1])
    return min(times_a), min(times_b)


# jax's monitoring events for its compile stages -> the totals' keys.
_COMPILE_EVENTS = {"jaxpr_trace_duration": "trace_s", "jaxpr_to_mlir_module_duration": "lower_s",
                   "backend_compile_duration": "xla_compile_s"}
_totals: dict[str, float] | None = None


def compile_totals() -> dict[str, float]:
    """A snapshot of this process's running totals since the first call: trace_s (tracing to a
    jaxpr), lower_s (to MLIR), xla_compile_s (XLA backend compilation), compiles (their count),
    cache_hits (programs loaded from a persistent compilation cache instead). Subtract two
    snapshots for what happened in between. Counts from jax's own monitoring events; the first
    call registers the listeners (once per process)."""
    global _totals
    if _totals is None:
        _totals = {"trace_s": 0.0, "lower_s": 0.0, "xla_compile_s": 0.0, "compiles": 0, "cache_hits": 0}

        def on_duration(event: str, seconds: float, **_):
            name = _COMPILE_EVENTS.get(event.rsplit("/", 1)[-1])
            if name:
                _totals[name] += seconds
                _totals["compiles"] += name == "xla_compile_s"

        def on_event(event: str, **_):
            _totals["cache_hits"] += event.endswith("/compilation_cache/cache_hits")

        jax.monitoring.register_event_duration_secs_listener(on_duration)
        jax.monitoring.register_event_listener(on_event)
    return dict(_totals)


def interleaved_medians(runs, repeats: int) -> list[tuple[object, float]]:
    """Per call in `runs` (argument-less callables): (its last output, median seconds over `repeats` warm
    calls). Every call is compiled and warmed first, then the calls alternate, so a drifting machine hits
    all of them alike."""
    outs = [jax.block_until_ready(run()) for run in runs]  # compile + warm-up
    times = [[] for _ in runs]
    for _ in range(repeats):
        for i, run in enumerate(runs):
            outs[i], seconds = timed_call(run)
            times[i].append(seconds)
    return [(out, statistics.median(t)) for out, t in zip(outs, times)]
