"""Training a DFlash drafter for a target (DFlash, arXiv 2602.06036, §3.3; SpecForge's recipe at small scale).

Data: the target's own answers to training prompts (`specjax.train.data`, resumable shards;
`make_dataset` below is the in-memory version for small runs and tests), with the tapped
layers' features computed once (`specjax.train.features`); the loop is `specjax.train.loop`.

One training step (`make_step`, jitted), per sequence x_0..x_{S-1} with loss mask m:
  1. the features of the drafter's tapped layers at every position, read from the batch;
  2. anchors: W positions drawn uniformly without replacement from
     {a : m_a = 1 and m_{a+1} = 1} (re-drawn every step), sorted; rows with fewer valid
     positions pad with invalid anchors;
  3. the drafter under the training mask (`specjax.models.dflash_net.anchored_hidden`, the
     decoding functions themselves): block j = [x_{a_j}, m, ..., m] sees context features
     of positions < a_j only and its own block bidirectionally;
  4. same-position labels: block row k predicts x_{a_j + k} (k >= 1), valid iff in range and
     m = 1 there; loss = sum_k w_k CE / sum_k w_k over valid labels, w_k = exp(-(k-1)/gamma);
     with a reduced draft vocabulary (`specjax.train.vocab`) the logits are the K columns
     only and a label outside them leaves the CE (and counts as a miss);
  5. optionally (`soft_labels` = lam > 0) the target's own distribution as well: loss = (1 - lam) CE +
     lam KL(p || q) with the same weights, p the target's softmax (T = 1) at the label's position over the
     draft vocabulary's columns (renormalised there), read from the target's last layer, which the batch
     then carries after the drafter's layers (`teacher_layers`). Not the DFlash paper's loss: distilling
     the drafter on the target's distribution is DistillSpec's (arXiv 2310.08461, §3), here forward KL.
The target's embedding and LM head are frozen (they are not in the drafter's params at all).
Logged: loss, per-position accuracy, and the training-time tau estimate
(1 + the length of the all-correct prefix of each block, averaged over valid anchors).
"""

from __future__ import annotations

import dataclasses
import time

import jax
import jax.numpy as jnp
import numpy as np

from specjax.decode import generate_ar
from specjax.drafters.dflash import DFlashDrafter
from specjax.models import pad_prompts
from specjax.models.dflash import DFlashConfig
from specjax.models.dflash_net import anchored_hidden
from specjax.models.model import final_norm
from specjax.sampling import Sampling
from specjax.train.loop import DrafterTrainConfig
from specjax.train.trainer import Trainer, arch_field, for_compute, int_tuple, optimizer_steps
from specjax.train.vocab import labels_in_vocab, subset_logits


@dataclasses.dataclass(frozen=True)
class DFlashTrainConfig(DrafterTrainConfig):
    """DFlash training: `DrafterTrainConfig`'s fields (see there) plus the block loss's.

    Fields:
      anchors: W, anchor positions (blocks) drawn per sequence each step; rows with fewer valid
        positions pad with invalid anchors.
      gamma: decay of the position weights w_k = exp(-(k - 1) / gamma) of the block loss (7 for block 16).
      soft_labels: lam in [0, 1]: the loss is (1 - lam) x the cross entropy against the data's tokens (the
        paper's, lam = 0) + lam x KL(target || drafter) at the same positions and weights, the target's
        distribution at T = 1 over the draft vocabulary. A greedy answer's token says only the target's
        argmax; its distribution also says how sure it is, which a sampled round's acceptance
        (sum min(p, q)) and DDTree's tree (built from q) depend on. The batch carries the target's last layer
        for it (online: a forward to the last layer; a cache: one more cached layer).
    """

    anchors: int = 32
    gamma: float = 7.0
    soft_labels: float = 0.0


# ============================================================================ data


def make_dataset(target, prompts: list[list[int]], *, seq_len: int, max_new_tokens: int, batch_size: int = 64,
                 sampled_fraction: float = 0.5, seed: int = 0, progress: bool = True) -> dict[str, np.ndarray]:
    """Target-regenerated training sequences: {"tokens" int32[N, seq_len], "loss_mask" bool[N, seq_len],
    "temperature" float32[N] (each answer's: 0 greedy, 1 sampled)}.

    target: (cfg, params). Prompts are cut to their last `seq_len - max_new_tokens`
    tokens; every `1 / sampled_fraction`-th batch is sampled at temperature 1, the rest
    greedy (0.5 by default, as `specjax.train.data.DataRecipe`). Generation stops at the target's EOS (included
    in the response).
    """
    cfg, params = target
    keep = seq_len - max_new_tokens
    if keep < 1:
        raise ValueError(f"seq_len {seq_len} leaves no room for a prompt before {max_new_tokens} new tokens")
    prompts = [p[-keep:] for p in prompts if p]
    order = np.argsort([len(p) for p in prompts], kind="stable")  # similar lengths per batch: less padding work
    tokens = np.zeros((len(prompts), seq_len), np.int32)
    mask = np.zeros((len(prompts), seq_len), bool)
    temperature = np.zeros(len(prompts), np.float32)
    every = int(round(1 / sampled_fraction)) if sampled_fraction > 0 else 0
    t0 = time.time()
    batches = [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    for bi, idx in enumerate(batches):
        rows = [prompts[i] for i in idx]
        width = max(len(r) for r in rows)
        width = 1 << (width - 1).bit_length()  # a few padded widths -> a few compiles
        toks, lens = pad_prompts(rows, min(width, keep))
        sampling = Sampling(temperature=1.0) if every and bi % every == every - 1 else Sampling()
        out = generate_ar(params, cfg, toks, lens, max_new_tokens, sampling=sampling,
                          key=jax.random.key(seed * 100003 + bi), cache_slots=keep + max_new_tokens)
        gen, num = np.asarray(out.tokens), np.asarray(out.num_tokens)
        temperature[idx] = sampling.temperature
        for r, i in enumerate(idx):
            p = len(rows[r])
            tokens[i, :p] = rows[r]
            tokens[i, p:p + num[r]] = gen[r, :num[r]]
            mask[i, p:p + num[r]] = True
        if progress and (bi % 10 == 0 or bi == len(batches) - 1):
            print(f"  data: batch {bi + 1}/{len(batches)} ({time.time() - t0:.0f}s)", flush=True)
    return {"tokens": tokens, "loss_mask": mask, "temperature": temperature}


# ============================================================================ loss


def draw_anchors(key, loss_mask: jax.Array, num: int):
    """(anchors int32[B, W], valid bool[B, W]): W positions drawn uniformly without replacement
    from {a : m_a and m_{a+1}} per row, ascending; rows with fewer take what they have."""
    ok = loss_mask[:, :-1] & loss_mask[:, 1:]  # [B, S-1]
    u = jax.random.uniform(key, ok.shape)
    score = jnp.where(ok, u, -1.0)
    top, idx = jax.lax.top_k(score, num)  # the W largest uniforms among valid positions
    valid = top >= 0
    idx = jnp.where(valid, idx, ok.shape[1])  # invalid anchors sort last
    order = jnp.argsort(idx, axis=1)
    anchors = jnp.take_along_axis(idx, order, axis=1)
    valid = jnp.take_along_axis(valid, order, axis=1)
    return jnp.where(valid, anchors, 0).astype(jnp.int32), valid


def block_labels(tokens: jax.Array, loss_mask: jax.Array, anchors: jax.Array, valid: jax.Array, num: int):
    """(labels int32[B, W, num], ok bool[B, W, num]): draft i = 1 .. num of the block at anchor a
    is the token x_{a+i}; it counts iff a + i is in range, in the loss mask and the anchor valid."""
    s = tokens.shape[1]
    pos = anchors[..., None] + jnp.arange(1, num + 1)  # [B, W, num]
    pos_c = jnp.minimum(pos, s - 1)
    labels = jnp.take_along_axis(tokens[:, None, :], pos_c, axis=2)
    ok = (pos < s) & jnp.take_along_axis(loss_mask[:, None, :], pos_c, axis=2) & valid[..., None]
    return labels, ok


def weighted_block_ce(logits: jax.Array, labels: jax.Array, ok: jax.Array, valid: jax.Array, gamma: float,
                      vocab=None):
    """Position-decayed cross entropy of per-draft logits f32[B, W, L, C] against target-id labels [B, W, L]
    (C = V, or K with a draft vocabulary `vocab`: a label outside it is no class, so it leaves the CE
    and counts as a miss): (loss = sum_i w_i CE_i / sum_i w_i over valid in-vocabulary labels,
    w_i = exp(-(i-1)/gamma) (w_1 = 1), metrics {"acc": f32[L] per-position top-1 accuracy over valid
    labels, "tau": mean over valid anchors of 1 + the all-correct prefix length})."""
    cls, known = labels_in_vocab(labels, vocab)
    logits = logits.astype(jnp.float32)  # bfloat16 products (a mixed-precision step): the softmax in float32
    logp = jax.nn.log_softmax(logits, axis=-1)
    ce = -jnp.take_along_axis(logp, cls[..., None], axis=-1)[..., 0]
    w = jnp.exp(-jnp.arange(labels.shape[-1], dtype=jnp.float32) / gamma)
    weight = w * (ok & known)
    loss = jnp.sum(ce * weight) / jnp.maximum(jnp.sum(weight), 1.0)
    correct = (jnp.argmax(logits, axis=-1) == cls) & ok & known
    acc = jnp.sum(correct, axis=(0, 1)) / jnp.maximum(jnp.sum(ok, axis=(0, 1)), 1)
    prefix = jnp.sum(jnp.cumprod(correct, axis=-1), axis=-1)  # [B, W]
    tau = jnp.sum(jnp.where(valid, prefix + 1, 0)) / jnp.maximum(jnp.sum(valid), 1)
    return loss, {"acc": acc, "tau": tau}


def block_loss(dparams, dcfg: DFlashConfig, touter, tcfg, features, tokens, loss_mask, anchors, valid, gamma: float,
               vocab=None, teacher=None, soft_labels: float = 0.0):
    """Weighted same-position cross entropy of the drafter's blocks; returns (loss, metrics)
    (`weighted_block_ce`: per-position accuracy and the training-time tau estimate). With `teacher`, the
    target's last-layer output [B, S, E] of the same tokens, and `soft_labels` lam > 0 the loss is
    (1 - lam) CE + lam `weighted_block_kl` (module docstring, step 5)."""
    hidden = anchored_hidden(dparams, dcfg, touter, tcfg, features, tokens, anchors, valid)  # [B, W, bs, E]
    logits = subset_logits(touter, tcfg, hidden[:, :, 1:], vocab)  # [B, W, L, C]
    labels, ok = block_labels(tokens, loss_mask, anchors, valid, dcfg.block_size - 1)
    loss, metrics = weighted_block_ce(logits, labels, ok, valid, gamma, vocab)
    if teacher is None or not soft_labels:
        return loss, metrics
    # x_{a+k} (k = 1..L) is predicted by the target's state at a + k - 1: the anchor's own, then the block's
    pos = jnp.minimum(anchors[..., None] + jnp.arange(labels.shape[-1]), tokens.shape[1] - 1)  # [B, W, L]
    state = jnp.take_along_axis(teacher[:, None], pos[..., None], axis=2)  # [B, W, L, E]
    target_logits = subset_logits(touter, tcfg, final_norm(touter, tcfg, state), vocab)
    kl = weighted_block_kl(logits, jax.lax.stop_gradient(target_logits), ok, gamma)
    return (1 - soft_labels) * loss + soft_labels * kl, metrics


def weighted_block_kl(logits: jax.Array, target_logits: jax.Array, ok: jax.Array, gamma: float) -> jax.Array:
    """Position-decayed KL(p || q) of the target's logits f32[B, W, L, C] (p = their softmax over the C
    columns) from the drafter's (q), averaged like `weighted_block_ce` (weights w_i = exp(-(i-1)/gamma) over
    the valid positions `ok`: here every one, in the draft vocabulary or not, since p is defined there)."""
    logq = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    logp = jax.nn.log_softmax(target_logits.astype(jnp.float32), axis=-1)
    kl = jnp.sum(jnp.exp(logp) * (logp - logq), axis=-1)  # [B, W, L]
    weight = jnp.exp(-jnp.arange(ok.shape[-1], dtype=jnp.float32) / gamma) * ok
    return jnp.sum(kl * weight) / jnp.maximum(jnp.sum(weight), 1.0)


def teacher_layers(tc: DFlashTrainConfig, tcfg) -> tuple[int, ...]:
    """The target layers a step reads after the drafter's: the last one when the loss uses the target's
    distribution (`soft_labels` > 0), else none."""
    return (tcfg.num_layers - 1,) if getattr(tc, "soft_labels", 0) else ()


def feature_layers(dcfg) -> tuple[int, ...]:
    """The target layers a DFlash / Domino step reads, in the drafter's order."""
    return tuple(dcfg.target_layer_ids)


def make_step(dcfg, tcfg, opt, tc: DFlashTrainConfig, compute_dtype=None):
    """(step, evaluate) with `specjax.train.loop`'s contract (anchors re-drawn from the step's key); the
    loss's products in `compute_dtype` (None: the params' float32; `specjax.train.trainer.for_compute`)."""

    soft = tc.soft_labels > 0

    def loss_at(p, touter, batch, vocab, key):
        p, touter = for_compute((p, touter), compute_dtype)
        feats = batch["features"].astype(compute_dtype or jnp.float32)
        teacher = feats[:, :, -1] if soft else None  # the last slot: `teacher_layers`
        feats = feats[:, :, :-1] if soft else feats
        anchors, valid = draw_anchors(key, batch["loss_mask"], tc.anchors)
        return block_loss(p, dcfg, touter, tcfg, feats, batch["tokens"], batch["loss_mask"], anchors, valid,
                          tc.gamma, vocab, teacher, tc.soft_labels)

    return optimizer_steps(loss_at, opt)


def init_norm_from_target(touter: dict):
    """`init` for the loop: start the drafter's final RMSNorm at the target's final RMSNorm weight
    ([choice]; the reference initialises it to 1). The shared LM head was trained on the target's
    normed states: a unit-weight norm gives real models (SmolLM2: initial loss ~60 nats) huge
    logits. Targets with a LayerNorm (GPT-NeoX) keep the unit init."""
    def init(dparams: dict) -> dict:
        final = touter.get("final_norm", {})
        if set(final) != {"weight"} or final["weight"].shape != dparams["norm"]["weight"].shape:
            return dparams
        return {**dparams, "norm": {"weight": jnp.asarray(final["weight"], dparams["norm"]["weight"].dtype)}}

    return init


@dataclasses.dataclass(frozen=True)
class DFlashArch:
    """A DFlash drafter's architecture choices (flags of `python -m specjax.train dflash`).

    Fields:
      layers: draft decoder layers.
      block_size: B, positions per block (B - 1 drafts per pass).
      mask_token: the mask token id (None: the least frequent id of the data outside the special tokens).
      target_layers: target layer ids whose outputs the drafter reads (None: the method's rule).
    """

    layers: int = arch_field(1, "draft layers")
    block_size: int = arch_field(16, "block size")
    mask_token: int | None = arch_field(None, "mask token id (default: the least frequent id of the data outside "
                                        "the special tokens)", int)
    target_layers: tuple[int, ...] | None = arch_field(None, "comma-separated target layer ids (default: the "
                                                       "method's rule)", int_tuple)


def build_config(arch: DFlashArch, tcfg, mask_id: int, draft_vocab: int = 0, cls=DFlashConfig, **extra):
    """The drafter config of `arch` for target `tcfg` (the draft vocabulary is a separate table: unused here)."""
    return cls.for_target(tcfg, num_layers=arch.layers, target_layer_ids=arch.target_layers,
                          block_size=arch.block_size, mask_token_id=mask_id, **extra)


TRAINER = Trainer(kind="dflash", help="a DFlash block drafter (also the backbone DDTree drafts with)",
                  train_config=DFlashTrainConfig, arch=DFlashArch, build_config=build_config, make_step=make_step,
                  layers=lambda dcfg, tcfg: feature_layers(dcfg), drafter=DFlashDrafter,
                  init=lambda touter, tcfg, vocab: init_norm_from_target(touter), measured=("ddtree-8",),
                  teacher_layers=teacher_layers)

__all__ = ["DFlashArch", "DFlashTrainConfig", "TRAINER", "build_config", "make_dataset", "draw_anchors", "block_labels",
           "weighted_block_ce", "weighted_block_kl", "block_loss", "feature_layers", "teacher_layers", "make_step",
           "init_norm_from_target"]
