"""Shared Hypothesis strategies: random valid (padded, batched) trees and logits.

The tree strategies (`trees`, `tree_rows`, `spread`, `tree_from_arrays`) ship with the package in
`specjax.testing` and are re-exported here; the logits and arrays for the verifier tests stay here.

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

from specjax.testing import spread, tree_from_arrays, tree_rows, trees  # noqa: F401  (re-exported)
from specjax.tree import Tree


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
