"""The EAGLE-3 drafter's network as pure functions over its params: the fused features, one decoder
step over (token embedding, state) pairs, its logits (own head over a draft vocabulary, or the
target's), and the training-time-test view unrolled over several steps.

The architecture (modules, config, checkpoint layouts) is `specjax.models.eagle3`; the decoding policy
(the cache bookkeeping of a generation, the stepper of the dynamic tree) is `specjax.drafters.eagle3`,
and the training loss `specjax.train.eagle3`.

Shapes: B batch, S rows, n tapped layers, E hidden, V vocab, K draft vocabulary.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from specjax.models.draft_vocab import (EXCLUDED_LOGIT, draft_head, draft_vocab_ids, split_draft_vocab, vocab_logits,
                                 weights_dtype, with_draft_vocab)
from specjax.models.cache import KVCache, init_cache
from specjax.models.eagle3 import Eagle3Config
from specjax.models.layers import LayerKV, cache_attention_mask, visible_slots
from specjax.models.model import ModelConfig, embed_tokens, merge_module

__all__ = ["check_full_head", "draft_step", "fuse", "init_draft_cache", "logits_of", "outer_module", "own_head_logits",
           "unrolled_hidden", "with_own_head"]


def outer_module(params: dict, cfg: Eagle3Config):
    """The drafter's modules outside its layer (fc, the final norm) from its params."""
    return merge_module(cfg, "Outer", {k: v for k, v in split_draft_vocab(params)[0].items() if k != "layers"})


def fuse(params: dict, cfg: Eagle3Config, features: jax.Array) -> jax.Array:
    """Target features [B, C, n, E] -> g [B, C, E] (the fc over the concatenated layers)."""
    return outer_module(params, cfg).fuse(features)


def own_head_logits(params: dict, cfg: Eagle3Config, normed: jax.Array) -> jax.Array:
    """The own `lm_head`'s logits f32[..., K] of final-normed states [..., E] (float32 accumulation)."""
    kernel = params["lm_head"]["kernel"]
    return jnp.einsum("...e,ek->...k", normed.astype(kernel.dtype), kernel, preferred_element_type=jnp.float32)


def logits_of(params: dict, cfg: Eagle3Config, target_params: dict, target_cfg: ModelConfig, hidden: jax.Array,
              head: jax.Array | None = None):
    """Draft logits f32[..., V] of the drafter's final norm of `hidden` [..., E]: with its own head
    (cfg.own_head) `own_head_logits` placed at the draft vocabulary's ids (all V columns when the
    params carry no ids, which needs K == V); else the target's LM head, with a draft vocabulary only
    its K columns (`specjax.models.draft_vocab.vocab_logits`; `head`: those columns [E, K] gathered
    beforehand). Columns outside the draft vocabulary hold EXCLUDED_LOGIT."""
    normed = outer_module(params, cfg).norm(hidden)
    ids = draft_vocab_ids(params)
    if not cfg.own_head:
        return vocab_logits(target_params, target_cfg, normed, ids, head)
    cols = own_head_logits(params, cfg, normed)
    if ids is None:
        check_full_head(cfg)
        return cols
    out = jnp.full(cols.shape[:-1] + (cfg.vocab_size,), EXCLUDED_LOGIT, jnp.float32)
    return out.at[..., ids].set(cols, unique_indices=True, indices_are_sorted=True)


def check_full_head(cfg: Eagle3Config) -> None:
    if cfg.draft_vocab_size != cfg.vocab_size:
        raise ValueError(f"the EAGLE-3 drafter's own lm_head has {cfg.draft_vocab_size} columns but its params carry "
                         f"no draft vocabulary ids to place them among the {cfg.vocab_size} tokens: add them with "
                         f"specjax.models.draft_vocab.with_draft_vocab(params, ids)")


def with_own_head(params: dict, cfg: Eagle3Config, target_params: dict, target_cfg: ModelConfig,
                  ids=None) -> tuple[Eagle3Config, dict]:
    """(cfg, params) of the paper's form: an own `lm_head` [E, K] initialised from the target head's columns
    `ids` (default: the params' draft vocabulary, else the full vocabulary), and the ids in the params.
    A drafter that already has its own head is returned unchanged (ids must then be None)."""
    if cfg.own_head:
        if ids is not None:
            raise ValueError("this EAGLE-3 drafter already has its own lm_head; its draft vocabulary is fixed")
        return cfg, params
    ids = draft_vocab_ids(params) if ids is None else ids
    ids = jnp.arange(cfg.vocab_size, dtype=jnp.int32) if ids is None else ids
    params = with_draft_vocab(params, ids, cfg.vocab_size)
    ids = params["draft_vocab"]["ids"]
    head = draft_head(target_params, target_cfg, ids).astype(weights_dtype(params))
    return dataclasses.replace(cfg, draft_vocab_size=int(ids.shape[0])), {**params, "lm_head": {"kernel": head}}


def draft_step(params: dict, cfg: Eagle3Config, target_params: dict, target_cfg: ModelConfig, g: jax.Array,
               tokens: jax.Array, positions: jax.Array, block_mask: jax.Array, cache: KVCache, region_offset=0):
    """The decoder layer over T rows: (out [B, T, E], cache with their K/V written).

    g [B, T, E] (fused features or a parent's output); tokens/positions int32[B, T] (tokens
    embedded with the *target's* embedding); block_mask bool[B, T, R] over the region; row t
    is written at region slot region_offset + t (lengths unchanged: see `commit`)."""
    emb = embed_tokens(target_params, target_cfg, tokens).astype(cache.k.dtype)
    mask = cache_attention_mask(cache.lengths, block_mask, cache.num_slots)
    layer = jax.tree.map(lambda x: x[0], params["layers"])
    kv = LayerKV(k=cache.k, v=cache.v, layer=jnp.int32(0), write_at=cache.lengths + region_offset,
                 visible=visible_slots(cache.lengths, block_mask.shape[2]))
    out, kv = merge_module(cfg, "Block", layer)(emb, g.astype(cache.k.dtype), positions, mask, kv)
    return out, cache.replace(k=kv.k, v=kv.v)


def init_draft_cache(cfg: Eagle3Config, batch: int, num_slots: int, dtype) -> KVCache:
    return init_cache(cfg.layer_config(), batch, num_slots, dtype)


def unrolled_hidden(params: dict, cfg: Eagle3Config, target_params: dict, target_cfg: ModelConfig,
                    features: jax.Array, tokens: jax.Array, steps: int) -> jax.Array:
    """The training-time test: outputs [steps, B, S, E] of the drafter unrolled `steps` times.

    features [B, S, n, E] target features of every position of tokens int32[B, S]. Step j row
    t reads token x_{t+1+j} (0 past the end) at position t + j with g = fc(f_t) (j = 0) or its
    own step j - 1 output, sees step-0 rows <= t and its own rows of steps 1..j; its logits
    (`logits_of`) predict x_{t+2+j}. Each step's K/V go to region slots [j S, (j + 1) S), all
    through `draft_step`, the decoding function.
    """
    b, s = tokens.shape
    cache = init_draft_cache(cfg, b, steps * s, weights_dtype(params))
    t = jnp.arange(s)
    region = jnp.arange(steps * s)
    g = fuse(params, cfg, features)
    outs = []
    for j in range(steps):  # static and short (EAGLE-3 trains with 7)
        nxt = jnp.concatenate([tokens[:, 1 + j:], jnp.zeros((b, 1 + j), tokens.dtype)], axis=1)[:, :s]
        step0 = (region[None, :] < s) & (region[None, :] <= t[:, None])  # [S, R]
        own = (region[None, :] >= s) & (region[None, :] % s == t[:, None]) & (region[None, :] < (j + 1) * s)
        mask = jnp.broadcast_to(step0 | own if j else step0, (b, s, steps * s))
        pos = jnp.broadcast_to(t + j, (b, s)).astype(jnp.int32)
        g, cache = draft_step(params, cfg, target_params, target_cfg, g, nxt, pos, mask, cache, region_offset=j * s)
        outs.append(g)
    return jnp.stack(outs)
