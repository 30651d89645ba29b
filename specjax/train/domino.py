"""Training a Domino drafter: backbone + head jointly, base-anchored curriculum (Domino, §4.2 and App. A.1).

Data, anchors, the training mask are DFlash's (`specjax.train.dflash`), the loop is
`specjax.train.loop`: the same target-regenerated sequences and cached features, W random
anchors per sequence, the backbone under the training mask (`anchored_hidden`, the decoding
functions). Per block at anchor a:
  * base logits: the target's LM head on the K draft rows (`draft_rows`: rows 1 .. B-1 for
    the paper's alignment, 0 .. B-1 for shifted labels); labels x_{a+1} .. x_{a+K} either way;
  * final logits: base + the head's correction with the GRU fed
      - "tf" (teacher forcing, the paper's): the ground truth x_a, x_{a+1}, ..., x_{a+K-1},
        all blocks in parallel (`teacher_forced_logits`);
      - "ttt" (the ablation): the block's own drafts, argmax of the final logits computed
        sequentially (`rollout`, as at inference), detached; losses still against the truth;
  * L_final, L_base: position-decayed CE (w_i = exp(-(i-1)/gamma), w_1 = 1, one normaliser);
  * L = (1 - lambda_t) L_final + lambda_t L_base, lambda_t = clip(lambda_0 (1 - t / (rho T)), 0, 1)
    (`curriculum_lambda`; lambda_0 = 1, rho = 1 as the released config; lambda_0 = 0 is the
    no-curriculum ablation). At lambda = 1 the head gets exactly zero gradient.
With a draft vocabulary (`specjax.train.vocab`) base and correction are its K columns only.
Logged per evaluation: valid loss = L_final, valid_loss_base, valid_tau_base (the backbone
alone) next to valid_tau_estimate (with the head); lambda is a function of the step.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import optax

from specjax.drafters.domino import DominoDrafter
from specjax.models.dflash_net import anchored_hidden
from specjax.models.domino import DominoConfig
from specjax.models.domino_net import draft_rows, rollout, teacher_forced_logits
from specjax.train.dflash import (DFlashArch, DFlashTrainConfig, block_labels, build_config, draw_anchors,
                                  feature_layers, init_norm_from_target, weighted_block_ce)
from specjax.train.trainer import Trainer, arch_field, for_compute
from specjax.train.vocab import subset_logits

PREFIXES = ("tf", "ttt")


@dataclasses.dataclass(frozen=True)
class DominoTrainConfig(DFlashTrainConfig):
    """Domino training: `DFlashTrainConfig`'s fields (see there) plus the curriculum's and the GRU prefix's.

    The loss is L = (1 - lambda_t) L_final + lambda_t L_base, with
    lambda_t = clip(lambda0 (1 - t / (anneal_frac * steps)), 0, 1) (`curriculum_lambda`).

    Fields:
      lambda0: curriculum start lambda_0 in [0, 1] (1 as the released config); 0 = no curriculum
        (lambda == 0: L_final only); at lambda = 1 the head gets no gradient.
      anneal_frac: rho > 0: lambda falls linearly to 0 at step rho * steps (1: at the last step).
      prefix: the GRU's inputs: "tf" teacher forcing (the ground truth, the paper's) or "ttt" the
        block's own drafts (argmax, rolled out as at inference, detached; the ablation).
    """

    lambda0: float = 1.0
    anneal_frac: float = 1.0
    prefix: str = "tf"

    def __post_init__(self):
        if self.prefix not in PREFIXES:
            raise ValueError(f"Domino training prefix must be one of {PREFIXES}, got {self.prefix!r}")
        if not 0.0 <= self.lambda0 <= 1.0 or self.anneal_frac <= 0:
            raise ValueError(f"need 0 <= lambda0 <= 1 and anneal_frac > 0, got {self.lambda0}, {self.anneal_frac}")
        if self.soft_labels:
            raise ValueError(f"soft_labels {self.soft_labels}: Domino's loss has no target-distribution term; train "
                             f"its DFlash backbone with it (python -m specjax.train dflash --soft-labels) and start "
                             f"Domino from that (--init)")


def curriculum_lambda(step, tc: DominoTrainConfig) -> jax.Array:
    """lambda_t = clip(lambda_0 (1 - step / (rho T)), 0, 1): linear from lambda_0 to 0 at step rho T."""
    t = jnp.asarray(step, jnp.float32) / (tc.anneal_frac * tc.steps)
    return jnp.clip(tc.lambda0 * (1.0 - t), 0.0, 1.0)


def block_logits_pair(dparams, dcfg: DominoConfig, touter, tcfg, features, tokens, anchors, valid,
                      prefix: str = "tf", vocab=None):
    """(base, final) f32[B, W, K, C] of every anchored block (module docstring); C = V, or the K
    columns of a draft vocabulary `vocab` (`specjax.train.vocab`: the head's W_2 cut to them)."""
    b, s = tokens.shape
    hidden = anchored_hidden(dparams, dcfg, touter, tcfg, features, tokens, anchors, valid)  # [B, W, bs, E]
    rows = draft_rows(dcfg, hidden)  # [B, W, K, E]
    base = subset_logits(touter, tcfg, rows, vocab)
    if vocab is not None:  # the correction over the same columns; gradients reach W_2's kept columns
        head = dparams["head"]
        dparams = {**dparams, "head": {**head, "w2": {"kernel": jnp.take(head["w2"]["kernel"], vocab.ids, axis=1)}}}
    k = dcfg.num_draft_positions
    inputs = jnp.take_along_axis(tokens[:, None, :], jnp.minimum(anchors[..., None] + jnp.arange(k), s - 1), axis=2)
    if prefix == "tf":
        return base, teacher_forced_logits(dcfg, dparams, touter, tcfg, rows, base, inputs)
    w = anchors.shape[1]
    flat = lambda x: x.reshape((b * w,) + x.shape[2:])  # noqa: E731

    def pick(logits, i, key):  # the block's own argmax draft, as a token id (a column of the draft vocabulary)
        best = jax.lax.stop_gradient(jnp.argmax(logits, axis=-1))
        return best if vocab is None else vocab.ids[best]

    _, final = rollout(dcfg, dparams, touter, tcfg, flat(rows), flat(base), flat(inputs[..., 0]), pick,
                       jax.random.split(jax.random.key(0), k))
    return base, final.reshape(base.shape)


def domino_loss(dparams, dcfg: DominoConfig, touter, tcfg, features, tokens, loss_mask, anchors, valid, lam,
                tc: DominoTrainConfig, vocab=None):
    """(L = (1 - lam) L_final + lam L_base, metrics): acc/tau of the final logits, tau_base,
    loss_final, loss_base (over a draft vocabulary's columns when `vocab` is given)."""
    base, final = block_logits_pair(dparams, dcfg, touter, tcfg, features, tokens, anchors, valid, tc.prefix, vocab)
    labels, ok = block_labels(tokens, loss_mask, anchors, valid, dcfg.num_draft_positions)
    l_final, m_final = weighted_block_ce(final, labels, ok, valid, tc.gamma, vocab)
    l_base, m_base = weighted_block_ce(base, labels, ok, valid, tc.gamma, vocab)
    loss = (1.0 - lam) * l_final + lam * l_base
    return loss, {**m_final, "tau_base": m_base["tau"], "loss_final": l_final, "loss_base": l_base}


def make_step(dcfg: DominoConfig, tcfg, opt, tc: DominoTrainConfig, compute_dtype=None):
    """(step, evaluate) with `specjax.train.loop`'s contract; evaluate's loss is L_final; the loss's products
    in `compute_dtype` (None: float32; `specjax.train.trainer.for_compute`)."""

    def loss_at(p, touter, batch, vocab, key, lam):
        anchors, valid = draw_anchors(key, batch["loss_mask"], tc.anchors)
        p, touter = for_compute((p, touter), compute_dtype)
        return domino_loss(p, dcfg, touter, tcfg, batch["features"].astype(compute_dtype or jnp.float32), batch["tokens"],
                           batch["loss_mask"], anchors, valid, lam, tc, vocab)

    @jax.jit
    def step(dparams, opt_state, touter, batch, vocab, key, step_index):
        lam = curriculum_lambda(step_index, tc)
        (value, metrics), grads = jax.value_and_grad(loss_at, has_aux=True)(dparams, touter, batch, vocab, key, lam)
        updates, opt_state = opt.update(grads, opt_state, dparams)
        return optax.apply_updates(dparams, updates), opt_state, value, metrics

    @jax.jit
    def evaluate(dparams, touter, batch, vocab, key):
        _, metrics = loss_at(dparams, touter, batch, vocab, key, 0.0)
        return metrics["loss_final"], metrics

    return step, evaluate


@dataclasses.dataclass(frozen=True)
class DominoArch(DFlashArch):
    """A Domino drafter's architecture: its DFlash backbone's (`DFlashArch`) and the head's.

    Fields:
      layers: the backbone's draft layers.
      block_size: B, the backbone's block.
      mask_token: the mask token id (None: chosen from the data).
      target_layers: target layer ids the backbone reads (None: the method's rule).
      gru_hidden: d_s, the GRU's width (paper: H/4).
      head_rank: r, the low-rank correction's rank (paper: H/16, floored at 32).
      shift_label: the released checkpoints' label alignment.
      pure_prefix_len: drafts 1..P use the base logits.
    """

    gru_hidden: int = arch_field(64, "d_s (paper: H/4)")
    head_rank: int = arch_field(32, "r (paper: H/16, floored at 32)")
    shift_label: bool = arch_field(False, "the released checkpoints' alignment")
    pure_prefix_len: int = arch_field(0, "drafts 1..P use base logits")


def build_domino_config(arch: DominoArch, tcfg, mask_id: int, draft_vocab: int = 0):
    return build_config(arch, tcfg, mask_id, draft_vocab, DominoConfig, gru_hidden=arch.gru_hidden,
                        head_rank=arch.head_rank, shift_label=arch.shift_label, pure_prefix_len=arch.pure_prefix_len)


TRAINER = Trainer(kind="domino", help="a Domino drafter: DFlash backbone + GRU head, base-anchored curriculum",
                  train_config=DominoTrainConfig, arch=DominoArch, build_config=build_domino_config,
                  make_step=make_step, layers=lambda dcfg, tcfg: feature_layers(dcfg), drafter=DominoDrafter,
                  init=lambda touter, tcfg, vocab: init_norm_from_target(touter), measured=("domino",))

__all__ = ["DominoArch", "DominoTrainConfig", "TRAINER", "build_domino_config", "curriculum_lambda", "block_logits_pair", "domino_loss", "make_step"]
