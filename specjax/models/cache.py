"""The KV cache pytree and its two operations: preallocation and commit.

    k, v     [L, B, S, K, D]   L layers, S slots per row, K key/value heads, D head dim
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
      k: [L, B, S, K, D] keys (layers, batch, slots, KV heads, head dim), rotary applied; the cache dtype
        (the params' by default).
      v: [L, B, S, K, D] values, same layout.
      lengths: int32[B] each row's committed length (= the position of the next token to process).
    """

    k: jax.Array
    v: jax.Array
    lengths: jax.Array

    @property
    def num_slots(self) -> int:
        return self.k.shape[2]

    @property
    def batch_size(self) -> int:
        return self.k.shape[1]


def init_cache(cfg, batch_size: int, num_slots: int, dtype=jnp.float32) -> KVCache:
    """An empty cache for `cfg` (any model config with num_layers/num_kv_heads/head_dim)."""
    if batch_size < 1 or num_slots < 1:
        raise ValueError(f"cache needs batch_size >= 1 and num_slots >= 1, got {batch_size}, {num_slots}")
    shape = (cfg.num_layers, batch_size, num_slots, cfg.num_kv_heads, cfg.head_dim)
    return KVCache(
        k=jnp.zeros(shape, dtype), v=jnp.zeros(shape, dtype), lengths=jnp.zeros((batch_size,), jnp.int32)
    )


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

    def move(layer_cache):  # [B, S, K, D]
        gathered = jnp.take_along_axis(layer_cache, src[:, :, None, None], axis=1)  # [B, M, K, D]
        return jax.vmap(lambda c, g, off: jax.lax.dynamic_update_slice_in_dim(c, g, off, axis=0))(
            layer_cache, gathered, cache.lengths
        )

    return KVCache(
        k=jax.vmap(move)(cache.k), v=jax.vmap(move)(cache.v), lengths=cache.lengths + n.astype(jnp.int32)
    )
