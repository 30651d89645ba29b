"""Batches for the benchmark harness (`specjax bench --batch B`): grouping prompts into calls,
splitting one call's output into per-row records, and the per-call timings.

With batch B, the prompts are cut into consecutive groups of B (prompt p sits in call
p // B, row p % B); each group is one `generate` / `generate_ar` call on int32[B, W]
right-padded prompts (W = the common prompt width of `prepare_prompts`). Every row of a
call keeps its own record (tokens, rounds, accepted / proposed / depth per round), so the
per-row metrics and the AR-equality check are exactly those of batch 1; wall time, TTFT and
TPOT belong to the call: the call ends when its slowest row does (with EOS off every row
generates max_new_tokens, and a call runs as many target forwards as its row with the most
rounds), which is exactly what a user of batching pays.
"""

from __future__ import annotations

import types

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["CallTimes", "call_times", "calls_of", "check_batches", "group_batches", "row_outputs"]


def check_batches(num_prompts: int, warmup: int, batch: int) -> None:
    """Raise ValueError unless `num_prompts` prompts, the first `warmup` discarded, cut into whole
    batches of `batch` rows leave at least one counted batch. Warm-up is counted in prompts and
    must itself be whole batches (a multiple of `batch`): no prompt is silently added or dropped."""
    if not isinstance(batch, (int, np.integer)) or isinstance(batch, bool) or batch < 1:
        raise ValueError(f"batch must be an int >= 1, got {batch!r}")
    if batch == 1:  # the historical message (batch 1 has no grouping constraint)
        if not 0 <= warmup < num_prompts:
            raise ValueError(f"warmup must lie in [0, {num_prompts}) (number of prompts), got {warmup}")
        return
    if num_prompts < batch:
        raise ValueError(f"batch {batch} needs at least {batch} prompts (one batch), got {num_prompts}")
    if num_prompts % batch:
        raise ValueError(f"batch {batch}: the number of prompts must be a multiple of the batch (whole batches, one "
                         f"compiled shape), got {num_prompts}; use {num_prompts - num_prompts % batch} or "
                         f"{num_prompts + batch - num_prompts % batch}")
    if warmup < 0 or warmup % batch:
        raise ValueError(f"batch {batch}: warmup counts prompts and must be a multiple of the batch (whole warm-up "
                         f"batches), got warmup {warmup}")
    if warmup >= num_prompts:
        raise ValueError(f"warmup must lie in [0, {num_prompts}) (number of prompts) so that at least one batch of "
                         f"{batch} is counted, got {warmup}")


def group_batches(prepared: list[tuple[jax.Array, jax.Array]], batch: int) -> list[tuple[jax.Array, jax.Array]]:
    """[(tokens int32[B, W], lengths int32[B])] per call: consecutive `prepare_prompts` rows stacked
    B = `batch` at a time (len(prepared) must be a multiple of `batch`). Batch 1: `prepared` itself."""
    if batch == 1:
        return list(prepared)
    if len(prepared) % batch:
        raise ValueError(f"{len(prepared)} prompts do not make whole batches of {batch}")
    groups = [prepared[i:i + batch] for i in range(0, len(prepared), batch)]
    return [(jnp.concatenate([t for t, _ in g]), jnp.concatenate([n for _, n in g])) for g in groups]


def row_outputs(out) -> list:
    """One host view per row of a generate output: tokens [1, M], num_tokens [1] and, for a
    speculative output, stats (accepted, proposed, depth [1, R], num_rounds [1]), each
    shaped like a batch-1 output's so that the harness's `_record` reads row 0 of it."""
    tokens, num = jax.device_get((out.tokens, out.num_tokens))
    stats = getattr(out, "stats", None)
    if stats is not None:
        stats = jax.device_get((stats.accepted, stats.proposed, stats.depth, stats.num_rounds))
    views = []
    for b in range(tokens.shape[0]):
        row = types.SimpleNamespace(tokens=tokens[b:b + 1], num_tokens=num[b:b + 1], stats=None)
        if stats is not None:
            acc, prop, depth, rounds = (np.asarray(x)[b:b + 1] for x in stats)
            row.stats = types.SimpleNamespace(accepted=acc, proposed=prop, depth=depth, num_rounds=rounds)
        views.append(row)
    return views


def calls_of(runs) -> list[list[int]]:
    """Indices into `runs` grouped by call (consecutive runs with the same `call`; a run whose
    `call` is None is a call of its own). Raises ValueError unless every call has as many rows."""
    groups: list[list[int]] = []
    for j, r in enumerate(runs):
        if groups and r.call is not None and runs[groups[-1][0]].call == r.call:
            groups[-1].append(j)
        else:
            groups.append([j])
    if len({len(g) for g in groups}) > 1:
        raise ValueError(f"calls of unequal batch sizes: {[len(g) for g in groups]}")
    for g in groups:
        if len({(runs[j].seconds, runs[j].ttft) for j in g}) != 1:
            raise ValueError(f"the rows of one call must share its wall time and TTFT (runs {g})")
    return groups


class CallTimes(types.SimpleNamespace):
    """Per call (arrays in call order): tokens (all rows), seconds, ttft (None each without TTFT calls),
    tpot = (seconds - ttft) / (longest row's tokens - 1) (None without TTFT or for 1-token rows),
    rounds = target forwards of the call (its row with the most rounds), aggregate = tokens / seconds."""


def call_times(runs, calls: list[list[int]], rounds: list[int]) -> CallTimes:
    """Pure: the per-call timings of `runs` grouped by `calls` (`rounds`: each run's rounds). For
    batch 1 these are the per-prompt values (tpot = (t_p - TTFT_p) / (T_p - 1))."""
    n = np.array([len(r.tokens) for r in runs])
    tokens = np.array([n[g].sum() for g in calls])
    longest = [n[g].max() for g in calls]
    seconds = np.array([runs[g[0]].seconds for g in calls])
    ttft = [runs[g[0]].ttft for g in calls]
    tpot = [(s - t) / (k - 1) if t is not None and k > 1 else None for s, t, k in zip(seconds, ttft, longest)]
    return CallTimes(tokens=tokens, seconds=seconds, ttft=ttft, tpot=tpot, aggregate=tokens / seconds,
                     rounds=[max(rounds[j] for j in g) for g in calls])
