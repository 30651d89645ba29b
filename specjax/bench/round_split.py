"""Where a DDTree (Domino, Graft) round spends its time, and what that predicts at another scale.

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

`DOMINO_PARTS` and `GRAFT_PARTS` are Domino's and Graft's; any other drafter gets the parts of the drafter
protocol (`protocol_split`: propose, verify, commit_observe), the whole round and one AR step. Each split is a
`RoundSplit` record (drafter class, parts, timing function);
this module declares its own in ``ROUND_SPLITS`` and `SPLITS` collects every module's (`specjax.declared`:
a drafter kind declared outside the package brings its own), which `method_split` and the bench's
``--round-split`` read.

`project_speedup` combines such costs with a table of tau per budget (measured here, or
a paper's published values as cited input) into the speedup the costs predict:
tau * ar_step / round. It is a projection, not a measurement.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from specjax.bench.timing import median_seconds
from specjax.declared import Registry
from specjax.decode import cache_sizes, initial_state, speculative_round, target_layers
from specjax.drafters.ddtree import DDTreeDrafter
from specjax.drafters.domino import DominoDrafter
from specjax.drafters.graft import GraftDrafter
from specjax.drafters.protocol import Verified
from specjax.drafters.retrieval import retrieve, union, update_table
from specjax.models.cache import commit
from specjax.models.model import forward
from specjax.numerics import DEFAULT_PRECISION, matmul_scope
from specjax.ops import argmax, device_widths
from specjax.sampling import Sampling
from specjax.tree import ancestor_mask, chain_tree, node_positions
from specjax.verify import slot_targets, tree_forward, verify_tree, walk

@dataclasses.dataclass(frozen=True)
class RoundSplit:
    """What a drafter class's round split times.

    Fields:
      drafter: the drafter class it splits (its subclasses too, unless a nearer class has a split).
      parts: the millisecond entries it returns, "round" and "ar_step" among them.
      time: (target, drafter, draft_params, tokens, lengths, *, rounds_before, reps, sampling, max_new,
        matmul_precision) -> {part: ms, ...} (extra entries, e.g. "width", are not parts).
    """

    drafter: type
    parts: tuple[str, ...]
    time: Callable[..., dict]


# drafter class -> its `RoundSplit`: every module's ``ROUND_SPLITS`` (`specjax.declared`), read at each use
SPLITS = Registry(__package__, "ROUND_SPLITS", key=lambda split: split.drafter, several=True)

PARTS = ("draft", "select", "mask", "verify", "walk_commit", "round", "ar_step")


def _median_ms(fn, *args, reps: int) -> float:
    """Median milliseconds of `reps` calls of `fn(*args)` after one compile + warm-up call."""
    jax.block_until_ready(fn(*args))
    return 1e3 * median_seconds(fn, *args, repeats=reps)


def _with_params(fn, params):
    """fn(params, *args) jitted, as a function of *args: the weights enter as arguments, as in the decode
    loop. (Closed over, they would be compile-time constants: XLA then folds layouts into them, e.g. the
    tied LM head's 113 MB transpose on SmolLM2, and times a program the loop never runs.)"""
    return functools.partial(jax.jit(fn), params)


def _ar_step(target, batch: int):
    """One jitted autoregressive step of the target: (cache, root int32[B]) -> (next token, cache)."""
    cfg, params = target
    ones = jnp.ones((batch, 1, 1), bool)

    def ar_step(params, cache, root):
        logits, cache = forward(params, cfg, root[:, None], cache.lengths[:, None], ones, cache)
        return argmax(logits[:, 0]), cache  # the loop's greedy pick (`specjax.decode.pick_token`)

    return _with_params(ar_step, params)


def state_after(target, drafter, draft_params, tokens, lengths, rounds: int, max_new: int, sampling: Sampling):
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
    state, run_round = state_after(target, drafter, draft_params, tokens, lengths, rounds_before, max_new, sampling)
    active = ~state.done
    base = drafter.block_drafter
    draft = jax.jit(lambda ds, root, act: base.block_logits(ds.block, root, act)[0])
    logits = draft(state.draft_state, state.root, active)
    select = jax.jit(drafter.tree)
    tree, _ = select(logits, active)
    extent = int(np.max(np.where(np.asarray(tree.valid), np.arange(1, tree.tokens.shape[1] + 1), 0)))
    width = min(w for w in device_widths(getattr(drafter, "verify_widths", (drafter.budget,))) if w >= extent)
    tree = jax.tree.map(lambda x: x[:, :width], tree)
    layers = tuple(drafter.target_layers)
    mask_fn = jax.jit(functools.partial(ancestor_mask, max_depth=drafter.max_depth))  # as the loop builds it
    mask = mask_fn(tree)

    def verify(params, cache, tree, mask, root):
        return tree_forward(params, cfg, tree, root, cache, layers, mask=mask)

    verify = _with_params(verify, params)
    t_logits, t_cache, feats = verify(state.cache, tree, mask, state.root)

    @jax.jit
    def walk_commit(tree, t_logits, t_cache, feats, key):
        result = walk(tree, slot_targets(t_logits, key, sampling), drafter.max_depth)  # the loop's own walk
        path_feats = jnp.take_along_axis(feats, result.path_slots[:, :, None, None], axis=1) if layers else None
        return commit(t_cache, result.path_slots, result.num_accepted + 1), path_feats

    ar_step = _ar_step(target, tokens.shape[0])
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


def costs_from_figures(budgets, ar_ms: float, verify_ms: dict[int, float], select_ms: float,
                       draft_ms: float) -> dict[int, dict[str, float]]:
    """Round costs per budget from per-part figures measured elsewhere (e.g. `bench-device` on a GPU),
    in `round_split`'s form for `project_speedup`: round(N) = draft + select + verify(N + 1), the
    verify forward of the root and N nodes linearly interpolated between the measured widths
    (verify_ms: pending tokens T -> ms; extrapolated from the last two beyond them)."""
    widths = sorted(verify_ms)
    if len(widths) < 2:
        raise ValueError(f"need verify figures at two widths at least, got {widths}")

    def verify(t):
        hi = next((i for i, w in enumerate(widths) if w >= t), len(widths) - 1)
        lo, hi = (hi - 1, hi) if hi > 0 else (0, 1)
        w0, w1 = widths[lo], widths[hi]
        return verify_ms[w0] + (verify_ms[w1] - verify_ms[w0]) * (t - w0) / (w1 - w0)

    return {n: {"draft": draft_ms, "select": select_ms, "verify": verify(n + 1), "ar_step": ar_ms,
                "round": draft_ms + select_ms + verify(n + 1)} for n in budgets}


DOMINO_PARTS = ("backbone", "head", "verify", "round", "ar_step")


def domino_split(target, drafter, draft_params, tokens, lengths, *, rounds_before: int = 2, reps: int = 10,
                 sampling: Sampling = Sampling(), max_new: int = 64,
                 matmul_precision: str = DEFAULT_PRECISION) -> dict[str, float]:
    """Median milliseconds of a Domino round's parts (`DOMINO_PARTS`) from a real mid-generation state:

    backbone  the DFlash forward + the LM head over the K draft rows (base logits, in parallel)
    head      the sequential rollout: K GRU steps + corrections + argmax / samples
    verify    the target forward over [root, K drafts] (chain mask, tapped features)
    round     the whole round as the loop runs it
    ar_step   one autoregressive step of the target
    drafter: a `DominoDrafter` (with `use_head=False` the rollout is K argmax / sample steps
    over the base logits, no GRU). The paper reports +2.8% latency for the head.
    """
    with matmul_scope(matmul_precision):
        cfg, params = target
        state, run_round = state_after(target, drafter, draft_params, tokens, lengths, rounds_before, max_new,
                                        sampling)
        ds, root, active = state.draft_state, state.root, ~state.done
        backbone = jax.jit(lambda ds, root, active: drafter.base_logits(ds, root, active)[:2])
        rows, base = backbone(ds, root, active)
        head = jax.jit(lambda ds, rows, base, root, key: drafter.rollout_from(ds, rows, base, root, key, sampling))
        tree = chain_tree(head(ds, rows, base, root, jax.random.key(0))[0])
        layers = tuple(drafter.target_layers)

        def verify(params, cache, tree, root):
            return tree_forward(params, cfg, tree, root, cache, layers, drafter.max_depth)

        verify = _with_params(verify, params)

        return {
            "backbone": _median_ms(backbone, ds, root, active, reps=reps),
            "head": _median_ms(head, ds, rows, base, root, jax.random.key(1), reps=reps),
            "verify": _median_ms(verify, state.cache, tree, root, reps=reps),
            "round": _median_ms(run_round, state, reps=reps),
            "ar_step": _median_ms(_ar_step(target, tokens.shape[0]), state.cache, root, reps=reps),
        }


GRAFT_PARTS = ("draft", "draft_dense", "retrieve", "propose", "mask", "verify", "walk", "table_update", "round",
               "ar_step")


def graft_split(target, drafter, draft_params, tokens, lengths, *, rounds_before: int = 2, reps: int = 10,
                sampling: Sampling = Sampling(), max_new: int = 64,
                matmul_precision: str = DEFAULT_PRECISION) -> dict[str, float]:
    """Median milliseconds of a Graft round's parts (`GRAFT_PARTS`; the paper's Table 14) from a
    real mid-generation state:

    draft         root step + the checkpoint-gated expansions (the pool and each row's stage)
    draft_dense   the same drafter never pruned: root step + all `depth` expansions
    retrieve      the template's tokens from the successor table (one gather per depth)
    propose       the whole drafter side: draft + ranking + retrieval + graft (merge); the
                  paper's "Merge" is about propose - draft - retrieve
    mask          ancestor mask + positions of the K_max-node tree ("Rebuild")
    verify        the target forward over [root, tree] (tapped layers, if the drafter reads any)
    walk          the walk over the target's logits ("Posterior")
    table_update  the target's top-k at every verified slot written into the table ("Matrix update")
    round         the whole round as the loop runs it (propose, verify, walk, commit, observe)
    ar_step       one autoregressive step of the target

    drafter: a `GraftDrafter`; draft_params its `GraftParams`. Also returns `stage` (row 0's
    stage in the timed round) and `step_cost` = (draft_dense / (1 + depth)) / verify, the
    drafter-forward-to-verify cost ratio `calibrate_thresholds` takes.
    """
    with matmul_scope(matmul_precision):
        cfg, params = target
        state, run_round = state_after(target, drafter, draft_params, tokens, lengths, rounds_before, max_new,
                                        sampling)
        ds, root, active = state.draft_state, state.root, ~state.done
        dense = dataclasses.replace(drafter, prune=False, retrieval=False)
        draft = jax.jit(lambda ds, root, active: drafter.draft(ds, root, active)[:2])
        draft_dense = jax.jit(lambda ds, root, active: dense.draft(ds, root, active)[0])
        template = drafter.tail_template if drafter.tail else union(drafter.stage_templates)[0]
        fetch = jax.jit(lambda table, root: retrieve(table, root, template))
        propose = jax.jit(lambda ds, root, active: drafter.propose(ds, root, active, None, sampling)[0])
        tree = propose(ds, root, active)
        mask_fn = jax.jit(lambda tree, lengths: (ancestor_mask(tree, drafter.max_depth), node_positions(tree, lengths)))
        mask, pos = mask_fn(tree, state.cache.lengths)
        layers = tuple(drafter.target_layers)

        def verify(params, cache, tree, mask, pos, root):
            return tree_forward(params, cfg, tree, root, cache, layers, mask=mask, positions=pos)[0]

        verify = _with_params(verify, params)

        t_logits = verify(state.cache, tree, mask, pos, root)

        @jax.jit
        def walk_of(tree, t_logits, key):  # the loop's own walk (`verify.slot_targets`, then `verify.walk`)
            return walk(tree, slot_targets(t_logits, key, sampling), drafter.max_depth)

        @jax.jit
        def table_update(table, tree, t_logits, root):
            top_ids = jax.lax.top_k(t_logits, table.shape[1])[1]
            toks = jnp.concatenate([root[:, None], tree.tokens], axis=1)
            valid = jnp.concatenate([jnp.ones_like(root[:, None], bool), tree.valid], axis=1)
            return update_table(table, toks, top_ids, valid)

        ar_step = _ar_step(target, tokens.shape[0])
        out = {
            "draft": _median_ms(draft, ds, root, active, reps=reps),
            "draft_dense": _median_ms(draft_dense, ds, root, active, reps=reps),
            "retrieve": _median_ms(fetch, ds.table, root, reps=reps),
            "propose": _median_ms(propose, ds, root, active, reps=reps),
            "mask": _median_ms(mask_fn, tree, state.cache.lengths, reps=reps),
            "verify": _median_ms(verify, state.cache, tree, mask, pos, root, reps=reps),
            "walk": _median_ms(walk_of, tree, t_logits, jax.random.key(1), reps=reps),
            "table_update": _median_ms(table_update, ds.table, tree, t_logits, root, reps=reps),
            "round": _median_ms(run_round, state, reps=reps),
            "ar_step": _median_ms(ar_step, state.cache, root, reps=reps),
        }
        stage = int(np.asarray(draft(ds, root, active)[1])[0])
        return {**out, "stage": stage, "step_cost": out["draft_dense"] / (1 + drafter.depth) / out["verify"]}


PROTOCOL_PARTS = ("propose", "verify", "commit_observe", "round", "ar_step")


def protocol_split(target, drafter, draft_params, tokens, lengths, *, rounds_before: int = 2, reps: int = 10,
                   sampling: Sampling = Sampling(), max_new: int = 64,
                   matmul_precision: str = DEFAULT_PRECISION) -> dict[str, float]:
    """Any drafter's round split along the drafter protocol, as `speculative_round` calls it (`PROTOCOL_PARTS`,
    ms, medians from the state after `rounds_before` rounds of the real loop):

        propose         `drafter.propose`: everything the drafter does to make its tree (draft forwards,
                        expansion, pruning, retrieval)
        verify          `verify_tree` at the drafter's verify widths: mask, the target's tree forward, the walk
        commit_observe  the target cache's commit and `drafter.observe` (the draft cache's catch-up)
        round           the whole round as the loop runs it; ar_step one AR step of the target

    Also returns `nodes` (row 0's proposed nodes) and `depth` (its tree depth)."""
    with matmul_scope(matmul_precision):
        state, run_round = state_after(target, drafter, draft_params, tokens, lengths, rounds_before, max_new,
                                        sampling)
        parts = protocol_parts(target, drafter, sampling)
        active = ~state.done
        key = jax.random.key(1)
        tree, probs, dstate = parts["propose"](state.draft_state, state.root, active, key)
        tp = parts["verify"](tree, state.root, state.cache, key, probs, active)
        ar_step = _ar_step(target, tokens.shape[0])
        out = {"propose": _median_ms(parts["propose"], state.draft_state, state.root, active, key, reps=reps),
               "verify": _median_ms(parts["verify"], tree, state.root, state.cache, key, probs, active, reps=reps),
               "commit_observe": _median_ms(parts["commit_observe"], tree, tp, dstate, state.cache.lengths, active,
                                            reps=reps),
               "round": _median_ms(run_round, state, reps=reps),
               "ar_step": _median_ms(ar_step, state.cache, state.root, reps=reps)}
        valid = np.asarray(tree.valid[0])
        depth = int(np.asarray(tree.depth[0])[valid].max()) if valid.any() else 0
        return {**out, "nodes": int(valid.sum()), "depth": depth}


def protocol_parts(target, drafter, sampling: Sampling) -> dict:
    """The jitted parts `protocol_split` times, the target's weights as arguments (`_with_params`):
    propose(draft_state, root, active, key) -> (tree, draft_probs, draft_state);
    verify(tree, root, cache, key, draft_probs, active) -> TargetPass;
    commit_observe(tree, target_pass, draft_state, start, active) -> (cache, draft_state), keeping every
    accepted token (the round also cuts at EOS and max_new_tokens: bookkeeping, not timed apart)."""
    cfg, params = target

    def propose(dstate, root, active, key):
        return drafter.propose(dstate, root, active, key, sampling)

    def verify(params, tree, root, cache, key, probs, active):
        return verify_tree(params, cfg, tree, root, cache, key, sampling, max_depth=drafter.max_depth,
                           draft_probs=probs, rejection=drafter.uses_rejection(sampling),
                           feature_layers=target_layers(drafter), top_k=getattr(drafter, "target_topk", 0),
                           widths=device_widths(getattr(drafter, "verify_widths", None)), active=active)

    @jax.jit
    def commit_observe(tree, tp, dstate, start, active):
        keep = jnp.where(active, tp.result.num_accepted + 1, 0)
        cache = commit(tp.cache, tp.result.path_slots, keep)
        return cache, drafter.observe(dstate, Verified(tree=tree, result=tp.result, num_kept=keep, active=active,
                                                       start=start, features=tp.features, top_ids=tp.top_ids,
                                                       top_logits=tp.top_logits))

    return {"propose": jax.jit(propose), "verify": _with_params(verify, params), "commit_observe": commit_observe}


def round_cost(target, drafter, draft_params, tokens, lengths, *, rounds_before: int = 2, reps: int = 10,
               sampling: Sampling = Sampling(), max_new: int = 64,
               matmul_precision: str = DEFAULT_PRECISION) -> dict[str, float]:
    """Median milliseconds of any drafter's whole round and of one AR step of the target, from the same
    real mid-generation state: {"round", "ar_step"}. round / ar_step is what a round costs in AR steps,
    so tau * ar_step / round is the speedup those costs allow (eta = speedup / tau = ar_step / round)."""
    with matmul_scope(matmul_precision):
        state, run_round = state_after(target, drafter, draft_params, tokens, lengths, rounds_before, max_new,
                                        sampling)
        ar_step = _ar_step(target, tokens.shape[0])
        return {"round": _median_ms(run_round, state, reps=reps),
                "ar_step": _median_ms(ar_step, state.cache, state.root, reps=reps)}


PROTOCOL_SPLIT = RoundSplit(object, PROTOCOL_PARTS, protocol_split)  # any drafter without a split of its own


def split_of(drafter) -> RoundSplit:
    """The round split of `drafter`: the one declared for its class or its nearest base class with one,
    else `PROTOCOL_SPLIT`."""
    mro = type(drafter).__mro__
    found = [s for cls, s in SPLITS.items() if cls in mro]
    return min(found, key=lambda s: mro.index(s.drafter)) if found else PROTOCOL_SPLIT


def method_split(target, drafter, draft_params, tokens, lengths, **kw) -> dict[str, float]:
    """The round parts of a speculative method's drafter, in ms, with "round" and "ar_step" always
    (`split_of`: `round_split` for DDTree drafters, `domino_split` for Domino, `graft_split` for Graft, a
    kind's own split where it declares one, else `round_cost`). kw: their shared keywords (reps,
    sampling, max_new, ...)."""
    return split_of(drafter).time(target, drafter, draft_params, tokens, lengths, **kw)


ROUND_SPLITS = (RoundSplit(DDTreeDrafter, PARTS, round_split), RoundSplit(DominoDrafter, DOMINO_PARTS, domino_split),
                RoundSplit(GraftDrafter, GRAFT_PARTS, graft_split))
