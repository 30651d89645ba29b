"""Verification walks: exactness against slow references and *distributional* losslessness.

* greedy_walk == a pure-Python walk on random padded trees and logits (batch 3);
* sampling_walk at temperature 0 == greedy_walk; the bonus never has a matching child;
* process_logits/target_probs == a numpy reference (temperature, top-k, top-p);
* chain_rejection at temperature 0 == greedy chain acceptance; q == p accepts all;
* losslessness: a tiny synthetic autoregressive target (vocab 4, logits from a table
  indexed by the previous two tokens) and a different synthetic draft; whole
  speculative generations are simulated for many independent keys (the batch axis
  plays the role of the vmap over keys) and the first 3 emitted tokens are compared
  with the exactly enumerated target distribution by a G-test. The same harness
  rejects deliberately broken samplers.
"""

from __future__ import annotations

import functools
import itertools

import jax
import jax.extend.core  # noqa: F401  (jaxprs_in_params)
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from scipy import stats

from specjax import sampling as S
from specjax import tree as T
from specjax import verify as Vf
from tests.strategies import children_tokens, float_arrays, trees, walk_logits

B, N, V = 3, 8, 6

greedy_walk = jax.jit(Vf.greedy_walk, static_argnames="max_depth")
sampling_walk = jax.jit(Vf.sampling_walk, static_argnames="max_depth")
chain_rejection = jax.jit(Vf.chain_rejection)
process_logits = jax.jit(S.process_logits)


def ref_walk(tree, targets, r, max_depth):
    """Slow walk of row r given the target token per slot (list indexable by slot)."""
    tok, par, val = (np.asarray(x[r]) for x in (tree.tokens, tree.parents, tree.valid))
    slot, path, toks = 0, [0], []
    while len(toks) < max_depth:
        t = int(targets[slot])
        kids = [i for i in range(len(tok)) if val[i] and par[i] + 1 == slot and tok[i] == t]
        if not kids:
            break
        slot = kids[0] + 1
        path.append(slot)
        toks.append(t)
    return path, toks, int(targets[slot])


def check_result(res, r, path, toks, bonus, max_depth):
    n = len(toks)
    assert int(res.num_accepted[r]) == n
    assert np.asarray(res.path_slots[r]).tolist() == path + [0] * (max_depth - n)
    assert np.asarray(res.accepted_tokens[r]).tolist() == toks + [0] * (max_depth - n)
    assert int(res.bonus[r]) == bonus
    assert np.asarray(res.emitted[r]).tolist()[: n + 1] == toks + [bonus]
    assert int(res.last_slot[r]) == path[-1]


@pytest.mark.parametrize("max_depth", [None, 2])
@given(data=st.data())
def test_greedy_walk_matches_reference(max_depth, data):
    tree = data.draw(trees(B, N, V))
    logits = data.draw(walk_logits(tree, V))
    res = greedy_walk(tree, logits, max_depth=max_depth)
    depth = N if max_depth is None else max_depth
    am = np.argmax(np.asarray(logits), -1)
    tok, par = np.asarray(tree.tokens), np.asarray(tree.parents)
    for r in range(B):
        path, toks, bonus = ref_walk(tree, am[r], r, depth)
        check_result(res, r, path, toks, bonus, depth)
        for k in range(1, len(path)):  # a root-to-node path, tokens read off the tree
            assert par[r, path[k] - 1] + 1 == path[k - 1] and tok[r, path[k] - 1] == toks[k - 1]
        assert bonus == am[r, path[-1]]


@given(data=st.data())
def test_sampling_walk_temperature_zero_is_greedy(data):
    tree = data.draw(trees(B, N, V))
    logits = data.draw(walk_logits(tree, V))
    key = jax.random.key(data.draw(st.integers(0, 2**31 - 1)))
    g, s = greedy_walk(tree, logits), sampling_walk(tree, logits, key, 0.0)
    jax.tree.map(np.testing.assert_array_equal, g, s)


@given(data=st.data())
def test_sampling_walk_structure(data):
    tree = data.draw(trees(B, N, V))
    logits = data.draw(walk_logits(tree, V, integer=False))
    key = jax.random.key(data.draw(st.integers(0, 2**31 - 1)))
    res = sampling_walk(tree, logits, key, 1.0, top_k=3)
    allowed = np.asarray(S.target_probs(logits, 1.0, top_k=3)) > 0
    for r in range(B):
        n = int(res.num_accepted[r])
        path = np.asarray(res.path_slots[r])[: n + 1].tolist()
        toks = np.asarray(res.accepted_tokens[r])[:n].tolist()
        for k in range(1, n + 1):  # each step: a child of the previous slot, token allowed there
            assert toks[k - 1] in children_tokens(tree, r, path[k - 1])
            assert allowed[r, path[k - 1], toks[k - 1]]
        assert int(res.bonus[r]) not in children_tokens(tree, r, path[-1])  # walk stopped: no match
        assert allowed[r, path[-1], int(res.bonus[r])]


# ---- logit processing -----------------------------------------------------------------


def ref_process(logits, temperature, top_k=None, top_p=None):
    """numpy float64 reference of process_logits -> probabilities, one row at a time."""
    logits = np.asarray(logits, np.float64)
    out = np.zeros_like(logits)
    for idx in np.ndindex(logits.shape[:-1]):
        x = logits[idx]
        t = np.broadcast_to(temperature, logits.shape[:1])[idx[0]]
        if t <= 0:
            out[idx][int(np.argmax(x))] = 1.0
            continue
        x = x / t
        keep = np.ones(len(x), bool)
        if top_k is not None:
            k = int(np.broadcast_to(top_k, logits.shape[:1])[idx[0]])
            if 0 < k < len(x):
                keep &= x >= np.sort(x)[::-1][k - 1]
        prob = np.where(keep, np.exp(x - x[keep].max()), 0.0)
        prob /= prob.sum()
        if top_p is not None:
            p = float(np.broadcast_to(top_p, logits.shape[:1])[idx[0]])
            if p < 1.0:
                order = np.argsort(-prob, kind="stable")
                mass, last = 0.0, None
                for j in order:  # smallest prefix reaching mass p
                    last = prob[j]
                    mass += prob[j]
                    if mass >= p:
                        break
                prob = np.where(prob >= last, prob, 0.0)
                prob /= prob.sum()
        out[idx] = prob
    return out


def top_p_margin(logits, temperature, top_k, top_p):
    """Distance of top_p from the nearest cumulative mass (skip float borderline cases)."""
    if top_p is None:
        return 1.0
    probs = ref_process(logits, temperature, top_k, None)
    cums = np.cumsum(-np.sort(-probs, axis=-1), axis=-1)
    p = np.broadcast_to(np.asarray(top_p, np.float64), probs.shape[:1]).reshape(-1, *[1] * (cums.ndim - 1))
    gap = np.where(p < 1.0, np.abs(cums - p), 1.0)  # top_p >= 1 is disabled: no boundary
    return float(gap.min())


@given(
    logits=float_arrays((2, 3, 7)),
    temperature=st.sampled_from([0.0, 0.5, 1.0, 2.0, (0.0, 0.7), (1.3, 0.0)]),
    top_k=st.sampled_from([None, 0, 1, 3, 7, (2, 5)]),
    top_p=st.sampled_from([None, 0.3, 0.9, 1.0, (0.5, 0.95)]),
)
def test_process_logits_matches_reference(logits, temperature, top_k, top_p):
    t = np.asarray(temperature, np.float32)
    k = None if top_k is None else np.asarray(top_k, np.int32)
    p = None if top_p is None else np.asarray(top_p, np.float32)
    assume(top_p_margin(logits, t, k, p) > 1e-4)
    got = np.asarray(jax.nn.softmax(process_logits(jnp.asarray(logits), t, k, p), axis=-1))
    want = ref_process(logits, t, k, p)
    np.testing.assert_allclose(got, want, atol=2e-5)
    np.testing.assert_array_equal(got > 0, want > 0)  # the same support, exactly
    np.testing.assert_allclose(np.asarray(S.target_probs(jnp.asarray(logits), t, k, p)), want, atol=2e-5)


process_logits_static_k = jax.jit(S.process_logits, static_argnames="top_k")


@given(
    logits=float_arrays((2, 3, 7)),
    temperature=st.sampled_from([0.0, 0.5, 1.0, (0.0, 0.7)]),
    top_k=st.sampled_from([0, 1, 2, 3, 6, 7, 9]),
    top_p=st.sampled_from([None, 0.3, 0.9, 1.0, (0.5, 0.95)]),
)
def test_process_logits_with_one_static_top_k_matches_reference(logits, temperature, top_k, top_p):
    """A `Sampling`'s top-k is one Python int for every row: the k-th largest comes from XLA's top-k
    kernel, and top-p sorts only those k (not the vocabulary); the same law as the reference."""
    t = np.asarray(temperature, np.float32)
    p = None if top_p is None else np.asarray(top_p, np.float32)
    assume(top_p_margin(logits, t, top_k, p) > 1e-4)
    got = np.asarray(jax.nn.softmax(process_logits_static_k(jnp.asarray(logits), t, top_k, p), axis=-1))
    want = ref_process(logits, t, top_k, p)
    np.testing.assert_allclose(got, want, atol=2e-5)
    np.testing.assert_array_equal(got > 0, want > 0)


def test_top_k_and_top_p_never_sort_the_vocabulary():
    """Why: XLA:CPU sorted [256, 9, 8192] logits in 4.8 s (the top-k kernel took 37 ms). A static top-k
    ranks with the top-k kernel and top-p then reads only those k; top-p alone and a per-row k find
    their cuts by bisection."""
    def primitives(jaxpr):
        found = set()
        for eqn in jaxpr.eqns:
            found.add(eqn.primitive.name)
            for sub in jax.extend.core.jaxprs_in_params(eqn.params):
                found |= primitives(sub)
        return found

    logits = jnp.zeros((2, 3, 64))
    static = primitives(jax.make_jaxpr(lambda x: S.process_logits(x, 1.0, 5, 0.9))(logits).jaxpr)
    nucleus = primitives(jax.make_jaxpr(lambda x: S.process_logits(x, 1.0, None, 0.9))(logits).jaxpr)
    per_row = primitives(jax.make_jaxpr(lambda x, k: S.process_logits(x, 1.0, k, 0.9))(logits, jnp.array([5, 3])).jaxpr)
    assert "sort" not in static and "top_k" in static
    assert "sort" not in nucleus and "top_k" not in nucleus
    assert "sort" not in per_row and "top_k" not in per_row


@pytest.mark.parametrize("seed", range(3))
def test_per_row_top_k_by_bisection_keeps_what_the_sorted_reference_keeps(seed):
    """A per-row k (`_kth_largest`, no sort) on 2,000-token rows: exact ties on a coarse grid, -inf, +inf,
    -0.0 beside +0.0 (equal as floats, ordered apart by their bit patterns), k from 1 to V. The support is compared
    exactly: the cut is a comparison with an entry of the row, with no rounding in it."""
    rng = np.random.default_rng(seed)
    logits = np.round(rng.normal(0, 2.0, (4, 2, 2000)) * 4) / 4
    logits[0, 1, rng.choice(2000, 1500, replace=False)] = -np.inf
    logits[1, 0, rng.choice(2000, 40, replace=False)] = -0.0
    logits[1, 0, rng.choice(2000, 40, replace=False)] = 0.0
    logits[1, 1, :] = np.where(rng.random(2000) < 0.5, -0.0, 0.0)
    logits[2, 1, rng.choice(2000, 3, replace=False)] = np.inf
    logits = logits.astype(np.float32)
    k = np.array([1, int(rng.integers(2, 1999)), 1999, 2000], np.int32)
    kept = np.asarray(S.process_logits(jnp.asarray(logits), 1.0, jnp.asarray(k), None)) > -np.inf
    kth = np.sort(logits, axis=-1)[..., ::-1][np.arange(4), :, k - 1][..., None]
    np.testing.assert_array_equal(kept, (logits >= kth) | (k[:, None, None] >= 2000))
    finite = np.isfinite(logits.max(axis=-1))  # the law where softmax is defined (no +inf in the row)
    got = np.asarray(S.target_probs(jnp.asarray(logits), 1.0, jnp.asarray(k), None))[finite]
    with np.errstate(invalid="ignore"):  # the reference's rows with +inf are NaN; they are not compared
        want = ref_process(logits, np.float32(1.0), k, None)[finite]
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=1e-12)


@pytest.mark.parametrize("seed", range(4))
def test_top_p_by_bisection_keeps_what_the_sorted_prefix_keeps_on_a_long_vocabulary(seed):
    """Top-p without a sort (`_nucleus_threshold`) on 2,000-token rows with many exact ties (logits on a
    coarse grid) and a tail at probability 0: the support and the law of the sorted-prefix reference."""
    rng = np.random.default_rng(seed)
    logits = np.round(rng.normal(0, 2.0, (2, 3, 2000)) * 4) / 4
    logits[0, 1, rng.choice(2000, 500, replace=False)] = -np.inf
    checked = 0
    for top_p in (0.3, 0.9, 0.99):
        if top_p_margin(logits, np.float32(1.0), None, np.float32(top_p)) < 1e-5:
            continue  # a cumulative mass within rounding of top_p: either answer is right
        checked += 1
        got = np.asarray(S.target_probs(jnp.asarray(logits, jnp.float32), 1.0, None, top_p))
        want = ref_process(logits, np.float32(1.0), None, np.float32(top_p))
        np.testing.assert_array_equal(got > 0, want > 0)
        # float32 softmax against float64: each probability within a few ulps of exp plus the normalising
        # sum's rounding, at most V u = 2,000 x 2^-24 = 1.2e-4 relative whatever the summation order
        np.testing.assert_allclose(got, want, rtol=2e-4, atol=1e-12)
    assert checked, "every top_p fell within rounding of a cumulative mass: nothing was compared"


@pytest.mark.parametrize("vocab", [1, 2, 5, 17, 64, 130])
def test_categorical_draws_the_softmax_law(vocab):
    """`specjax.sampling.categorical` (two-stage Gumbel-max over blocks of the vocabulary): 40,000 draws
    of a random law with some tokens at probability 0 (a whole block of them where V allows) against
    softmax by a G-test; a 0-probability token is never drawn."""
    rng = np.random.default_rng(vocab)
    logits = rng.normal(0, 1.5, vocab).astype(np.float32)
    if vocab >= 5:
        logits[rng.choice(vocab, vocab // 4, replace=False)] = -np.inf
    if vocab >= 64:
        logits[-16:] = -np.inf  # a whole block of the last
    law = np.exp(logits.astype(np.float64) - logits.max())  # exp(-inf) = 0: the tokens never drawn
    law /= law.sum()
    n = 40_000
    draws = np.asarray(jax.jit(S.categorical)(jax.random.key(vocab), jnp.broadcast_to(jnp.asarray(logits), (n, vocab))))
    assert draws.dtype == np.int32 and draws.shape == (n,)
    counts = np.bincount(draws, minlength=vocab)
    assert counts[law == 0].sum() == 0, "drew a token of probability 0"
    expected = law * n
    big = expected >= 5
    obs = np.append(counts[big], counts[~big & (law > 0)].sum())
    exp = np.append(expected[big], expected[~big & (law > 0)].sum())
    obs, exp = (obs, exp) if exp[-1] > 0 else (obs[:-1], exp[:-1])
    if len(obs) > 1:
        assert stats.power_divergence(obs, exp, lambda_="log-likelihood").pvalue > 1e-3, (counts, expected)
    else:
        assert counts[int(np.argmax(law))] == n


def test_categorical_keeps_the_batch_shape_and_draws_a_one_token_law_exactly():
    """[B, N, V] logits -> int32[B, N] within the vocabulary; a slot whose law is one token draws it. (That
    rows draw with their own noise is in the law test: its 40,000 rows share one key.)"""
    logits = jax.random.normal(jax.random.key(0), (3, 4, 300))
    out = S.categorical(jax.random.key(1), logits)
    assert out.shape == (3, 4) and out.dtype == jnp.int32
    assert ((0 <= out) & (out < 300)).all()
    hard = logits.at[1, 2].set(-jnp.inf).at[1, 2, 7].set(0.0)  # a one-token law in one slot
    assert int(S.categorical(jax.random.key(1), hard)[1, 2]) == 7


# ---- chain rejection ------------------------------------------------------------------

K = 4


@given(data=st.data())
def test_chain_rejection_temperature_zero_is_greedy_chain(data):
    tokens = np.asarray(data.draw(st.lists(st.integers(0, V - 1), min_size=B * K, max_size=B * K))).reshape(B, K)
    logits = data.draw(float_arrays((B, K + 1, V)))
    follow = np.asarray(data.draw(st.lists(st.booleans(), min_size=B * K, max_size=B * K))).reshape(B, K)
    for r, i in zip(*np.nonzero(follow)):  # make the argmax agree with the draft often
        logits[r, i, tokens[r, i]] += 10.0
    q = jax.nn.softmax(jnp.asarray(data.draw(float_arrays((B, K, V)))), -1)
    num = jnp.asarray(data.draw(st.lists(st.integers(0, K), min_size=B, max_size=B)), jnp.int32)
    temps = jnp.asarray(data.draw(st.sampled_from([(0.0, 0.0, 0.0), (0.0, 1.0, 0.0)])), jnp.float32)
    key = jax.random.key(data.draw(st.integers(0, 2**31 - 1)))
    res = chain_rejection(jnp.asarray(tokens), q, jnp.asarray(logits), key, temps, num_draft=num)
    tree_res = greedy_walk(T.chain_tree(jnp.asarray(tokens), num), jnp.asarray(logits), max_depth=K)
    am = np.argmax(logits, -1)
    for r in range(B):
        if temps[r] > 0:
            continue
        n = 0
        while n < int(num[r]) and tokens[r, n] == am[r, n]:
            n += 1
        check_result(res, r, list(range(n + 1)), tokens[r, :n].tolist(), int(am[r, n]), K)
        for f in ("path_slots", "num_accepted", "accepted_tokens", "bonus"):
            np.testing.assert_array_equal(getattr(res, f)[r], getattr(tree_res, f)[r])


@given(logits=float_arrays((B, K + 1, V)), seed=st.integers(0, 2**31 - 1))
def test_chain_rejection_extreme_drafts(logits, seed):
    key_draft, key_verify = jax.random.split(jax.random.key(seed))
    p = S.target_probs(jnp.asarray(logits), 0.8, top_k=4)
    tokens = jax.random.categorical(key_draft, jnp.log(p[:, :K]), axis=-1)
    # q == p: every ratio is 1, so every token is accepted and the bonus comes from p[K].
    res = chain_rejection(tokens, p[:, :K], jnp.asarray(logits), key_verify, 0.8, top_k=4)
    np.testing.assert_array_equal(res.num_accepted, K)
    np.testing.assert_array_equal(res.accepted_tokens, tokens)
    assert np.all(np.asarray(p)[np.arange(B), K, np.asarray(res.bonus)] > 0)
    # q puts all its mass on a token p forbids: rejected at once, bonus from p[0].
    forbidden = jnp.argmin(p[:, :K], axis=-1)
    q_bad = jax.nn.one_hot(forbidden, V)
    res = chain_rejection(forbidden, q_bad, jnp.asarray(logits), key_verify, 0.8, top_k=4)
    np.testing.assert_array_equal(res.num_accepted, 0)
    assert np.all(np.asarray(p)[np.arange(B), 0, np.asarray(res.bonus)] > 0)


# ---- statistical losslessness ---------------------------------------------------------

VS, PROMPT, NTOK, ROUNDS = 4, (1, 3), 3, 3  # vocab, prompt, tokens compared, rounds run
NSAMP = 30_000
_rng = np.random.default_rng(20240611)
TARGET_TABLE = (_rng.normal(size=(VS, VS, VS)) * 1.5).astype(np.float32)  # [prev2, prev1, next]
DRAFT_TABLE = (TARGET_TABLE + _rng.normal(size=(VS, VS, VS)) * 1.2).astype(np.float32)
TREE_PARENTS = np.array([-1, -1, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5], np.int32)  # binary, depth 3
CONFIGS = {  # target processing (T, top_k, top_p), draft (T, top_k); k = 0, p = 1 disable
    "plain": dict(target=(1.0, 0, 1.0), draft=(1.0, 0)),
    "processed": dict(target=(0.8, 3, 0.95), draft=(1.3, 3)),
}


def exact_distribution(target):
    """Exact P(x1, x2, x3 | PROMPT) of the processed synthetic target: float64[VS^3]."""
    assert top_p_margin(TARGET_TABLE, *target) > 1e-4  # no float borderline in top-p
    probs = ref_process(TARGET_TABLE, *target)  # [VS, VS, VS]: next-token law per (prev2, prev1)
    out = np.zeros([VS] * NTOK)
    for xs in itertools.product(range(VS), repeat=NTOK):
        ctx, pr = list(PROMPT), 1.0
        for x in xs:
            pr *= probs[ctx[-2], ctx[-1], x]
            ctx.append(x)
        out[xs] = pr
    return out.reshape(-1)


def draft_dist(prev2, prev1, draft):
    t, k = draft
    return S.target_probs(jnp.asarray(DRAFT_TABLE)[prev2, prev1], t, k, None)


def propose_tree(prev2, prev1, key, draft):
    """Binary draft tree of depth 3 that depends on the context: child 0 = draft argmax,
    child 1 = a draft sample (so duplicates occur), sample children dropped w.p. 1/4."""
    keys = jax.random.split(key, 4)
    pairs, tokens = [(prev2[:, None], prev1[:, None])], []
    for lvl in range(3):
        a, b = pairs[-1]
        q = draft_dist(a, b, draft)  # [B, P, V]
        kids = jnp.stack([jnp.argmax(q, -1), jax.random.categorical(keys[lvl], jnp.log(q))], -1)
        kids = kids.reshape(q.shape[0], -1)  # [B, 2P], BFS order
        tokens.append(kids)
        pairs.append((jnp.repeat(b, 2, axis=1), kids))
    tokens = jnp.concatenate(tokens, 1).astype(jnp.int32)
    bsz = tokens.shape[0]
    parents = jnp.broadcast_to(jnp.asarray(TREE_PARENTS), tokens.shape)
    tree = T.Tree(tokens, parents, T.compute_depth(parents, jnp.ones_like(tokens, bool)), jnp.ones_like(tokens, bool))
    keep = (jnp.arange(14) % 2 == 0) | jax.random.bernoulli(keys[3], 0.75, (bsz, 14))
    return T.prune(tree, keep)


def target_forward(tree, prev2, prev1):
    """Synthetic target logits at root + every node: f32[B, N+1, VS]."""
    slot_tok = jnp.concatenate([prev1[:, None], tree.tokens], 1)
    parent_tok = jnp.take_along_axis(slot_tok, jnp.where(tree.valid, tree.parents + 1, 0), axis=1)
    slot_prev = jnp.concatenate([prev2[:, None], parent_tok], 1)
    return jnp.asarray(TARGET_TABLE)[slot_prev, slot_tok]


def tree_round(prev2, prev1, key, cfg, bug):
    k_draft, k_verify = jax.random.split(key)
    tree = propose_tree(prev2, prev1, k_draft, cfg["draft"])
    logits = target_forward(tree, prev2, prev1)
    if bug is None:
        return sampling_walk(tree, logits, k_verify, *cfg["target"], max_depth=3)
    samples = Vf.sample_targets(logits, k_verify, *cfg["target"])
    if bug == "shared_noise":  # one Gumbel draw reused at every slot: samples not independent
        g = jax.random.gumbel(k_verify, (logits.shape[0], 1, VS))
        return Vf.walk(tree, jnp.argmax(S.process_logits(logits, *cfg["target"]) + g, -1), 3)
    # bug == "draft_argmax": accept a draft token whenever it is the draft's argmax
    slot_tok = jnp.concatenate([prev1[:, None], tree.tokens], 1)
    slot_prev = jnp.concatenate([prev2[:, None], jnp.take_along_axis(
        slot_tok, jnp.where(tree.valid, tree.parents + 1, 0), axis=1)], 1)
    dmax = jnp.argmax(draft_dist(slot_prev, slot_tok, cfg["draft"]), -1)
    slots = jnp.broadcast_to(jnp.arange(15), samples.shape)
    found, _ = jax.vmap(T.match_child, in_axes=(None, 1, 1), out_axes=1)(tree, slots, samples)
    res = Vf.walk(tree, jnp.where(found, samples, dmax), 3)
    return res.replace(bonus=jnp.take_along_axis(samples, res.last_slot[:, None], 1)[:, 0])


def chain_round(prev2, prev1, key, cfg, bug):
    k_draft, k_verify = jax.random.split(key)
    keys = jax.random.split(k_draft, 3)
    a, b, toks, qs = prev2, prev1, [], []
    for i in range(3):  # draft K = 3 tokens autoregressively, recording q
        q = draft_dist(a, b, cfg["draft"])
        x = jax.random.categorical(keys[i], jnp.log(q)).astype(jnp.int32)
        toks.append(x), qs.append(q)
        a, b = b, x
    tokens, q = jnp.stack(toks, 1), jnp.stack(qs, 1)
    logits = target_forward(T.chain_tree(tokens), prev2, prev1)  # [B, 4, VS]
    if bug is None:
        return chain_rejection(tokens, q, logits, k_verify, *cfg["target"])
    return broken_chain(tokens, q, logits, k_verify, cfg["target"], bug)


def broken_chain(tokens, q, logits, key, target, bug):
    """Chain rejection with a deliberate bug, to show the test has power."""
    k_u, k_r = jax.random.split(key)
    p = S.target_probs(logits, *target)
    px = jnp.take_along_axis(p[:, :3], tokens[..., None], -1)[..., 0]
    qx = jnp.take_along_axis(q, tokens[..., None], -1)[..., 0]
    accept = jax.random.uniform(k_u, px.shape) * qx < px
    if bug == "draft_argmax":
        accept |= tokens == jnp.argmax(q, -1)
    n = jnp.sum(jnp.cumprod(accept, -1), -1)
    resid = jnp.maximum(p - jnp.concatenate([q, jnp.zeros_like(q[:, :1])], 1), 0.0)
    if bug == "resample_p":  # the classic bug: resample from p instead of the residual
        resid = p
    bonus = jax.random.categorical(k_r, jnp.log(resid))[jnp.arange(n.shape[0]), n]
    return Vf.WalkResult(jnp.zeros((n.shape[0], 4), jnp.int32), n, jnp.where(jnp.arange(3) < n[:, None], tokens, 0), bonus)


@functools.partial(jax.jit, static_argnames=("method", "bug", "nsamp"))
def simulate(key, prompt, cfg, method, bug=None, nsamp=NSAMP):
    """Run ROUNDS speculative rounds (a `lax.scan`) for nsamp independent generations,
    one per batch row, after `prompt` int32[2]. cfg holds the processing parameters as
    traced arrays, so "plain" and "processed" share one compilation. Returns (first NTOK
    emitted tokens int32[nsamp, NTOK], accepted draft tokens int32[nsamp, ROUNDS])."""
    step = tree_round if method == "tree" else chain_round
    width = 4  # max tokens per round (depth 3 / K = 3, + bonus)
    ctx = jnp.zeros((nsamp, len(PROMPT) + ROUNDS * width), jnp.int32).at[:, :2].set(prompt)
    length = jnp.full((nsamp,), len(PROMPT), jnp.int32)

    def one_round(carry, rnd):
        ctx, length = carry
        prev2, prev1 = (jnp.take_along_axis(ctx, (length - d)[:, None], 1)[:, 0] for d in (2, 1))
        res = step(prev2, prev1, jax.random.fold_in(key, rnd), cfg, bug)
        ctx = jax.vmap(lambda c, e, m: jax.lax.dynamic_update_slice(c, e, (m,)))(ctx, res.emitted, length)
        return (ctx, length + res.num_accepted + 1), res.num_accepted

    (ctx, _), accepted = jax.lax.scan(one_round, (ctx, length), jnp.arange(ROUNDS))
    return ctx[:, len(PROMPT): len(PROMPT) + NTOK], accepted.T


def run_config(config):
    c = CONFIGS[config]
    return dict(target=tuple(jnp.asarray(x) for x in c["target"]), draft=tuple(jnp.asarray(x) for x in c["draft"]))


def g_test(samples, exact):
    """G-test of samples int[n, NTOK] against exact probs[VS^NTOK]; cells with expected
    count < 5 are pooled. Returns (p-value, samples in zero-probability cells, G, dof);
    any sample in a zero-probability cell gives p = 0."""
    cells = np.ravel_multi_index(tuple(np.asarray(samples).T), [VS] * NTOK)
    obs = np.bincount(cells, minlength=exact.size).astype(float)
    if obs[exact == 0].sum() > 0:
        return 0.0, int(obs[exact == 0].sum()), float("inf"), 0
    exp = exact * len(cells)
    small = (exp < 5) & (exact > 0)
    big = exp >= 5
    o = np.append(obs[big], obs[small].sum())
    e = np.append(exp[big], exp[small].sum())
    if e[-1] == 0:
        o, e = o[:-1], e[:-1]
    res = stats.power_divergence(o, e, lambda_="log-likelihood")
    return float(res.pvalue), 0, float(res.statistic), len(o) - 1


@pytest.mark.parametrize("method", ["tree", "chain"])
@pytest.mark.parametrize("config", ["plain", "processed"])
def test_sampling_is_lossless(method, config):
    """sampling_walk (tree proposal) and chain_rejection reproduce the exact target law."""
    samples, accepted = simulate(jax.random.key(7), jnp.asarray(PROMPT), run_config(config), method)
    exact = exact_distribution(CONFIGS[config]["target"])
    pvalue, bad, g, dof = g_test(samples, exact)
    mean_acc = float(np.mean(np.asarray(accepted)))
    print(f"\n[lossless] {method}/{config}: n={NSAMP} cells={int((exact > 0).sum())} G={g:.1f} dof={dof} "
          f"p={pvalue:.4g} mean accepted/round={mean_acc:.3f}")
    assert bad == 0, f"{bad} samples in zero-probability outcomes"
    assert pvalue > 1e-3
    assert mean_acc > 0.3  # the draft really is accepted, so the walk/rejection path is exercised
    assert np.any(np.asarray(accepted) == 3)


@pytest.mark.parametrize("method,bug", [
    ("tree", "draft_argmax"), ("chain", "draft_argmax"), ("chain", "resample_p"), ("tree", "shared_noise"),
])
def test_broken_samplers_are_rejected(method, bug):
    samples, _ = simulate(jax.random.key(7), jnp.asarray(PROMPT), run_config("plain"), method, bug)
    pvalue, bad, g, dof = g_test(samples, exact_distribution(CONFIGS["plain"]["target"]))
    print(f"\n[broken] {method}/{bug}: n={NSAMP} G={g:.1f} dof={dof} p={pvalue:.4g} impossible-outcome samples={bad}")
    assert pvalue < 1e-6
