"""DynaTree (specjax/drafters/dynatree.py): tree construction vs the slow Algorithm 1,
the DY2 invariants (proofs/dynatree.md), static level widths, greedy losslessness and
draft-cache bookkeeping through `generate`, and the Phase-3 schedule.

Compiles are shared: `build_tree` on a synthetic table at a few (N, L, K), `generate`
at four drafter settings whose numeric knobs come in through `DynaTreeParams` (no
recompile per Hypothesis example).
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specjax.decode import _generate, generate, generate_ar
from specjax.drafters.protocol import Verified
from specjax.drafters.dynatree import (THRESHOLDS, DynaTreeDrafter, DynaTreeParams, Knobs, Schedule,
                                       acceptance_statistic, build_tree, level_widths, log_thresholds, update_history)
from specjax.models import init_cache, pad_prompts, prefill
from specjax.tree import Tree, ancestor_mask, check_tree
from specjax.verify import WalkResult
from tests.dynatree_reference import (HASH_ADD, HASH_MUL, context_hash, max_level_counts, rank_order,
                                      reference_schedule, reference_tree, synthetic_table)
from tests.fixtures import (MAX_NEW, PAIRS, PROMPT_WIDTH, assert_caches_follow_output, assert_lossless,
                            prompt_batches, random_pair_params)

# ==================================================================== build_tree on a synthetic draft

CONTEXTS, VOCAB = 251, 10
SHAPES = [(12, 4, 3), (30, 6, 4), (6, 5, 2)]  # (N_max, static levels L, B_max = K)
ROWS = 4


def table_level_fn(table):
    """A draft whose next-token log-probs are table[hash(root, path)]; the carry also
    records the attention rows each forwarded node was given."""

    def level_fn(carry, level, depth):
        root_hash, hashes, masks = carry
        rows, n = jnp.arange(hashes.shape[0])[:, None], hashes.shape[1]
        parent = jnp.take_along_axis(hashes, jnp.maximum(level.parent_slots, 0), axis=1)
        h = jnp.where(level.parent_slots < 0, root_hash[:, None], parent) * HASH_MUL + level.tokens + HASH_ADD
        h = h % CONTEXTS
        idx = jnp.where(level.valid, level.slots, n)
        hashes = hashes.at[rows, idx].set(h, mode="drop")
        masks = masks.at[rows, idx].set(level.mask_rows, mode="drop")
        return table[h], (root_hash, hashes, masks)

    return level_fn


@functools.partial(jax.jit, static_argnames=("max_nodes", "num_levels", "max_branch"))
def build_synthetic(table, root_hash, knobs, *, max_nodes, num_levels, max_branch):
    b = root_hash.shape[0]
    carry = (root_hash, jnp.zeros((b, max_nodes), jnp.int32), jnp.zeros((b, max_nodes, max_nodes), bool))
    tree, info, (_, _, masks) = build_tree(table[root_hash], table_level_fn(table), carry, knobs, max_nodes=max_nodes,
                                           num_levels=num_levels, max_branch=max_branch)
    return tree, info, masks


@st.composite
def knob_rows(draw, levels: int, k: int):
    """One row of drafting knobs: Phase-1 style (no gate, no pruning) or Phase-2 style."""
    tau_l = draw(st.floats(0.05, 0.7))
    tau_h = draw(st.floats(tau_l + 0.01, 0.99))
    b_min, b_mid, b_max = sorted(draw(st.lists(st.integers(1, k), min_size=3, max_size=3)))
    d0 = draw(st.integers(1, levels))
    row = dict(tau_h=tau_h, tau_l=tau_l, b_min=b_min, b_mid=b_mid, b_max=b_max, d0=d0)
    if draw(st.booleans()):
        return dict(row, d_max=d0, rho_stop=0.0, rho_deep=0.0, tau=0.0)
    small = st.sampled_from([0.0, 1e-4, 1e-3, 1e-2, 0.05, 0.2])
    return dict(row, d_max=draw(st.integers(1, levels + 1)), rho_stop=draw(small), rho_deep=draw(small),
                tau=draw(small))


def log_knobs(rows: list[dict]) -> tuple[Knobs, list[dict]]:
    """Device Knobs and, per row, the very float32 log-thresholds `build_tree` compares with
    (`log_thresholds`) and the integer knobs, for the reference."""
    ints = ("d0", "d_max", "b_min", "b_mid", "b_max")
    knobs = Knobs(**{name: jnp.asarray(np.array([r[name] for r in rows], np.int32 if name in ints else np.float32))
                     for name in (*THRESHOLDS, *ints)})
    logs = {name: np.asarray(x) for name, x in jax.jit(log_thresholds)(knobs).items()}
    ref = [dict(**{f"log_{name}": logs[name][i] for name in THRESHOLDS}, **{k: r[k] for k in ints})
           for i, r in enumerate(rows)]
    return knobs, ref


def draw_synthetic(data, seed, shape):
    n, levels, k = shape
    rng = np.random.default_rng(seed)
    table = synthetic_table(rng, CONTEXTS, VOCAB)
    root_hash = rng.integers(0, CONTEXTS, ROWS)
    knobs, ref = log_knobs([data.draw(knob_rows(levels, k)) for _ in range(ROWS)])
    tree, info, masks = build_synthetic(jnp.asarray(table), jnp.asarray(root_hash, jnp.int32), knobs, max_nodes=n,
                                        num_levels=levels, max_branch=k)
    return table, root_hash, ref, tree, info, masks


@pytest.mark.parametrize("shape", SHAPES)
@settings(max_examples=30)
@given(data=st.data(), seed=st.integers(0, 2**32 - 1))
def test_build_tree_equals_slow_algorithm1(shape, data, seed):
    """Same nodes in the same (BFS, packed) order, same float32 path log-probs, same B(u)
    and expansion decisions as the FIFO-queue Algorithm 1; the attention rows handed to
    the draft are exactly the ancestor-or-self rows."""
    n, levels, k = shape
    table, root_hash, ref_knobs, tree, info, masks = draw_synthetic(data, seed, shape)
    tok, par, dep, val = (np.asarray(x) for x in (tree.tokens, tree.parents, tree.depth, tree.valid))
    cum, fwd, exp_, br = (np.asarray(x) for x in (info.cum_logp, info.forwarded, info.expandable, info.branching))
    forwarded_levels = len(level_widths(n, levels, k)) - 1
    refs = [reference_tree(table[root_hash[b]], lambda path, b=b: table[context_hash(root_hash[b], path, CONTEXTS)],
                           ref_knobs[b], n, levels) for b in range(ROWS)]
    # A level is forwarded iff it is not the deepest static one and some node of it (any row) may expand.
    gated = {d for ref in refs for d, e in zip(ref["depth"], ref["expandable"]) if e}
    for b in range(ROWS):
        ref = refs[b]
        m = len(ref["tokens"])
        assert val[b].sum() == m and val[b, :m].all(), f"row {b}: {val[b].sum()} nodes, reference {m}"
        assert tok[b, :m].tolist() == ref["tokens"], f"row {b} tokens"
        assert par[b, :m].tolist() == ref["parents"], f"row {b} parents"
        assert dep[b, :m].tolist() == ref["depth"], f"row {b} depth"
        np.testing.assert_array_equal(cum[b, :m], np.asarray(ref["cum"], np.float32))  # bit for bit
        f = (dep[b, :m] <= forwarded_levels) & np.isin(dep[b, :m], list(gated))
        assert fwd[b, :m].tolist() == f.tolist() and not fwd[b, m:].any()
        assert exp_[b, :m][f].tolist() == np.asarray(ref["expandable"])[f].tolist(), f"row {b} expandable"
        assert br[b, :m][f].tolist() == np.asarray(ref["branching"])[f].tolist(), f"row {b} branching"
    anc = np.asarray(ancestor_mask(tree))[:, 1:, 1:]
    np.testing.assert_array_equal(np.asarray(masks)[fwd], anc[fwd])


def check_dy2(tree: Tree, info, table, root_hash, ref_knobs, n: int, levels: int):
    """The DY2 invariants, checked from the tree alone (independently of the reference)."""
    check_tree(tree, vocab_size=VOCAB, unique_siblings=True, packed=True)
    tok, par, dep, val = (np.asarray(x) for x in (tree.tokens, tree.parents, tree.depth, tree.valid))
    cum = np.asarray(info.cum_logp)
    for b, kn in enumerate(ref_knobs):
        m = int(val[b].sum())
        assert 1 <= m <= n
        assert dep[b, :m].max() <= max(1, min(kn["d_max"], levels)), f"row {b}: depth {dep[b, :m].max()}"
        root = table[root_hash[b]]
        assert tok[b, 0] == rank_order(root)[0] and cum[b, 0] == root[tok[b, 0]]  # u_0 = draft top-1
        paths = {}
        for i in range(m):
            paths[i] = (paths[par[b, i]] if par[b, i] >= 0 else ()) + (int(tok[b, i]),)
        for u in range(m):
            children = [i for i in range(m) if par[b, i] == u]
            d, c = dep[b, u], cum[b, u]
            gate = (d < min(kn["d_max"], levels) and c >= kn["log_rho_stop"] and c >= kn["log_tau"]
                    and (d < kn["d0"] or c >= kn["log_rho_deep"]))
            if not gate:
                assert not children, f"row {b}: node {u} (depth {d}, log p {c}) fails the gate but has children"
                continue
            logp = table[context_hash(root_hash[b], paths[u], CONTEXTS)]
            order = rank_order(logp)
            conf = logp[order[0]]
            nb = kn["b_min"] if conf >= kn["log_tau_h"] else kn["b_mid"] if conf >= kn["log_tau_l"] else kn["b_max"]
            assert [tok[b, i] for i in children] == order[: len(children)].tolist()  # top ranks, in rank order
            for i in children:  # p(child) = p(u) q(child | u), and no child below tau
                assert cum[b, i] == np.float32(c + logp[tok[b, i]]) and cum[b, i] >= kn["log_tau"]
            if len(children) < nb:  # fewer than B(u) only if pruned by tau or the budget ran out
                assert m == n or np.float32(c + logp[order[len(children)]]) < kn["log_tau"], (
                    f"row {b}: node {u} has {len(children)} < B(u) = {nb} children, budget {m}/{n}")


@pytest.mark.parametrize("shape", SHAPES)
@settings(max_examples=30)
@given(data=st.data(), seed=st.integers(0, 2**32 - 1))
def test_tree_invariants_dy2(shape, data, seed):
    n, levels, k = shape
    table, root_hash, ref_knobs, tree, info, _ = draw_synthetic(data, seed, shape)
    check_dy2(tree, info, table, root_hash, ref_knobs, n, levels)


@settings(max_examples=20)
@given(data=st.data(), seed=st.integers(0, 2**32 - 1))
def test_draft_work_follows_the_live_tree(data, seed):
    """Each level is forwarded at the smallest power of 4 holding its live nodes (over
    the batch; capped at the one level width W = max W_d, the bucket set (1, 4, 16, ..., W)
    being shared by all levels), and a level no row reaches is not forwarded at all: the
    draft's work is at most 4x the live tree (and W per level), whatever the static widths. The
    level function adds the width it was run at to a counter in the carry, so only executed
    branches count."""
    n, levels, k = 30, 6, 4
    rng = np.random.default_rng(seed)
    table = jnp.asarray(synthetic_table(rng, CONTEXTS, VOCAB))
    root_hash = jnp.asarray(rng.integers(0, CONTEXTS, ROWS), jnp.int32)
    knobs, _ = log_knobs([data.draw(knob_rows(levels, k)) for _ in range(ROWS)])
    tree, info, work = count_draft_work(table, root_hash, knobs, max_nodes=n, num_levels=levels, max_branch=k)
    depth, fwd = np.asarray(tree.depth), np.asarray(info.forwarded)
    widths = level_widths(n, levels, k)
    expected = 0
    for d in range(1, len(widths)):
        live = int((fwd & (depth == d)).sum(axis=1).max())
        expected += 0 if live == 0 else min(4 ** math.ceil(math.log(live, 4) - 1e-9), max(widths))  # capped at W
    bound = sum(min(4 ** math.ceil(math.log(w, 4) - 1e-9), max(widths)) for w in widths[:-1])
    assert int(work) == expected <= bound, (int(work), expected, bound)


@functools.partial(jax.jit, static_argnames=("max_nodes", "num_levels", "max_branch"))
def count_draft_work(table, root_hash, knobs, *, max_nodes, num_levels, max_branch):
    inner = table_level_fn(table)

    def level_fn(carry, level, depth):
        logp, inner_carry = inner(carry[0], level, depth)
        return logp, (inner_carry, carry[1] + level.tokens.shape[1])

    b = root_hash.shape[0]
    carry = ((root_hash, jnp.zeros((b, max_nodes), jnp.int32), jnp.zeros((b, max_nodes, max_nodes), bool)),
             jnp.int32(0))
    tree, info, (_, work) = build_tree(table[root_hash], level_fn, carry, knobs, max_nodes=max_nodes,
                                       num_levels=num_levels, max_branch=max_branch)
    return tree, info, work


@pytest.mark.parametrize("n, levels, k", [(1, 4, 3), (3, 5, 3), (7, 4, 2), (12, 4, 3), (13, 5, 3), (20, 6, 2),
                                          (16, 4, 4), (30, 6, 4)])
def test_level_widths_are_exact_maxima(n, levels, k):
    """W_d equals the largest level-d count any admissible count sequence reaches: sound
    (no node is ever dropped by the static width) and tight."""
    assert list(level_widths(n, levels, k)) == max_level_counts(n, levels, k)


# ==================================================================== through the decode loop

_RECORDS: list = []


def _record(*arrays):
    _RECORDS.append(tuple(np.array(a, copy=True) for a in arrays))  # callback buffers may be reused


class RecordingDynaTree(DynaTreeDrafter):
    """DynaTree that hands every round's tree, walk result and knobs to the host."""

    def observe(self, state, verified):
        tree, result, active = verified.tree, verified.result, verified.active
        jax.debug.callback(_record, tree.tokens, tree.parents, tree.depth, tree.valid, result.num_accepted,
                           result.accepted_tokens, active, state.knobs.d0, state.knobs.tau_h, state.knobs.tau_l,
                           ordered=True)
        return super().observe(state, verified)


PHASE3 = Schedule(window=4, min_rounds=2, d0_range=(1, 4))
SETTINGS = [  # pair, self-draft, batch, static drafter fields
    ("neox32", False, 2, dict(phase=1, d0=3, n_max=10)),
    ("qwen64", True, 3, dict(phase=2, d0=2, d_max=4, n_max=16)),
    ("neox32", False, 2, dict(phase=3, d0=2, d_max=5, n_max=12, schedule=PHASE3)),
    ("neox32", True, 2, dict(phase=3, d0=2, d_max=5, n_max=12, schedule=PHASE3)),
]


@st.composite
def decode_knobs(draw, drafter: DynaTreeDrafter, batch: int):
    """Knobs inside the drafter's static bounds (and the Phase-3 ranges); random tiny models
    are flat, so the probability thresholds are small enough for trees to grow."""
    s = drafter.sched
    tau_h = draw(st.floats(*s.tau_h_range))
    tau_l = draw(st.floats(*s.tau_l_range))
    b_min, b_mid, b_max = sorted(draw(st.lists(st.integers(1, drafter.b_max), min_size=3, max_size=3)))
    d0 = draw(st.integers(*s.d0_range) if drafter.phase == 3 else st.integers(1, drafter.d0) if drafter.phase == 1
              else st.integers(1, drafter.d_max - 1))
    probs = st.sampled_from([1e-4, 1e-3, 1e-2, 0.05])
    rho_stop, rho_deep = sorted([draw(probs), draw(probs)])
    return Knobs(tau_h=tau_h, tau_l=tau_l, d0=d0, d_max=draw(st.integers(d0 + 1, drafter.d_max)), b_min=b_min,
                 b_mid=b_mid, b_max=b_max, rho_stop=rho_stop, rho_deep=rho_deep, tau=draw(probs)).broadcast(batch)


def greedy_chain(tokens, parents, valid) -> list[int]:
    """Tokens of the rank-0 chain: from the root, follow the lowest-index child."""
    chain, node = [], -1
    while True:
        kids = np.nonzero(valid & (parents == node))[0]
        if len(kids) == 0:
            return chain
        node = int(kids[0])
        chain.append(int(tokens[node]))


def target_gap(params, cfg, context, token) -> float:
    """Target logit of its argmax minus that of `token` after `context`."""
    tokens, lengths = pad_prompts([context])
    logits, _, _ = prefill(params, cfg, tokens, lengths, init_cache(cfg, 1, len(context)))
    row = np.asarray(logits[0, -1])
    return float(row.max() - row[token])


@pytest.mark.parametrize("pair, self_draft, batch, fields", SETTINGS)
@settings(max_examples=3)
@given(data=st.data(), seed=st.integers(0, 2**16))
def test_greedy_lossless_and_real_trees(pair, self_draft, batch, fields, data, seed):
    cfg, draft_cfg = PAIRS[pair]
    params = random_pair_params(cfg, seed)
    drafter = RecordingDynaTree(cfg if self_draft else draft_cfg, **fields)
    lm = params if self_draft else random_pair_params(draft_cfg, seed + 7)
    knobs = data.draw(decode_knobs(drafter, batch))
    prompts = data.draw(prompt_batches(batch, cfg.vocab_size))
    tokens, lengths = pad_prompts(prompts, PROMPT_WIDTH)
    eos = (3,)
    ar = generate_ar(params, cfg, tokens, lengths, MAX_NEW, eos_ids=eos)
    _RECORDS.clear()
    spec = generate(params, cfg, drafter, DynaTreeParams(lm=lm, knobs=knobs), tokens, lengths, MAX_NEW, eos_ids=eos)
    spec.tokens.block_until_ready()
    jax.effects_barrier()
    assert_lossless(params, cfg, prompts, ar, spec)
    assert_caches_follow_output(params, cfg, lm, drafter.draft_cfg, prompts, spec)

    acc, prop, rounds = (np.asarray(x) for x in (spec.stats.accepted, spec.stats.proposed, spec.stats.num_rounds))
    for b in range(batch):
        r = rounds[b]
        assert np.all((acc[b, :r] >= 0) & (acc[b, :r] <= drafter.max_depth)) and np.all(acc[b, r:] == -1)
        assert np.all((prop[b, :r] >= 1) & (prop[b, :r] <= drafter.n_max)) and np.all(prop[b, r:] == -1)
    assert len(_RECORDS) == rounds.max()
    k0 = {name: np.asarray(getattr(knobs, name)) for name in ("d0", "tau_h", "tau_l")}
    s = drafter.sched
    emitted = np.ones(batch, int)  # tokens emitted before the round (the first comes from the prefill)
    done_rounds = np.zeros(batch, int)
    near_ties = []
    for tok, par, dep, val, n_acc, acc_tok, active, d0, tau_h, tau_l in _RECORDS:
        tree = Tree(tokens=jnp.asarray(tok), parents=jnp.asarray(par), depth=jnp.asarray(dep), valid=jnp.asarray(val))
        check_tree(tree, vocab_size=cfg.vocab_size, unique_siblings=True, packed=True)
        assert val[active, 0].all() and not val[~active].any()  # finished rows draft nothing
        assert (dep.max(1) <= drafter.max_depth).all() and (val.sum(1) <= drafter.n_max).all()
        if drafter.phase == 3:  # the knobs stay within their ranges
            assert ((s.d0_range[0] <= d0) & (d0 <= s.d0_range[1])).all() and (tau_l < tau_h).all()
            assert ((tau_h >= np.float32(s.tau_h_range[0])) & (tau_h <= np.float32(s.tau_h_range[1]))).all()
            assert ((tau_l >= np.float32(s.tau_l_range[0])) & (tau_l <= np.float32(s.tau_l_range[1]))).all()
        else:
            assert (d0 == k0["d0"]).all() and (tau_h == k0["tau_h"]).all() and (tau_l == k0["tau_l"]).all()
        for b in np.nonzero(active)[0]:
            done_rounds[b] += 1
            chain, got = greedy_chain(tok[b], par[b], val[b]), acc_tok[b, : n_acc[b]].tolist()
            last_round = done_rounds[b] == rounds[b]  # its acceptance is cut to what the output keeps
            if self_draft and got != chain and not (last_round and got == chain[: len(got)]):
                # draft == target: the walk follows the draft's greedy chain to its end, unless near-tie
                j = next(i for i in range(len(chain)) if i >= len(got) or got[i] != chain[i])
                context = prompts[b] + np.asarray(spec.tokens[b, : emitted[b]]).tolist() + chain[:j]
                near_ties.append((b, j, target_gap(params, cfg, context, chain[j])))
            emitted[b] += n_acc[b] + 1
    assert emitted.tolist() == np.asarray(spec.num_tokens).tolist()
    assert all(gap < 1e-4 for *_, gap in near_ties), f"self-draft rejected its greedy chain: {near_ties}"
    if near_ties:
        print(f"self-draft near-ties (row, chain index, target logit gap): {near_ties}")


class FullWidthDynaTree(DynaTreeDrafter):
    """DynaTree whose tree is always verified at its full budget (no width buckets)."""

    @property
    def verify_widths(self):
        return (self.n_max,)


def test_verify_width_buckets_change_nothing_but_cost():
    """Verifying only the smallest bucket holding the live tree gives the same tokens and
    the same per-round acceptance as verifying all N_max slots: an `extent` that cut off a
    valid node would lower acceptance here while greedy output stayed lossless."""
    cfg, _ = PAIRS["neox32"]
    params = random_pair_params(cfg, 11)
    fields = dict(phase=2, d0=2, d_max=4, n_max=24, rho_stop=1e-4, rho_deep=1e-3, tau=1e-4)
    bucketed, full = DynaTreeDrafter(cfg, **fields), FullWidthDynaTree(cfg, **fields)  # self-draft: deep trees
    assert bucketed.verify_widths == (3, 7, 15, 24)  # forwards of 4, 8, 16 rows (`ops.verify_buckets`), then N
    tokens, lengths = pad_prompts([[1, 5, 9, 2], [7, 7]], PROMPT_WIDTH)
    outs = [generate(params, cfg, d, params, tokens, lengths, MAX_NEW, eos_ids=()) for d in (bucketed, full)]
    for a, b in zip(jax.tree.leaves((outs[0].tokens, outs[0].stats)), jax.tree.leaves((outs[1].tokens, outs[1].stats))):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert np.asarray(outs[0].stats.accepted).max() >= 2, "self-draft should accept deep paths"


def test_knob_override_does_not_recompile():
    """Different knobs through DynaTreeParams reuse the compiled loop (parameter sweeps)."""
    pair, self_draft, batch, fields = SETTINGS[1]
    cfg, _ = PAIRS[pair]
    params = lm = random_pair_params(cfg, 1)
    drafter = RecordingDynaTree(cfg, **fields)  # the compiled loop of the self-draft setting above
    prompts = [[1, 2, 3], [4, 5], [6]]
    tokens, lengths = pad_prompts(prompts, PROMPT_WIDTH)
    ar = generate_ar(params, cfg, tokens, lengths, MAX_NEW, eos_ids=(3,))
    sizes = []
    for tau in (1e-3, 0.05):
        knobs = drafter.default_knobs(batch).replace(tau=jnp.full((batch,), tau, jnp.float32),
                                                     rho_stop=jnp.full((batch,), tau / 2, jnp.float32))
        spec = generate(params, cfg, drafter, DynaTreeParams(lm=lm, knobs=knobs), tokens, lengths, MAX_NEW,
                        eos_ids=(3,))
        assert_lossless(params, cfg, prompts, ar, spec)
        sizes.append(_generate._cache_size())
    jax.effects_barrier()
    assert sizes[0] == sizes[1]


# ==================================================================== Phase 3


SCHEDULES = [Schedule(window=4, min_rounds=3, accept_high=0.8, accept_low=0.6, step=0.1, d0_range=(1, 5)),
             Schedule(window=3, min_rounds=1, accept_high=0.5, accept_low=0.5, step=0.25, d0_range=(2, 3))]


@functools.partial(jax.jit, static_argnames=("sched",))
def run_schedule(knobs, a_rounds, active_rounds, sched):
    """Apply `update_history` for each round: a_rounds f32[R, B], active bool[R, B]."""
    b = a_rounds.shape[1]

    def step(carry, xs):
        knobs, window, count = update_history(*carry, *xs, sched)
        return (knobs, window, count), (knobs.d0, knobs.tau_h, knobs.tau_l)

    init = (knobs, jnp.zeros((b, sched.window), jnp.float32), jnp.zeros((b,), jnp.int32))
    return jax.lax.scan(step, init, (a_rounds, active_rounds))[1]


def knobs0(batch, d0=3, tau_h=0.8, tau_l=0.3):
    return Knobs(tau_h=tau_h, tau_l=tau_l, d0=d0, d_max=6, b_min=1, b_mid=2, b_max=3, rho_stop=0.1, rho_deep=0.5,
                 tau=0.05).broadcast(batch)


def test_schedule_directions_and_bounds():
    """Full acceptance deepens D_0 and lowers (tau_h, tau_l) every `min_rounds` rounds up
    to the bounds; rejection does the opposite; mid-range acceptance and inactive rows
    leave them alone."""
    sched = SCHEDULES[0]
    rounds = 12
    a = jnp.asarray(np.tile([1.0, 0.0, 0.7, 1.0], (rounds, 1)), jnp.float32)
    active = jnp.asarray(np.tile([True, True, True, False], (rounds, 1)))
    d0, tau_h, tau_l = (np.asarray(x) for x in run_schedule(knobs0(4), a, active, sched))
    moves = np.arange(1, rounds + 1) // sched.min_rounds  # moves made after each round
    np.testing.assert_array_equal(d0[:, 0], np.minimum(3 + moves, 5))
    np.testing.assert_array_equal(d0[:, 1], np.maximum(3 - moves, 1))
    np.testing.assert_allclose(tau_h[:, 0], np.maximum(0.8 - 0.1 * moves, 0.5), atol=1e-6)
    np.testing.assert_allclose(tau_l[:, 0], np.maximum(0.3 - 0.1 * moves, 0.1), atol=1e-6)
    np.testing.assert_allclose(tau_h[:, 1], np.minimum(0.8 + 0.1 * moves, 0.95), atol=1e-6)
    np.testing.assert_allclose(tau_l[:, 1], np.minimum(0.3 + 0.1 * moves, 0.45), atol=1e-6)
    for row in (2, 3):
        assert (d0[:, row] == 3).all()
        assert (tau_h[:, row] == np.float32(0.8)).all() and (tau_l[:, row] == np.float32(0.3)).all()
    assert (tau_l < tau_h).all()


@pytest.mark.parametrize("sched", SCHEDULES)
@settings(max_examples=40)
@given(data=st.data())
def test_schedule_equals_reference(sched, data):
    rounds, batch = 16, 3
    grid = st.sampled_from([0.0, 0.25, 0.5, 0.75, 1.0])  # exact float32 sums: no rounding near a threshold
    a = np.asarray(data.draw(st.lists(st.lists(grid, min_size=batch, max_size=batch), min_size=rounds,
                                      max_size=rounds)), np.float32)
    active = np.asarray(data.draw(st.lists(st.lists(st.booleans(), min_size=batch, max_size=batch),
                                           min_size=rounds, max_size=rounds)))
    start = dict(d0=sched.d0_range[0], tau_h=0.7, tau_l=0.3)
    d0, tau_h, tau_l = (np.asarray(x) for x in run_schedule(knobs0(batch, **start), jnp.asarray(a),
                                                           jnp.asarray(active), sched))
    for b in range(batch):
        ref = reference_schedule(a[:, b], active[:, b], start, sched)
        assert d0[:, b].tolist() == [r["d0"] for r in ref]
        np.testing.assert_array_equal(tau_h[:, b], np.asarray([r["tau_h"] for r in ref], np.float32))
        np.testing.assert_array_equal(tau_l[:, b], np.asarray([r["tau_l"] for r in ref], np.float32))


def test_observe_feeds_the_schedule():
    """`observe` turns the walk into a_r = accepted / tree depth and moves the knobs
    (Phase 3 only); Phase 2 keeps them."""
    cfg, draft_cfg = PAIRS["neox32"]
    lm = random_pair_params(draft_cfg, 3)
    tokens, lengths = pad_prompts([[1, 2, 3], [4, 5, 6]], PROMPT_WIDTH)
    chain = Tree(tokens=jnp.asarray([[5, 6, 7, 0], [5, 6, 7, 0]], jnp.int32),
                 parents=jnp.asarray([[-1, 0, 1, -1]] * 2, jnp.int32), depth=jnp.asarray([[1, 2, 3, 0]] * 2, jnp.int32),
                 valid=jnp.asarray([[True, True, True, False]] * 2))
    result = WalkResult(path_slots=jnp.asarray([[0, 1, 2, 3], [0, 0, 0, 0]], jnp.int32),
                        num_accepted=jnp.asarray([3, 0], jnp.int32),
                        accepted_tokens=jnp.asarray([[5, 6, 7], [0, 0, 0]], jnp.int32), bonus=jnp.asarray([9, 9]))
    np.testing.assert_array_equal(np.asarray(acceptance_statistic(chain, result)), [1.0, 0.0])
    active = jnp.asarray([True, True])
    for phase, want_d0 in ((3, [4, 1]), (2, [2, 2])):
        drafter = DynaTreeDrafter(draft_cfg, phase=phase, d0=2, d_max=5, n_max=4, schedule=PHASE3)
        state = drafter.init(lm, tokens, lengths, MAX_NEW)
        observe = jax.jit(drafter.observe)
        for _ in range(2 * PHASE3.min_rounds):  # two moves
            state = observe(state, Verified(tree=chain, result=result, num_kept=result.num_accepted + 1,
                                            active=active, start=jnp.zeros((2,), jnp.int32)))
        assert np.asarray(state.knobs.d0).tolist() == want_d0
        tau_h = np.asarray(state.knobs.tau_h)
        assert (tau_h[0] < drafter.tau_h < tau_h[1]) if phase == 3 else (tau_h == np.float32(drafter.tau_h)).all()


def test_bad_configs_raise():
    _, draft_cfg = PAIRS["neox32"]
    with pytest.raises(ValueError, match="phase must be 1, 2 or 3"):
        DynaTreeDrafter(draft_cfg, phase=4)
    with pytest.raises(ValueError, match="b_min <= b_mid <= b_max"):
        DynaTreeDrafter(draft_cfg, b_min=2, b_mid=1)
    with pytest.raises(ValueError, match="0 < tau_l < tau_h < 1"):
        DynaTreeDrafter(draft_cfg, tau_h=0.3, tau_l=0.4)
    with pytest.raises(ValueError, match="d0 < d_max"):
        DynaTreeDrafter(draft_cfg, d0=8, d_max=8)
    with pytest.raises(ValueError, match="rho_stop < rho_deep"):
        DynaTreeDrafter(draft_cfg, rho_stop=0.5, rho_deep=0.1)
    with pytest.raises(ValueError, match="n_max must be >= 1"):
        DynaTreeDrafter(draft_cfg, n_max=0)
    with pytest.raises(ValueError, match="Phase-3 ranges"):
        DynaTreeDrafter(draft_cfg, schedule=Schedule(tau_l_range=(0.1, 0.6)))
    with pytest.raises(ValueError, match="exceeds the draft vocabulary"):
        DynaTreeDrafter(draft_cfg, b_max=40)
    DynaTreeDrafter(draft_cfg, phase=1, d0=8, d_max=8)  # Phase 1 has no depth gate: d0 = D_max is fine
