"""Draft trees: the pytree every drafter proposes and the verifier walks.

A `Tree` holds a batch of padded, topologically ordered token trees hanging below a
*root*: the last committed (bonus) token, which the target has not processed yet.

    tokens  int32[B, N]   token id of each node
    parents int32[B, N]   index of the parent node in [0, N), or -1 for a child of the root
    depth   int32[B, N]   1 for children of the root, parent depth + 1 below
    valid   bool [B, N]   padding mask; invalid nodes have parents = -1 and depth = 0

Nodes are ordered parents-before-children (parents[b, i] < i). The budget `N` is the
static shape; how many nodes a row really uses is `valid.sum(-1)`. Valid nodes need not
be packed at the front (a row may have gaps). The ancestor mask and positions are
*derived* (see `ancestor_mask`, `node_positions`), never stored.

In verification the root is prepended: slot 0 of the target's pending block is the
root and node i sits at slot i + 1.

Invariants (checked on the host by `check_tree`):
  * parents[b, i] in [-1, i) for valid nodes (parents before children);
  * the parent of a valid node is valid (the tree is prefix-closed: every prefix of a
    drafted token path is itself drafted);
  * depth = parent depth + 1 (1 below the root);
  * padding is normalised: invalid nodes have parents = -1 and depth = 0 (their tokens
    are don't-care; `normalize` sets them to 0).

Duplicate siblings (two valid children of one node with the same token) are *allowed*:
both walks in `specjax.verify` follow the lowest-index matching child, and both copies
have the same root-to-node token path, hence the same target context and the same
target distribution, so greedy exactness and sampling losslessness are unaffected (see
proofs/sampling_walk.md). They only waste budget: the subtree under the second copy can
never be reached. Drafters that promise unique siblings can assert it with
`check_tree(tree, unique_siblings=True)`, and `dedup_siblings` merges duplicates.

Device functions (batched, static shapes, `lax` loops only): `ancestor_mask`,
`node_positions`, `compute_depth`, `normalize`, `prune`, `dedup_siblings`, `chain_tree`,
`children_mask`, `match_child`, `bfs_order`, `reorder`, `to_bfs`, `tree_violations` (the
invariants of `check_tree`, on device: what `generate(..., check_trees=True)` checks).
Host helpers (numpy, for tests and users): `tree_from_lists`, `tree_from_paths`,
`token_paths`, `check_tree`.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

__all__ = [
    "ancestor_mask", "bfs_order", "chain_tree", "check_tree", "children_mask", "compute_depth", "dedup_siblings",
    "match_child", "node_positions", "normalize", "prune", "reorder", "to_bfs", "token_paths", "Tree", "tree_depth",
    "tree_from_lists", "tree_from_paths", "tree_violations", "TREE_RULES",
]


@struct.dataclass
class Tree:
    """A batch of padded draft trees below each row's root (module docstring: invariants). Nodes come
    parents before children; N is the static budget. A pytree: passes through `jax.jit` and `lax`
    control flow like any array.

    Fields:
      tokens: int32[B, N] token id of each node (don't-care on padding; `normalize` sets 0).
      parents: int32[B, N] index of each node's parent in [0, i), or -1 for a child of the root
        (and for padding).
      depth: int32[B, N] 1 for children of the root, parent depth + 1 below; 0 on padding.
      valid: bool[B, N] padding mask: True for the row's real nodes (not necessarily a prefix).
    """

    tokens: jax.Array
    parents: jax.Array
    depth: jax.Array
    valid: jax.Array

    @property
    def batch_size(self) -> int:
        return self.tokens.shape[0]

    @property
    def budget(self) -> int:
        return self.tokens.shape[1]


# ----------------------------------------------------------------------------------------
# Derived quantities
# ----------------------------------------------------------------------------------------


@functools.partial(jax.jit, static_argnames=("max_depth",))
def ancestor_mask(tree: Tree, max_depth: int | None = None) -> jax.Array:
    """Ancestor-or-self mask of root + nodes: bool[B, N+1, N+1].

    mask[b, i, j] is True iff slot j is slot i or an ancestor of slot i, where slot 0
    is the root and slot i + 1 is node i. Invalid nodes see only the root and themselves
    (so their logits are finite and ignored).

    max_depth (static) bounds the depth of the nodes whose rows must be exact: each node's
    ancestors at distance 0..max_depth are found by max_depth parallel pointer steps
    (a_{d+1} = parent(a_d), one gather over all nodes each) and scattered into the mask at
    once -- O(N D) work with a critical path of D gathers, the form a decode loop wants
    (it knows its drafter's max_depth). Rows of nodes deeper than max_depth miss their
    farthest ancestors (no walk of that drafter reaches them). None: exact for any tree,
    by N sequential steps in topological order (row(i) = row(parent(i)) | e_i).
    """
    b, n = tree.tokens.shape
    eye = jnp.eye(n + 1, dtype=bool)
    parent_slot = jnp.where(tree.valid, tree.parents + 1, 0)  # [B, N], root is slot 0
    if max_depth is not None:
        up = jnp.concatenate([jnp.zeros((b, 1), jnp.int32), parent_slot.astype(jnp.int32)], axis=1)  # [B, N+1]
        hops = [jnp.broadcast_to(jnp.arange(n + 1, dtype=jnp.int32), (b, n + 1))]
        for _ in range(max(int(max_depth), 1)):  # the root (slot 0) is its own parent: chains end there
            hops.append(jnp.take_along_axis(up, hops[-1], axis=1))
        targets = jnp.stack(hops, axis=-1)  # [B, N+1, D+1] slots on each row's path to the root
        rows = jnp.arange(n + 1)[None, :, None]
        return jnp.zeros((b, n + 1, n + 1), bool).at[jnp.arange(b)[:, None, None], rows, targets].set(True)

    def body(i, mask):
        # Parents precede children, so row parent_slot[:, i] is final when we reach i.
        parent_rows = jnp.take_along_axis(mask, parent_slot[:, i][:, None, None], axis=1)[:, 0]  # [B, N+1]
        return mask.at[:, i + 1].set(parent_rows | eye[i + 1])

    mask0 = jnp.broadcast_to(eye, (b, n + 1, n + 1))
    mask0 = mask0.at[:, :, 0].set(True)
    return jax.lax.fori_loop(0, n, body, mask0)


def tree_depth(tree: Tree) -> jax.Array:
    """Depth of each row's tree: int32[B], the largest depth of a valid node (0 if none)."""
    return jnp.max(jnp.where(tree.valid, tree.depth, 0), axis=1).astype(jnp.int32)


def node_positions(tree: Tree, lengths: jax.Array) -> jax.Array:
    """Absolute positions of root + nodes: int32[B, N+1] = lengths[:, None] + [0, depth]."""
    depth = jnp.where(tree.valid, tree.depth, 0)
    return lengths[:, None].astype(jnp.int32) + jnp.concatenate([jnp.zeros_like(depth[:, :1]), depth], axis=1)


@jax.jit
def compute_depth(parents: jax.Array, valid: jax.Array) -> jax.Array:
    """Depths from parent pointers: int32[B, N] (0 for invalid nodes).

    parents int32[B, N] (topologically ordered, -1 = child of the root), valid bool[B, N].
    One `lax.fori_loop` over node index; each step is vectorised over the batch.
    """
    n = parents.shape[1]

    def body(i, depth):
        p = parents[:, i]
        parent_depth = jnp.take_along_axis(depth, jnp.maximum(p, 0)[:, None], axis=1)[:, 0]
        d = jnp.where(p >= 0, parent_depth + 1, 1)
        return depth.at[:, i].set(jnp.where(valid[:, i], d, 0))

    return jax.lax.fori_loop(0, n, body, jnp.zeros(parents.shape, jnp.int32))


def normalize(tree: Tree) -> Tree:
    """Set padding to the canonical form: invalid nodes get token 0, parent -1, depth 0."""
    v = tree.valid
    return Tree(
        tokens=jnp.where(v, tree.tokens, 0).astype(jnp.int32),
        parents=jnp.where(v, tree.parents, -1).astype(jnp.int32),
        depth=jnp.where(v, tree.depth, 0).astype(jnp.int32),
        valid=v.astype(bool),
    )


@jax.jit
def prune(tree: Tree, keep: jax.Array) -> Tree:
    """Drop every node with keep == False together with its whole subtree.

    keep bool[B, N]. A node survives iff it is valid and it and all its ancestors are
    kept, so the result stays prefix-closed; node indices are unchanged (the pruned
    slots become normalised padding). `lax.fori_loop` over node index.
    """
    n = tree.budget
    alive0 = tree.valid & keep

    def body(i, alive):
        p = tree.parents[:, i]
        parent_alive = jnp.take_along_axis(alive, jnp.maximum(p, 0)[:, None], axis=1)[:, 0]
        return alive.at[:, i].set(alive[:, i] & ((p < 0) | parent_alive))

    alive = jax.lax.fori_loop(0, n, body, alive0)
    return normalize(tree.replace(valid=alive))


@jax.jit
def dedup_siblings(tree: Tree) -> Tree:
    """Merge duplicate siblings: the result has unique siblings and the same *set* of
    root-to-node token paths (the multiset collapses to a set).

    In topological order each valid node is mapped to its canonical copy: the
    lowest-index valid node with the same canonical parent and the same token. Only
    canonical nodes stay valid, and their children are re-hung below the canonical
    parent, so subtrees of duplicates are merged rather than lost. Node indices are
    unchanged (merged slots become normalised padding). `lax.fori_loop` over node index
    with an O(B N) vectorised compare per step.
    """
    b, n = tree.tokens.shape
    idx = jnp.arange(n, dtype=jnp.int32)

    def body(i, state):
        canon, cparent = state  # int32[B, N]: canonical copy of each node, canonical parent
        p = tree.parents[:, i]
        cp = jnp.where(p >= 0, jnp.take_along_axis(canon, jnp.maximum(p, 0)[:, None], axis=1)[:, 0], -1)
        same = (tree.valid & (idx[None, :] < i) & (cparent == cp[:, None])
                & (tree.tokens == tree.tokens[:, i][:, None]) & (canon == idx[None, :]))  # [B, N]
        c = jnp.where(same.any(-1), jnp.argmax(same, axis=-1).astype(jnp.int32), i)
        return canon.at[:, i].set(c), cparent.at[:, i].set(cp)

    init = (jnp.broadcast_to(idx, (b, n)), jnp.full((b, n), -1, jnp.int32))
    canon, cparent = jax.lax.fori_loop(0, n, body, init)
    keep = tree.valid & (canon == idx[None, :])
    return normalize(tree.replace(parents=cparent, valid=keep))


def chain_tree(tokens: jax.Array, num: jax.Array | None = None) -> Tree:
    """A chain (linear draft) as a Tree: node i is the child of node i-1.

    tokens int32[B, K]; num int32[B] (number of valid leading nodes, default K).
    """
    b, k = tokens.shape
    idx = jnp.arange(k, dtype=jnp.int32)
    valid = jnp.ones((b, k), bool) if num is None else idx[None, :] < num[:, None]
    tree = Tree(
        tokens=tokens.astype(jnp.int32),
        parents=jnp.broadcast_to(idx - 1, (b, k)),
        depth=jnp.broadcast_to(idx + 1, (b, k)),
        valid=valid,
    )
    return normalize(tree)


# The rules `tree_violations` checks, in the order of its last axis (`check_tree`'s, plus the
# bounds a decode loop knows: its drafter's max_depth and the target's vocabulary).
TREE_RULES = (
    "parent before the node (-1 <= parent < node index)",
    "parent is a valid node (the tree is prefix-closed)",
    "depth = parent depth + 1 (1 below the root)",
    "padding normalised (invalid node: parent -1, depth 0)",
    "depth <= the drafter's max_depth",
    "token in [0, vocab_size)",
)


def tree_violations(tree: Tree, max_depth: int | None = None, vocab_size: int | None = None) -> jax.Array:
    """Which node breaks which invariant, on device: bool[B, N, len(TREE_RULES)].

    [b, i, k] is True when node i of row b breaks rule `TREE_RULES[k]`; all False for a valid
    tree (the invariants `check_tree` checks on the host, in the same terms). `max_depth` /
    `vocab_size` (static; None: not checked) bound the depth and the tokens of valid nodes.
    Vectorised: one gather of each node's parent, no loop.
    """
    b, n = tree.tokens.shape
    idx = jnp.arange(n, dtype=jnp.int32)[None]
    valid, parents, depth, tokens = tree.valid.astype(bool), tree.parents, tree.depth, tree.tokens
    in_order = (parents >= -1) & (parents < idx)
    at = jnp.clip(parents, 0, n - 1)
    parent_valid = jnp.take_along_axis(valid, at, axis=1)
    parent_depth = jnp.take_along_axis(depth, at, axis=1)
    has_parent = parents >= 0
    want = jnp.where(has_parent, parent_depth + 1, 1)
    false = jnp.zeros((b, n), bool)
    rules = [
        valid & ~in_order,
        valid & in_order & has_parent & ~parent_valid,
        valid & in_order & (depth != want),
        ~valid & ((parents != -1) | (depth != 0)),
        valid & (depth > max_depth) if max_depth is not None else false,
        valid & ((tokens < 0) | (tokens >= vocab_size)) if vocab_size is not None else false,
    ]
    return jnp.stack(rules, axis=-1)


# ----------------------------------------------------------------------------------------
# Child matching (what the verifier walks need)
# ----------------------------------------------------------------------------------------


def children_mask(tree: Tree, slot: jax.Array) -> jax.Array:
    """bool[B, N]: node i is a valid child of slot[b] (slot 0 = root, slot i+1 = node i)."""
    return tree.valid & (tree.parents + 1 == slot[:, None])


def match_child(tree: Tree, slot: jax.Array, token: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Find the child of `slot` that carries `token`.

    slot int32[B], token int32[B] -> (found bool[B], child_slot int32[B]). child_slot is
    the slot (1 + node index) of the lowest-index matching valid child, 0 when none.
    O(B N) vectorised compare.
    """
    hit = children_mask(tree, slot) & (tree.tokens == token[:, None])  # [B, N]
    found = hit.any(-1)
    child = jnp.argmax(hit, axis=-1).astype(jnp.int32) + 1
    return found, jnp.where(found, child, 0)


# ----------------------------------------------------------------------------------------
# BFS flattening
# ----------------------------------------------------------------------------------------


@jax.jit
def bfs_order(tree: Tree) -> jax.Array:
    """Breadth-first (FIFO queue) order of each row: perm int32[B, N].

    Node k of the BFS tree is node perm[b, k] of `tree`. Valid nodes come first, sorted
    by (depth, BFS rank of the parent, original index) -- exactly the order in which a
    FIFO breadth-first traversal that visits children by index would dequeue them;
    invalid nodes follow in index order. The ranks are found as the fixed point of that
    sort (level d is final after d rounds), with a `lax.while_loop` of at most N + 1
    batched sorts.
    """
    b, n = tree.tokens.shape
    idx = jnp.broadcast_to(jnp.arange(n, dtype=jnp.int32), (b, n))
    level = jnp.where(tree.valid, tree.depth, n + 1)
    has_parent = tree.valid & (tree.parents >= 0)

    def sort_once(rank):
        parent_rank = jnp.where(has_parent, jnp.take_along_axis(rank, jnp.maximum(tree.parents, 0), axis=1), -1)
        order = jnp.lexsort((idx, parent_rank, level), axis=-1).astype(jnp.int32)  # last key is primary
        new_rank = jnp.zeros_like(rank).at[jnp.arange(b)[:, None], order].set(idx)
        return order, new_rank

    def cond(state):
        _, _, changed, it = state
        return changed & (it <= n)

    def body(state):
        _, rank, _, it = state
        order, new_rank = sort_once(rank)
        return order, new_rank, jnp.any(new_rank != rank), it + 1

    order, _, _, _ = jax.lax.while_loop(cond, body, (idx, idx, jnp.array(True), jnp.array(0)))
    return order


def reorder(tree: Tree, perm: jax.Array) -> Tree:
    """Renumber nodes: node k of the result is node perm[b, k] of `tree`.

    perm int32[B, N] must be a per-row permutation that keeps parents before children
    (e.g. `bfs_order`). Parent pointers are remapped through the inverse permutation.
    """
    b, n = tree.tokens.shape
    inv = jnp.zeros_like(perm).at[jnp.arange(b)[:, None], perm].set(jnp.arange(n, dtype=perm.dtype))
    take = lambda x: jnp.take_along_axis(x, perm, axis=1)  # noqa: E731
    old_parents = take(tree.parents)
    new_parents = jnp.where(old_parents >= 0, jnp.take_along_axis(inv, jnp.maximum(old_parents, 0), axis=1), -1)
    return normalize(Tree(tokens=take(tree.tokens), parents=new_parents, depth=take(tree.depth), valid=take(tree.valid)))


def to_bfs(tree: Tree) -> tuple[Tree, jax.Array]:
    """BFS-flattened equivalent tree and the permutation used: (Tree, perm int32[B, N])."""
    perm = bfs_order(tree)
    return reorder(tree, perm), perm


# ----------------------------------------------------------------------------------------
# Host helpers (numpy): construction, inspection, validation
# ----------------------------------------------------------------------------------------


def tree_from_lists(
    tokens: Sequence[Sequence[int]], parents: Sequence[Sequence[int]], budget: int | None = None
) -> Tree:
    """Build a padded Tree from per-row Python lists (host side, for tests and users).

    tokens[b][i], parents[b][i]: token and parent (-1 = root, else a smaller index in the
    same row) of node i of row b. Rows may have different lengths; each is padded with
    normalised invalid nodes to `budget` (default: the longest row). Depths are
    computed. Raises ValueError on a malformed row.
    """
    if len(tokens) != len(parents):
        raise ValueError(f"{len(tokens)} token rows but {len(parents)} parent rows")
    n = budget if budget is not None else max([len(r) for r in tokens] + [1])
    b = len(tokens)
    tok = np.zeros((b, n), np.int32)
    par = np.full((b, n), -1, np.int32)
    dep = np.zeros((b, n), np.int32)
    val = np.zeros((b, n), bool)
    for r, (tr, pr) in enumerate(zip(tokens, parents)):
        if len(tr) != len(pr):
            raise ValueError(f"row {r}: {len(tr)} tokens but {len(pr)} parents")
        if len(tr) > n:
            raise ValueError(f"row {r}: {len(tr)} nodes exceed the budget {n}")
        for i, (t, p) in enumerate(zip(tr, pr)):
            if not -1 <= p < i:
                raise ValueError(f"row {r}, node {i}: parent {p} not in [-1, {i})")
            tok[r, i], par[r, i], val[r, i] = t, p, True
            dep[r, i] = 1 if p < 0 else dep[r, p] + 1
    return Tree(tokens=jnp.asarray(tok), parents=jnp.asarray(par), depth=jnp.asarray(dep), valid=jnp.asarray(val))


def tree_from_paths(paths: Sequence[Sequence[Sequence[int]]], budget: int | None = None) -> Tree:
    """Build a Tree (a trie, BFS-ordered) from per-row sets of token paths below the root.

    paths[b] is a collection of token sequences; all their prefixes become nodes, each
    path prefix exactly once (so siblings are unique).
    """
    tokens, parents = [], []
    for row in paths:
        prefixes = sorted({tuple(p[:k]) for p in row for k in range(1, len(p) + 1)}, key=lambda s: (len(s), s))
        index = {}
        tr, pr = [], []
        for pre in prefixes:
            index[pre] = len(tr)
            tr.append(int(pre[-1]))
            pr.append(index[pre[:-1]] if len(pre) > 1 else -1)
        tokens.append(tr)
        parents.append(pr)
    return tree_from_lists(tokens, parents, budget)


def token_paths(tree: Tree) -> list[list[tuple[int, ...]]]:
    """Per row, the sorted list (a multiset) of root-to-node token paths of valid nodes."""
    tok, par, val = (np.asarray(x) for x in (tree.tokens, tree.parents, tree.valid))
    out = []
    for r in range(tok.shape[0]):
        memo: dict[int, tuple[int, ...]] = {}
        for i in range(tok.shape[1]):
            if val[r, i]:
                p = par[r, i]
                memo[i] = (memo[p] if p >= 0 else ()) + (int(tok[r, i]),)
        out.append(sorted(memo.values()))
    return out


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise ValueError(message)


def check_tree(
    tree: Tree, *, vocab_size: int | None = None, unique_siblings: bool = False, packed: bool = False
) -> None:
    """Validate the Tree invariants on the host; raise ValueError naming the first
    violation (row, node, rule).

    Always checked: shapes/dtypes, parents before children, parent valid
    (prefix-closed), depth = parent depth + 1, normalised padding. Optional:
    `vocab_size` (tokens of valid nodes in range), `unique_siblings` (no two valid
    siblings with the same token), `packed` (valid nodes occupy a prefix of each row).
    """
    tok, par, dep, val = (np.asarray(x) for x in (tree.tokens, tree.parents, tree.depth, tree.valid))
    _require(tok.ndim == 2, f"tokens must be [B, N], got shape {tok.shape}")
    for name, x in (("parents", par), ("depth", dep), ("valid", val)):
        _require(x.shape == tok.shape, f"{name} shape {x.shape} != tokens shape {tok.shape}")
    for name, x in (("tokens", tok), ("parents", par), ("depth", dep)):
        _require(np.issubdtype(x.dtype, np.integer), f"{name} must be integer, got {x.dtype}")
    _require(val.dtype == bool, f"valid must be bool, got {val.dtype}")
    b, n = tok.shape
    for r in range(b):
        seen: dict[tuple[int, int], int] = {}
        for i in range(n):
            p, d = int(par[r, i]), int(dep[r, i])
            if not val[r, i]:
                _require(p == -1 and d == 0, f"row {r}, node {i}: padding not normalised (parent {p}, depth {d})")
                continue
            if packed:
                _require(i == 0 or val[r, i - 1], f"row {r}, node {i}: valid node after padding (packed=True)")
            _require(-1 <= p < i, f"row {r}, node {i}: parent {p} not before the node (need -1 <= parent < {i})")
            _require(p < 0 or val[r, p], f"row {r}, node {i}: parent {p} is invalid (tree not prefix-closed)")
            want = 1 if p < 0 else int(dep[r, p]) + 1
            _require(d == want, f"row {r}, node {i}: depth {d} != parent depth + 1 = {want}")
            t = int(tok[r, i])
            if vocab_size is not None:
                _require(0 <= t < vocab_size, f"row {r}, node {i}: token {t} outside [0, {vocab_size})")
            if unique_siblings:
                _require((p, t) not in seen, f"row {r}, node {i}: duplicate sibling of node {seen.get((p, t))} (token {t})")
            seen[(p, t)] = i
