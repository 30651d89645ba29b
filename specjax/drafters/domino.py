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

A draft vocabulary in the params (`specjax.draft_vocab`) restricts both the base logits and
the correction (the columns of W_2) to its K tokens; every other token keeps EXCLUDED_LOGIT.

Shapes: B batch, K drafts per round, E hidden, d_s GRU width, V vocabulary.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from specjax.draft_vocab import add_to_columns, draft_vocab_ids, vocab_logits
from specjax.drafters.dflash import DFlashDrafter, DFlashState, block_hidden
from specjax.drafters.spec import Build, Field, MethodSpec, Reader
from specjax.inputs import require_config
from specjax.models.domino import DominoConfig
from specjax.models.model import embed_tokens
from specjax.tree import chain_tree

__all__ = [
    "correction", "DominoDrafter", "draft_rows", "draft_vocab_head", "gru_cell", "head_mask", "rollout", "sampler",
    "teacher_forced_logits", "METHODS", "READER", "VERIFY_RULES",
]

VERIFY_RULES = ("rejection", "walk")


# ============================================================================ the head, pure


def gru_cell(head: dict, e: jax.Array, h: jax.Array) -> jax.Array:
    """One bias-free GRU step, PyTorch's gate convention: e [..., E], h [..., d_s] -> [..., d_s]."""
    gi = e.astype(h.dtype) @ head["w_ih"]["kernel"].astype(h.dtype)
    gh = h @ head["w_hh"]["kernel"].astype(h.dtype)
    i_r, i_z, i_n = jnp.split(gi, 3, axis=-1)
    h_r, h_z, h_n = jnp.split(gh, 3, axis=-1)
    r = jax.nn.sigmoid(i_r + h_r)
    z = jax.nn.sigmoid(i_z + h_z)
    n = jnp.tanh(i_n + r * h_n)
    return (1.0 - z) * n + z * h


def correction(head: dict, rows: jax.Array, s: jax.Array) -> jax.Array:
    """W_2 SiLU(W_1 [rows ; s]): rows [..., E], s [..., d_s] -> f32[..., V] (f32[..., K] for a
    `draft_vocab_head`)."""
    x = jnp.concatenate([rows.astype(jnp.float32), s.astype(jnp.float32)], axis=-1)
    u = jax.nn.silu(x @ head["w1"]["kernel"].astype(jnp.float32))
    return u @ head["w2"]["kernel"].astype(jnp.float32)


def draft_vocab_head(params: dict) -> tuple[dict, jax.Array | None]:
    """(the head, ids int32[K] of the params' draft vocabulary or None): with a draft vocabulary,
    W_2 keeps only its K columns [r, K], cut once here rather than in every draft step."""
    head, ids = params["head"], draft_vocab_ids(params)
    if ids is None:
        return head, None
    return {**head, "w2": {"kernel": jnp.take(head["w2"]["kernel"], ids, axis=1)}}, ids


def draft_rows(cfg: DominoConfig, hidden: jax.Array) -> jax.Array:
    """The K block rows the drafts read: hidden [..., block, E] -> [..., K, E] (rho(i) = i or i - 1)."""
    return hidden if cfg.shift_label else hidden[..., 1:, :]


def head_mask(cfg: DominoConfig, use_head: bool = True, k: int | None = None) -> jax.Array:
    """f32[K]: 1 where draft i (1-based) gets the correction (i > P), 0 on the pure prefix or with the head off
    (K = k, default cfg.num_draft_positions)."""
    on = jnp.arange(1, (k or cfg.num_draft_positions) + 1) > cfg.pure_prefix_len
    return (on & use_head).astype(jnp.float32)


def teacher_forced_logits(cfg: DominoConfig, params: dict, touter: dict, tcfg, rows: jax.Array, base: jax.Array,
                          inputs: jax.Array, use_head: bool = True) -> jax.Array:
    """Final logits with the GRU fed given tokens (training; all blocks in parallel).

    rows [..., K, E], base f32[..., K, V]; inputs int32[..., K] = (y_0 = root, y_1, ..., y_{K-1}).
    Returns f32[..., K, V]: L_i = base_i + mask_i W_2 SiLU(W_1 [rows_i ; s_i]), s_i the GRU
    state after inputs 1 .. i. Equal to `rollout` with the same tokens forced (tests C3). With a
    draft vocabulary in `params` the correction goes to its columns only (base then holds
    EXCLUDED_LOGIT elsewhere: `specjax.draft_vocab.vocab_logits`)."""
    head, ids = draft_vocab_head(params)
    emb = embed_tokens(touter, tcfg, inputs)  # [..., K, E]
    h0 = jnp.zeros(inputs.shape[:-1] + (cfg.gru_hidden,), jnp.float32)

    def step(h, e):
        h = gru_cell(head, e, h)
        return h, h

    _, states = jax.lax.scan(step, h0, jnp.moveaxis(emb, -2, 0))  # [K, ..., d_s]
    states = jnp.moveaxis(states, 0, -2)
    mask = head_mask(cfg, use_head, inputs.shape[-1])
    return add_to_columns(base, mask[:, None] * correction(head, rows, states), ids)


def rollout(cfg: DominoConfig, params: dict, touter: dict, tcfg, rows: jax.Array, base: jax.Array, root: jax.Array,
            pick, keys: jax.Array, use_head: bool = True):
    """The sequential draft: (tokens int32[B, K], final logits f32[B, K, V]).

    rows [B, K, E], base f32[B, K, V], root int32[B]; pick(logits f32[B, V], i, key) ->
    int32[B] chooses draft i + 1 (argmax, a sample, or a forced token); keys [K] one PRNG
    key per draft. The GRU starts from 0 on `root` (module docstring, step 2). With a draft
    vocabulary in `params` the correction is computed and added on its columns only."""
    head, ids = draft_vocab_head(params)
    k = rows.shape[1]
    mask = head_mask(cfg, use_head, k)
    b = root.shape[0]

    def step(carry, xs):
        h, prev = carry
        i, row, base_i, key = xs
        logits = base_i
        if use_head:  # static: head off drafts from the base logits without running the GRU at all
            h = gru_cell(head, embed_tokens(touter, tcfg, prev), h)
            logits = add_to_columns(logits, mask[i] * correction(head, row, h), ids)
        tok = pick(logits, i, key).astype(jnp.int32)
        return (h, tok), (tok, logits)

    h0 = jnp.zeros((b, cfg.gru_hidden), jnp.float32)
    xs = (jnp.arange(k), jnp.moveaxis(rows, 1, 0), jnp.moveaxis(base, 1, 0), keys)
    _, (tokens, logits) = jax.lax.scan(step, (h0, root.astype(jnp.int32)), xs)
    return jnp.moveaxis(tokens, 0, 1), jnp.moveaxis(logits, 0, 1)


def sampler(sampling):
    """pick() for `rollout`: argmax at T = 0, else a sample of the processed distribution."""
    if sampling.greedy:
        return lambda logits, i, key: jnp.argmax(logits, axis=-1)
    return lambda logits, i, key: jax.random.categorical(key, sampling.log_probs(logits), axis=-1)


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
