"""The DFlash drafter's network as pure functions over its params: the context K/V of the target's
features, the draft layers over a block, and the training view of many anchored blocks at once.

The architecture (modules, config, checkpoint layout) is `specjax.models.dflash`; the decoding policy
built on these functions (the context bookkeeping of a generation, chain DFlash) is
`specjax.drafters.dflash`, and the training loss `specjax.train.dflash`.

Shapes: B batch, C context positions, K kv heads, D head dim, n tapped layers, E hidden, N_d draft
layers, W anchors per training sequence.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from specjax.models.draft_vocab import split_draft_vocab, weights_dtype
from specjax.models.cache import KVCache, advance, init_cache
from specjax.models.dflash import DFlashConfig
from specjax.models.layers import LayerKV, cache_attention_mask, visible_slots
from specjax.models.model import ModelConfig, embed_tokens, final_norm, merge_module, outer_params

__all__ = [
    "anchored_hidden", "context_kv", "draft_hidden", "drafter_features", "ingest_context", "init_draft_cache",
    "outer_module", "per_layer", "target_outer", "write_region",
]


def per_layer(params: dict) -> dict:
    """The drafter's params with "layers" as a tuple of N_d per-layer dicts (what decoding carries): the
    functions below then run the layers one after another, each reading its own arrays. Scanned over the
    stacked [N_d, ...] arrays, XLA:CPU copies layer i's slice before its products, in every draft forward
    of every round (SmolLM2's 3-layer drafter: ~5 ms of a ~60 ms DDTree round, docs/results.md); sliced
    here once per generation instead. Idempotent; the stacked form is the checkpoint's and training's."""
    layers = params["layers"]
    if isinstance(layers, (tuple, list)):
        return params
    n = jax.tree.leaves(layers)[0].shape[0]
    return {**params, "layers": tuple(jax.tree.map(lambda x, i=i: x[i], layers) for i in range(n))}


def _run_layers(layer, carry, layers, ids):
    """`jax.lax.scan(layer, carry, (layers, ids))` for stacked layers; a loop over `per_layer` ones."""
    if not isinstance(layers, (tuple, list)):
        return jax.lax.scan(layer, carry, (layers, ids))
    outs = []
    for i, layer_params in enumerate(layers):
        carry, out = layer(carry, (layer_params, ids[i]))
        outs.append(out)
    return carry, None if outs[0] is None else jax.tree.map(lambda *xs: jnp.stack(xs), *outs)


def outer_module(params: dict, cfg: DFlashConfig):
    """The drafter's modules outside its layers (fc + hidden_norm, the final norm) from its params."""
    return merge_module(cfg, "Outer", {k: v for k, v in split_draft_vocab(params)[0].items() if k != "layers"})


def drafter_features(cfg: DFlashConfig, target_params: dict, target_cfg: ModelConfig, features: jax.Array) -> jax.Array:
    """The target's tapped features [..., n, E] as the drafter reads them: unchanged, except that with
    cfg.norm_last_layer the tap of the target's last layer goes through the target's final norm (HF
    hidden_states[-1]; `target_params`: the target's outer params). Same dtype as `features`."""
    last = tuple(i == target_cfg.num_layers - 1 for i in cfg.target_layer_ids)
    if not (cfg.norm_last_layer and any(last)):
        return features
    normed = final_norm(target_params, target_cfg, features).astype(features.dtype)
    return jnp.where(jnp.asarray(last)[:, None], normed, features)


@functools.partial(jax.jit, static_argnames=("cfg",))  # eager callers: one compile per shape
def context_kv(params: dict, cfg: DFlashConfig, features: jax.Array, positions: jax.Array):
    """K/V that every draft layer injects for context positions (params' layers stacked or `per_layer`).

    features [B, C, n, E] target features; positions int32[B, C]. Returns (k, v)
    [N_d, B, C, K, D]: k_norm(k_proj(c)) rotated at `positions`, v_proj(c), with
    c = hidden_norm(fc(features)) shared by all layers (no input_layernorm on c).
    """
    c = outer_module(params, cfg).context(features)  # [B, C, E]

    def layer(_, xs):
        return None, merge_module(cfg, "Block", xs[0]).self_attn.keys_values(c, positions)

    _, (k, v) = _run_layers(layer, None, params["layers"], jnp.arange(cfg.num_layers))
    return k, v


def write_region(cache: KVCache, k: jax.Array, v: jax.Array, offset: int = 0) -> KVCache:
    """Write k, v [N_d, B, C, K, D] at region slots [offset, offset + C) of every row (lengths unchanged)."""
    b, c = k.shape[1:3]
    rows = jnp.arange(b)[:, None]
    cols = cache.lengths[:, None] + offset + jnp.arange(c)[None]  # [B, C]
    # The cache is [N_d, B, K, S, D]; indices around the head slice select [B, C] first: new as [B, C, N_d, K, D].
    put = lambda buf, new: buf.at[:, rows, :, cols].set(  # noqa: E731
        new.transpose(1, 2, 0, 3, 4).astype(buf.dtype), mode="drop")
    return cache.replace(k=put(cache.k, k), v=put(cache.v, v))


@functools.partial(jax.jit, static_argnames=("cfg", "target_cfg"))
def draft_hidden(params: dict, cfg: DFlashConfig, target_params: dict, target_cfg: ModelConfig, tokens: jax.Array,
                 positions: jax.Array, block_mask: jax.Array, cache: KVCache, region_offset: int):
    """The draft layers over block tokens: (hidden [B, T, E] after the final norm, cache); params' layers
    stacked or `per_layer`.

    tokens/positions int32[B, T] (embedded with the *target's* embedding); block_mask
    bool[B, T, R] over the pending region (context K/V already written there by
    `write_region`); the block's own K/V are written at region slot region_offset + t.
    """
    x = embed_tokens(target_params, target_cfg, tokens).astype(cache.k.dtype)  # [B, T, E]
    mask = cache_attention_mask(cache.lengths, block_mask, cache.num_slots)  # [B, T, S]
    write_at = cache.lengths + region_offset
    visible = visible_slots(cache.lengths, block_mask.shape[2])

    def layer(carry, xs):
        x, k_cache, v_cache = carry
        layer_params, i = xs
        kv = LayerKV(k=k_cache, v=v_cache, layer=i, write_at=write_at, visible=visible)
        x, kv = merge_module(cfg, "Block", layer_params)(x, positions, mask, kv)
        return (x, kv.k, kv.v), None

    (x, k, v), _ = _run_layers(layer, (x, cache.k, cache.v), params["layers"], jnp.arange(cfg.num_layers))
    return outer_module(params, cfg).norm(x), cache.replace(k=k, v=v)


def init_draft_cache(cfg: DFlashConfig, batch: int, num_slots: int, dtype) -> KVCache:
    """The drafter's empty context cache: k, v [L_draft, B, num_slots, K, D], lengths int32[B]."""
    return init_cache(cfg.layer_config(), batch, num_slots, dtype)


def ingest_context(params: dict, cfg: DFlashConfig, cache: KVCache, features: jax.Array, num: jax.Array) -> KVCache:
    """Append the first num[b] of features [B, C, n, E] (positions lengths .. lengths + C - 1) to the context cache."""
    c = features.shape[1]
    pos = cache.lengths[:, None] + jnp.arange(c, dtype=jnp.int32)[None]
    cache = write_region(cache, *context_kv(params, cfg, features, pos))
    return advance(cache, num)  # written at region offset 0: in place


def anchored_hidden(params: dict, cfg: DFlashConfig, target_params: dict, target_cfg: ModelConfig,
                    features: jax.Array, tokens: jax.Array, anchors: jax.Array, anchor_valid: jax.Array,
                    block_size: int | None = None) -> jax.Array:
    """The drafter under the training mask: hidden [B, W, block, E] for W anchors per sequence at once.

    features [B, S, n, E] target features of every position of tokens int32[B, S];
    anchors int32[B, W] (positions a_j), anchor_valid bool[B, W]. Block j is
    [tokens[a_j], m, ..., m] at positions a_j + (0 .. block - 1); its queries see the
    context keys of positions < a_j (strictly: the anchor's own features are not known at
    inference) and every key of their own block, nothing else. The same functions as
    `block_logits`, so each block equals an inference forward with context = features[:a_j]
    (tests/test_dflash.py checks it).
    """
    bs = block_size or cfg.block_size
    b, s = tokens.shape
    w = anchors.shape[1]
    features = drafter_features(cfg, target_params, target_cfg, features)
    pos = jnp.broadcast_to(jnp.arange(s, dtype=jnp.int32), (b, s))
    cache = init_draft_cache(cfg, b, s + w * bs, weights_dtype(params))
    cache = write_region(cache, *context_kv(params, cfg, features, pos))
    first = jnp.take_along_axis(tokens, anchors, axis=1)  # [B, W]
    block = jnp.concatenate([first[..., None], jnp.full((b, w, bs - 1), cfg.mask_token_id, jnp.int32)], axis=2)
    block_pos = anchors[..., None] + jnp.arange(bs, dtype=jnp.int32)  # [B, W, bs]
    q_block = jnp.repeat(jnp.arange(w), bs)  # [W*bs] block id of each query
    ctx_ok = pos[:, None, :] < jnp.repeat(anchors, bs, axis=1)[..., None]  # [B, W*bs, S]
    same = (q_block[:, None] == q_block[None, :])[None] & jnp.repeat(anchor_valid, bs, axis=1)[..., None]
    mask = jnp.concatenate([ctx_ok & jnp.repeat(anchor_valid, bs, axis=1)[..., None], same], axis=2)
    hidden, _ = draft_hidden(params, cfg, target_params, target_cfg, block.reshape(b, w * bs),
                             block_pos.reshape(b, w * bs), mask, cache, region_offset=s)
    return hidden.reshape(b, w, bs, -1)


def target_outer(target_params: dict) -> dict:
    """The target's params a drafter shares: everything but the layer stack (`outer_params`)."""
    return outer_params(target_params)
