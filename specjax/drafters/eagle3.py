"""EAGLE-3: an autoregressive one-layer drafter that reads the target's low/mid/high features.

Architecture and the (features, token) pairing: `specjax.models.eagle3`; the network as pure
functions (forward step, logits, the training-time-test view): `specjax.models.eagle3_net`.
Decoding runs on the EAGLE-2 dynamic tree (`specjax.drafters.eagle2_tree`, `eagle3_drafter`);
this file is the `Eagle3Stepper`.

Cache bookkeeping (its own one-layer KV cache, committed like the target's):
  * prefill: rows (f_t, x_{t+1}) of the prompt, t = 0 .. P - 2, are committed; f_{P-1}
    waits in `pending` for the root (the first bonus token, not known yet);
  * every round (`start`): the pending rows (f_{s+j}, x_{s+j+1}) for last round's root
    s and accepted path a_1 .. a_n, the last row's token being the new root, are forwarded
    at region slots [0, C) and committed (n + 1 of them): the committed rows always hold
    target features, never the drafter's own states; the last row's output is the root's
    state and logits;
  * tree nodes (`step`) are forwarded into the region after that with g = their parent's
    output; they are scratch (never committed), exactly as the training-time test sees them.
`observe` stores the root + accepted-path features (`Verified.features`) and the accepted
tokens as the next round's pending rows.

Training view (`unrolled_hidden`): step 0 is the causal forward over all rows with g =
fc(f_t); step j >= 1 feeds every row its own step j - 1 output with token x_{t+1+j} at
position t + j, attending to step-0 keys of rows <= t and to its own keys of steps 1..j:
the attention pattern a depth-j chain node sees at inference (tested equal).

Logits (`logits_of`): the paper's drafter (cfg.draft_vocab_size = K) projects with its own
`lm_head` [E, K]; the ids params["draft_vocab"]["ids"] (EAGLE-3's d2t map, `specjax.models.draft_vocab`)
place those K logits in the target's vocabulary. A drafter with the target's head
(draft_vocab_size None) may still carry a draft vocabulary: it then uses those K columns of the
target's head. Either way every other column is EXCLUDED_LOGIT, so the tree drafts only those
tokens and verification against the target's full distribution stays lossless.
`with_own_head` turns a target-head drafter into the paper's form (the head initialised from the
target's K columns: what the trainer starts from).

Shapes: B batch, C = max_depth + 1 pending rows, n tapped layers, E hidden, V vocab.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import struct

from specjax.models.draft_vocab import draft_head, draft_vocab_ids, weights_dtype
from specjax.drafters.eagle2_tree import TREE_FIELDS, Eagle2TreeDrafter, tree_shape
from specjax.drafters.protocol import PromptContext, Verified
from specjax.drafters.spec import Build, Field, MethodSpec, Reader
from specjax.inputs import require_config
from specjax.models.cache import KVCache, advance
from specjax.models.eagle3 import Eagle3Config
from specjax.models.eagle3_net import check_full_head, draft_step, fuse, init_draft_cache, logits_of
from specjax.models.model import ModelConfig, check_params

__all__ = ["Eagle3State", "Eagle3Stepper", "METHODS", "READER", "eagle3_drafter"]


# ============================================================================ decoding


@struct.dataclass
class Eagle3State:
    """EAGLE-3's decoding state (B rows, C = max_depth + 1 pending rows; bookkeeping: module docstring).

    Fields:
      params: the drafter's params.
      target_params: the target's params outside the layer stack (embedding, final norm, LM head):
        shared with the target, not copied.
      cache: the drafter's one-layer `KVCache` [1, B, K, S, D]; `lengths` = committed rows (rows that
        hold target features, never the drafter's own states); tree nodes are scratch after them.
      pending: [B, C, n, E] target features (params dtype) of last round's root + accepted path (after
        the prefill: of the last prompt position), forwarded and committed by the next `start`; rows
        >= pending_n are padding.
      pending_tokens: int32[B, C] the token paired with each pending row (row j: the accepted token
        a_{j+1}); the last real row's token is the root, filled in by `start`.
      pending_n: int32[B] how many pending rows are real (1 after the prefill; the kept tokens of the
        last round after `observe`; 0 once committed).
      draft_head: [E, K] the target head's columns of the drafter's draft vocabulary (`specjax.models.draft_vocab`),
        gathered once by `init`; None with the full vocabulary or the drafter's own head.
    """

    params: dict
    target_params: dict
    cache: KVCache
    pending: jax.Array
    pending_tokens: jax.Array
    pending_n: jax.Array
    draft_head: jax.Array | None = None


@dataclasses.dataclass(frozen=True)
class Eagle3Stepper:
    """EAGLE-3 as an `ARStepper` of the dynamic tree (`eagle3_drafter`); state `Eagle3State` (its
    one-layer KV cache [1, B, K, S, D], pending features [B, C, n, E]); carried state [B, W, E]:
    each node's parent's output hidden state.

    Fields:
      cfg: the drafter's `Eagle3Config` (its tapped target layers).
      target_cfg: the target's model config it serves (checked against `cfg` here, early, and
        against the config `generate` gets).
    """

    cfg: Eagle3Config
    target_cfg: ModelConfig

    def __post_init__(self):
        require_config("the EAGLE-3 drafter (Eagle3Stepper, eagle3_drafter)", self.cfg, Eagle3Config)
        self.cfg.check_target(self.target_cfg)

    @property
    def target_layers(self) -> tuple[int, ...]:
        return self.cfg.target_layer_ids

    def validate(self, target_cfg) -> None:
        self.cfg.check_target(target_cfg)
        if target_cfg != self.target_cfg:
            raise ValueError(f"the EAGLE-3 drafter was built for target {self.target_cfg}, generate() got {target_cfg}")

    def init(self, params, tokens, prompt_lengths, max_new_tokens: int, context: PromptContext | None = None, *,
             region: int, max_depth: int) -> Eagle3State:
        if context is None or context.features is None:
            raise ValueError("EAGLE-3 reads the target: init needs the prompt's target features (PromptContext)")
        check_params(self.cfg, params, "the EAGLE-3 drafter")  # while tracing: before anything compiles
        ids = draft_vocab_ids(params)
        if self.cfg.own_head and ids is None:
            check_full_head(self.cfg)
        if self.cfg.own_head and ids is not None and ids.shape[0] != self.cfg.draft_vocab_size:
            raise ValueError(f"the EAGLE-3 drafter's own lm_head has {self.cfg.draft_vocab_size} columns but its "
                             f"draft vocabulary {ids.shape[0]} ids")
        b, t = tokens.shape
        c = max_depth + 1
        dtype = weights_dtype(params)
        # committed rows <= the target's committed length <= T + M - 1; then max(C, region) scratch slots
        cache = init_draft_cache(self.cfg, b, t + max_new_tokens + max(c, region) + 1, dtype)
        features = context.features.astype(dtype)
        nxt = jnp.concatenate([tokens[:, 1:], jnp.zeros((b, 1), tokens.dtype)], axis=1)  # x_{t+1} of row t
        pos = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (b, t))
        causal = jnp.broadcast_to(jnp.tril(jnp.ones((t, t), bool)), (b, t, t))
        _, cache = draft_step(params, self.cfg, context.target_params, self.target_cfg,
                              fuse(params, self.cfg, features), nxt, pos, causal, cache)
        cache = advance(cache, prompt_lengths - 1)  # in place (region offset 0); row P - 1 waits for the root
        last = jnp.take_along_axis(features, (prompt_lengths - 1)[:, None, None, None], axis=1)  # [B, 1, n, E]
        pending = jnp.zeros((b, c) + features.shape[2:], dtype).at[:, :1].set(last)
        return Eagle3State(params=params, target_params=context.target_params, cache=cache, pending=pending,
                           pending_tokens=jnp.zeros((b, c), jnp.int32), pending_n=jnp.ones((b,), jnp.int32),
                           draft_head=None if self.cfg.own_head else draft_head(context.target_params, self.target_cfg,
                                                                                 ids))

    def start(self, state: Eagle3State, root, active):
        b, c = state.pending_tokens.shape
        j = jnp.arange(c, dtype=jnp.int32)[None]
        last = state.pending_n - 1
        tokens = jnp.where(j == last[:, None], root[:, None], state.pending_tokens)
        positions = state.cache.lengths[:, None] + j
        causal = jnp.broadcast_to(jnp.tril(jnp.ones((c, c), bool)), (b, c, c))
        g = fuse(state.params, self.cfg, state.pending)
        out, cache = draft_step(state.params, self.cfg, state.target_params, self.target_cfg, g, tokens, positions,
                                causal, state.cache)
        hidden = jnp.take_along_axis(out, last[:, None, None], axis=1)[:, 0]  # [B, E] the root's state
        n = jnp.where(active, state.pending_n, 0)
        cache = advance(cache, n)  # the forward wrote them at region offset 0: in place
        logits = logits_of(state.params, self.cfg, state.target_params, self.target_cfg, hidden, state.draft_head)
        return logits, hidden, state.replace(cache=cache, pending_n=state.pending_n - n)

    def step(self, state: Eagle3State, tokens, carried, depth, region_offset, mask):
        b, w = tokens.shape
        # the root's row sits at position lengths - 1; a depth-d node at lengths - 1 + d
        positions = jnp.broadcast_to(state.cache.lengths[:, None] - 1 + depth, (b, w)).astype(jnp.int32)
        out, cache = draft_step(state.params, self.cfg, state.target_params, self.target_cfg, carried, tokens,
                                positions, mask, state.cache, region_offset)
        logits = logits_of(state.params, self.cfg, state.target_params, self.target_cfg, out, state.draft_head)
        return logits, out, state.replace(cache=cache)

    def observe(self, state: Eagle3State, verified: Verified, node_slots) -> Eagle3State:
        act = verified.active
        c = state.pending_tokens.shape[1]
        acc = verified.result.accepted_tokens  # [B, D]: row j (j < n) pairs f_{s+j} with a_{j+1}
        tokens = jnp.zeros_like(state.pending_tokens).at[:, : acc.shape[1]].set(acc[:, : c])
        pending = verified.features.astype(state.pending.dtype)[:, :c]
        return state.replace(pending=jnp.where(act[:, None, None, None], pending, state.pending),
                             pending_tokens=jnp.where(act[:, None], tokens, state.pending_tokens),
                             pending_n=jnp.where(act, verified.num_kept, state.pending_n))


def eagle3_drafter(cfg: Eagle3Config, target_cfg: ModelConfig, top_k: int = 10, depth: int = 8, total: int = 60):
    """EAGLE-3 on the EAGLE-2 dynamic tree (defaults: Graft's top_k 10, depth 8, K_max 60)."""
    return Eagle2TreeDrafter(Eagle3Stepper(cfg, target_cfg), top_k=top_k, depth=depth, total=total)


READER = Reader("eagle3", "EAGLE-3", lambda d, p: (f"1 layer, reads target layers {list(d.target_layer_ids)}, "
                                                   f"{sum(x.size for x in jax.tree.leaves(p)):,} params"))


def _build_tree(b: Build):
    cfg, params = b.need("eagle3")
    return Eagle2TreeDrafter(Eagle3Stepper(cfg, b.target_cfg), **tree_shape(b)), params


def _build_chain(b: Build):
    k = b.values["K"]
    if k < 1:
        raise ValueError(f"eagle3-chain<K> needs K >= 1, got {b.spec!r}")
    cfg, params = b.need("eagle3")
    return Eagle2TreeDrafter(Eagle3Stepper(cfg, b.target_cfg), top_k=1, depth=k - 1, total=k), params


METHODS = (
    MethodSpec("eagle3", ("eagle3",), "EAGLE-3 (reads the target's low / mid / high features) on the EAGLE-2 dynamic "
               "tree (`Eagle2TreeDrafter`; Graft's defaults)", _build_tree, fields=TREE_FIELDS, needs=("eagle3",),
               label="dynamic tree"),
    MethodSpec("eagle3-chain", ("eagle3-chain<K>",), "EAGLE-3 drafting a greedy chain of K tokens (the dynamic tree "
               "with top_k 1, depth K - 1, total K)", _build_chain,
               positional=(Field("K", int, None, "draft tokens per round"),), needs=("eagle3",)),
)
