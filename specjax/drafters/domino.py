"""Domino: a DFlash drafter whose parallel block is corrected causally, token by token.

Per round (Domino, arXiv 2605.29707, §4; architecture in `specjax.models.domino`):
  1. one backbone forward, exactly DFlash's (`specjax.drafters.dflash.block_hidden`): block
     rows H_0 .. H_{B-1}; draft i (i = 1 .. K) reads row rho(i) = i (paper) or i - 1
     (shifted labels), base logits = the target's LM head on those K rows, in parallel;
  2. a sequential rollout (`rollout`, a `lax.scan` over the K drafts inside the one decode
     loop): the GRU state starts at 0 on the round's root token every round (nothing of the
     head carries across rounds), and for i = 1 .. K
         s_i = GRUCell(e(y_{i-1}), s_{i-1})        (y_0 = root, s_0 = 0)
         L_i = base_i + W_2 SiLU(W_1 [H_rho(i) ; s_i])   (base only for i <= P)
         y_i = argmax L_i (T = 0) or a sample of the processed softmax(L_i / T) (T > 0);
  3. the chain [y_1 .. y_K] goes to the target like any other tree.
K per round is block_size - 1 in both alignments by default, as the reference drafts
(`DominoConfig.num_inference_drafts`); with shifted labels the block has one more trained row,
which `DominoDrafter(num_drafts=block_size)` drafts too.

Verification at T > 0 (`verify`): "rejection" (default) is chain speculative sampling with
the law each draft token was actually drawn from, q_i = processed softmax(L_i) given the
drafted prefix (proofs/domino.md, DO2); "walk" is the reference code's sample-and-match
(the sampling walk: accept y_i iff it equals the target's own sample there). Both are
lossless; rejection accepts y with probability min(1, p(y)/q(y)) >= p(y), so it accepts
at least as often (the notebook reports both).

`use_head=False` drafts from the base logits alone with the same weights (Table 4 of the
paper; with the paper's alignment it is exactly chain DFlash on the backbone).

A draft vocabulary in the params (`specjax.models.draft_vocab`) restricts both the base logits and
the correction (the columns of W_2) to its K tokens; every other token keeps EXCLUDED_LOGIT.

The head's pure functions (GRU cell, correction, rollout, teacher forcing) are
`specjax.models.domino_net`; this file is the decoding policy, `DominoDrafter`.

Shapes: B batch, K drafts per round, E hidden, d_s GRU width, V vocabulary.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from specjax.models.draft_vocab import draft_vocab_ids, vocab_logits
from specjax.drafters.dflash import DFlashDrafter, DFlashState, block_hidden
from specjax.drafters.spec import Build, Field, MethodSpec, Reader
from specjax.inputs import require_config
from specjax.models.domino import DominoConfig
from specjax.models.domino_net import correction, draft_rows, rollout, sampler
from specjax.tree import chain_tree

__all__ = ["DominoDrafter", "METHODS", "READER", "VERIFY_RULES"]

VERIFY_RULES = ("rejection", "walk")


# ============================================================================ the drafter


@dataclasses.dataclass(frozen=True)
class DominoDrafter(DFlashDrafter):
    """Domino drafting on the one loop (module docstring).

    Proposes a chain Tree [B, K] (K = `num_drafts`: 15 drafts at block 16 by default, in both
    alignments, as the reference) and, at T > 0 with verify="rejection", the law each draft was drawn
    from, f32[B, K, V]; state: DFlash's (`DFlashState`).

    Fields:
      cfg: a `DominoConfig` (the DFlash backbone + the GRU / low-rank head).
      target_cfg: the target's model config it runs with (checked early, as `DFlashDrafter`).
      block_size: must be None or the trained cfg.block_size (the head's rows are tied to it).
      use_head: True applies the causal correction head; False drafts from the base logits alone
        (the same weights; Table 4 of the paper).
      verify: rule at T > 0: "rejection" (chain speculative sampling with the drafts' laws, default)
        or "walk" (the reference's sample-and-match sampling walk); ignored at T = 0 (greedy walk).
      num_drafts: K drafts per round, in [1, cfg.num_draft_positions]; None: cfg.num_inference_drafts =
        block_size - 1, the reference's (with shift_label the trained block has block_size rows:
        num_drafts=block_size drafts the last one too).
    """

    cfg: DominoConfig
    use_head: bool = True
    verify: str = "rejection"
    num_drafts: int | None = None

    config_class = DominoConfig

    def __post_init__(self):
        require_config("DominoDrafter", self.cfg, DominoConfig)  # before reading its fields
        if self.block_size not in (None, self.cfg.block_size):
            raise ValueError(f"Domino drafts with its trained block ({self.cfg.block_size}), got block_size "
                             f"{self.block_size}")
        if self.verify not in VERIFY_RULES:
            raise ValueError(f"Domino verify rule must be one of {VERIFY_RULES}, got {self.verify!r}")
        if self.num_drafts is not None and not 1 <= self.num_drafts <= self.cfg.num_draft_positions:
            raise ValueError(f"Domino num_drafts must lie in [1, {self.cfg.num_draft_positions}] (the trained draft "
                             f"rows), got {self.num_drafts}")
        super().__post_init__()

    @property
    def budget(self) -> int:
        return self.num_drafts or self.cfg.num_inference_drafts

    @property
    def max_depth(self) -> int:
        return self.budget

    def uses_rejection(self, sampling) -> bool:
        return self.verify == "rejection" and not sampling.greedy

    def rollout_from(self, state: DFlashState, rows, base, root, key, sampling):
        """(tokens int32[B, K], final logits f32[B, K, V]) from the K draft rows [B, K, E] and their
        base logits f32[B, K, V] (one PRNG key per draft, split from `key`)."""
        keys = jax.random.split(key, self.budget)
        return rollout(self.cfg, state.params, state.target_params, self.target_cfg, rows, base, root,
                       sampler(sampling), keys, self.use_head)

    def base_logits(self, state: DFlashState, root, active=None):
        """(rows [B, K, E], base logits f32[B, K, V], state): the backbone's one forward and the
        target's LM head over the K draft rows in one matmul (pending context committed)."""
        hidden, state = block_hidden(self.cfg, self.target_cfg, state, root, active, self.block)
        rows = draft_rows(self.cfg, hidden)[:, : self.budget]
        ids = draft_vocab_ids(state.params)
        return rows, vocab_logits(state.target_params, self.target_cfg, rows, ids, state.draft_head), state

    def propose(self, state: DFlashState, root, active, key, sampling):
        rows, base, state = self.base_logits(state, root, active)
        tokens, logits = self.rollout_from(state, rows, base, root, key, sampling)
        num = jnp.where(active, self.budget, 0).astype(jnp.int32)  # finished rows draft nothing
        probs = jnp.exp(sampling.log_probs(logits)) if self.uses_rejection(sampling) else None
        return chain_tree(tokens, num), probs, state


READER = Reader("domino", "Domino", lambda d, p: (
    f"{d.num_layers}-layer backbone, block {d.block_size}, GRU {d.gru_hidden}, rank {d.head_rank}, shift_label "
    f"{d.shift_label}, reads target layers {list(d.target_layer_ids)}, "
    f"{sum(x.size for x in jax.tree.leaves(p)):,} params"))


def _build(b: Build):
    head, verify = b.values["head"], b.values["verify"]
    if head not in (0, 1):
        raise ValueError(f"Domino field 'head' is 0 (backbone only) or 1, got {head}")
    if verify not in VERIFY_RULES:
        raise ValueError(f"Domino field 'verify' is one of {', '.join(VERIFY_RULES)}, got {verify!r}")
    cfg, params = b.need("domino")
    return DominoDrafter(cfg, b.target_cfg, use_head=bool(head), verify=verify), params


METHODS = (MethodSpec("domino", ("domino",), "Domino: the DFlash backbone forward + the GRU / low-rank causal "
                      "correction rolled out draft by draft, a chain (`DominoDrafter`)", _build,
                      fields=(Field("head", int, 1, "1: with the causal head; 0: the backbone alone (same weights)"),
                              Field("verify", str, "rejection", "rejection (chain rejection) or walk, at T > 0")),
                      needs=("domino",), label="Domino"),)
