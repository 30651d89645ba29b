"""Tree pytree: derived masks/positions, BFS flattening, pruning, validation, builders.

Every fast (jitted, batched) function is compared with a slow numpy/Python reference on
random padded trees from tests/strategies.py; `check_tree` is shown to catch each kind
of invalid tree.
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from specjax import tree as T
from tests.strategies import tree_from_arrays, trees

B, N, V = 3, 8, 6  # the one shape the jitted functions see (plus B=2, N=5 in a few spots)

ancestor_mask = jax.jit(T.ancestor_mask)
node_positions = jax.jit(T.node_positions)
compute_depth = jax.jit(T.compute_depth)
to_bfs = jax.jit(T.to_bfs)
prune = jax.jit(T.prune)
dedup_siblings = jax.jit(T.dedup_siblings)
match_child = jax.jit(T.match_child)


def np_tree(tree):
    return tuple(np.asarray(x) for x in (tree.tokens, tree.parents, tree.depth, tree.valid))


def ref_ancestors(par, val, r, i):
    """Set of slots that are node i or its ancestors, plus the root (slot 0)."""
    out = {0, i + 1}
    if not val[r, i]:
        return out
    p = par[r, i]
    while p >= 0:
        out.add(p + 1)
        p = par[r, p]
    return out


@given(trees(B, N, V), st.integers(1, N))
def test_pointer_jumping_mask_equals_the_sequential_one_up_to_max_depth(tree, max_depth):
    """The decode loop's form (D pointer steps, one scatter) equals the exact mask on every
    row of a node of depth <= D, and on every row when D bounds the tree's depth."""
    exact = np.asarray(ancestor_mask(tree))
    fast = np.asarray(jax.jit(T.ancestor_mask, static_argnums=1)(tree, max_depth))
    _, _, depth, val = np_tree(tree)
    rows = np.concatenate([np.ones((B, 1), bool), ~val | (depth <= max_depth)], axis=1)  # root + shallow nodes
    np.testing.assert_array_equal(fast[rows], exact[rows])
    deep = np.concatenate([np.zeros((B, 1), bool), val & (depth > max_depth)], axis=1)
    assert np.all(fast[deep] <= exact[deep])  # deeper rows only miss their farthest ancestors


@given(trees(B, N, V))
def test_ancestor_mask_matches_reference(tree):
    _, par, _, val = np_tree(tree)
    mask = np.asarray(ancestor_mask(tree))
    assert mask.shape == (B, N + 1, N + 1)
    for r in range(B):
        assert mask[r, 0].tolist() == [True] + [False] * N  # the root sees only itself
        for i in range(N):
            want = np.zeros(N + 1, bool)
            want[list(ref_ancestors(par, val, r, i))] = True
            np.testing.assert_array_equal(mask[r, i + 1], want, err_msg=f"row {r} node {i}")


@given(trees(B, N, V), st.lists(st.integers(0, 100), min_size=B, max_size=B))
def test_positions_and_depth(tree, lengths):
    _, par, dep, val = np_tree(tree)
    pos = np.asarray(node_positions(tree, jnp.asarray(lengths, jnp.int32)))
    for r in range(B):
        assert pos[r, 0] == lengths[r]
        for i in range(N):
            # depth = number of proper ancestors below the root + 1 = path length
            want = len(ref_ancestors(par, val, r, i)) - 1 if val[r, i] else 0
            assert pos[r, i + 1] == lengths[r] + want
    np.testing.assert_array_equal(np.asarray(compute_depth(tree.parents, tree.valid)), dep)


@given(trees(B, N, V), trees(B, N, 3, unique_siblings=True, packed=True))
def test_generated_trees_are_valid(tree, unique_packed):
    T.check_tree(tree, vocab_size=V)
    T.check_tree(unique_packed, vocab_size=3, unique_siblings=True, packed=True)


@given(trees(B, N, V))
def test_bfs_reorder_preserves_tree(tree):
    bfs, perm = to_bfs(tree)
    perm = np.asarray(perm)
    T.check_tree(bfs, vocab_size=V, packed=True)
    assert T.token_paths(bfs) == T.token_paths(tree)  # same multiset of root-to-node paths
    tok, par, dep, val = np_tree(bfs)
    for r in range(B):
        assert sorted(perm[r].tolist()) == list(range(N))
        n = int(val[r].sum())
        # FIFO BFS: depths and parent indices are both non-decreasing along the order
        assert np.all(np.diff(dep[r, :n]) >= 0)
        assert np.all(np.diff(par[r, :n]) >= 0), f"row {r}: parents {par[r, :n]} not BFS"
    # Same structure: the ancestor mask is the permuted one.
    slot_perm = np.concatenate([np.zeros((B, 1), int), perm + 1], axis=1)
    old, new = np.asarray(ancestor_mask(tree)), np.asarray(ancestor_mask(bfs))
    for r in range(B):
        nv = int(val[r].sum()) + 1
        idx = slot_perm[r, :nv]
        np.testing.assert_array_equal(new[r, :nv, :nv], old[r][np.ix_(idx, idx)])


def test_bfs_is_fifo_not_level_by_index():
    # Level order by index would give [A, B, b1, a1]; the FIFO BFS visits A's child first.
    tree = T.tree_from_lists([[10, 20, 21, 11]], [[-1, -1, 1, 0]])
    bfs, perm = T.to_bfs(tree)
    assert np.asarray(perm)[0].tolist() == [0, 1, 3, 2]
    assert np.asarray(bfs.tokens)[0].tolist() == [10, 20, 11, 21]
    assert np.asarray(bfs.parents)[0].tolist() == [-1, -1, 0, 1]


def test_tree_from_lists_and_paths():
    tree = T.tree_from_lists([[5, 6, 7], [1]], [[-1, 0, 0], [-1]], budget=4)
    T.check_tree(tree, packed=True)
    assert np.asarray(tree.depth).tolist() == [[1, 2, 2, 0], [1, 0, 0, 0]]
    assert np.asarray(tree.parents).tolist() == [[-1, 0, 0, -1], [-1, -1, -1, -1]]
    assert T.token_paths(tree) == [[(5,), (5, 6), (5, 7)], [(1,)]]
    paths = [[(1, 2, 3), (1, 4), (2,)], [(0, 0, 0, 0)]]
    trie = T.tree_from_paths(paths, budget=6)
    T.check_tree(trie, unique_siblings=True, packed=True)
    assert T.token_paths(trie) == [[(1,), (1, 2), (1, 2, 3), (1, 4), (2,)], [(0,), (0, 0), (0, 0, 0), (0, 0, 0, 0)]]
    with pytest.raises(ValueError, match="parent 1 not in"):
        T.tree_from_lists([[1, 2]], [[-1, 1]])
    with pytest.raises(ValueError, match="exceed the budget"):
        T.tree_from_lists([[1, 2]], [[-1, 0]], budget=1)


def test_chain_tree():
    chain = T.chain_tree(jnp.array([[3, 4, 5], [6, 7, 8]]), jnp.array([3, 1]))
    T.check_tree(chain, packed=True)
    assert T.token_paths(chain) == [[(3,), (3, 4), (3, 4, 5)], [(6,)]]


# ---- check_tree catches each kind of invalid tree ------------------------------------

BASE = ([[4, 5, 6, 7, 0]], [[-1, 0, 0, 1, -1]], [[1, 2, 2, 3, 0]], [[True, True, True, True, False]])

MUTATIONS = {
    # name: (function mutating (tok, par, dep, val) in place, expected message)
    "parent after child": (lambda t, p, d, v: p.__setitem__((0, 1), 3), "not before the node"),
    "self parent": (lambda t, p, d, v: p.__setitem__((0, 2), 2), "not before the node"),
    "parent below -1": (lambda t, p, d, v: p.__setitem__((0, 0), -2), "not before the node"),
    "parent invalid": (lambda t, p, d, v: v.__setitem__((0, 1), False) or p.__setitem__((0, 1), -1)
                       or d.__setitem__((0, 1), 0), "is invalid"),
    "depth wrong": (lambda t, p, d, v: d.__setitem__((0, 3), 2), "depth 2 != parent depth"),
    "root child depth": (lambda t, p, d, v: d.__setitem__((0, 0), 0), "depth 0 != parent depth"),
    "padding parent": (lambda t, p, d, v: p.__setitem__((0, 4), 0), "padding not normalised"),
    "padding depth": (lambda t, p, d, v: d.__setitem__((0, 4), 1), "padding not normalised"),
    "token range": (lambda t, p, d, v: t.__setitem__((0, 2), 9), "outside"),
    "duplicate sibling": (lambda t, p, d, v: t.__setitem__((0, 2), 5), "duplicate sibling"),
    "gap when packed": (lambda t, p, d, v: v.__setitem__((0, 4), True) or v.__setitem__((0, 3), False)
                        or d.__setitem__((0, 4), 1) or d.__setitem__((0, 3), 0)
                        or p.__setitem__((0, 3), -1), "after padding"),
}


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_check_tree_catches(name):
    tok, par, dep, val = (np.array(x) for x in BASE)
    T.check_tree(tree_from_arrays(tok, par, val), vocab_size=8, unique_siblings=True, packed=True)
    mutate, message = MUTATIONS[name]
    mutate(tok, par, dep, val)
    bad = T.Tree(tokens=jnp.asarray(tok), parents=jnp.asarray(par), depth=jnp.asarray(dep), valid=jnp.asarray(val))
    with pytest.raises(ValueError, match=re.escape(message)):
        T.check_tree(bad, vocab_size=8, unique_siblings=True, packed=name == "gap when packed")


def test_duplicates_only_checked_on_request():
    tree = T.tree_from_lists([[4, 4]], [[-1, -1]])
    T.check_tree(tree)  # allowed by default: harmless for the walks
    with pytest.raises(ValueError, match="duplicate sibling"):
        T.check_tree(tree, unique_siblings=True)


@given(trees(B, N, V, min_nodes=2), st.data())
def test_check_tree_catches_random_corruption(tree, data):
    tok, par, dep, val = (np.array(x) for x in np_tree(tree))
    r = data.draw(st.integers(0, B - 1))
    nodes = np.flatnonzero(val[r])
    if len(nodes) < 1:
        return
    i = int(data.draw(st.sampled_from(nodes.tolist())))
    kind = data.draw(st.sampled_from(["depth", "parent_forward", "pad_parent"]))
    if kind == "depth":
        dep[r, i] += data.draw(st.sampled_from([-1, 1, 2]))
    elif kind == "parent_forward":
        par[r, i] = data.draw(st.integers(i, N - 1))
    else:
        pads = np.flatnonzero(~val[r])
        if len(pads) == 0:
            return
        par[r, pads[0]] = 0
    bad = T.Tree(tokens=jnp.asarray(tok), parents=jnp.asarray(par), depth=jnp.asarray(dep), valid=jnp.asarray(val))
    with pytest.raises(ValueError):
        T.check_tree(bad)


# ---- prune / dedup / match_child -------------------------------------------------------


@given(trees(B, N, V), st.lists(st.booleans(), min_size=B * N, max_size=B * N))
def test_prune_drops_whole_subtrees(tree, keep):
    keep = np.array(keep).reshape(B, N)
    out = prune(tree, jnp.asarray(keep))
    T.check_tree(out)
    _, par, _, val = np_tree(tree)
    want = np.zeros((B, N), bool)
    for r in range(B):
        for i in range(N):
            chain = ref_ancestors(par, val, r, i) - {0}
            want[r, i] = val[r, i] and all(keep[r, s - 1] for s in chain)
    np.testing.assert_array_equal(np.asarray(out.valid), want)
    np.testing.assert_array_equal(np.asarray(out.tokens)[want], np.asarray(tree.tokens)[want])


@given(trees(B, N, 3))
def test_dedup_siblings_keeps_the_path_set(tree):
    out = dedup_siblings(tree)
    T.check_tree(out, unique_siblings=True)
    assert [sorted(set(p)) for p in T.token_paths(tree)] == T.token_paths(out)


@given(trees(B, N, 3), st.data())
def test_match_child_matches_reference(tree, data):
    tok, par, _, val = np_tree(tree)
    slot = data.draw(st.lists(st.integers(0, N), min_size=B, max_size=B))
    token = data.draw(st.lists(st.integers(0, 2), min_size=B, max_size=B))
    for r in range(B):  # mostly ask for an existing (parent, token) pair, duplicates included
        nodes = np.flatnonzero(val[r]).tolist()
        if nodes and data.draw(st.integers(0, 3)):
            i = data.draw(st.sampled_from(nodes))
            slot[r], token[r] = int(par[r, i]) + 1, int(tok[r, i])
    found, child = match_child(tree, jnp.asarray(slot, jnp.int32), jnp.asarray(token, jnp.int32))
    for r in range(B):
        hits = [i for i in range(N) if val[r, i] and par[r, i] + 1 == slot[r] and tok[r, i] == token[r]]
        assert bool(found[r]) == bool(hits)
        assert int(child[r]) == (hits[0] + 1 if hits else 0)


def test_eager_calls_of_the_looping_functions_compile_once_per_shape():
    """The public functions with a `lax` loop are jitted: called eagerly (a notebook, a test)
    with new values of the same shapes they reuse their program. Unjitted, every call traced
    a fresh loop body and compiled it again (measured: 225 compiles of one `walk` shape)."""
    from specjax.bench.timing import compile_totals
    from specjax.drafters.grafting import graft
    from specjax.drafters.retrieval import Template, retrieve
    from specjax.verify import walk

    template = Template.from_counts((2, 1), 2)

    def calls(seed):
        rng = np.random.default_rng(seed)
        tree = T.tree_from_paths([[(1,), (1, 2), (3,)], [(int(rng.integers(4)),)]], budget=4)
        table = jnp.asarray(rng.integers(0, 5, (5, 2)), jnp.int32)
        ret = retrieve(table, jnp.asarray([1, 2], jnp.int32), template)
        graft(tree.tokens, tree.parents, tree.depth, tree.valid, jnp.zeros((2, 4), jnp.int32), jnp.asarray([3, 1]),
              ret, template, jnp.ones((2, template.size), bool), jnp.full((2,), -1, jnp.int32), 6)
        walk(tree, jnp.asarray(rng.integers(0, 4, (2, 5)), jnp.int32), 3)
        T.ancestor_mask(tree, 2), T.ancestor_mask(tree), T.compute_depth(tree.parents, tree.valid)
        T.prune(tree, jnp.asarray(rng.random((2, 4)) < 0.5)), T.dedup_siblings(tree), T.bfs_order(tree)

    calls(0)
    before = compile_totals()["compiles"]
    calls(1)
    assert compile_totals()["compiles"] == before
