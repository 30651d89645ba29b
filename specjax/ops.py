"""Small array ops whose default XLA lowering is slow enough to matter.

`top_k`: XLA rewrites `lax.top_k` into its partial TopK kernel only when nothing is fused
into the sort; inside a larger program it often fuses the consumers (gathers) in and
falls back to a full stable sort over the last axis — for a draft vocabulary of 8k and a
few hundred tree nodes, ~100x slower on CPU. An optimization barrier on the outputs keeps
the fast kernel. `lax.top_k` also orders -0.0 below +0.0; `equal_zeros=True` makes them
equal (ties -> lower index), as a reference comparing values does.

`argmax`: `jnp.argmax` lowers to one reduce over (value, index) pairs, which XLA:CPU runs
2-3x slower than a max followed by the smallest index that attains it (a vocabulary of 49k:
143 vs 64 us per row, 9 rows 709 vs 275 us; measured on 2 CPU cores). Same result, NaN included.

`width_buckets` / `switch_on_width`: run work whose live size is only known at run time
(the nodes of an adaptive tree) at the smallest of a few static widths that holds it.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
from jax import lax

__all__ = ["argmax", "device_widths", "FLAT_VERIFY_WIDTH", "switch_on_width", "top_k", "verify_buckets",
           "width_buckets"]


def top_k(x: jax.Array, k: int, *, equal_zeros: bool = False, chunk: int | None = None
          ) -> tuple[jax.Array, jax.Array]:
    """`lax.top_k` (values [..., k], int32 indices [..., k] over the last axis, ties -> lower
    index), kept on the fast kernel. `equal_zeros`: -0.0 counts as +0.0 (and is returned as
    +0.0), so an exact zero of either sign ties by index; `lax.top_k` puts -0.0 below +0.0.

    `chunk`: rank in two stages when the last axis V is longer than `chunk` (and k <= chunk):
    the top k of each run of `chunk` entries (V padded with -inf to a multiple), then the top k
    of those ceil(V / chunk) * k candidates. The same values and indices as one `lax.top_k` for
    inputs without NaN: every overall winner is among its run's top k, and a tie between runs
    goes to the lower run, which holds the lower index. Many short sorts instead of one long one
    per row: what a GPU's sort-based top-k of a 152k vocabulary may prefer (`specjax bench-device
    --parts select` times both); None (the default) is one `lax.top_k`."""
    if equal_zeros:
        x = jnp.where(x == 0, jnp.zeros((), x.dtype), x)
    vocab = x.shape[-1]
    if chunk is not None and chunk < vocab and k <= chunk:
        runs = -(-vocab // chunk)
        padded = jnp.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, runs * chunk - vocab)], constant_values=-jnp.inf)
        run_values, run_idx = lax.top_k(padded.reshape(*x.shape[:-1], runs, chunk), k)  # [..., runs, k]
        run_idx = run_idx + chunk * jnp.arange(runs, dtype=run_idx.dtype)[:, None]
        values, pick = lax.top_k(run_values.reshape(*x.shape[:-1], runs * k), k)
        indices = jnp.take_along_axis(run_idx.reshape(*x.shape[:-1], runs * k), pick, axis=-1)
    else:
        values, indices = lax.top_k(x, k)
    # a barrier each: one over the (values, indices) pair aborted XLA with the vocabulary sharded on "model"
    return lax.optimization_barrier(values), lax.optimization_barrier(indices)


def argmax(x: jax.Array) -> jax.Array:
    """int32[...]: `jnp.argmax(x, axis=-1)` of x [..., V], the first index on ties and the first NaN if
    any, as a max and then the smallest index attaining it (see the module docstring for why)."""
    top = jnp.max(x, axis=-1, keepdims=True)
    hit = (x == top) | (jnp.isnan(x) & jnp.isnan(top))
    return jnp.min(jnp.where(hit, jnp.arange(x.shape[-1], dtype=jnp.int32), x.shape[-1]), axis=-1)


def width_buckets(width: int, smallest: int = 4, factor: float = 2) -> tuple[int, ...]:
    """Static widths for work whose live size varies at run time: smallest, then each the
    previous times `factor` (rounded up), those below `width`, then `width` itself. About
    a factor `factor` (a little more after rounding up) of the work past the live size is
    wasted at most, at the price of one compiled branch per width."""
    if width < 1 or smallest < 1 or factor <= 1:
        raise ValueError(f"need width >= 1, smallest >= 1, factor > 1, got {width}, {smallest}, {factor}")
    out, w = [], smallest
    while w < width:
        out.append(w)
        w = max(w + 1, math.ceil(w * factor))
    return (*out, width)


def verify_buckets(budget: int, smallest_rows: int = 4, factor: float = 2) -> tuple[int, ...]:
    """Verify widths (tree nodes past the root, up to `budget`) whose target forwards have
    `width_buckets` row counts: the root and w nodes are w + 1 rows, so rows 4, 8, 16, ...
    are widths 3, 7, 15, ..., budget. On a CPU those row counts are the products' fast ones
    (`specjax.models.layers.KERNEL_FIRST_PAD` pads 5-7 rows to 8 and 9-15 to 16): buckets of
    4 and 8 nodes verified 5 and 9 rows, which cost as 8 and 16."""
    return tuple(rows - 1 for rows in width_buckets(budget + 1, smallest=min(smallest_rows, budget + 1),
                                                    factor=factor))


# Verify widths up to which one target forward costs about the same as a single token on a
# backend: on a GPU the verify is memory-bound up to ~64-128 tokens (issue 16: 8B shape, T = 1
# 8.6 ms, T = 64 11.0 ms), so width buckets below that buy little and each costs a compiled
# branch (DynaTree's 12 branches took 83 s to compile there); on a CPU every token costs.
FLAT_VERIFY_WIDTH = {"cpu": 1, "gpu": 64, "cuda": 64, "rocm": 64, "tpu": 128}


def device_widths(widths: tuple[int, ...] | None, backend: str | None = None) -> tuple[int, ...] | None:
    """A drafter's verify `widths` (nodes past the root) for `backend` (default: jax's default
    backend): every width whose forward (the root and its nodes: w + 1 tokens) is shorter than
    the backend's flat size (`FLAT_VERIFY_WIDTH`) is dropped, so the next larger one serves
    those trees; the largest width always stays. None stays None (one full width). DynaTree's
    (3, 7, ..., 63, 127, 255, 256) keep 63 on a GPU: trees of up to 63 nodes verify as 64 tokens."""
    if widths is None:
        return None
    backend = jax.default_backend() if backend is None else backend
    flat = FLAT_VERIFY_WIDTH.get(backend, 1)
    kept = tuple(w for w in widths[:-1] if w + 1 >= flat)
    return (*kept, widths[-1])


def switch_on_width(live, widths: tuple[int, ...], branch, operands, empty=None):
    """`branch(w, *operands)` for the smallest static `w` in `widths` with `w >= live`.

    live: int32 scalar (traced) <= widths[-1], e.g. the number of live nodes of a packed
    level, maximised over the batch. With `empty` given, `empty(*operands)` runs instead
    when live == 0. One `lax.switch`: only the chosen branch executes, so the cost follows
    the live size, while every shape stays static. All branches must return the same
    shapes (pad to the full width inside the branch).
    """
    branches = [functools.partial(branch, w) for w in widths]
    index = jnp.sum(live > jnp.asarray(widths[:-1], jnp.int32)).astype(jnp.int32) if len(widths) > 1 else jnp.int32(0)
    if empty is not None:
        branches = [empty, *branches]
        index = jnp.where(live == 0, 0, index + 1)
    if len(branches) == 1:
        return branches[0](*operands)
    return lax.switch(index, branches, *operands)
