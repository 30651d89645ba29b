"""DFlash: a block-diffusion drafter that reads the target's hidden states.

One drafter forward per round proposes a whole block: the input is [root, m, ..., m]
(`block_size` tokens, m the mask token) at positions start .. start + block_size - 1, and
row i of the output predicts the token at position start + i (i >= 1), so one pass gives
L = block_size - 1 per-position marginals (`block_logits`, the common currency of chain
DFlash, DDTree, Domino and Graft). Everything before the root reaches the drafter only
through its *context cache*: per draft layer, the keys/values of hidden_norm(fc(f)) for
the target features f of every committed position (architecture: `specjax.models.dflash`; the
network as pure functions: `specjax.models.dflash_net`).

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

A draft vocabulary in the params (`specjax.models.draft_vocab`: params["draft_vocab"]["ids"])
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

import jax
import jax.numpy as jnp
from flax import struct

from specjax.models.draft_vocab import draft_head, draft_vocab_ids, vocab_logits, weights_dtype
from specjax.drafters.protocol import PromptContext, Verified
from specjax.drafters.spec import Build, Field, MethodSpec, Reader
from specjax.inputs import require_config
from specjax.models.cache import KVCache, advance
from specjax.models.dflash import DFlashConfig
from specjax.models.dflash_net import (context_kv, draft_hidden, drafter_features, ingest_context, init_draft_cache,
                                       per_layer, write_region)
from specjax.models.model import ModelConfig, check_params
from specjax.ops import argmax
from specjax.tree import chain_tree

__all__ = ["block_hidden", "block_logits", "DFlashDrafter", "DFlashState", "METHODS", "READER"]


# ============================================================================ decoding state


@struct.dataclass
class DFlashState:
    """DFlash's decoding state (B rows, C = pending_width = max_depth + 1 = the block for chain DFlash).

    Fields:
      params: the drafter's params.
      target_params: the target's params outside the layer stack (embedding, final norm, LM head):
        shared with the target, not copied (the block is embedded and projected with them).
      cache: the context `KVCache` k, v [N_d, B, K, S, D] of projected target features; `lengths` =
        committed context positions (== the target's committed length once the pending rows are in).
      pending: [B, C, n, E] target features (params dtype) of last round's root + accepted path, waiting
        to be written into the context by the next drafter forward; rows >= pending_n are padding.
      pending_n: int32[B] how many pending rows are real (the last round's kept tokens; 0 once written).
      draft_head: [E, K] the target head's columns of the drafter's draft vocabulary (`specjax.models.draft_vocab`),
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
    cache = advance(cache, n)  # the context rows sit at region offset 0: in place
    return hidden, state.replace(cache=cache, pending_n=state.pending_n - n)  # finished rows keep theirs


def block_logits(cfg: DFlashConfig, target_cfg: ModelConfig, state: DFlashState, root: jax.Array,
                 active: jax.Array | None = None, block_size: int | None = None):
    """(logits f32[B, L, V], state): `block_hidden` through the target's LM head, rows 1 .. L
    (L = block_size - 1): row i - 1 of the logits predicts the token at position root + i.
    With a draft vocabulary in the drafter's params only its K columns are computed
    (`specjax.models.draft_vocab.vocab_logits`; the others are EXCLUDED_LOGIT)."""
    hidden, state = block_hidden(cfg, target_cfg, state, root, active, block_size)
    ids = draft_vocab_ids(state.params)
    return vocab_logits(state.target_params, target_cfg, hidden[:, 1:], ids, state.draft_head), state


# ============================================================================ chain DFlash


@dataclasses.dataclass(frozen=True)
class DFlashDrafter:
    """Chain DFlash: one drafter forward, argmax per position, a chain of L = block - 1 nodes.

    Proposes a chain Tree [B, L] from logits f32[B, L, V] (`block_logits`); state `DFlashState`:
    the context cache k, v [L_draft, B, K, S, D] of projected target features and the pending
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
        params = per_layer(params)  # sliced once here, not copied out of the stack in every draft forward
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
        tokens = argmax(logits)  # [B, L]
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
