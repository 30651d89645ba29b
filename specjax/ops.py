"""Small array ops whose default XLA lowering is slow enough to matter.

`top_k`: XLA rewrites `lax.top_k` into its partial TopK kernel only when nothing is fused
into the sort; inside a larger program it often fuses the consumers (gathers) in and
falls back to a full stable sort over the last axis — for a draft vocabulary of 8k and a
few hundred tree nodes, ~100x slower on CPU. An optimization barrier on the outputs keeps
the fast kernel.
"""

from __future__ import annotations

import jax
from jax import lax


def top_k(x: jax.Array, k: int) -> tuple[jax.Array, jax.Array]:
    """`lax.top_k` (values, int32 indices over the last axis, ties -> lower index), kept on the fast kernel."""
    values, indices = lax.top_k(x, k)
    return lax.optimization_barrier((values, indices))
