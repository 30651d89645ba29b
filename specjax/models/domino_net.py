"""The Domino head as pure functions over its params: the GRU cell over the drafted tokens, the
low-rank causal correction of the backbone's rows, the teacher-forced logits of training and the
sequential rollout of decoding (Domino, arXiv 2605.29707, §4.1).

The architecture (modules, config, checkpoint layouts) is `specjax.models.domino`; the backbone's
forward is DFlash's (`specjax.models.dflash_net`); the decoding policy is `specjax.drafters.domino`
and the training loss `specjax.train.domino`.

Shapes: B batch, K drafts per round, E hidden, d_s GRU width, V vocabulary.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from specjax.models.draft_vocab import add_to_columns, draft_vocab_ids
from specjax.models.domino import DominoConfig
from specjax.models.model import embed_tokens
from specjax.ops import argmax
from specjax.sampling import categorical

__all__ = ["correction", "draft_rows", "draft_vocab_head", "gru_cell", "head_mask", "rollout", "sampler",
           "teacher_forced_logits"]


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
    EXCLUDED_LOGIT elsewhere: `specjax.models.draft_vocab.vocab_logits`)."""
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
        return lambda logits, i, key: argmax(logits)
    return lambda logits, i, key: categorical(key, sampling.log_probs(logits))
