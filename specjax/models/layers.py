"""Building blocks shared by every architecture family: rotary embeddings, RMSNorm,
activations, and attention of pending tokens over a KV cache.

Shape letters used throughout the models:

    B batch   T pending tokens   S cache slots   E embed   V vocab
    H query heads   K key/value heads   G = H // K (query heads per KV head)   D head dim
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
from flax import nnx, struct

from specjax.ops import switch_on_width, width_buckets

ACTIVATIONS = {
    "gelu": lambda x: jax.nn.gelu(x, approximate=False),
    "gelu_new": lambda x: jax.nn.gelu(x, approximate=True),
    "gelu_pytorch_tanh": lambda x: jax.nn.gelu(x, approximate=True),
    "relu": jax.nn.relu,
    "silu": jax.nn.silu,
}


def init_normal(rngs: nnx.Rngs, shape: tuple[int, ...], dtype, std: float = 0.02) -> nnx.Param:
    return nnx.Param((std * jax.random.normal(rngs.params(), shape)).astype(dtype))


@dataclasses.dataclass(frozen=True)
class Llama3RopeScaling:
    """Llama 3.1's rotary frequency scaling (HF `rope_type: "llama3"`), hashable for jit.

    With L = original_max_position_embeddings and an unscaled inverse frequency f of
    wavelength w = 2*pi / f: w < L / high_freq_factor keeps f (high frequencies);
    w > L / low_freq_factor uses f / factor (low frequencies); in between f is blended,
    (1 - s) * f / factor + s * f with s = (L / w - low_freq_factor) / (high_freq_factor - low_freq_factor).

    Fields:
      factor: the divisor of the low frequencies (Llama 3.1: 8).
      low_freq_factor: wavelengths above L / low_freq_factor are scaled (Llama 3.1: 1).
      high_freq_factor: wavelengths below L / high_freq_factor are kept (Llama 3.1: 4).
      original_max_position_embeddings: L, the context the model was pre-trained with (Llama 3.1: 8192).
    """

    factor: float
    low_freq_factor: float
    high_freq_factor: float
    original_max_position_embeddings: int

    def __post_init__(self):
        if not self.factor > 0:
            raise ValueError(f"llama3 rope scaling factor must be > 0, got {self.factor}")
        if not 0 < self.low_freq_factor < self.high_freq_factor:
            raise ValueError(f"llama3 rope scaling needs 0 < low_freq_factor < high_freq_factor, got "
                             f"{self.low_freq_factor} and {self.high_freq_factor}")
        if self.original_max_position_embeddings <= 0:
            raise ValueError(f"llama3 rope scaling original_max_position_embeddings must be > 0, "
                             f"got {self.original_max_position_embeddings}")

    def scale(self, inv_freq: jax.Array) -> jax.Array:
        """float32[R/2] unscaled inverse frequencies -> float32[R/2] scaled ones."""
        old_len = float(self.original_max_position_embeddings)
        wavelen = 2 * math.pi / inv_freq
        smooth = (old_len / wavelen - self.low_freq_factor) / (self.high_freq_factor - self.low_freq_factor)
        blended = (1 - smooth) * inv_freq / self.factor + smooth * inv_freq
        low = wavelen > old_len / self.low_freq_factor
        high = wavelen < old_len / self.high_freq_factor
        return jnp.where(high, inv_freq, jnp.where(low, inv_freq / self.factor, blended))


def rope_inv_freq(rotary_dim: int, theta: float, scaling: Llama3RopeScaling | None = None) -> jax.Array:
    """Inverse frequencies float32[R/2] of rotary dims pairs (i, i + R/2): theta^(-2i/R), then `scaling`."""
    inv_freq = 1.0 / (theta ** (jnp.arange(0, rotary_dim, 2, dtype=jnp.float32) / rotary_dim))  # [R/2]
    return inv_freq if scaling is None else scaling.scale(inv_freq)


def split_heads(x: jax.Array, kernel: jax.Array) -> jax.Array:
    """x [B, T, E] through kernel [E, *heads] -> [B, T, *heads] (e.g. heads = (H, D)), as one 2-D
    matrix product over the flattened kernel (see `merge_heads`)."""
    e, heads = kernel.shape[0], kernel.shape[1:]
    return (x @ kernel.reshape(e, -1)).reshape(*x.shape[:-1], *heads)


# A product of a few rows by an output-major kernel, on a CPU, runs as kernel times rows (y^T = W x^T, then a
# transposed copy of the small result): XLA:CPU's YNNPACK kernels spread that product's many output rows over
# the cores, where x W^T with 2-64 rows runs mostly on one. They are fastest at 2-4, 8 and 16 rows, so 5-7 rows
# are padded to 8 and 9-15 to 16 (zero rows, dropped after). SmolLM2's 120 layer products alone (2 cores of an
# AMD EPYC with AVX-512, ms):
#
#     rows            2     4     5     8     9    12    16    17    32    64
#     x W^T        28.8  32.5  33.4  39.1  37.1  40.7  44.7  48.6  65.3  93.8
#     kernel first 20.3  20.7  28.4  25.7  35.1  36.0  31.1  41.5  48.2  80.5   (unpadded)
#
# One row is 15-16 ms either way; the tied head [V, E] of a 9-row verify 9.0 -> 7.3 ms (docs/results.md).
# The kernel gets a leading axis of 1 (a free reshape): with a plain [O, I] operand XLA folds the transpose
# back into x W^T. Every output is the same dot product over I. One-row steps, large batches and
# accelerators keep x W^T.
KERNEL_FIRST_MAX_ROWS = 64
KERNEL_FIRST_PAD = {5: 8, 6: 8, 7: 8, **{r: 16 for r in range(9, 16)}}  # rows -> the faster row count


def project_out_major(x: jax.Array, kernel: jax.Array, preferred_element_type=None) -> jax.Array:
    """x [..., I] through an output-major kernel [*out, I] -> [..., *out] (x times the kernel's
    transpose, as one 2-D product: `specjax.models.llama.fuse_layer` says why output-major; on a CPU,
    2 to KERNEL_FIRST_MAX_ROWS rows as the kernel times the rows, see above). preferred_element_type:
    the product's accumulation and result dtype (None: the inputs')."""
    out, i = kernel.shape[:-1], kernel.shape[-1]
    flat = kernel.reshape(-1, i)  # [O, I]
    rows = math.prod(x.shape[:-1])
    if 1 < rows <= KERNEL_FIRST_MAX_ROWS and jax.default_backend() == "cpu":
        padded = KERNEL_FIRST_PAD.get(rows, rows)
        x2 = jnp.pad(x.reshape(rows, i), ((0, padded - rows), (0, 0)))  # [padded, I]
        y = jax.lax.dot_general(flat[None], x2, (((2,), (1,)), ((), ())),
                                preferred_element_type=preferred_element_type)  # [1, O, padded]
        return y[:, :, :rows].transpose(0, 2, 1).reshape(*x.shape[:-1], *out)
    y = jax.lax.dot_general(x, flat, (((x.ndim - 1,), (1,)), ((), ())), preferred_element_type=preferred_element_type)
    return y.reshape(*x.shape[:-1], *out)


def merge_heads(x: jax.Array, kernel: jax.Array) -> jax.Array:
    """x [B, T, H, D] through kernel [H, D, E] -> [B, T, E], as one 2-D matrix product.

    Why not `jnp.einsum("bthd,hde->bte")`: contracting two axes, XLA:CPU lowers it with a
    transposed copy of the kernel before every product (SmolLM2-135M at batch 1: 30 copies of
    1.3 MB per decode step, ~0.5 ms each, a third of the step). The flattened product reads
    the kernel in place."""
    h, d, e = kernel.shape
    return x.reshape(*x.shape[:-2], h * d) @ kernel.reshape(h * d, e)


def apply_rotary(x: jax.Array, positions: jax.Array, rotary_dim: int, theta: float,
                 scaling: Llama3RopeScaling | None = None) -> jax.Array:
    """Rotary embedding (GPT-NeoX "rotate half" convention) on the first `rotary_dim` dims.

    x: [B, T, H, D]; positions: int32[B, T]. Dims >= rotary_dim pass through unchanged
    (Pythia's partial rotary). Angles are computed in float32 whatever x's dtype.
    scaling: Llama 3.1 frequency scaling of the inverse frequencies (None: plain RoPE).
    """
    if rotary_dim == 0:
        return x
    half = rotary_dim // 2
    inv_freq = rope_inv_freq(rotary_dim, theta, scaling)  # [R/2]
    angles = positions.astype(jnp.float32)[..., None] * inv_freq  # [B, T, R/2]
    cos = jnp.cos(angles)[:, :, None, :]  # [B, T, 1, R/2]
    sin = jnp.sin(angles)[:, :, None, :]
    x_rot, x_pass = x[..., :rotary_dim].astype(jnp.float32), x[..., rotary_dim:]
    x1, x2 = x_rot[..., :half], x_rot[..., half:]
    rotated = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
    return jnp.concatenate([rotated.astype(x.dtype), x_pass], axis=-1)


class RMSNorm(nnx.Module):
    """RMSNorm with a learned per-feature weight, statistics in float32 (Llama/Qwen)."""

    def __init__(self, features: int, eps: float, dtype):
        self.eps = eps
        self.weight = nnx.Param(jnp.ones((features,), dtype))

    def __call__(self, x: jax.Array) -> jax.Array:
        xf = x.astype(jnp.float32)
        xf = xf * jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + self.eps)
        return self.weight[...] * xf.astype(x.dtype)


def cache_attention_mask(lengths: jax.Array, block_mask: jax.Array, num_slots: int) -> jax.Array:
    """Which cache slots each pending token may attend to: bool[B, T, S].

    block_mask: bool[B, T, R] over the *pending region*, the R slots
    [lengths[b], lengths[b] + R) after row b's committed prefix. Committed slots
    (s < lengths[b]) are always visible; region slot r is visible to pending token t iff
    block_mask[b, t, r]; slots past the region never are.
    """
    t, r = block_mask.shape[1:]
    rel = jnp.arange(num_slots)[None, :] - lengths[:, None]  # [B, S] position inside the region
    in_region = (rel >= 0) & (rel < r)
    visible = jnp.take_along_axis(block_mask, jnp.broadcast_to(jnp.clip(rel, 0, r - 1)[:, None, :], (rel.shape[0], t, num_slots)), axis=2)
    return (rel < 0)[:, None, :] | (in_region[:, None, :] & visible)


# Caches longer than this are attended over a prefix bucket (`LayerKV.attend`): the
# smallest of ATTENTION_MIN_SLOTS * 4^i (and the full cache) holding every row's visible
# slots. At or below it one branch reads every slot, as before: a small cache costs little,
# and each bucket is one more compiled attention per forward.
ATTENTION_MIN_SLOTS = 1024


@struct.dataclass
class LayerKV:
    """The stacked KV cache as one layer sees it. `append` writes the new K/V in place into the
    stacked arrays (a scatter of T slots; slicing a layer out, updating it and writing it back
    would copy the whole layer cache three times per forward, which dominates small models);
    `attend` reads only the prefix of slots a pending token can see.

    Fields:
      k: [L, B, K, S, D] the whole stacked key cache (all layers).
      v: [L, B, K, S, D] the whole stacked value cache.
      layer: int32 scalar, this layer's index into the stack (traced inside the layer scan).
      write_at: int32[B] the slot where each row's first pending token goes (lengths + region offset).
      visible: int32 scalar or None: no pending token of any row sees a slot >= visible (the
        longest row's committed prefix + its pending region, `visible_slots`); None: all S slots.
      deferred: (static) keep this forward's new K/V in `new_k` / `new_v` instead of writing them into
        k / v; `attend` reads them there as if written. A forward inside a `lax.switch` branch then
        leaves the cache untouched, and its caller writes the rows after the switch (`cache.write_rows`):
        XLA copies a buffer that a branch updates in place (every branch, the whole cache, each round).
      new_k: [B, T, K, D] the deferred keys (None until `append`).
      new_v: [B, T, K, D] the deferred values (None until `append`).
    """

    k: jax.Array
    v: jax.Array
    layer: jax.Array
    write_at: jax.Array
    visible: jax.Array | None = None
    new_k: jax.Array | None = None
    new_v: jax.Array | None = None
    deferred: bool = struct.field(pytree_node=False, default=False)

    def append(self, k_new: jax.Array, v_new: jax.Array) -> "LayerKV":
        """Write [B, T, K, D] new keys/values at write_at[b] + t; returns the updated LayerKV.
        The caller guarantees write_at + T <= S (checked on the host before compiling, see
        `cache.check_capacity`). Deferred: keep them in new_k / new_v (the class docstring)."""
        if self.deferred:
            return self.replace(new_k=k_new.astype(self.k.dtype), new_v=v_new.astype(self.v.dtype))
        b, t = k_new.shape[:2]
        rows = jnp.arange(b)[:, None]
        cols = self.write_at[:, None] + jnp.arange(t)[None]
        # Indices around the head slice select [B, T] first, then (K, D): the new [B, T, K, D] as it is.
        at = (self.layer, rows, slice(None), cols)
        k = self.k.at[at].set(k_new.astype(self.k.dtype), mode="drop", unique_indices=True)
        v = self.v.at[at].set(v_new.astype(self.v.dtype), mode="drop", unique_indices=True)
        return self.replace(k=k, v=v)

    def attend(self, q: jax.Array, mask: jax.Array, scale: float) -> jax.Array:
        """`attend` of q [B, T, H, D] over this layer's slots with mask bool[B, T, S]: [B, T, H, D].

        Only the first w slots are read, w the smallest of `attention_widths(S)` >= `visible`
        (one `lax.switch`; the branch slices the layer out of the stacked cache itself, so
        the unread slots are never copied). Slots >= visible are masked for every query, so
        the result is the full attention's: their softmax weights are exactly 0.
        """
        _, b, kh, s, d = self.k.shape
        pending = None
        if self.deferred:  # this forward's rows are not in k / v: their slots there are stale
            t = self.new_k.shape[1]
            cols = self.write_at[:, None] + jnp.arange(t)[None]  # [B, T'] the slots the rows will take
            pending = jnp.take_along_axis(mask, jnp.minimum(cols, s - 1)[:, None, :], axis=2)  # [B, T, T']
            pending = pending & (cols < s)[:, None, :]  # a row past the cache is dropped by the write
            slots = jnp.arange(s)[None]
            stale = (slots >= self.write_at[:, None]) & (slots < self.write_at[:, None] + t)  # [B, S]
            mask = mask & ~stale[:, None, :]

        def over(w, k, v, mask, q):
            k_l = jax.lax.dynamic_slice(k, (self.layer, 0, 0, 0, 0), (1, b, kh, w, d))[0]  # [B, K, w, D]
            v_l = jax.lax.dynamic_slice(v, (self.layer, 0, 0, 0, 0), (1, b, kh, w, d))[0]
            if pending is not None:
                return attend(q, k_l, v_l, mask[..., :w], scale, new=(self.new_k, self.new_v, pending))
            return attend(q, k_l, v_l, mask[..., :w], scale)

        widths = attention_widths(s)
        if self.visible is None or len(widths) == 1:
            return over(s, self.k, self.v, mask, q)
        return switch_on_width(jnp.minimum(self.visible, s), widths, over, (self.k, self.v, mask, q))


def attention_widths(num_slots: int) -> tuple[int, ...]:
    """The static prefix widths `LayerKV.attend` may read of a num_slots cache:
    ATTENTION_MIN_SLOTS * 4^i below num_slots, then num_slots (one width up to the minimum)."""
    if num_slots <= ATTENTION_MIN_SLOTS:
        return (num_slots,)
    return width_buckets(num_slots, smallest=ATTENTION_MIN_SLOTS, factor=4)


def visible_slots(lengths: jax.Array, region: int) -> jax.Array:
    """int32 scalar: the slots any pending token may see, max_b lengths[b] + region (the
    committed prefix and the pending region of R = `region` slots; `cache_attention_mask`)."""
    return (jnp.max(lengths) + region).astype(jnp.int32)


# One-token queries (decode steps, T = 1) of a batch of at least this many rows attend by
# multiply-and-sum; smaller batches and every multi-token forward use the batched product. Measured on
# 2 CPU cores, SmolLM2-135M, 449 slots, per-layer cache, ms per decode step (sum vs product): batch 128
# 459 vs 1002, 16 100 vs 115, 4 59 vs 59. Same values up to float32 summation order.
ONE_TOKEN_REDUCE_MIN_BATCH = 4


def _attend_one_token(q, k_all, v_all, mask, scale):
    """`attend` for T = 1 by multiply-and-sum: q [B, 1, H, D] -> [B, 1, H, D]."""
    b, _, h, d = q.shape
    kv_heads = k_all.shape[1]
    qg = q.reshape(b, kv_heads, h // kv_heads, 1, d).astype(jnp.float32)  # [B, K, G, 1, D]
    scores = jnp.sum(qg * k_all[:, :, None].astype(jnp.float32), axis=-1) * scale  # [B, K, G, S]
    scores = jnp.where(mask[:, None], scores, jnp.finfo(jnp.float32).min)  # mask [B, 1, S] -> [B, 1, 1, S]
    probs = jax.nn.softmax(scores, axis=-1)
    out = jnp.sum(probs[..., None] * v_all[:, :, None].astype(jnp.float32), axis=-2)  # [B, K, G, D]
    return out.reshape(b, 1, h, d).astype(q.dtype)


def attend(
    q: jax.Array, k_all: jax.Array, v_all: jax.Array, mask: jax.Array, scale: float,
    new: tuple[jax.Array, jax.Array, jax.Array] | None = None,
) -> jax.Array:
    """Grouped-query attention of pending queries over all cache slots.

    q: [B, T, H, D]; k_all, v_all: [B, K, S, D]; mask: bool[B, T, S]. Returns [B, T, H, D].
    new: (k_new, v_new [B, T', K, D], mask bool[B, T, T']): T' more slots held apart from the cache (a
    deferred write, `LayerKV.deferred`), attended as if written after its S slots: one softmax over S + T'.
    The G = H / K query heads of a KV head and the T tokens are the rows of one product per
    (B, K): [G*T, D] x [S, D]^T, read where the cache lies (no copy of K or V).
    Scores and softmax in float32: q . k is accumulated in float32 on the operands' own
    dtype (`preferred_element_type`), so a bf16 cache is read as bf16, never copied to
    float32 first (the products of two bf16 values are exact in float32: same scores).
    """
    b, t, h, d = q.shape
    kv_heads, s = k_all.shape[1:3]
    g = h // kv_heads
    if t == 1 and b >= ONE_TOKEN_REDUCE_MIN_BATCH and new is None:
        return _attend_one_token(q, k_all, v_all, mask, scale)
    rows = q.reshape(b, t, kv_heads, g, d).transpose(0, 2, 3, 1, 4).reshape(b, kv_heads, g * t, d)  # [B, K, G*T, D]
    if new is not None:  # the held-apart slots after the cache's: [B, K, S + T', D] in the products below
        k_new, v_new, new_mask = new
        k_new, v_new = k_new.transpose(0, 2, 1, 3), v_new.transpose(0, 2, 1, 3)  # [B, K, T', D]
        mask = jnp.concatenate([mask, new_mask], axis=-1)  # [B, T, S + T']
        s = s + k_new.shape[2]
    if rows.dtype != k_all.dtype:
        rows, k_all = rows.astype(jnp.float32), k_all.astype(jnp.float32)
        k_new = k_new.astype(jnp.float32) if new is not None else None

    def scores_of(keys):  # [B, K, G*T, S'] in float32
        return jnp.einsum("bkqd,bksd->bkqs", rows, keys, preferred_element_type=jnp.float32) * scale

    scores = scores_of(k_all) if new is None else jnp.concatenate([scores_of(k_all), scores_of(k_new)], axis=-1)
    visible = jnp.broadcast_to(mask[:, None], (b, g, t, s)).reshape(b, 1, g * t, s)  # row g*T + t: token t's mask
    scores = jnp.where(visible, scores, jnp.finfo(jnp.float32).min)
    probs = jax.nn.softmax(scores, axis=-1)
    if new is None:
        out = jnp.einsum("bkqs,bksd->bkqd", probs, v_all.astype(jnp.float32))  # [B, K, G*T, D]
    else:  # the cache's slots and the held-apart ones: two products, one sum
        cut = v_all.shape[2]
        out = (jnp.einsum("bkqs,bksd->bkqd", probs[..., :cut], v_all.astype(jnp.float32))
               + jnp.einsum("bkqs,bksd->bkqd", probs[..., cut:], v_new.astype(jnp.float32)))
    return out.reshape(b, kv_heads, g, t, d).transpose(0, 3, 1, 2, 4).reshape(b, t, h, d).astype(q.dtype)


class EmbedAndHead(nnx.Module):
    """Everything outside the layer stack, shared by all architectures: token embedding
    `embed`, final norm `final_norm` (given: LayerNorm or RMSNorm), and the output
    projection `head` — absent when tied to the embedding."""

    def __init__(self, vocab_size: int, hidden_size: int, final_norm: nnx.Module, tied: bool, dtype, rngs: nnx.Rngs):
        init = nnx.initializers.normal(0.02)
        self.tied = tied
        self.embed = nnx.Embed(vocab_size, hidden_size, embedding_init=init, param_dtype=dtype, rngs=rngs)
        self.final_norm = final_norm
        if not tied:
            self.head = nnx.Linear(hidden_size, vocab_size, use_bias=False, kernel_init=init, param_dtype=dtype,
                                   rngs=rngs)

    def embed_tokens(self, tokens: jax.Array) -> jax.Array:  # int32[B, T] -> [B, T, E]
        return self.embed(tokens)

    def logits(self, x: jax.Array) -> jax.Array:  # [B, T, E] -> f32[B, T, V]
        return self.project(self.final_norm(x))

    def project(self, x: jax.Array) -> jax.Array:  # [..., E] -> f32[..., V], no final norm
        """The output projection, accumulated and returned in float32 whatever the params'
        dtype: rounding bf16 logits to bf16 would create exact ties over a large vocabulary."""
        if self.tied:
            # the embedding [V, E] is an output-major kernel (a 9-row verify forward's head: 9.0 -> 7.3 ms on SmolLM2)
            return project_out_major(x, self.embed.embedding[...], preferred_element_type=jnp.float32)
        return jnp.einsum("...e,ev->...v", x, self.head.kernel[...], preferred_element_type=jnp.float32)
