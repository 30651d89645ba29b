"""Training an EAGLE-3 drafter with the training-time test (PAPER_NOTES section 4).

Data: the DFlash recipe exactly (`specjax.train.dflash.make_dataset`: train-split prompts
answered by the target itself), so both drafters of a target learn from the same sequences.

One step (`make_step`, jitted), per sequence x_0..x_{S-1} with loss mask m:
  1. target forward (no gradient) -> features of the tapped layers f_t and the target's
     logits z_t (its distribution of x_{t+1}) at every position;
  2. the drafter unrolled `ttt_steps` times on its own states (`unrolled_hidden`, the
     decoding functions): step j, row t predicts x_{t+2+j};
  3. loss_j = sum over rows with m_{t+2+j} = 1 of CE(softmax(z_{t+1+j}), q_j(. | row t)) /
     their number (soft labels: the target's distribution, as the reference), total =
     sum_j 0.8^j loss_j (the reference's step weights). Token inputs are the data's tokens
     (= the target's own outputs), the states are the drafter's: that is the "test".
Logged: loss, per-step top-1 agreement with the target's argmax, and the training-time tau
estimate (1 + the all-correct prefix over the unrolled steps, averaged over valid rows).
The loop, checkpoints, `--resume` and export are DFlash's (`specjax.train.dflash.train`).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import optax

from specjax.drafters.dflash import target_outer
from specjax.drafters.eagle3 import logits_of, unrolled_hidden
from specjax.train.dflash import DrafterTrainConfig
from specjax.models import causal_mask, forward_tapped, init_cache
from specjax.models.eagle3 import Eagle3Config


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


def target_view(tparams, tcfg, dcfg: Eagle3Config, tokens):
    """(features [B, S, n, E], target logits f32[B, S, V]) of a causal target forward, no gradient."""
    b, s = tokens.shape
    pos = jnp.broadcast_to(jnp.arange(s, dtype=jnp.int32), (b, s))
    logits, _, feats = forward_tapped(tparams, tcfg, tokens, pos, causal_mask(b, s),
                                      init_cache(tcfg, b, s, jax.tree.leaves(tparams)[0].dtype), dcfg.target_layer_ids)
    return jax.lax.stop_gradient(feats), jax.lax.stop_gradient(logits)


def ttt_loss(dparams, dcfg: Eagle3Config, touter, tcfg, features, target_logits, tokens, loss_mask, steps: int,
             decay: float):
    """The training-time-test loss (module docstring): (loss, {"acc": f32[steps], "tau": scalar})."""
    b, s = tokens.shape
    hidden = unrolled_hidden(dparams, dcfg, touter, tcfg, features, tokens, steps)  # [J, B, S, E]
    logp = jax.nn.log_softmax(logits_of(dparams, dcfg, touter, tcfg, hidden), axis=-1)  # [J, B, S, V]
    t = jnp.arange(s)
    target_p = jax.nn.softmax(target_logits, axis=-1)  # [B, S, V], once: step j reads rows shifted by 1 + j
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


def make_step(dcfg: Eagle3Config, tcfg, opt, tc: Eagle3TrainConfig):
    """(step, evaluate) with the signatures `specjax.train.dflash.train` drives (the key is unused:
    every row is a training example, no anchors are drawn)."""

    def loss_at(p, tparams, tokens, loss_mask):
        feats, zl = target_view(tparams, tcfg, dcfg, tokens)
        return ttt_loss(p, dcfg, target_outer(tparams), tcfg, feats, zl, tokens, loss_mask, tc.ttt_steps,
                        tc.step_decay)

    @jax.jit
    def step(dparams, opt_state, tparams, tokens, loss_mask, key, step_index):
        (value, metrics), grads = jax.value_and_grad(loss_at, has_aux=True)(dparams, tparams, tokens, loss_mask)
        updates, opt_state = opt.update(grads, opt_state, dparams)
        return optax.apply_updates(dparams, updates), opt_state, value, metrics

    evaluate_chunk = jax.jit(loss_at)

    def evaluate(dparams, tparams, tokens, loss_mask, key):
        """Mean over chunks of `batch_size` rows: [rows, S, V] logits for every unrolled step of a
        whole validation set do not fit in memory for a real vocabulary."""
        n = tc.batch_size
        parts = [evaluate_chunk(dparams, tparams, tokens[i:i + n], loss_mask[i:i + n])
                 for i in range(0, len(tokens) - n + 1, n)] or [evaluate_chunk(dparams, tparams, tokens, loss_mask)]
        return jax.tree.map(lambda *xs: sum(xs) / len(xs), *parts)

    return step, evaluate


__all__ = ["Eagle3TrainConfig", "target_view", "ttt_loss", "make_step"]
