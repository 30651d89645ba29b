"""Property tests for DDTree tree selection (specjax/drafters/ddtree.py).

Checked against the slow references in tests/ddtree_reference.py: the paper's heap
algorithm (Algorithm 1), a brute-force sort of every prefix, the surrogate by summing
over every continuation Y in V^L, and every valid tree of a given size. The claims and
their proofs are indexed in proofs/README.md (DDTree: proofs/ddtree.md).

Shapes come from a few fixed (B, L, V, budget) tuples so that each jitted selection
compiles only a few times; Hypothesis draws a seed and a "mode" for the log-probs
(continuous, quantised with many exact ties, uniform depths, q = 1 exactly, q = 0,
unnormalised integer log-probs whose sums tie exactly across depths, with -0.0).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests import ddtree_reference as ref
from specjax.drafters.ddtree import num_prefixes, select_tree, select_tree_scored, selection_size

METHODS = ("levels", "pops")
MODES = ("normal", "quantised", "uniform", "peaked", "masked", "integer")

# (B, L, V, budget): V < budget, V > budget, budget > #prefixes (3+9 = 12 < 13), L = 1, budget = 1.
REF_SHAPES = [(2, 3, 5, 7), (3, 6, 12, 40), (2, 3, 9, 4), (2, 2, 3, 13), (2, 1, 6, 4), (2, 3, 4, 1)]
SMALL_SHAPES = [s for s in REF_SHAPES if num_prefixes(s[1], s[2]) <= 1000]  # brute force / exhaustive Y
ENUM_SHAPES = [(2, 2, 3, 13), (2, 3, 2, 5), (2, 2, 4, 3), (2, 3, 4, 1)]  # every valid tree is enumerable
LEMMA_SHAPES = [(2, 3, 9, 4), (2, 1, 6, 4), (2, 2, 4, 3), (2, 3, 4, 1)]  # V > budget, so K = budget < V


def make_log_q(rng: np.random.Generator, shape: tuple[int, int, int], mode: str) -> np.ndarray:
    """float32 log_softmax of random logits [B, L, V], with the ties/edge values of `mode`."""
    b, depth, vocab = shape
    logits = rng.normal(size=shape) * rng.choice([0.3, 1.0, 3.0, 8.0])
    if mode == "quantised":  # few distinct logits: many exactly equal log-probs and prefix sums
        logits = rng.integers(0, 3, size=shape).astype(np.float64)
    elif mode == "uniform":  # some depths entirely uniform
        logits = np.where(rng.random((b, depth, 1)) < 0.5, 0.0, logits)
    elif mode == "peaked":  # q = 1 exactly in float32 at some depths (log q = 0, the rest ~ -200)
        hot = rng.integers(0, vocab, size=(b, depth, 1)) == np.arange(vocab)
        logits = logits + 200.0 * (hot & (rng.random((b, depth, 1)) < 0.5))
    elif mode == "masked":  # q = 0 (log q = -inf) for some tokens, never a whole depth
        dead = rng.random(shape) < 0.4
        dead[..., rng.integers(0, vocab)] = False
        logits = np.where(dead, -np.inf, logits)
    elif mode == "integer":  # unnormalised integer log-probs: exact ties across depths, q = 1 as +0.0 and -0.0
        log_q = -rng.integers(0, 3, size=shape).astype(np.float32)
        return np.where((log_q == 0) & (rng.random(shape) < 0.5), np.float32(-0.0), log_q)
    logits = logits.astype(np.float32)
    z = logits - logits.max(-1, keepdims=True)
    return (z - np.log(np.exp(z).sum(-1, keepdims=True))).astype(np.float32)


@st.composite
def problems(draw, shapes, modes=MODES):
    """(log_q f32[B, L, V], budget) for one of the fixed shapes."""
    b, depth, vocab, budget = draw(st.sampled_from(shapes))
    mode = draw(st.sampled_from(modes))
    seed = draw(st.integers(0, 2**32 - 1))
    return make_log_q(np.random.default_rng(seed), (b, depth, vocab), mode), budget


@st.composite
def random_valid_trees(draw, depth: int, vocab: int, max_size: int):
    """A random prefix-closed set of token tuples (length <= depth), from a bushy tree to a chain."""
    nodes: list[tuple[int, ...]] = []
    for _ in range(draw(st.integers(0, max_size))):
        open_nodes = [()] + [u for u in nodes if len(u) < depth]
        parent = open_nodes[draw(st.integers(0, len(open_nodes) - 1))]
        child = parent + (draw(st.integers(0, vocab - 1)),)
        if child not in nodes:
            nodes.append(child)
    return set(nodes)


def run(log_q, budget, method):
    tree, scores = select_tree_scored(log_q, budget, method=method)
    return {k: np.asarray(v) for k, v in dict(
        tokens=tree.tokens, parents=tree.parents, depth=tree.depth, valid=tree.valid, scores=scores).items()}


def prefixes(out, row):
    return ref.tree_row_prefixes(out["tokens"][row], out["parents"][row], out["depth"][row], out["valid"][row])


def ranks_of(log_q_row, prefix):
    r = ref.token_ranks(log_q_row)
    return [int(r[d, v]) for d, v in enumerate(prefix)]


# ---------------------------------------------------------------- equals the references


@pytest.mark.parametrize("method", METHODS)
@settings(max_examples=60)
@given(problem=problems(REF_SHAPES))
def test_equals_heap_reference(method, problem):
    """Same nodes, same order, same float32 scores as the heapq Algorithm 1 (ties included)."""
    log_q, budget = problem
    out, want = run(log_q, budget, method), ref.heap_select_batch(log_q, budget)
    for key in ("tokens", "parents", "depth", "valid"):
        np.testing.assert_array_equal(out[key], want[key], err_msg=key)
    np.testing.assert_array_equal(out["scores"], want["scores"])
    for row in range(log_q.shape[0]):
        ours = set(prefixes(out, row))
        theirs = {n["prefix"] for n in ref.heap_select(log_q[row], budget)}
        assert ours == theirs
        np.testing.assert_allclose(ref.surrogate_additive(log_q[row], ours),
                                   ref.surrogate_additive(log_q[row], theirs), rtol=1e-5)


@pytest.mark.parametrize("method", METHODS)
@settings(max_examples=40)
@given(problem=problems(SMALL_SHAPES))
def test_equals_bruteforce_order(method, problem):
    """Ours = the first `budget` of ALL prefixes (every rank, not only the top-K) sorted by
    the documented order, node for node: Proposition 2 with our tie-break, and Lemma 1
    (restricting to the top-K ranks loses nothing)."""
    log_q, budget = problem
    out = run(log_q, budget, method)
    for row in range(log_q.shape[0]):
        want = ref.bruteforce_select(log_q[row], budget)
        assert prefixes(out, row) == want
        assert ref.is_prefix_closed(set(want))  # Proposition 2: the top prefixes form a valid tree


def test_known_answers():
    """Hand-computed trees exercising every tie rule, q = 1 and q = 0 (budget 13 > 12 prefixes)."""
    ninf = -np.inf
    log_q = np.array([
        [[-1, -2, -4], [-1, -3, -3]],  # integer log-probs: exact ties, not normalised
        [[0, ninf, ninf], [ninf, 0, ninf]],  # q = 1 and q = 0
    ], np.float32)
    want = [
        # sigma: -1 | -2 (depth 1 before 2) | -3 | -4 (depth 1, then ranks) | -5 (parent (1) before (2)) | -7
        [(0,), (1,), (0, 0), (1, 0), (2,), (0, 1), (0, 2), (1, 1), (1, 2), (2, 0), (2, 1), (2, 2)],
        # sigma 0: (0), (0,1); then -inf: depth 1 by token id, depth 2 by parent then rank (token 1 is rank 0)
        [(0,), (0, 1), (1,), (2,), (0, 0), (0, 2), (1, 1), (1, 0), (1, 2), (2, 1), (2, 0), (2, 2)],
    ]
    uniform = np.zeros((2, 2, 3), np.float32)  # everything ties: breadth-first, lexicographic
    bfs = [(0,), (1,), (2,)] + [(a, b) for a in range(3) for b in range(3)]
    for method in METHODS:
        out, flat = run(log_q, 13, method), run(uniform, 13, method)
        for row in range(2):
            assert prefixes(out, row) == want[row]
            assert prefixes(flat, row) == bfs
        np.testing.assert_array_equal(out["parents"][0], [-1, -1, 0, 1, -1, 0, 0, 1, 1, 4, 4, 4, -1])
        np.testing.assert_array_equal(out["valid"][0], [True] * 12 + [False])


def test_known_answers_depth_rule_and_signed_zero():
    """Row 0: (1,0) and (0,0,0) tie at sigma = -3; the shallower wins although its parent
    (1) was selected after (0,0). Row 1: log q = -0.0 and +0.0 are equal, token 0 first."""
    log_q = np.full((2, 3, 5), -9, np.float32)
    log_q[0, :, 0], log_q[0, 0, 1] = [0, -1, -2], -2
    log_q[1] = -5
    log_q[1, 0, :2] = [-0.0, 0.0]
    want = [
        [(0,), (0, 0), (1,), (1, 0), (0, 0, 0), (1, 0, 0), (2,)],
        [(0,), (1,), (2,), (3,), (4,), (0, 0), (0, 1)],
    ]
    for method in METHODS:
        out = run(log_q, 7, method)
        for row in range(2):
            assert prefixes(out, row) == want[row], (method, row)


def test_log_q_rounded_above_zero_inside_a_trace_keeps_parents_before_children():
    """Regression (found by `check_trees` on a 200x-sharpened drafter): a log_softmax fused into a larger
    program rounds the dominant token's log q to a tiny positive value; unclamped, every deeper prefix then
    outscored its parent and the chain came out deepest first (parents [1, 2, 3, -1]). Inside a trace the
    selection reads such values as q = 1: the same tree as exact zeros."""
    log_q = np.full((1, 4, 48), -30.0, np.float32)
    rounded = log_q.copy()
    log_q[:, :, 31], rounded[:, :, 31] = 0.0, 1e-7
    for method in METHODS:
        traced = jax.jit(lambda x, m=method: select_tree(x, 16, method=m))(jnp.asarray(rounded))
        exact = select_tree(jnp.asarray(log_q), 16, method=method)
        assert np.asarray(traced.parents[0, :4]).tolist() == [-1, 0, 1, 2], method
        jax.tree.map(np.testing.assert_array_equal, traced, exact)
    with pytest.raises(ValueError, match="must be log-probabilities"):  # a direct call still names them
        select_tree(jnp.asarray(rounded), 16)


# ---------------------------------------------------------------- the paper's claims


@settings(max_examples=40)
@given(problem=problems(SMALL_SHAPES), data=st.data())
def test_proposition1_surrogate_is_sum_of_prefix_probs(problem, data):
    """E_{Y~Q}[alpha_T(Y)] (enumerating every Y in V^L) = sum_{u in T} q(u), for our tree
    and for random valid trees."""
    log_q, budget = problem
    _, depth, vocab = log_q.shape
    out = run(log_q, budget, "levels")
    # The identity needs sum_v q_d(v) = 1 exactly; float32 rows are off by ~1e-7, so
    # renormalise in float64 for both sides.
    lq64 = log_q.astype(np.float64)
    lq64 -= np.log(np.exp(lq64).sum(-1, keepdims=True))
    for row in range(log_q.shape[0]):
        ours = set(prefixes(out, row))
        other = data.draw(random_valid_trees(depth, vocab, max_size=8))
        for tree in (ours, other):
            assert ref.is_prefix_closed(tree)
            np.testing.assert_allclose(ref.surrogate_exhaustive(lq64[row], tree),
                                       ref.surrogate_additive(lq64[row], tree), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("method", METHODS)
@settings(max_examples=25)
@given(problem=problems(ENUM_SHAPES))
def test_propositions_2_3_optimal_among_all_valid_trees(method, problem):
    """No valid tree with <= budget nodes has a larger surrogate than ours (every such tree
    is enumerated); ours is one of them (prefix-closed) and has min(budget, #prefixes) nodes.

    Scores are float32, the comparison is float64: ours may lose by float32 rounding of
    near-ties only, hence rtol 1e-6.
    """
    log_q, budget = problem
    _, depth, vocab = log_q.shape
    out = run(log_q, budget, method)
    all_trees = [set(t) for t in ref.valid_trees(depth, vocab, budget)]
    for row in range(log_q.shape[0]):
        ours = set(prefixes(out, row))
        assert len(ours) == min(budget, num_prefixes(depth, vocab)) == out["valid"][row].sum()
        assert ours in all_trees
        value = ref.surrogate_additive(log_q[row], ours)
        best = max(ref.surrogate_additive(log_q[row], t) for t in all_trees)
        assert value >= best * (1 - 1e-6), (value, best)


def test_reference_enumerates_every_valid_tree():
    """The enumeration behind the optimality test is complete and duplicate-free:
    g(h) = (1 + g(h-1))^V prefix-closed sets below a root with h levels."""
    for depth, vocab in [(1, 3), (2, 2), (2, 3), (3, 2)]:
        trees = [frozenset(t) for t in ref.valid_trees(depth, vocab, num_prefixes(depth, vocab))]
        assert len(trees) == len(set(trees)) == ref.count_valid_trees(depth, vocab)
        assert all(ref.is_prefix_closed(set(t)) for t in trees)
    small = {frozenset(t) for t in ref.valid_trees(3, 2, 4)}  # with a size cap: the capped subset
    full = {frozenset(t) for t in ref.valid_trees(3, 2, num_prefixes(3, 2))}
    assert small == {t for t in full if len(t) <= 4}


@pytest.mark.parametrize("method", METHODS)
@settings(max_examples=30)
@given(problem=problems(LEMMA_SHAPES + [(3, 6, 12, 40)]))
def test_lemma1_only_top_k_ranks(method, problem):
    """Every selected node uses a top-K token (K = min(budget, V)) at each depth, and where
    the brute force is affordable, the budget best prefixes over ALL ranks are in S_K."""
    log_q, budget = problem
    _, depth, vocab = log_q.shape
    k = min(budget, vocab)
    out = run(log_q, budget, method)
    for row in range(log_q.shape[0]):
        for u in prefixes(out, row):
            assert max(ranks_of(log_q[row], u)) < k, u
        if num_prefixes(depth, vocab) <= 1000:
            for u in ref.bruteforce_select(log_q[row], budget):
                assert max(ranks_of(log_q[row], u)) < k, u


# ---------------------------------------------------------------- structure and batching


@pytest.mark.parametrize("method", METHODS)
@settings(max_examples=30)
@given(problem=problems(REF_SHAPES))
def test_tree_structure(method, problem):
    """Packed, topologically ordered, depth-consistent, no duplicate siblings, exact padding,
    scores = float32 path sums, non-increasing in slot order (the selection order)."""
    log_q, budget = problem
    b, depth, vocab = log_q.shape
    out = run(log_q, budget, method)
    n = selection_size(budget, depth, vocab)
    assert n == min(budget, num_prefixes(depth, vocab))
    for row in range(b):
        tok, par, dep, val, sc = (out[k][row] for k in ("tokens", "parents", "depth", "valid", "scores"))
        np.testing.assert_array_equal(val, np.arange(budget) < n)
        np.testing.assert_array_equal(tok[n:], 0)
        np.testing.assert_array_equal(par[n:], -1)
        np.testing.assert_array_equal(dep[n:], 0)
        assert np.all(np.isneginf(sc[n:]))
        for i in range(n):
            assert -1 <= par[i] < i
            assert (par[i] == -1) == (dep[i] == 1)
            assert dep[i] == (1 if par[i] < 0 else dep[par[i]] + 1) <= depth
            assert 0 <= tok[i] < vocab
        pre = prefixes(out, row)
        assert len(set(pre)) == len(pre) == n
        for i, u in enumerate(pre):
            assert sc[i] == ref.prefix_sigmas(log_q[row], u)[-1]
        assert np.all(sc[1:n] <= sc[: n - 1])  # (np.diff would give nan on -inf - -inf)


@pytest.mark.parametrize("method", METHODS)
@settings(max_examples=25)
@given(problem=problems(REF_SHAPES), seed=st.integers(0, 2**32 - 1), mode=st.sampled_from(MODES))
def test_batch_rows_independent(method, problem, seed, mode):
    """A row's tree does not depend on the other rows of the batch."""
    log_q, budget = problem
    other = make_log_q(np.random.default_rng(seed), log_q.shape, mode)
    keep = np.random.default_rng(seed + 1).random(log_q.shape[0]) < 0.5
    mixed = np.where(keep[:, None, None], log_q, other)
    a, b = run(log_q, budget, method), run(mixed, budget, method)
    for key in a:
        np.testing.assert_array_equal(a[key][keep], b[key][keep], err_msg=key)


def test_inside_jit_and_methods_agree():
    """Callable under an outer jit (budget static); both formulations give the same tree."""
    log_q = make_log_q(np.random.default_rng(0), (3, 6, 12), "quantised")
    direct = select_tree(log_q, 40)
    inner = jax.jit(lambda x: select_tree(x, 40, method="pops"))(log_q)
    for key in ("tokens", "parents", "depth", "valid"):
        np.testing.assert_array_equal(getattr(direct, key), getattr(inner, key), err_msg=key)


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize("log_q, budget, match", [
    (np.zeros((2, 3, 5), np.float32), 0, "budget must be >= 1"),
    (np.zeros((2, 3, 5), np.float32), -3, "budget must be >= 1"),
    (np.zeros((2, 3, 5), np.float32), 2.5, "budget must be a Python int"),
    (np.zeros((2, 3, 5), np.float32), True, "budget must be a Python int"),
    (np.zeros((3, 5), np.float32), 4, "rank 3"),
    (np.zeros((1, 2, 3, 5), np.float32), 4, "rank 3"),
    (np.zeros((2, 0, 5), np.float32), 4, "depth L must be >= 1"),
    (np.zeros((2, 3, 0), np.float32), 4, "vocabulary V must be >= 1"),
    (np.zeros((0, 3, 5), np.float32), 4, "batch size B must be >= 1"),
    (np.zeros((2, 3, 5), np.int32), 4, "floating point"),
])
def test_bad_inputs(log_q, budget, match):
    with pytest.raises(ValueError, match=match):
        select_tree(log_q, budget)


def test_garbage_values_raise_named_errors_on_direct_calls():
    """NaN marginals used to give a tree of 'valid' nodes; logits (> 0) are not log-probabilities."""
    log_q = np.log(np.full((2, 3, 5), 0.2, np.float32))
    log_q[1, 2, 3] = np.nan
    with pytest.raises(ValueError, match=r"1 NaN entries \(first at \[b, d, v\] = \(1, 2, 3\)\)"):
        select_tree(log_q, 4)
    with pytest.raises(ValueError, match=r"must be log-probabilities.*found 2.5 at \[b, d, v\] = \(0, 0, 0\)"):
        select_tree(np.full((1, 2, 3), 2.5, np.float32), 4)
    with pytest.raises(ValueError, match="NaN"):
        select_tree_scored(np.full((1, 2, 3), np.nan, np.float32), 4)
    select_tree(np.full((1, 2, 3), -np.inf, np.float32), 4)  # q = 0 everywhere is allowed (a -inf tree)


def test_bad_method():
    with pytest.raises(ValueError, match="method must be one of"):
        select_tree(np.zeros((1, 2, 3), np.float32), 2, method="heap")
