"""The KV cache pytree and its two operations: preallocation and commit.

    k, v     [L, B, K, S, D]   L layers, K key/value heads, S slots per row, D head dim
             (or, a "per-layer" cache, a tuple of L arrays [1, B, K, S, D]: `per_layer_cache`)

Heads before slots (the layout of transformers' caches): attention is then a batched product over
(B, K) that reads each head's [S, D] block where it lies. With slots before heads XLA:CPU copied every
layer's K and V into that order before the products, each step (SmolLM2-135M, 30 layers at batch 1:
120 copies, 4.1 ms of a 32 ms decode step).
    lengths  int32[B]          committed tokens per row; slots >= lengths[b] are scratch

A forward writes its T pending tokens at slots [lengths, lengths + T) of every row but
does not advance `lengths`; `commit` then gathers the accepted pending slots into
place. Plain decoding is "append 1, commit 1"; speculative rollback is a gather, never
a re-forward.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct


@struct.dataclass
class KVCache:
    """A stacked KV cache: slots [0, lengths[b]) of row b are committed; slots past it are pending
    (written by a forward, not yet committed: `commit` gathers the kept ones into place) or free.

    Fields:
      k: [L, B, K, S, D] keys (layers, batch, KV heads, slots, head dim), rotary applied; the cache dtype
        (the params' by default).
      v: [L, B, K, S, D] values, same layout.
      lengths: int32[B] each row's committed length (= the position of the next token to process).
    k and v may instead both be tuples of L arrays [1, B, K, S, D], one per layer (`per_layer_cache`):
    read by the per-layer forwards of unstacked / dual params (`specjax.models.model.LAYOUTS`).
    """

    k: jax.Array | tuple[jax.Array, ...]
    v: jax.Array | tuple[jax.Array, ...]
    lengths: jax.Array

    @property
    def per_layer(self) -> bool:
        """Whether k and v are tuples of per-layer arrays (`per_layer_cache`)."""
        return isinstance(self.k, tuple)

    @property
    def num_slots(self) -> int:
        return (self.k[0] if self.per_layer else self.k).shape[3]

    @property
    def batch_size(self) -> int:
        return (self.k[0] if self.per_layer else self.k).shape[1]


def init_cache(cfg, batch_size: int, num_slots: int, dtype=jnp.float32) -> KVCache:
    """An empty cache for `cfg` (any model config with num_layers/num_kv_heads/head_dim)."""
    if batch_size < 1 or num_slots < 1:
        raise ValueError(f"cache needs batch_size >= 1 and num_slots >= 1, got {batch_size}, {num_slots}")
    shape = (cfg.num_layers, batch_size, cfg.num_kv_heads, num_slots, cfg.head_dim)
    return KVCache(
        k=jnp.zeros(shape, dtype), v=jnp.zeros(shape, dtype), lengths=jnp.zeros((batch_size,), jnp.int32)
    )


@struct.dataclass
class PendingRows:
    """A forward's new keys and values held apart from the cache (`forward_tapped(..., write_cache=False)`),
    row t of batch row b bound for slot lengths[b] + region offset + t (`write_rows`).

    Fields:
      k: [L, B, T, K, D] the new keys, rotary applied, in the cache's dtype.
      v: [L, B, T, K, D] the new values.
    """

    k: jax.Array
    v: jax.Array


def write_rows(cache: KVCache, rows: PendingRows, region_offset: int | jax.Array = 0,
               count: int | jax.Array | None = None) -> KVCache:
    """`cache` with `rows` written where `forward_tapped` would have written them: row t of batch row b at slot
    lengths[b] + region_offset + t of every layer (a row past the last slot is dropped, as there). `count` (int32
    scalar): only rows t < count are written, the rest dropped (padding a width switch added: no write)."""
    b, t = rows.k.shape[1:3]
    cols = (cache.lengths + region_offset)[:, None] + jnp.arange(t)
    if count is not None:
        # out of range, so dropped; still distinct (the scatter below promises unique indices)
        cols = jnp.where(jnp.arange(t)[None] < count, cols, cols + cache.num_slots)
    at = (slice(None), jnp.arange(b)[:, None], slice(None), cols)

    def put(layers, new):  # layers [L', B, K, S, D] <- new [L', B, T, K, D] (indexed as [B, T, L', K, D])
        return layers.at[at].set(new.transpose(1, 2, 0, 3, 4).astype(layers.dtype), mode="drop", unique_indices=True)

    if cache.per_layer:
        k = tuple(put(x, rows.k[i:i + 1]) for i, x in enumerate(cache.k))
        v = tuple(put(x, rows.v[i:i + 1]) for i, x in enumerate(cache.v))
    else:
        k, v = put(cache.k, rows.k), put(cache.v, rows.v)
    return cache.replace(k=k, v=v)


def advance(cache: KVCache, n: jax.Array) -> KVCache:
    """`commit(cache, arange(M) per row, n)` for a forward of M tokens written at region offset 0
    (a prefill, a catch-up of pending tokens, a decode step: M = 1): pending slot j is already slot
    lengths[b] + j, where commit would move it, so only `lengths` moves (n: int32[B] <= M). Skips
    the gather and write-back of every layer that `commit` traces: at batch 128 with a per-layer
    cache that move cost as much as the decode step's forward, and inside a loop XLA copies the
    whole cache to keep the forward's attention read apart from the move's in-place write."""
    return cache.replace(lengths=cache.lengths + n.astype(jnp.int32))


def per_layer_cache(cache: KVCache) -> KVCache:
    """The same cache as a tuple of L arrays [1, B, K, S, D] per field (idempotent).

    A stacked cache is read inside the layer scan by slicing layer i out of [L, ...], and
    XLA:CPU copies that slice before the attention reads it: the whole cache, twice, every
    step. Per-layer arrays are read where they lie and written in place. Measured on 2 CPU cores
    (SmolLM2-135M, batch 128, 449 slots, the data generator's pool, with the earlier slots-before-heads
    layout): 683 -> 443 ms per decode
    step. At batch 1 the copies are small: `generate_ar` over unstacked params ran 38.6 vs 38.2 ms
    per token with and without it (a loaded machine, same process), so the loops keep stacked caches."""
    if cache.per_layer:
        return cache
    split = lambda x: tuple(x[i:i + 1] for i in range(x.shape[0]))  # noqa: E731
    return KVCache(k=split(cache.k), v=split(cache.v), lengths=cache.lengths)


def stacked_cache(cache: KVCache) -> KVCache:
    """The inverse of `per_layer_cache`: k and v as [L, B, K, S, D] arrays (idempotent)."""
    if not cache.per_layer:
        return cache
    return KVCache(k=jnp.concatenate(cache.k), v=jnp.concatenate(cache.v), lengths=cache.lengths)


def check_capacity(lengths, num_pending: int, num_slots: int, what: str = "input") -> None:
    """Raise a clear error on the host if `num_pending` tokens do not fit after `lengths`.

    Inside jit an out-of-range cache write would be silently dropped (or clamped), so
    callers check concrete lengths before compiling anything.
    """
    needed = int(np.max(np.asarray(lengths))) + int(num_pending)
    if needed > num_slots:
        raise ValueError(
            f"{what} does not fit in the KV cache: needs {needed} slots (committed "
            f"{int(np.max(np.asarray(lengths)))} + pending {num_pending}) but the cache has {num_slots}"
        )


def commit(cache: KVCache, slots: jax.Array, n: jax.Array) -> KVCache:
    """Move accepted pending tokens into place and advance `lengths`.

    slots: int32[B, M] indices into the last pending block (0 = first pending token);
    n: int32[B] how many of them to keep. Row b's pending slot slots[b, j] (j < n[b]) is
    copied to absolute slot lengths[b] + j, then lengths[b] += n[b]. Entries j >= n[b]
    are ignored. All gathers happen before any write, so overlapping moves are safe.
    """
    m = slots.shape[1]
    keep = jnp.arange(m)[None, :] < n[:, None]  # [B, M]
    src = cache.lengths[:, None] + jnp.where(keep, slots, jnp.arange(m)[None, :])  # [B, M]

    def move(layer_cache):  # [B, K, S, D]
        gathered = jnp.take_along_axis(layer_cache, src[:, None, :, None], axis=2)  # [B, K, M, D]
        return jax.vmap(lambda c, g, off: jax.lax.dynamic_update_slice_in_dim(c, g, off, axis=1))(
            layer_cache, gathered, cache.lengths
        )

    moved = lambda x: jax.tree.map(jax.vmap(move), x)  # noqa: E731  (per layer, stacked or per-layer arrays)
    return KVCache(k=moved(cache.k), v=moved(cache.v), lengths=cache.lengths + n.astype(jnp.int32))
