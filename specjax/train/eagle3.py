"""Training an EAGLE-3 drafter with the training-time test (EAGLE-3, arXiv 2503.01840, §3).

Data: the DFlash recipe exactly (`specjax.train.data` shards and their feature cache), so every
drafter of a target learns from the same sequences; the loop is `specjax.train.loop`.

One step (`make_step`, jitted), per sequence x_0..x_{S-1} with loss mask m:
  1. from the batch's cached features: the tapped layers f_t, and the target's logits z_t (its
     distribution of x_{t+1}) = the head on the final-normed output of the last layer (cached too);
  2. the drafter unrolled `ttt_steps` times on its own states (`unrolled_hidden`, the
     decoding functions): step j, row t predicts x_{t+2+j};
  3. loss_j = sum over rows with m_{t+2+j} = 1 of CE(softmax(z_{t+1+j}), q_j(. | row t)) /
     their number (soft labels: the target's distribution, as the reference), total =
     sum_j 0.8^j loss_j (the reference's step weights). Token inputs are the data's tokens
     (= the target's own outputs), the states are the drafter's: that is the "test".
     With a reduced draft vocabulary (`specjax.train.vocab`), both distributions are over its K
     columns (the reference's `target_p[..., t2d]`), renormalised.
The drafter's logits (`draft_logits`): the paper's drafter (cfg.draft_vocab_size = K) has its own
trained `lm_head` [E, K], whose columns are the draft vocabulary's ids in order (K = V without
one); `init_head_from_target` starts it at the target head's K columns. A drafter with the
target's head (draft_vocab_size None) trains everything but the head, as before.
Logged: loss, per-step top-1 agreement with the target's argmax, and the training-time tau
estimate (1 + the all-correct prefix over the unrolled steps, averaged over valid rows).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from specjax.models.draft_vocab import draft_head
from specjax.drafters.eagle3 import eagle3_drafter
from specjax.models.eagle3 import Eagle3Config
from specjax.models.eagle3_net import own_head_logits, unrolled_hidden
from specjax.models.model import final_norm, merge_module
from specjax.train.loop import DrafterTrainConfig
from specjax.train.trainer import Trainer, arch_field, for_compute, int_tuple, optimizer_steps
from specjax.train.vocab import subset_logits


@dataclasses.dataclass(frozen=True)
class Eagle3TrainConfig(DrafterTrainConfig):
    """EAGLE-3 training: `DrafterTrainConfig`'s fields (see there; `steps` defaults to 1500 here) plus
    the training-time test's.

    Fields:
      steps: optimiser steps in total (1500 here; 1200 in `DrafterTrainConfig`).
      ttt_steps: J, unroll length of the training-time test (the reference's `length`; 7).
      step_decay: loss weight of unrolled step j is step_decay ** j (the reference's 0.8).
    """

    steps: int = 1500
    ttt_steps: int = 7
    step_decay: float = 0.8


def feature_layers(dcfg: Eagle3Config, tcfg) -> tuple[int, ...]:
    """The layers a step reads: the drafter's tapped layers, then the target's last layer (its logits)."""
    return tuple(dcfg.target_layer_ids) + (tcfg.num_layers - 1,)


def draft_logits(dparams, dcfg: Eagle3Config, touter, tcfg, hidden, vocab=None):
    """The drafter's logits f32[..., C] of its states [..., E] on its own final norm: its own `lm_head`
    (dcfg.own_head; C = K, the columns of `vocab`, or V without one), else the target's head (K columns
    with a draft vocabulary)."""
    norm = merge_module(dcfg, "Outer", {k: v for k, v in dparams.items() if k != "layers"}).norm
    if not dcfg.own_head:
        return subset_logits(touter, tcfg, norm(hidden), vocab)
    columns = tcfg.vocab_size if vocab is None else vocab.ids.shape[0]
    if columns != dcfg.draft_vocab_size:
        raise ValueError(f"the EAGLE-3 drafter's own lm_head has {dcfg.draft_vocab_size} columns but training "
                         f"scores {columns} (the draft vocabulary's size, or the target's vocabulary without one)")
    return own_head_logits(dparams, dcfg, norm(hidden))


def init_head_from_target(touter: dict, tcfg, vocab=None):
    """`init` for the loop: start an own `lm_head` at the target head's columns of the draft vocabulary
    (`vocab`, or all V); the identity for a drafter with the target's head (no `lm_head` in its params)."""
    def init(dparams: dict) -> dict:
        if "lm_head" not in dparams:
            return dparams
        head = draft_head(touter, tcfg, jnp.arange(tcfg.vocab_size) if vocab is None else vocab.ids)
        if head.shape != dparams["lm_head"]["kernel"].shape:
            raise ValueError(f"the drafter's lm_head is {dparams['lm_head']['kernel'].shape}, the target head's draft "
                             f"vocabulary columns are {head.shape}")
        return {**dparams, "lm_head": {"kernel": head.astype(dparams["lm_head"]["kernel"].dtype)}}

    return init


def ttt_loss(dparams, dcfg: Eagle3Config, touter, tcfg, features, target_logits, tokens, loss_mask, steps: int,
             decay: float, vocab=None):
    """The training-time-test loss (module docstring): (loss, {"acc": f32[steps], "tau": scalar}).
    target_logits: f32[B, S, C], the target's logits over the same C columns as the drafter's."""
    b, s = tokens.shape
    hidden = unrolled_hidden(dparams, dcfg, touter, tcfg, features, tokens, steps)  # [J, B, S, E]
    logp = jax.nn.log_softmax(draft_logits(dparams, dcfg, touter, tcfg, hidden, vocab).astype(jnp.float32),
                              axis=-1)  # [J, B, S, C], float32 after bfloat16 products too
    t = jnp.arange(s)
    target_p = jax.nn.softmax(target_logits.astype(jnp.float32), axis=-1)  # [B, S, V], once: step j reads rows shifted by 1 + j
    target_top = jnp.argmax(target_logits, axis=-1)  # [B, S]
    losses, correct, valid = [], [], []
    for j in range(steps):
        label_pos = t + 2 + j  # row t at step j predicts x_{t+2+j} ...
        ok = (label_pos < s) & jnp.take_along_axis(loss_mask, jnp.broadcast_to(jnp.minimum(label_pos, s - 1), (b, s)),
                                                   axis=1)
        shift = lambda x: jnp.concatenate([x[:, 1 + j:], x[:, -1:].repeat(1 + j, axis=1)], axis=1)  # noqa: E731
        ce = -jnp.sum(shift(target_p) * logp[j], axis=-1)  # ... whose target law is softmax(z_{t+1+j}); [B, S]
        losses.append(jnp.sum(ce * ok) / jnp.maximum(jnp.sum(ok), 1))
        correct.append((jnp.argmax(logp[j], -1) == shift(target_top)) & ok)
        valid.append(ok)
    loss = sum(decay ** j * l for j, l in enumerate(losses))
    correct, valid = jnp.stack(correct), jnp.stack(valid)  # [J, B, S]
    acc = jnp.sum(correct, axis=(1, 2)) / jnp.maximum(jnp.sum(valid, axis=(1, 2)), 1)
    prefix = jnp.sum(jnp.cumprod(correct, axis=0), axis=0)  # [B, S] all-correct steps from row t
    tau = jnp.sum(jnp.where(valid[0], prefix + 1, 0)) / jnp.maximum(jnp.sum(valid[0]), 1)
    return loss, {"acc": acc, "tau": tau}


def make_step(dcfg: Eagle3Config, tcfg, opt, tc: Eagle3TrainConfig, compute_dtype=None):
    """(step, evaluate) with `specjax.train.loop`'s contract (the key is unused: every row is a
    training example, no anchors are drawn); the loss's products in `compute_dtype` (None: float32)."""
    n = len(dcfg.target_layer_ids)

    def loss_at(p, touter, batch, vocab, key):
        p, touter = for_compute((p, touter), compute_dtype)
        feats = batch["features"].astype(compute_dtype or jnp.float32)  # [B, S, n + 1, E]: tapped layers, then the last
        target_logits = subset_logits(touter, tcfg, final_norm(touter, tcfg, feats[:, :, n]), vocab)
        return ttt_loss(p, dcfg, touter, tcfg, feats[:, :, :n], jax.lax.stop_gradient(target_logits),
                        batch["tokens"], batch["loss_mask"], tc.ttt_steps, tc.step_decay, vocab)

    return optimizer_steps(loss_at, opt)


@dataclasses.dataclass(frozen=True)
class Eagle3Arch:
    """An EAGLE-3 drafter's architecture choices (flags of `python -m specjax.train eagle3`).

    Fields:
      target_layers: the low / mid / high target layer ids it reads (None: EAGLE-3's rule).
    """

    target_layers: tuple[int, ...] | None = arch_field(None, "comma-separated target layer ids (default: the "
                                                       "method's rule)", int_tuple)


def build_config(arch: Eagle3Arch, tcfg, mask_id: int, draft_vocab: int = 0) -> Eagle3Config:
    """The paper's drafter: its own lm_head over the draft vocabulary (K = draft_vocab, or the full one)."""
    return Eagle3Config.for_target(tcfg, target_layer_ids=arch.target_layers,
                                   draft_vocab_size=draft_vocab or tcfg.vocab_size)


TRAINER = Trainer(kind="eagle3", help="an EAGLE-3 drafter with the training-time test", train_config=Eagle3TrainConfig,
                  arch=Eagle3Arch, build_config=build_config, make_step=make_step, layers=feature_layers,
                  drafter=eagle3_drafter, init=init_head_from_target, measured=("eagle3",), uses_mask_token=False)

__all__ = ["Eagle3Arch", "Eagle3TrainConfig", "TRAINER", "build_config", "feature_layers", "draft_logits", "init_head_from_target", "ttt_loss", "make_step"]
