"""Training a DFlash drafter for a target (PAPER_NOTES 1.5; SpecForge's recipe at small scale).

Data (`make_dataset`): real prompts from the registry datasets' *train* splits (never the
evaluation prompts), each answered by the target itself (`generate_ar`: greedy, plus a
`sampled_fraction` at temperature 1), so the drafter learns the target's distribution.
Sequences are prompt + response, right padded to `seq_len`; the loss mask covers the
response tokens. Saved as `data.npz` + the exact recipe (`data.json`) in the run directory.

One training step (`make_step`, jitted), per sequence x_0..x_{S-1} with loss mask m:
  1. target forward (no gradient) -> features of the drafter's tapped layers, every position;
  2. anchors: W positions drawn uniformly without replacement from
     {a : m_a = 1 and m_{a+1} = 1} (re-drawn every step), sorted; rows with fewer valid
     positions pad with invalid anchors;
  3. the drafter under the training mask (`specjax.drafters.dflash.anchored_hidden`, the
     decoding functions themselves): block j = [x_{a_j}, m, ..., m] sees context features
     of positions < a_j only and its own block bidirectionally;
  4. same-position labels: block row k predicts x_{a_j + k} (k >= 1), valid iff in range and
     m = 1 there; loss = sum_k w_k CE / sum_k w_k over valid labels, w_k = exp(-(k-1)/gamma).
AdamW + linear warm-up + cosine decay + global-norm clipping (optax). The target's
embedding and LM head are frozen (they are not in the drafter's params at all).
Logged: loss, per-position accuracy, and the training-time tau estimate
(1 + the length of the all-correct prefix of each block, averaged over valid anchors).
Checkpoints every `ckpt_every` steps (`--resume`); `export` writes the float16 drafter
directory + `recipe.json` (data and training recipe, measured numbers).
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from specjax.drafters.dflash import anchored_hidden, target_outer
from specjax.models import causal_mask, forward_tapped, init_cache, save_checkpoint
from specjax.models.dflash import DFlashConfig
from specjax.models.model import project_to_vocab


@dataclasses.dataclass(frozen=True)
class DrafterTrainConfig:
    """The optimisation and logging fields every drafter's training shares (`train`, `make_optimizer`):
    AdamW with linear warm-up from 0, then cosine decay, after global-norm clipping (optax).

    Fields:
      steps: optimiser steps in total (the schedule's length; a resumed run continues to it).
      batch_size: sequences per step (one epoch = len(train) // batch_size steps, reshuffled per epoch).
      lr: peak learning rate, reached after the warm-up.
      warmup_frac: fraction of `steps` spent in the linear warm-up (at least 1 step).
      min_lr_ratio: the cosine decay's final learning rate as a fraction of lr (0 = decay to 0).
      weight_decay: AdamW's decoupled weight decay (0 = plain Adam).
      clip: global gradient-norm clipping threshold.
      log_every: steps between held-out evaluations / log records (also the train-loss averaging window).
      ckpt_every: steps between checkpoints (one is also written at the last step of a call).
      seed: seeds the drafter's init, the batch order and the per-step keys (e.g. anchor draws).
    """

    steps: int = 1200
    batch_size: int = 8
    lr: float = 1e-3
    warmup_frac: float = 0.04
    min_lr_ratio: float = 0.0
    weight_decay: float = 0.0
    clip: float = 1.0
    log_every: int = 50
    ckpt_every: int = 200
    seed: int = 0


@dataclasses.dataclass(frozen=True)
class DFlashTrainConfig(DrafterTrainConfig):
    """DFlash training: `DrafterTrainConfig`'s fields (see there) plus the block loss's.

    Fields:
      anchors: W, anchor positions (blocks) drawn per sequence each step; rows with fewer valid
        positions pad with invalid anchors.
      gamma: decay of the position weights w_k = exp(-(k - 1) / gamma) of the block loss (7 for block 16).
    """

    anchors: int = 32
    gamma: float = 7.0


# ============================================================================ data


def choose_mask_token(counts: np.ndarray, reserved: tuple[int, ...] = ()) -> int:
    """A token id that (almost) never occurs in the data: the least frequent id outside
    `reserved` (ties -> the highest id). The frozen target embedding of a never-seen token
    is a fixed vector the target never used, which is what DFlash's dedicated mask id is."""
    order = np.lexsort((-np.arange(len(counts)), counts))
    for i in order:
        if int(i) not in reserved:
            return int(i)
    raise ValueError("every token id is reserved")


def make_dataset(target, prompts: list[list[int]], *, seq_len: int, max_new_tokens: int, batch_size: int = 64,
                 sampled_fraction: float = 0.25, seed: int = 0, progress: bool = True) -> dict[str, np.ndarray]:
    """Target-regenerated training sequences: {"tokens" int32[N, seq_len], "loss_mask" bool[N, seq_len]}.

    target: (cfg, params). Prompts are cut to their last `seq_len - max_new_tokens`
    tokens; every `1 / sampled_fraction`-th batch is sampled at temperature 1, the rest
    greedy. Generation stops at the target's EOS (included in the response).
    """
    from specjax.decode import generate_ar
    from specjax.models import pad_prompts
    from specjax.sampling import Sampling

    cfg, params = target
    keep = seq_len - max_new_tokens
    if keep < 1:
        raise ValueError(f"seq_len {seq_len} leaves no room for a prompt before {max_new_tokens} new tokens")
    prompts = [p[-keep:] for p in prompts if p]
    order = np.argsort([len(p) for p in prompts], kind="stable")  # similar lengths per batch: less padding work
    tokens = np.zeros((len(prompts), seq_len), np.int32)
    mask = np.zeros((len(prompts), seq_len), bool)
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
        for r, i in enumerate(idx):
            p = len(rows[r])
            tokens[i, :p] = rows[r]
            tokens[i, p:p + num[r]] = gen[r, :num[r]]
            mask[i, p:p + num[r]] = True
        if progress and (bi % 10 == 0 or bi == len(batches) - 1):
            print(f"  data: batch {bi + 1}/{len(batches)} ({time.time() - t0:.0f}s)", flush=True)
    return {"tokens": tokens, "loss_mask": mask}


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


def weighted_block_ce(logits: jax.Array, labels: jax.Array, ok: jax.Array, valid: jax.Array, gamma: float):
    """Position-decayed cross entropy of per-draft logits f32[B, W, L, V] against labels [B, W, L]:
    (loss = sum_i w_i CE_i / sum_i w_i over valid labels, w_i = exp(-(i-1)/gamma) (w_1 = 1),
    metrics {"acc": f32[L] per-position top-1 accuracy, "tau": mean over valid anchors of
    1 + the all-correct prefix length})."""
    logp = jax.nn.log_softmax(logits, axis=-1)
    ce = -jnp.take_along_axis(logp, labels[..., None], axis=-1)[..., 0]
    w = jnp.exp(-jnp.arange(labels.shape[-1], dtype=jnp.float32) / gamma)
    weight = w * ok
    loss = jnp.sum(ce * weight) / jnp.maximum(jnp.sum(weight), 1.0)
    correct = (jnp.argmax(logits, axis=-1) == labels) & ok
    acc = jnp.sum(correct, axis=(0, 1)) / jnp.maximum(jnp.sum(ok, axis=(0, 1)), 1)
    prefix = jnp.sum(jnp.cumprod(correct, axis=-1), axis=-1)  # [B, W]
    tau = jnp.sum(jnp.where(valid, prefix + 1, 0)) / jnp.maximum(jnp.sum(valid), 1)
    return loss, {"acc": acc, "tau": tau}


def block_loss(dparams, dcfg: DFlashConfig, touter, tcfg, features, tokens, loss_mask, anchors, valid, gamma: float):
    """Weighted same-position cross entropy of the drafter's blocks; returns (loss, metrics)
    (`weighted_block_ce`: per-position accuracy and the training-time tau estimate)."""
    hidden = anchored_hidden(dparams, dcfg, touter, tcfg, features, tokens, anchors, valid)  # [B, W, bs, E]
    logits = project_to_vocab(touter, tcfg, hidden[:, :, 1:])  # [B, W, L, V]
    labels, ok = block_labels(tokens, loss_mask, anchors, valid, dcfg.block_size - 1)
    return weighted_block_ce(logits, labels, ok, valid, gamma)


def target_features(tparams, tcfg, dcfg: DFlashConfig, tokens):
    """Features [B, S, n, E] of the drafter's tapped layers (a causal target forward, no gradient)."""
    b, s = tokens.shape
    pos = jnp.broadcast_to(jnp.arange(s, dtype=jnp.int32), (b, s))
    _, _, feats = forward_tapped(tparams, tcfg, tokens, pos, causal_mask(b, s),
                                 init_cache(tcfg, b, s, jax.tree.leaves(tparams)[0].dtype), dcfg.target_layer_ids)
    return jax.lax.stop_gradient(feats)


def make_optimizer(tc: DFlashTrainConfig):
    warmup = max(1, int(tc.warmup_frac * tc.steps))
    schedule = optax.warmup_cosine_decay_schedule(0.0, tc.lr, warmup, max(tc.steps, warmup + 1),
                                                  end_value=tc.lr * tc.min_lr_ratio)
    opt = optax.chain(optax.clip_by_global_norm(tc.clip), optax.adamw(schedule, weight_decay=tc.weight_decay))
    return opt, schedule


def make_step(dcfg, tcfg, opt, tc: DFlashTrainConfig):
    @jax.jit
    def step(dparams, opt_state, tparams, tokens, loss_mask, key, step_index):
        feats = target_features(tparams, tcfg, dcfg, tokens)
        anchors, valid = draw_anchors(key, loss_mask, tc.anchors)

        def loss(p):
            return block_loss(p, dcfg, target_outer(tparams), tcfg, feats, tokens, loss_mask, anchors, valid, tc.gamma)

        (value, metrics), grads = jax.value_and_grad(loss, has_aux=True)(dparams)
        updates, opt_state = opt.update(grads, opt_state, dparams)
        return optax.apply_updates(dparams, updates), opt_state, value, metrics

    @jax.jit
    def evaluate(dparams, tparams, tokens, loss_mask, key):
        feats = target_features(tparams, tcfg, dcfg, tokens)
        anchors, valid = draw_anchors(key, loss_mask, tc.anchors)
        return block_loss(dparams, dcfg, target_outer(tparams), tcfg, feats, tokens, loss_mask, anchors, valid,
                          tc.gamma)

    return step, evaluate


# ============================================================================ loop


def init_norm_from_target(dparams: dict, tparams: dict) -> dict:
    """Start the drafter's final RMSNorm at the target's final RMSNorm weight ([choice]; the
    reference initialises it to 1). The shared LM head was trained on the target's normed
    states: a unit-weight norm gives real models (SmolLM2: initial loss ~60 nats) huge
    logits. Targets with a LayerNorm (GPT-NeoX) keep the unit init."""
    final = tparams.get("final_norm", {})
    if set(final) != {"weight"} or final["weight"].shape != dparams["norm"]["weight"].shape:
        return dparams
    return {**dparams, "norm": {"weight": jnp.asarray(final["weight"], dparams["norm"]["weight"].dtype)}}


def train(target, dcfg: DFlashConfig, data: dict, tc: DFlashTrainConfig, out: str | pathlib.Path,
          resume: bool = False, valid_rows: int = 64, stop_after: int | None = None,
          step_factory=None) -> tuple[dict, list]:
    """Train a drafter for `target` = (cfg, params) on `data` (make_dataset); returns (params, log).

    `step_factory(dcfg, tcfg, opt, tc) -> (step, evaluate)` builds the jitted update
    step(dparams, opt_state, tparams, tokens, loss_mask, key, step_index) and evaluation
    evaluate(dparams, tparams, tokens, loss_mask, key) (default: DFlash's `make_step`;
    EAGLE-3 and Domino pass their own), metrics {"acc": f32[L], "tau": scalar, any other
    scalars (logged as valid_<name>)}.

    The last `valid_rows` sequences are held out for the periodic evaluation. `stop_after`:
    run at most that many steps in this call, then checkpoint and return (a time-boxed run;
    `resume=True` continues on the same schedule, batches and anchors: batch and anchor draws
    are pure functions of (seed, step))."""
    from specjax.train.lm import _progress, init_or_resume, save_state

    tcfg, tparams = target
    dcfg.check_target(tcfg)
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    ckpt = out / "ckpt"
    tokens, mask = data["tokens"], data["loss_mask"]
    train_tok, train_mask = tokens[:-valid_rows], mask[:-valid_rows]
    val_tok, val_mask = jnp.asarray(tokens[-valid_rows:]), jnp.asarray(mask[-valid_rows:])
    opt, schedule = make_optimizer(tc)
    dparams, opt_state, start, log = init_or_resume(ckpt, dcfg, opt, tc.seed, resume)
    if start == 0:
        dparams = init_norm_from_target(dparams, tparams)
    n_params = int(sum(np.prod(x.shape) for x in jax.tree.leaves(dparams)))
    print(f"drafter: {n_params:,} params, {dcfg}; {len(train_tok)} train / {valid_rows} valid sequences", flush=True)
    step_fn, eval_fn = (step_factory or make_step)(dcfg, tcfg, opt, tc)
    bar = _progress(tc.steps, start)
    recent, t0 = [], time.time()
    n = len(train_tok)
    end = tc.steps if stop_after is None else min(tc.steps, start + stop_after)
    for s in range(start, end):
        rng = np.random.default_rng([tc.seed, s // max(1, n // tc.batch_size)])
        perm = rng.permutation(n)
        j = (s % max(1, n // tc.batch_size)) * tc.batch_size
        rows = perm[j:j + tc.batch_size]
        key = jax.random.fold_in(jax.random.key(tc.seed), s)
        dparams, opt_state, loss, metrics = step_fn(dparams, opt_state, tparams, jnp.asarray(train_tok[rows]),
                                                    jnp.asarray(train_mask[rows]), key, jnp.int32(s))
        recent = (recent + [float(loss)])[-tc.log_every:]
        bar.update(1)
        bar.set_postfix_str(f"loss {np.mean(recent):.3f} tau {float(metrics['tau']):.2f}", refresh=False)
        done = s + 1
        if done % tc.log_every == 0 or done == tc.steps:
            vloss, vm = eval_fn(dparams, tparams, val_tok, val_mask, jax.random.key(12345))
            rec = {"step": done, "train_loss": float(np.mean(recent)), "valid_loss": float(vloss),
                   "valid_tau_estimate": float(vm["tau"]), "valid_acc": [round(float(a), 4) for a in vm["acc"]],
                   "lr": float(schedule(done)), "seconds": round(time.time() - t0, 1),
                   **{f"valid_{k}": round(float(v), 4) for k, v in vm.items() if k not in ("acc", "tau")}}
            log.append(rec)
            bar.write(json.dumps(rec))
        if done % tc.ckpt_every == 0 or done in (tc.steps, end):
            save_state(ckpt, dcfg, dparams, opt_state, done, tc, log)
    bar.close()
    return dparams, log


def export(directory: str | pathlib.Path, dcfg: DFlashConfig, dparams, recipe: dict) -> pathlib.Path:
    """float16 drafter checkpoint (config.json + model.safetensors) + recipe.json."""
    directory = pathlib.Path(directory)
    save_checkpoint(directory, dcfg, dparams, dtype=np.float16)
    (directory / "recipe.json").write_text(json.dumps(recipe, indent=2) + "\n")
    return directory


__all__ = ["DrafterTrainConfig", "DFlashTrainConfig", "choose_mask_token", "make_dataset", "draw_anchors",
           "block_labels", "weighted_block_ce", "block_loss",
           "target_features", "make_optimizer", "make_step", "train", "export"]
