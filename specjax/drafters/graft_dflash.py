"""Graft(TAIL) on chain DFlash (Graft, arXiv 2605.20104, App. F "DFlash Demo Implementation").

Chain DFlash drafts L = block - 1 tokens d_1..d_L in one forward. Keep the confident prefix
B^df = the largest k >= 1 with prod_{i<=k} max_v q_i(v) > tau (our rule; the paper says only
"low-confidence positions, from DFlash draft logits"), then fill the remaining L - B^df
positions with the table's rank-0 chain from the last kept token: r_1 = M[d_{B^df}, 0],
r_{j+1} = M[r_j, 0]. Where a table row is empty the chain falls back to the DFlash tokens
of the remaining positions. The result is still a chain of L tokens, verified as chain
DFlash is (greedy / sampling walk: lossless for any proposal); the same table as Graft,
filled from the prefill and from every verified slot.

Params: `GraftParams(base=DFlash params, table, thresholds=[tau])`.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import struct

from specjax.drafters.dflash import BLOCK, DFlashDrafter, block_drafter
from specjax.drafters.graft import GraftParams, graft_params
from specjax.drafters.protocol import Verified, Wrapper
from specjax.drafters.retrieval import update_from_prompt, update_from_round
from specjax.drafters.spec import Build, Field, MethodSpec
from specjax.ops import argmax
from specjax.tree import chain_tree

__all__ = ["DFlashTailDrafter", "METHODS", "TailState"]


@struct.dataclass
class TailState:
    """Graft(TAIL)-DFlash's state (B rows).

    Fields:
      block: the DFlash drafter's state (`DFlashState`).
      table: int32[V, k] the successor table (-1 = empty), updated from the prefill and every round.
      threshold: f32[] tau, the confidence threshold of the kept DFlash prefix (thresholds[0] of the params).
      root: int32[B] the root of the last proposed chain (the first table row its retrieval could read).
      kept: int32[B] B^df, DFlash tokens kept in the last proposal (>= 1; the rest came from the table
        or fell back to DFlash's tokens).
    """

    block: object
    table: jax.Array
    threshold: jax.Array
    root: jax.Array
    kept: jax.Array


@dataclasses.dataclass(frozen=True)
class DFlashTailDrafter(Wrapper):
    """Graft(TAIL) on chain DFlash (module docstring).

    Proposes a chain Tree [B, L] (L = block - 1): the confident DFlash prefix, then the table's
    rank-0 chain; params `GraftParams(base, table int32[V, k], thresholds f32[1])`; state `TailState`.

    Fields:
      dflash: the `DFlashDrafter` whose chain is cut (its block, target and verification).
      width: k >= 1, the table width (8; the target's top-k recorded per token; only rank 0 is proposed).
    """

    dflash: DFlashDrafter
    width: int = 8

    def __post_init__(self):
        if self.width < 1:
            raise ValueError(f"table width k must be >= 1, got {self.width}")

    @property
    def inner(self):
        return self.dflash

    @property
    def budget(self) -> int:
        return self.dflash.budget

    @property
    def target_topk(self) -> int:
        return self.width

    def uses_rejection(self, sampling) -> bool:
        return False

    def init(self, params: GraftParams, tokens, prompt_lengths, max_new_tokens: int, context=None) -> TailState:
        if not isinstance(params, GraftParams) or params.thresholds.shape != (1,):
            raise ValueError("Graft(TAIL)-DFlash takes GraftParams(base=DFlash params, table, thresholds=[tau]) "
                             "(graft_params(dflash_params, vocab, thresholds=(tau,)))")
        table = params.table
        if context is not None and context.top_ids is not None:
            table = update_from_prompt(table, tokens, prompt_lengths, context.top_ids)
        b = tokens.shape[0]
        return TailState(block=self.dflash.init(params.base, tokens, prompt_lengths, max_new_tokens, context),
                         table=table, threshold=params.thresholds[0], root=jnp.zeros((b,), jnp.int32),
                         kept=jnp.zeros((b,), jnp.int32))

    def propose(self, state: TailState, root, active, key, sampling):
        logits, block = self.dflash.block_logits(state.block, root, active)  # [B, L, V]
        draft = argmax(logits)
        conf = jnp.cumprod(jnp.max(jax.nn.softmax(logits.astype(jnp.float32), axis=-1), axis=-1), axis=1)
        kept = jnp.maximum(jnp.sum(conf > state.threshold, axis=1), 1).astype(jnp.int32)  # conf is non-increasing
        v = state.table.shape[0]

        def step(carry, i):
            prev, fallen = carry
            nxt = state.table[jnp.clip(prev, 0, v - 1), 0]
            fallen = fallen | ((i >= kept) & (nxt < 0))
            tok = jnp.where((i < kept) | fallen, draft[:, i], nxt)
            return (tok, fallen), tok

        _, toks = jax.lax.scan(step, (root, jnp.zeros_like(active)), jnp.arange(draft.shape[1]))
        num = jnp.where(active, self.budget, 0).astype(jnp.int32)
        return chain_tree(toks.T, num), None, state.replace(block=block, root=root,
                                                             kept=jnp.where(active, kept, state.kept))

    def carry_over(self, params: GraftParams, state: TailState) -> GraftParams:
        return params.replace(table=state.table)

    def observe(self, state: TailState, verified: Verified) -> TailState:
        return state.replace(block=self.dflash.observe(state.block, verified),
                             table=update_from_round(state.table, state.root, verified))


def _build(b: Build):
    block, params = block_drafter(b)
    drafter = DFlashTailDrafter(block)
    return drafter, graft_params(params, b.target_cfg.vocab_size, drafter.width, (b.values["thr"],))


METHODS = (MethodSpec("dflash-tail", ("dflash-tail",), "Graft(TAIL) on chain DFlash: the confident prefix of the "
                      "DFlash chain, then the table's rank-0 chain (`DFlashTailDrafter`)", _build,
                      fields=(Field("thr", float, 0.3, "confidence that ends the DFlash prefix"), BLOCK),
                      needs=("dflash",), label="Graft(TAIL)-DFlash"),)
