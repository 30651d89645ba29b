"""Where a DDTree round spends its time, and what that predicts at another scale.

`round_split` times the parts of one round of `specjax.decode.speculative_round` for a
`DDTreeDrafter` from a real mid-generation state, each part jitted on its own, medians
over repetitions (milliseconds):

    draft        the block drafter's forward (context ingest + block -> logits [B, L, V])
    select       log-softmax + `select_tree` + pruning (the tree from the logits)
    mask         `ancestor_mask` of the verified prefix of the tree
    verify       the target forward over [root, tree] at the width the loop would use
    walk_commit  walk + feature gather + cache commit
    round        the whole round, jitted as the loop runs it (its parts fuse, so it is
                 not exactly the sum)
    ar_step      one autoregressive step of the target (forward over 1 token + argmax)

`project_speedup` combines such costs with a table of tau per budget (measured here, or
a paper's published values as cited input) into the speedup the costs predict:
tau * ar_step / round. It is a projection, not a measurement.
"""

from __future__ import annotations

import functools
import time

import jax
import jax.numpy as jnp
import numpy as np

from specjax.decode import cache_sizes, initial_state, speculative_round
from specjax.models.cache import commit
from specjax.models.model import forward, forward_tapped
from specjax.numerics import DEFAULT_PRECISION, matmul_scope
from specjax.sampling import Sampling
from specjax.tree import ancestor_mask, chain_tree, positions
from specjax.verify import greedy_walk, sampling_walk

PARTS = ("draft", "select", "mask", "verify", "walk_commit", "round", "ar_step")


def _median_ms(fn, *args, reps: int) -> float:
    jax.block_until_ready(fn(*args))  # compile + warm
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return 1e3 * float(np.median(times))


def _state_after(target, drafter, draft_params, tokens, lengths, rounds: int, max_new: int, sampling: Sampling):
    cfg, params = target
    slots, reserve = cache_sizes(drafter, tokens.shape[1], max_new)
    static = dict(max_new_tokens=max_new, eos_ids=(), sampling=sampling)
    start = jax.jit(functools.partial(initial_state, pad_id=0, num_slots=slots, reserve=reserve, **static),
                    static_argnums=(1, 2))
    step = jax.jit(functools.partial(speculative_round, **static), static_argnums=(1, 2))
    state = start(params, cfg, drafter, draft_params, tokens, lengths, jax.random.key(0))
    for _ in range(rounds):
        state = step(params, cfg, drafter, state)
    return state, lambda s: step(params, cfg, drafter, s)


def round_split(target, drafter, draft_params, tokens, lengths, *, rounds_before: int = 2, reps: int = 10,
                sampling: Sampling = Sampling(), max_new: int = 64,
                matmul_precision: str = DEFAULT_PRECISION) -> dict[str, float]:
    """Median milliseconds of each part of one round (`PARTS`, module docstring).

    target (cfg, params); drafter a `DDTreeDrafter` (its `block_drafter` provides the
    logits); tokens int32[B, T] / lengths int32[B] prompts. The state is the one after
    `rounds_before` rounds of the real loop, so caches hold real context. Also returns
    `width` (the verify width used) and `nodes` (kept tree nodes, row 0). Every part is
    traced under `matmul_precision` (specjax's policy, `specjax.numerics`), as the loop is.
    """
    with matmul_scope(matmul_precision):  # jit traces lazily: the scope must cover the first (tracing) calls
        return _round_split(target, drafter, draft_params, tokens, lengths, rounds_before, reps, sampling, max_new)


def _round_split(target, drafter, draft_params, tokens, lengths, rounds_before, reps, sampling, max_new):
    cfg, params = target
    state, run_round = _state_after(target, drafter, draft_params, tokens, lengths, rounds_before, max_new, sampling)
    active = ~state.done
    base = drafter.block_drafter
    draft = jax.jit(lambda ds, root, act: base.block_logits(ds.block, root, act)[0])
    logits = draft(state.draft_state, state.root, active)
    select = jax.jit(drafter.tree)
    tree, _ = select(logits, active)
    extent = int(np.max(np.where(np.asarray(tree.valid), np.arange(1, tree.tokens.shape[1] + 1), 0)))
    width = min(w for w in getattr(drafter, "verify_widths", (drafter.budget,)) if w >= extent)
    tree = jax.tree.map(lambda x: x[:, :width], tree)
    layers = tuple(drafter.target_layers)
    mask_fn = jax.jit(ancestor_mask)
    mask = mask_fn(tree)

    @jax.jit
    def verify(cache, tree, mask, root):
        block = jnp.concatenate([root[:, None], tree.tokens], axis=1)
        return forward_tapped(params, cfg, block, positions(tree, cache.lengths), mask, cache, layers)

    t_logits, t_cache, feats = verify(state.cache, tree, mask, state.root)

    @jax.jit
    def walk_commit(tree, t_logits, t_cache, feats, key):
        if sampling.greedy:
            result = greedy_walk(tree, t_logits, drafter.max_depth)
        else:
            result = sampling_walk(tree, t_logits, key, sampling.temperature, max_depth=drafter.max_depth)
        path_feats = jnp.take_along_axis(feats, result.path_slots[:, :, None, None], axis=1) if layers else None
        return commit(t_cache, result.path_slots, result.num_accepted + 1), path_feats

    ones = jnp.ones((tokens.shape[0], 1, 1), bool)

    @jax.jit
    def ar_step(cache, root):
        logits, cache = forward(params, cfg, root[:, None], cache.lengths[:, None], ones, cache)
        return jnp.argmax(logits[:, 0], axis=-1), cache

    out = {
        "draft": _median_ms(draft, state.draft_state, state.root, active, reps=reps),
        "select": _median_ms(select, logits, active, reps=reps),
        "mask": _median_ms(mask_fn, tree, reps=reps),
        "verify": _median_ms(verify, state.cache, tree, mask, state.root, reps=reps),
        "walk_commit": _median_ms(walk_commit, tree, t_logits, t_cache, feats, jax.random.key(1), reps=reps),
        "round": _median_ms(run_round, state, reps=reps),
        "ar_step": _median_ms(ar_step, state.cache, state.root, reps=reps),
    }
    return {**out, "width": width, "nodes": int(np.asarray(tree.valid[0]).sum())}


def project_speedup(costs: dict[int, dict[str, float]], taus: dict[int, float]) -> dict[int, float]:
    """Projected speedup over AR per budget: tau(N) * ar_step / round(N).

    costs: budget -> `round_split` output (ms); taus: budget -> tokens per round (bonus
    included). Budgets missing from either are skipped."""
    return {n: taus[n] * costs[n]["ar_step"] / costs[n]["round"] for n in costs if n in taus}


DOMINO_PARTS = ("backbone", "head", "verify", "round")


def domino_split(target, drafter, draft_params, tokens, lengths, *, rounds_before: int = 2, reps: int = 10,
                 sampling: Sampling = Sampling(), max_new: int = 64,
                 matmul_precision: str = DEFAULT_PRECISION) -> dict[str, float]:
    """Median milliseconds of a Domino round's parts (`DOMINO_PARTS`) from a real mid-generation state:

    backbone  the DFlash forward + the LM head over the K draft rows (base logits, in parallel)
    head      the sequential rollout: K GRU steps + corrections + argmax / samples
    verify    the target forward over [root, K drafts] (chain mask, tapped features)
    round     the whole round as the loop runs it
    drafter: a `DominoDrafter` (with `use_head=False` the rollout is K argmax / sample steps
    over the base logits, no GRU). The paper reports +2.8% latency for the head.
    """
    with matmul_scope(matmul_precision):
        cfg, params = target
        state, run_round = _state_after(target, drafter, draft_params, tokens, lengths, rounds_before, max_new,
                                        sampling)
        ds, root, active = state.draft_state, state.root, ~state.done
        backbone = jax.jit(lambda ds, root, active: drafter.base_logits(ds, root, active)[:2])
        rows, base = backbone(ds, root, active)
        head = jax.jit(lambda ds, rows, base, root, key: drafter.rollout_from(ds, rows, base, root, key, sampling))
        tree = chain_tree(head(ds, rows, base, root, jax.random.key(0))[0])
        layers = tuple(drafter.target_layers)

        @jax.jit
        def verify(cache, tree, root):
            block = jnp.concatenate([root[:, None], tree.tokens], axis=1)
            return forward_tapped(params, cfg, block, positions(tree, cache.lengths), ancestor_mask(tree), cache, layers)

        return {
            "backbone": _median_ms(backbone, ds, root, active, reps=reps),
            "head": _median_ms(head, ds, rows, base, root, jax.random.key(1), reps=reps),
            "verify": _median_ms(verify, state.cache, tree, root, reps=reps),
            "round": _median_ms(run_round, state, reps=reps),
        }
