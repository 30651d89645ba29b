"""DFlash: a block-diffusion drafter that reads the target's hidden states.

One drafter forward per round proposes a whole block: the input is [root, m, ..., m]
(`block_size` tokens, m the mask token) at positions start .. start + block_size - 1, and
row i of the output predicts the token at position start + i (i >= 1), so one pass gives
L = block_size - 1 per-position marginals (`block_logits`, the common currency of chain
DFlash, DDTree, Domino and Graft). Everything before the root reaches the drafter only
through its *context cache*: per draft layer, the keys/values of hidden_norm(fc(f)) for
the target features f of every committed position (architecture: `specjax.models.dflash`).

Context bookkeeping (the part that silently breaks tau when it is off by one):
  * prefill: the target's features of all prompt positions are written and committed
    (`init`); the root (the first bonus token) has no features yet;
  * every round: the features of last round's root + accepted path (`Verified.features`,
    gathered by the loop with the slots it commits) wait in `pending`; the next drafter
    forward writes their K/V at the region slots [0, C) after the committed context,
    the block's K/V at [C, C + block) (scratch, never committed), and afterwards commits
    exactly the pending_n context slots: context length == target committed length == the
    root's position, every round, and block K/V never persist.

Chain DFlash (the DFlash paper's decoding, `DFlashDrafter`): draft token i = argmax of
row i (argmax also at T > 0, as the reference); verified by the greedy walk at T = 0 and
by the lossless sampling walk at T > 0 (never min(1, p/q) with marginals).

A draft vocabulary in the params (`specjax.draft_vocab`: params["draft_vocab"]["ids"])
restricts `block_logits` to its K columns of the target's head (the rest EXCLUDED_LOGIT; the
columns are gathered once, by `init`), so chain DFlash, DDTree, Domino and Graft on top of it
draft only those tokens.

Features enter through `drafter_features`: with cfg.norm_last_layer (the reference's convention,
set for its layout) a tap of the target's last layer passes through the target's final norm, in
`init`, `observe` and `anchored_hidden` (training) alike; every other tap is the raw residual.

Shapes: B batch, C = block_size pending context slots, K kv heads, D head dim, n tapped
layers, E hidden, V vocab, W anchors per training sequence.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
from flax import struct

from specjax.draft_vocab import draft_head, draft_vocab_ids, split_draft_vocab, vocab_logits, weights_dtype
from specjax.drafters.protocol import PromptContext, Verified
from specjax.drafters.spec import Build, Field, MethodSpec, Reader
from specjax.inputs import require_config
from specjax.models.cache import KVCache, commit, init_cache
from specjax.models.dflash import DFlashConfig
from specjax.models.layers import LayerKV, cache_attention_mask, visible_slots
from specjax.models.model import ModelConfig, check_params, embed_tokens, final_norm, merge_module
from specjax.tree import chain_tree

__all__ = [
    "anchored_hidden", "block_hidden", "block_logits", "context_kv", "DFlashDrafter", "DFlashState", "draft_hidden",
    "drafter_features",
    "ingest_context", "init_draft_cache", "METHODS", "READER", "target_outer", "write_region",
]


# ============================================================================ pure forward


def _outer(params: dict, cfg: DFlashConfig):
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
    """K/V that every draft layer injects for context positions.

    features [B, C, n, E] target features; positions int32[B, C]. Returns (k, v)
    [N_d, B, C, K, D]: k_norm(k_proj(c)) rotated at `positions`, v_proj(c), with
    c = hidden_norm(fc(features)) shared by all layers (no input_layernorm on c).
    """
    c = _outer(params, cfg).context(features)  # [B, C, E]

    def layer(_, layer_params):
        return None, merge_module(cfg, "Block", layer_params).self_attn.keys_values(c, positions)

    _, (k, v) = jax.lax.scan(layer, None, params["layers"])
    return k, v


def write_region(cache: KVCache, k: jax.Array, v: jax.Array, offset: int = 0) -> KVCache:
    """Write k, v [N_d, B, C, K, D] at region slots [offset, offset + C) of every row (lengths unchanged)."""
    b, c = k.shape[1:3]
    rows = jnp.arange(b)[:, None]
    cols = cache.lengths[:, None] + offset + jnp.arange(c)[None]  # [B, C]
    put = lambda buf, new: buf.at[:, rows, cols].set(new.astype(buf.dtype), mode="drop")  # noqa: E731
    return cache.replace(k=put(cache.k, k), v=put(cache.v, v))


@functools.partial(jax.jit, static_argnames=("cfg", "target_cfg"))
def draft_hidden(params: dict, cfg: DFlashConfig, target_params: dict, target_cfg: ModelConfig, tokens: jax.Array,
                 positions: jax.Array, block_mask: jax.Array, cache: KVCache, region_offset: int):
    """The draft layers over block tokens: (hidden [B, T, E] after the final norm, cache).

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

    (x, k, v), _ = jax.lax.scan(layer, (x, cache.k, cache.v), (params["layers"], jnp.arange(cfg.num_layers)))
    return _outer(params, cfg).norm(x), cache.replace(k=k, v=v)


def init_draft_cache(cfg: DFlashConfig, batch: int, num_slots: int, dtype) -> KVCache:
    """The drafter's empty context cache: k, v [L_draft, B, num_slots, K, D], lengths int32[B]."""
    return init_cache(cfg.layer_config(), batch, num_slots, dtype)


def ingest_context(params: dict, cfg: DFlashConfig, cache: KVCache, features: jax.Array, num: jax.Array) -> KVCache:
    """Append the first num[b] of features [B, C, n, E] (positions lengths .. lengths + C - 1) to the context cache."""
    c = features.shape[1]
    pos = cache.lengths[:, None] + jnp.arange(c, dtype=jnp.int32)[None]
    cache = write_region(cache, *context_kv(params, cfg, features, pos))
    return commit(cache, jnp.broadcast_to(jnp.arange(c, dtype=jnp.int32), pos.shape), num)


# ============================================================================ decoding state


@struct.dataclass
class DFlashState:
    """DFlash's decoding state (B rows, C = pending_width = max_depth + 1 = the block for chain DFlash).

    Fields:
      params: the drafter's params.
      target_params: the target's params outside the layer stack (embedding, final norm, LM head):
        shared with the target, not copied (the block is embedded and projected with them).
      cache: the context `KVCache` k, v [N_d, B, S, K, D] of projected target features; `lengths` =
        committed context positions (== the target's committed length once the pending rows are in).
      pending: [B, C, n, E] target features (params dtype) of last round's root + accepted path, waiting
        to be written into the context by the next drafter forward; rows >= pending_n are padding.
      pending_n: int32[B] how many pending rows are real (the last round's kept tokens; 0 once written).
      draft_head: [E, K] the target head's columns of the drafter's draft vocabulary (`specjax.draft_vocab`),
        gathered once by `init`; None with the full vocabulary.
    """

    params: dict
    target_params: dict
    cache: KVCache
    pending: jax.Array
    pending_n: jax.Array
    draft_head: jax.Array | None = None


def block_hidden(cfg: DFlashConfig, target_cfg: ModelConfig, state: DFlashState, root: jax.Array,
                 active: jax.Array | None = None, block_size: int | None = None):
    """One drafter forward: (hidden [B, block, E] after the final norm, state with the pending context committed).

    root int32[B] is the last committed token, at position = committed context + pending_n;
    hidden row i sits at position root + i (row 0 is the root's own). Inactive rows commit nothing.
    """
    bs = block_size or cfg.block_size
    b, c = state.pending.shape[:2]
    cache = state.cache
    ctx_pos = cache.lengths[:, None] + jnp.arange(c, dtype=jnp.int32)[None]  # [B, C]
    cache = write_region(cache, *context_kv(state.params, cfg, state.pending, ctx_pos))
    start = cache.lengths + state.pending_n  # the root's position
    tokens = jnp.concatenate([root[:, None], jnp.full((b, bs - 1), cfg.mask_token_id, jnp.int32)], axis=1)
    positions = start[:, None] + jnp.arange(bs, dtype=jnp.int32)[None]
    region = jnp.arange(c + bs)[None, None]  # block queries see pending context r < pending_n and the whole block
    mask = (region < state.pending_n[:, None, None]) | (region >= c)
    mask = jnp.broadcast_to(mask, (b, bs, c + bs))
    hidden, cache = draft_hidden(state.params, cfg, state.target_params, target_cfg, tokens, positions, mask, cache,
                                 region_offset=c)
    n = state.pending_n if active is None else jnp.where(active, state.pending_n, 0)
    cache = commit(cache, jnp.broadcast_to(jnp.arange(c, dtype=jnp.int32), (b, c)), n)
    return hidden, state.replace(cache=cache, pending_n=state.pending_n - n)  # finished rows keep theirs


def block_logits(cfg: DFlashConfig, target_cfg: ModelConfig, state: DFlashState, root: jax.Array,
                 active: jax.Array | None = None, block_size: int | None = None):
    """(logits f32[B, L, V], state): `block_hidden` through the target's LM head, rows 1 .. L
    (L = block_size - 1): row i - 1 of the logits predicts the token at position root + i.
    With a draft vocabulary in the drafter's params only its K columns are computed
    (`specjax.draft_vocab.vocab_logits`; the others are EXCLUDED_LOGIT)."""
    hidden, state = block_hidden(cfg, target_cfg, state, root, active, block_size)
    ids = draft_vocab_ids(state.params)
    return vocab_logits(state.target_params, target_cfg, hidden[:, 1:], ids, state.draft_head), state


# ============================================================================ training view


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


# ============================================================================ chain DFlash


def target_outer(target_params: dict) -> dict:
    """The target's params a drafter shares: everything but the layer stack."""
    return {k: v for k, v in target_params.items() if k != "layers"}


@dataclasses.dataclass(frozen=True)
class DFlashDrafter:
    """Chain DFlash: one drafter forward, argmax per position, a chain of L = block - 1 nodes.

    Proposes a chain Tree [B, L] from logits f32[B, L, V] (`block_logits`); state `DFlashState`:
    the context cache k, v [L_draft, B, S, K, D] of projected target features and the pending
    features [B, L + 1, n, E] of the last round's committed tokens.

    Fields:
      cfg: the drafter's `DFlashConfig` (its target layer ids, block size, mask token).
      target_cfg: the target's model config it runs with (checked against `cfg` here, early, and
        against the config `generate` gets).
      block_size: inference block (root + block_size - 1 mask tokens, any >= 2); None: cfg.block_size
        (the trained one).
    """

    cfg: DFlashConfig
    target_cfg: ModelConfig
    block_size: int | None = None

    target_topk = 0
    config_class = DFlashConfig  # exactly (a DominoConfig is a DFlashConfig with a head: DominoDrafter's)

    def __post_init__(self):
        require_config(type(self).__name__, self.cfg, self.config_class)
        if self.block_size is not None and self.block_size < 2:
            raise ValueError(f"DFlash block size must be >= 2 (the root + at least one mask token), got "
                             f"{self.block_size}")
        self.cfg.check_target(self.target_cfg)

    @property
    def block(self) -> int:
        return self.block_size or self.cfg.block_size

    @property
    def target_layers(self) -> tuple[int, ...]:
        return self.cfg.target_layer_ids

    @property
    def budget(self) -> int:
        return self.block - 1

    @property
    def max_depth(self) -> int:
        return self.block - 1

    def validate(self, target_cfg) -> None:
        self.cfg.check_target(target_cfg)
        if target_cfg != self.target_cfg:
            raise ValueError(f"DFlashDrafter was built for target {self.target_cfg}, generate() got {target_cfg}")

    def uses_rejection(self, sampling) -> bool:
        return False  # the sampling walk: marginals are not the path-conditional proposal

    @property
    def pending_width(self) -> int:
        """C: features of the root + the longest accepted path (max_depth + 1 = block for DFlash)."""
        return self.max_depth + 1

    def cache_slots(self, prompt_width: int, max_new_tokens: int) -> int:
        """Context committed <= T + M - 1, plus the region: C pending + block slots."""
        return prompt_width + max_new_tokens + self.pending_width + self.block

    def init(self, params, tokens, prompt_lengths, max_new_tokens: int, context: PromptContext | None = None):
        if context is None or context.features is None:
            raise ValueError("DFlash reads the target: init needs the prompt's target features (PromptContext)")
        check_params(self.cfg, params, type(self).__name__)  # while tracing: before anything compiles
        b = tokens.shape[0]
        dtype = weights_dtype(params)
        cache = init_draft_cache(self.cfg, b, self.cache_slots(tokens.shape[1], max_new_tokens), dtype)
        features = drafter_features(self.cfg, context.target_params, self.target_cfg, context.features.astype(dtype))
        cache = ingest_context(params, self.cfg, cache, features, prompt_lengths)
        feat = context.features.shape[2:]
        return DFlashState(params=params, target_params=context.target_params, cache=cache,
                           pending=jnp.zeros((b, self.pending_width) + feat, dtype),
                           pending_n=jnp.zeros((b,), jnp.int32),
                           draft_head=draft_head(context.target_params, self.target_cfg, draft_vocab_ids(params)))

    def block_logits(self, state: DFlashState, root, active=None):
        """(logits f32[B, L, V], state): the drafter's marginals for the block after `root`."""
        return block_logits(self.cfg, self.target_cfg, state, root, active, self.block)

    def propose(self, state: DFlashState, root, active, key, sampling):
        logits, state = self.block_logits(state, root, active)
        tokens = jnp.argmax(logits, axis=-1).astype(jnp.int32)  # [B, L]
        num = jnp.where(active, self.budget, 0).astype(jnp.int32)  # finished rows draft nothing
        return chain_tree(tokens, num), None, state

    def observe(self, state: DFlashState, verified: Verified) -> DFlashState:
        act = verified.active
        features = drafter_features(self.cfg, state.target_params, self.target_cfg,
                                    verified.features.astype(state.pending.dtype))
        pending = jnp.where(act[:, None, None, None], features, state.pending)
        return state.replace(pending=pending, pending_n=jnp.where(act, verified.num_kept, state.pending_n))


def _count(params) -> int:
    return sum(x.size for x in jax.tree.leaves(params))


READER = Reader("dflash", "DFlash", lambda d, p: (f"{d.num_layers} layers, block {d.block_size}, reads target layers "
                                                  f"{list(d.target_layer_ids)}, {_count(p):,} params"))


def block_drafter(b: Build) -> tuple[DFlashDrafter, dict]:
    """(DFlashDrafter, its params) for a method built on the DFlash drafter; its field `block`
    (None: the trained block)."""
    cfg, params = b.need("dflash")
    return DFlashDrafter(cfg, b.target_cfg, block_size=b.values.get("block")), params


BLOCK = Field("block", int, None, "block size B (default: the trained block)")
METHODS = (MethodSpec("dflash", ("dflash",), "chain DFlash: one drafter forward over the target's features, argmax "
                      "per position, a chain of B - 1 tokens (`DFlashDrafter`)", block_drafter, fields=(BLOCK,),
                      needs=("dflash",), label="DFlash"),)
