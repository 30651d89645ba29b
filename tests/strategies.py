"""Shared Hypothesis strategies: random valid (padded, batched) trees and logits.

Shapes are fixed by the caller (a few fixed (B, N, V) per test module) so that jitted
functions compile only a few times; Hypothesis varies the *contents*: how many nodes a
row uses, where the padding gaps are, the tree shape (from bushy to a single chain),
tokens (with or without duplicate siblings) and the logits. Arrays are built from a
drawn seed with numpy, the way jax's own Hypothesis tests do.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from hypothesis import strategies as st

from specjax.tree import Tree


@st.composite
def tree_rows(draw, budget: int, vocab: int, min_nodes: int = 0, unique_siblings: bool = False):
    """One row as (tokens, parents) Python lists of length <= budget, topologically ordered.

    Parents are drawn to give both bushy trees and long chains (half of the time a node
    hangs below the previous node). With unique_siblings, duplicate siblings are dropped
    together with their subtrees.
    """
    n = draw(st.integers(min_nodes, budget))
    tokens, parents = [], []
    for i in range(n):
        chain = draw(st.booleans()) and i > 0
        parents.append(i - 1 if chain else draw(st.integers(-1, i - 1)))
        tokens.append(draw(st.integers(0, vocab - 1)))
    if unique_siblings:
        keep, new_index, seen = [], {}, set()
        for i, (t, p) in enumerate(zip(tokens, parents)):
            if (p >= 0 and p not in new_index) or (p, t) in seen:
                continue  # parent dropped, or duplicate sibling
            seen.add((p, t))
            new_index[i] = len(keep)
            keep.append((t, new_index[p] if p >= 0 else -1))
        tokens, parents = [t for t, _ in keep], [p for _, p in keep]
    return tokens, parents


def spread(tokens, parents, budget: int, slots, pad_token: int = 0):
    """Place the nodes of a packed row at increasing `slots` of a row of length budget
    (padding gaps in between), remapping parents; returns full-length arrays. Padding
    carries `pad_token` (tokens of invalid nodes are don't-care and must be ignored)."""
    tok = np.full(budget, pad_token, np.int32)
    par = np.full(budget, -1, np.int32)
    val = np.zeros(budget, bool)
    for i, (t, p) in enumerate(zip(tokens, parents)):
        tok[slots[i]], par[slots[i]], val[slots[i]] = t, (slots[p] if p >= 0 else -1), True
    return tok, par, val


@st.composite
def trees(draw, batch: int = 3, budget: int = 8, vocab: int = 6, min_nodes: int = 0,
          unique_siblings: bool = False, packed: bool = False) -> Tree:
    """A random valid Tree [batch, budget]: each row its own size, shape and tokens;
    unless `packed`, valid nodes are spread over the row with padding gaps in between."""
    rows = []
    for _ in range(batch):
        tokens, parents = draw(tree_rows(budget, vocab, min_nodes, unique_siblings))
        if packed:
            slots = list(range(len(tokens)))
        else:
            slots = sorted(draw(st.lists(st.integers(0, budget - 1), min_size=len(tokens),
                                         max_size=len(tokens), unique=True)))
        rows.append(spread(tokens, parents, budget, slots, draw(st.integers(0, vocab - 1))))
    tok, par, val = (np.stack(x) for x in zip(*rows))
    return tree_from_arrays(tok, par, val)


def tree_from_arrays(tok, par, val) -> Tree:
    """Tree from numpy rows (parents before children), depths computed on the host."""
    dep = np.zeros_like(tok)
    for r in range(tok.shape[0]):
        for i in range(tok.shape[1]):
            if val[r, i]:
                dep[r, i] = 1 if par[r, i] < 0 else dep[r, par[r, i]] + 1
    return Tree(tokens=jnp.asarray(tok, jnp.int32), parents=jnp.asarray(par, jnp.int32),
                depth=jnp.asarray(dep, jnp.int32), valid=jnp.asarray(val, bool))


def children_tokens(tree: Tree, r: int, slot: int) -> list[int]:
    """Tokens of the valid children of `slot` (0 = root) in row r, in index order."""
    par, val, tok = np.asarray(tree.parents[r]), np.asarray(tree.valid[r]), np.asarray(tree.tokens[r])
    return [int(tok[i]) for i in range(len(tok)) if val[i] and par[i] + 1 == slot]


@st.composite
def walk_logits(draw, tree: Tree, vocab: int, integer: bool | None = None):
    """Logits f32[B, N+1, V] for walking `tree`: at each slot, with probability 0.7 the
    argmax is one of that slot's child tokens (so walks go deep), else it is random.
    With `integer`, logits are small integers, so argmax ties are frequent (tests the
    first-index tie rule)."""
    b, n = tree.tokens.shape
    seed = draw(st.integers(0, 2**32 - 1))
    integer = draw(st.booleans()) if integer is None else integer
    rng = np.random.default_rng(seed)
    if integer:
        logits = rng.integers(0, 3, size=(b, n + 1, vocab)).astype(np.float32)
    else:
        logits = rng.normal(size=(b, n + 1, vocab)).astype(np.float32)
    for r in range(b):
        for s in range(n + 1):
            kids = children_tokens(tree, r, s)
            if kids and rng.random() < 0.7:
                logits[r, s, kids[rng.integers(len(kids))]] += 4.0
    return jnp.asarray(logits)


@st.composite
def float_arrays(draw, shape, scale: float = 2.0):
    """A float32 numpy array of the given shape from a drawn seed (normal * scale)."""
    seed = draw(st.integers(0, 2**32 - 1))
    return (np.random.default_rng(seed).normal(size=shape) * scale).astype(np.float32)
