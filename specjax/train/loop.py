"""The drafter trainer every drafter kind shares: batches from cached features, resumable, observable, sharded.

    trainset = TrainSet.from_directories(data_dir, cache_dir, layers, seq_len=448)
    dparams, log = train((tcfg, touter), dcfg, trainset, tc, "runs/x", step_factory=make_step)

A step over a feature cache never runs the target's layers: the features it reads (`specjax.train.features`)
were computed once, so it costs the drafter's forward / backward and the (reduced) LM head only; an online step
(`online_steps`, no cache) runs the frozen target's forward over its batch first, and its held-out evaluations
read the fixed held-out set's features computed once (`_HeldOut`).
`touter` is the target's embedding, final norm and LM head (`specjax.models.model.outer_params`), frozen.

Step contract (`step_factory(dcfg, tcfg, opt, tc) -> (step, evaluate)`, both jitted):
  step(dparams, opt_state, touter, batch, vocab, key, step_index) -> (dparams, opt_state, loss, metrics)
  evaluate(dparams, touter, batch, vocab, key) -> (loss, metrics)  (the loop averages it over chunks
    of batch_size held-out rows: a whole held-out set's logits need not fit in memory)
batch: {"tokens" int32[B, S], "loss_mask" bool[B, S] (the response), "features" f16[B, S, n, E]}, or, packed
(`specjax.train.trainset.TrainSet.pack`, a kind that reads tokens only), "positions" and "segments" int32[B, S]
instead of "features";
vocab: None (the full vocabulary) or a `DraftVocabTables` (`specjax.train.vocab`); metrics:
{"acc": f32[L], "tau": scalar, other scalars}.

Determinism: the batch of step s is a pure function of (seed, s) (an epoch permutation seeded
with (seed, epoch), packed or not: `specjax.train.trainset`), every step key is
fold_in(key(seed), s), and a checkpoint holds params,
optimiser state, the step, the log and the wall seconds so far; so a run stopped at any
checkpoint and resumed ends bit-exactly where an uninterrupted run ends (tested).

Several devices: with `mesh` (`specjax.sharding.make_mesh`), batches are placed with the batch
axis on "data", the frozen target head vocab-parallel on "model" (`shard_params`), the drafter
and optimiser state replicated; the same jitted step runs (XLA inserts the collectives).

Several processes (`specjax.distributed`, a mesh over every process's devices): every process
runs `train` with the same arguments; each reads only its rows of every batch (its block of
the step's rows on "data", `distributed.local_rows`: the global batch is the one-process run's)
and the global batch is assembled with `jax.make_array_from_process_local_data`; the step and
optimiser state are the one-device step's. Process 0 alone writes checkpoints (all wait for it)
and logs; a resume reads the checkpoint on every process (`out` on a shared filesystem).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import pathlib
import platform
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import NamedSharding, PartitionSpec
from tqdm.auto import tqdm

from specjax.distributed import barrier, global_batch, is_main, local_rows
from specjax.models import init_params
from specjax.models.model import layer_features
from specjax.sharding import replicate, shard_params
from specjax.train.checkpoints import BEST_DIR, export, init_vocab_ids, load_best, load_state, save_state, warm_start
from specjax.train.trainer import for_compute
from specjax.train.trainset import ANSWERS, TrainSet

__all__ = ["DrafterTrainConfig", "SCHEDULES", "TrainSet", "make_optimizer", "wsd_decay_start", "online_features",
           "online_steps", "train", "export", "save_state", "load_state", "load_best", "best_record",
           "evaluations_since_best", "machine", "warm_start", "init_vocab_ids", "ANSWERS", "FIT_TIMED_STEPS", "SPLIT_REPS",
           "HELD_OUT_FEATURES_BYTES", "BEST_DIR"]

SCHEDULES = ("cosine", "wsd")  # `DrafterTrainConfig.schedule`
FIT_TIMED_STEPS = 10  # compiled steps timed to fit a time-boxed run's schedule to its deadline (`train`)


@dataclasses.dataclass(frozen=True)
class DrafterTrainConfig:
    """The optimisation and logging fields every drafter's training shares (`train`, `make_optimizer`):
    AdamW with linear warm-up from 0, then cosine decay (or warmup-stable-decay), after global-norm clipping (optax).

    Fields:
      steps: optimiser steps in total (the schedule's length; a resumed run continues to it).
      batch_size: rows per step: sequences, or packed rows of several (`TrainSet.pack`) (one epoch =
        len(train) // batch_size steps unpacked, reshuffled per epoch).
      lr: peak learning rate, reached after the warm-up.
      warmup_frac: fraction of `steps` spent in the linear warm-up (at least 1 step).
      warmup_steps: the warm-up in steps instead (0: `warmup_frac` of `steps`); runs of different lengths that
        must share their first steps (the branches of `specjax.train.scaling`'s one-run table) give this.
      schedule: "cosine" (warm-up, then cosine decay to min_lr_ratio * lr over the rest) or "wsd" (warm-up,
        lr held, then a linear decay to min_lr_ratio * lr over the last `decay_frac` of the steps: "Scaling Laws
        and Compute-Optimal Training beyond Fixed Training Durations", Hägele et al., arXiv 2405.18392, §3: a
        run of any shorter length is the long run's checkpoint at `wsd_decay_start` plus its own decay).
      decay_frac: the "wsd" schedule's final decay as a fraction of `steps` (at least one step).
      min_lr_ratio: the decay's final learning rate as a fraction of lr (0 = decay to 0).
      weight_decay: AdamW's decoupled weight decay (0 = plain Adam).
      clip: global gradient-norm clipping threshold.
      log_every: steps between held-out evaluations / log records (also the train-loss averaging window).
      ckpt_every: steps between checkpoints (one is also written at the last step of a call).
      seed: seeds the drafter's init, the batch order and the per-step keys (e.g. anchor draws).
      patience: early stopping on the held-out τ estimate: stop once this many held-out evaluations in a row
        (one every `log_every` steps) have not beaten the best one, and return (export) the best evaluation's
        weights, kept in the checkpoint's best/ (0: run every step and return the last weights).
    """

    steps: int = 1200
    batch_size: int = 8
    lr: float = 1e-3
    warmup_frac: float = dataclasses.field(default=0.04, metadata={"at_most": 1})
    warmup_steps: int = 0
    schedule: str = dataclasses.field(default="cosine", metadata={"choices": SCHEDULES})
    decay_frac: float = dataclasses.field(default=0.2, metadata={"at_most": 1})
    min_lr_ratio: float = dataclasses.field(default=0.0, metadata={"at_most": 1})
    weight_decay: float = 0.0
    clip: float = 1.0
    log_every: int = 50
    ckpt_every: int = 200
    seed: int = 0
    patience: int = 0


def wsd_decay_start(steps: int, decay_frac: float, warmup: int = 1) -> int:
    """The step at which a "wsd" schedule of `steps` steps starts its decay: `steps` less round(decay_frac *
    steps) (at least one decay step), never before the warm-up's end."""
    return max(warmup, steps - max(1, round(decay_frac * steps)))


def make_optimizer(tc: DrafterTrainConfig):
    """(optax optimiser, learning-rate schedule) of the config (class docstring)."""
    warmup = tc.warmup_steps or max(1, int(tc.warmup_frac * tc.steps))
    if tc.schedule == "wsd":
        decay_at = wsd_decay_start(tc.steps, tc.decay_frac, warmup)
        schedule = optax.join_schedules(
            [optax.linear_schedule(0.0, tc.lr, warmup), optax.constant_schedule(tc.lr),
             optax.linear_schedule(tc.lr, tc.lr * tc.min_lr_ratio, max(1, tc.steps - decay_at))], [warmup, decay_at])
    else:
        schedule = optax.warmup_cosine_decay_schedule(0.0, tc.lr, warmup, max(tc.steps, warmup + 1),
                                                      end_value=tc.lr * tc.min_lr_ratio)
    opt = optax.chain(optax.clip_by_global_norm(tc.clip), optax.adamw(schedule, weight_decay=tc.weight_decay))
    return opt, schedule


# ============================================================================ early stopping


def best_record(log: list) -> int | None:
    """Index of a training log's best held-out evaluation: the first with the highest finite τ estimate (None:
    no record has one). A later evaluation is better only when its (logged, rounded) estimate is higher."""
    taus = [r.get("valid_tau_estimate") for r in log]
    finite = [i for i, t in enumerate(taus) if t is not None and np.isfinite(t)]
    return max(finite, key=lambda i: (taus[i], -i)) if finite else None


def evaluations_since_best(log: list) -> int:
    """Held-out evaluations logged after the best one (all of them when none has a τ estimate)."""
    i = best_record(log)
    return len(log) if i is None else len(log) - 1 - i


# ============================================================================ loop


def machine() -> dict:
    """Where a run ran: platform, device kind and count, CPU cores."""
    d = jax.devices()[0]
    return {"platform": d.platform, "device_kind": d.device_kind, "devices": jax.device_count(),
            "cpu_cores": os.cpu_count(), "processor": platform.processor() or platform.machine()}


def _place_rows(batch_of, rows: np.ndarray, mesh):
    """The batch of sequence `rows` (`batch_of(rows) -> dict of host arrays [len(rows), ...]`) on the
    device(s): with a mesh, batch axis on "data", each process reading only its own block of rows."""
    if mesh is None:
        return jax.tree.map(jnp.asarray, batch_of(rows))
    sharding = NamedSharding(mesh, PartitionSpec("data"))
    return global_batch(batch_of(rows[local_rows(sharding, len(rows))]), sharding, len(rows))


def online_features(tcfg, layers: tuple[int, ...], target_dtype=None):
    """`with_features(target, batch) -> (touter, batch with "features" f16[B, S, n, E])`, target = (touter,
    the target's whole params): the forward an online step runs before the drafter's (`online_steps`), on
    its own for `train`'s `step_split`."""
    def with_features(target, batch):
        touter, tparams = target
        if target_dtype is not None:
            tparams = jax.tree.map(lambda x: x.astype(target_dtype), tparams)
        feats = layer_features(tparams, tcfg, batch["tokens"], layers).astype(jnp.float16)
        return touter, {**batch, "features": jax.lax.stop_gradient(feats)}

    return with_features


def online_steps(step_fn, eval_fn, tcfg, layers: tuple[int, ...], target_dtype=None):
    """The kind's (step, evaluate) with each batch's features computed inside the jitted call: one causal
    forward of the frozen target over the batch's tokens int32[B, S] (`layer_features`, the function the
    feature cache is filled with, cast to its float16), so a step reads tokens only. Their `touter` argument
    becomes (touter, target params). On an accelerator this replaces a cache of ~10 MB per sequence.

    `train` evaluates with this evaluate only when the held-out set's features are too large to keep (`_HeldOut`).

    target_dtype: run that forward with the target's params cast to it (bfloat16 on a GPU: the frozen
    target's products at the accelerator's fast rate; the drafter, its master weights and the optimizer
    state stay float32); None: the params' own dtype."""
    with_features = online_features(tcfg, layers, target_dtype)

    @jax.jit
    def step(dparams, opt_state, target, batch, vocab, key, step_index):
        touter, batch = with_features(target, batch)
        return step_fn(dparams, opt_state, touter, batch, vocab, key, step_index)

    @jax.jit
    def evaluate(dparams, target, batch, vocab, key):
        touter, batch = with_features(target, batch)
        return eval_fn(dparams, touter, batch, vocab, key)

    return step, evaluate


HELD_OUT_FEATURES_BYTES = 1 << 30  # an online run keeps its held-out set's target features when they fit this


class _HeldOut:
    """The held-out set as `_evaluate` reads it: whole chunks of `rows` sequences (all rows when fewer than one),
    placed on the device(s) at the first evaluation. An online run (`with_features`, `online_features`; `target`
    = (touter, the target's params)) computes their target features then, once, when they fit
    HELD_OUT_FEATURES_BYTES: the set is fixed, so every evaluation would otherwise rerun the frozen target's
    forward over it (64 held-out sequences in chunks of a step's 16: four steps' forwards every `log_every` steps); evaluations then run
    the kind's own `evaluate` on (touter, the cached features). Larger sets compute them in each evaluation, as a
    step does (`online_steps`' evaluate). `cached`: whether the features are kept (decided before any compute)."""

    def __init__(self, valid: dict, rows: int, mesh, target, with_features=None, feature_bytes: int = 0):
        n = len(valid["tokens"])
        self.starts = range(0, max(n - rows, 0) + 1, rows)
        used = min(n, len(self.starts) * rows)
        self.valid, self.rows, self.mesh, self.with_features = valid, rows, mesh, with_features
        self.cached = with_features is not None and used * feature_bytes <= HELD_OUT_FEATURES_BYTES
        self.target = target[0] if self.cached else target  # what the evaluation takes as its touter
        self._target, self._chunks = target, None

    def chunks(self) -> list[dict]:
        if self._chunks is None:
            n = len(self.valid["tokens"])
            chunk = lambda r: {k: v[r] for k, v in self.valid.items()}  # noqa: E731
            self._chunks = [_place_rows(chunk, np.arange(i, min(i + self.rows, n)), self.mesh) for i in self.starts]
            if self.cached:
                forward = jax.jit(lambda target, batch: self.with_features(target, batch)[1])
                self._chunks = [forward(self._target, c) for c in self._chunks]
        return self._chunks


def _evaluate(eval_fn, dparams, held_out: _HeldOut, vocab):
    """(loss, metrics) averaged over the held-out chunks (the logits of a whole held-out set at once, [rows, W, L,
    V], need not fit in memory); one fixed key."""
    parts = [eval_fn(dparams, held_out.target, c, vocab, jax.random.key(12345)) for c in held_out.chunks()]
    return jax.tree.map(lambda *xs: sum(xs) / len(xs), *parts)


def train(target, dcfg, trainset: TrainSet, tc: DrafterTrainConfig, out: str | pathlib.Path, *, step_factory,
          vocab=None, resume: bool = False, stop_after: int | None = None, mesh=None, init=None,
          progress: bool = True, deadline: float | None = None, target_params=None,
          target_dtype=None, fit_steps: bool = False, compute_dtype=None,
          step_split: bool = False) -> tuple[dict, list]:
    """Train a drafter; returns (params, log). target: (tcfg, touter) — the target's config and its
    outer params (`specjax.models.model.outer_params`: embedding, final norm, LM head); vocab: a
    `DraftVocabTables` or None.

    `stop_after`: run at most that many steps in this call, then checkpoint and return (`deadline`, a
    `time.time()`: stop at the first step that would start after it, likewise, one process only); `resume`
    continues from out/ckpt (same schedule, batches and keys: bit-exact). `init(dparams) ->
    dparams` adjusts a fresh drafter (e.g. its final norm from the target's). `mesh`: see the
    module docstring. `target_params`: the target's whole params, needed when `trainset` computes its
    features in the step (`TrainSet.online`), that forward in `target_dtype` (`online_steps`, the params cast
    once). Logs a record every `log_every` steps (train loss, held-out loss, τ estimate, per-position
    accuracy, lr, seconds, the evaluation's own seconds; online, on the held-out set's features computed at the
    first evaluation and kept when they fit HELD_OUT_FEATURES_BYTES: `_HeldOut`) and shows a progress bar with
    the ETA.

    `fit_steps` (with a `deadline`, a fresh run): the schedule's length `tc.steps` is replaced, once, by what
    the time left buys at the step time measured over `FIT_TIMED_STEPS` compiled steps (steps at a batch width
    not run before, which compile, excluded: the first, or each new width of grouped batches; a held-out
    evaluation falling inside the window counts too, so the estimate errs long and a run ends early rather
    than late; the step with the fitted schedule compiles once more for each width, paid for out of the time
    left: `_FitTimer`), so a time-boxed run ends its cosine decay at the deadline instead of being cut
    mid-schedule. The fitted length is kept in the checkpoint's train_config; a resumed run continues to it.

    `compute_dtype` (e.g. bfloat16 on an accelerator): the dtype of the step's products (the kind's
    `make_step(..., compute_dtype=)`); master weights and optimizer state stay float32.

    `step_split`: where a step's time goes, measured: at the first step of each batch width, the warm median
    seconds of `SPLIT_REPS` more calls of that step on its batch and, when the step computes the target's
    features itself (online), of that forward alone (`online_features`), printed as one line; the extra calls'
    outputs are dropped, so the run trains exactly as without it (its wall seconds grow). Not with `fit_steps`
    (the fit would count the extra calls as step time).

    `tc.patience` > 0 (early stopping): each held-out evaluation that beats the best so far is checkpointed with
    its weights (ckpt/best), the run stops once `patience` evaluations in a row have not, and the params
    returned are the best evaluation's (the last ones when no evaluation ran). Which evaluation is best is read
    from the log (`best_record`), so a resumed run stops where an uninterrupted one does."""
    tcfg, touter = target
    if step_split and fit_steps:
        raise ValueError("step_split times extra calls of the step, which fit_steps would count as step time: "
                         "give one of them")
    if hasattr(dcfg, "check_target"):  # a drafter reading the target (a draft LM was checked when built)
        dcfg.check_target(tcfg)
    pathlib.Path(out).mkdir(parents=True, exist_ok=True)
    ckpt = pathlib.Path(out) / "ckpt"
    fit = fit_steps and deadline is not None and not (resume and ckpt.exists())
    vocab_ids = None if vocab is None else np.asarray(vocab.ids)
    tc, opt, schedule, dparams, opt_state, start, log, seconds_before = _initial(dcfg, tc, ckpt, resume, init,
                                                                                 vocab_ids)
    online = trainset.features is None and bool(trainset.layers)  # a draft LM's batches need no features
    if online and target_params is None:
        raise ValueError("a TrainSet without a feature cache computes its features in the step: pass target_params")
    touter, dparams, opt_state, vocab = _placed(target, dparams, opt_state, vocab, mesh, online, target_params,
                                                compute_dtype, target_dtype)
    n_params = int(sum(np.prod(x.shape) for x in jax.tree.leaves(dparams)))
    dtype_arg = {} if compute_dtype is None else {"compute_dtype": compute_dtype}  # a kind without it still runs

    with_features = online_features(tcfg, trainset.layers) if online else None
    valid = trainset.valid_batch()
    feature_bytes = valid["tokens"].shape[1] * len(trainset.layers) * tcfg.hidden_size * 2  # float16, a sequence
    held_out = _HeldOut(valid, tc.batch_size, mesh, touter, with_features, feature_bytes)

    def steps_for(opt, tc):
        """The kind's jitted (step, evaluate) for this optimiser, computing the features when online (the
        evaluation's only when the held-out set's are not cached: `_HeldOut`)."""
        step_fn, eval_fn = step_factory(dcfg, tcfg, opt, tc, **dtype_arg)
        if not online:
            return step_fn, eval_fn
        step, evaluate = online_steps(step_fn, eval_fn, tcfg, trainset.layers)
        return step, (eval_fn if held_out.cached else evaluate)

    end = tc.steps if stop_after is None else min(tc.steps, start + stop_after)
    run = _Run(tc, schedule, *steps_for(opt, tc), dparams, opt_state, log, start, end)
    main = is_main()  # process 0 logs and writes the checkpoints (one process: always)
    bar = tqdm(total=tc.steps, initial=start, unit="step", disable=not (progress and main), mininterval=10,
               smoothing=0.05)
    say = bar.write if main else (lambda _: None)
    say(f"drafter: {n_params:,} params; {trainset.num_train} train / {trainset.valid_rows} held-out sequences; "
        f"steps {start} -> {end} of {tc.steps}")
    if deadline is not None and jax.process_count() > 1:
        raise ValueError("deadline stops one process on its own clock: with several processes use stop_after")
    t0 = time.time()  # this call's seconds, on top of the checkpoint's

    if run.tc.patience and resume and ckpt.exists():
        run.best_params = load_best(ckpt)
        run.stopped_early = json.loads((ckpt / "state.json").read_text()).get("stopped_early")

    def checkpoint(step: int) -> None:
        if main:
            save_state(ckpt, dcfg, run.dparams, run.opt_state, step, run.tc, run.log, seconds_before + time.time() - t0,
                       vocab_ids, fitted=run.fitted is not None, best_params=run.best_params,
                       stopped_early=run.stopped_early)

    def refit(fitted: int) -> None:  # the schedule's new length: a new optimiser (same state layout), its steps
        run.tc = dataclasses.replace(run.tc, steps=fitted)
        opt, run.schedule = make_optimizer(run.tc)  # the count carries on
        run.step_fn, run.eval_fn = steps_for(opt, run.tc)
        run.end = fitted if stop_after is None else min(fitted, start + stop_after)
        run.fitted = bar.total = fitted

    split = None if not step_split else _StepSplit(with_features, bool(trainset.layers))
    stopped = _run_steps(run, trainset, touter, vocab, mesh, bar, say, checkpoint, refit if fit else None, deadline,
                         lambda: seconds_before + time.time() - t0, held_out, split)
    if stopped is not None:
        if stopped % run.tc.ckpt_every:
            checkpoint(stopped)
        say(f"stopped at step {stopped} of {run.tc.steps}: the deadline passed (continue with resume)")
    bar.close()
    if run.tc.patience and run.best_params is not None:
        return run.best_params, run.log
    return jax.device_get(run.dparams), run.log


@dataclasses.dataclass
class _Run:
    """What `train`'s step loop advances: the config (its steps refitted once at most), the schedule, the jitted
    step and evaluation, the drafter's params and optimizer state, the log, the first and the last step of this
    call, and the fitted schedule length (None: not fitted)."""

    tc: DrafterTrainConfig
    schedule: object
    step_fn: object
    eval_fn: object
    dparams: dict
    opt_state: object
    log: list
    start: int
    end: int
    fitted: int | None = None
    best_params: dict | None = None  # early stopping: the best held-out evaluation's weights (host arrays)
    stopped_early: int | None = None  # early stopping: the step it stopped at


def _run_steps(run: _Run, trainset: TrainSet, touter, vocab, mesh, bar, say, checkpoint, refit, deadline,
               seconds, held_out: _HeldOut, split=None) -> int | None:
    """`train`'s steps from run.start to run.end: log records every `log_every` steps, checkpoints every
    `ckpt_every`, the schedule refitted to the deadline once (`refit`, None: never), each new batch width's
    step split (`split`, a `_StepSplit`; None: none); returns the step at which the deadline stopped it (None:
    it ran to the end, or early stopping ended it; `_early_stop`)."""
    recent = []
    t0, s, tc = time.time(), run.start, run.tc
    widths = functools.partial(trainset.widths_between, tc.batch_size, tc.seed)
    fit = _FitTimer(widths, t0) if refit is not None else None
    if run.stopped_early is not None:  # a resumed run that had stopped early: nothing left to do
        say(f"the run stopped early at step {run.stopped_early}; nothing to resume")
        return None
    while s < run.end:
        if deadline is not None and s > run.start and time.time() >= deadline:
            return s  # on time (a time-boxed run): the steps done so far are checkpointed by the caller
        rows = trainset.rows_at(s, tc.batch_size, tc.seed)
        width = trainset.batch_width(rows)
        batch = _place_rows(functools.partial(trainset.batch, width=width), rows, mesh)
        key = jax.random.fold_in(jax.random.key(tc.seed), s)
        run.dparams, run.opt_state, loss, metrics = run.step_fn(run.dparams, run.opt_state, touter, batch, vocab, key,
                                                                jnp.int32(s))
        if split is not None and width not in split.widths:
            say(split.line(run, touter, batch, vocab, key, jnp.int32(s), width))
        recent = (recent + [loss])[-tc.log_every:]  # device scalars: read back at a log step, not every step
        bar.update(1)
        if s == run.start:  # the first step compiled (jit compiles in the call): rate, ETA, elapsed count from here
            bar.reset()
            bar.n = bar.last_print_n = bar.initial = run.start + 1
            bar.refresh()
        done = s = s + 1
        if fit is not None and run.fitted is None:  # a few reads of the device's clock, before the schedule is fitted
            jax.block_until_ready(loss)
            if fit.add(width, time.time()):
                fitted, step_s, compile_s = fit.length(done, deadline)
                refit(fitted)
                tc = run.tc
                say(f"fitted the schedule to the deadline: {step_s * 1e3:.1f} ms a step after compiling "
                    f"({compile_s:.1f} s a width, {fit.widths} width{'s' * (fit.widths > 1)}) -> {fitted} steps")
        if done % tc.log_every == 0 or done == tc.steps:
            recent = [float(x) for x in recent]
            rec, valid_tau = _log_record(run.eval_fn, run.dparams, held_out, vocab, recent, done,
                                         float(run.schedule(done)), seconds())
            bar.set_postfix_str(f"loss {np.mean(recent):.3f} tau {float(metrics['tau']):.2f} valid tau "
                                f"{valid_tau:.2f}", refresh=False)  # this evaluation's, not the one before
            run.log.append(rec)
            say(json.dumps(rec))
            new_best = tc.patience > 0 and _early_stop(run, done, say)
        else:
            new_best = False
        if new_best or done % tc.ckpt_every == 0 or done == run.end:
            checkpoint(done)
            barrier(f"specjax-ckpt-{done}")  # every process returns / resumes after the checkpoint is whole
    return None


def _early_stop(run: _Run, done: int, say) -> bool:
    """After the held-out evaluation of step `done` (the log's last record): keep the weights when it is the best
    so far (True: checkpoint them now), or end the run at `done` when `patience` evaluations in a row have not
    beaten the best (`run.end`, `run.stopped_early`)."""
    since = evaluations_since_best(run.log)
    if since == 0:
        run.best_params = jax.device_get(run.dparams)
        return True
    if since >= run.tc.patience and done < run.tc.steps:  # (at its last step a run ends anyway: not early)
        i = best_record(run.log)
        best = None if i is None else run.log[i]
        run.end = run.stopped_early = done
        say(f"stopped early at step {done}: {since} held-out evaluations without beating "
            + (f"step {best['step']}'s τ estimate {best['valid_tau_estimate']}" if best else "a finite τ estimate")
            + " (its weights are the run's result)")
    return False


def _initial(dcfg, tc: DrafterTrainConfig, ckpt: pathlib.Path, resume: bool, init, vocab_ids):
    """Where a run starts: (tc, opt, schedule, dparams, opt_state, start step, log, seconds before) of a fresh
    drafter (`init` applied) or of the checkpoint a resumed run continues (its fitted schedule length kept;
    ValueError when it holds another config or draft vocabulary)."""
    if resume and ckpt.exists():  # a fitted schedule's length is the checkpoint's, not the config's
        saved = json.loads((ckpt / "state.json").read_text())
        if saved.get("fitted"):
            tc = dataclasses.replace(tc, steps=saved["train_config"]["steps"])
    opt, schedule = make_optimizer(tc)
    dparams = init_params(dcfg, jax.random.key(tc.seed), jnp.float32)
    opt_state = opt.init(dparams)
    start, log, seconds_before = 0, [], 0.0
    if resume and ckpt.exists():
        saved_cfg, dparams, opt_state, start, log, seconds_before, saved_ids = load_state(ckpt, opt_state)
        if saved_cfg != dcfg:
            raise ValueError(f"{ckpt} holds a drafter with config {saved_cfg}, not the requested {dcfg}")
        if (saved_ids is None) != (vocab_ids is None) or (saved_ids is not None
                                                          and not np.array_equal(saved_ids, vocab_ids)):
            raise ValueError(f"{ckpt} was trained with another draft vocabulary; resume with the same --draft-vocab")
    elif init is not None:
        dparams = init(dparams)
    return tc, opt, schedule, dparams, opt_state, start, log, seconds_before


def _placed(target, dparams, opt_state, vocab, mesh, online: bool, target_params, compute_dtype, target_dtype):
    """(the target's params as the step takes them, dparams, opt_state, vocab) on `mesh` (None: as they are):
    the drafter's state and the vocabulary replicated, the target's params sharded; its outer params cast once
    to `compute_dtype` (the step's own cast is then a no-op), and, `online` (features computed in the step),
    (outer, whole params in `target_dtype`)."""
    tcfg, touter = target
    if mesh is not None:
        dparams, opt_state = replicate(dparams, mesh), replicate(opt_state, mesh)
        touter = shard_params(touter, tcfg, mesh)
        target_params = None if not online else shard_params(target_params, tcfg, mesh)
        vocab = None if vocab is None else replicate(vocab, mesh)
    touter = for_compute(touter, compute_dtype)
    if online:
        if target_dtype is not None:  # half the memory in bfloat16, too
            target_params = jax.tree.map(lambda x: x.astype(target_dtype), target_params)
        touter = (touter, target_params)
    return touter, dparams, opt_state, vocab


SPLIT_REPS = 3  # timed calls of each part of a step in `train`'s step_split (after one warm-up call)


class _StepSplit:
    """`train`'s step_split: `line(...)` times a step at a batch width not split yet (`widths`), whole and, with
    `with_features` (`online_features`: the step computes them), the target's forward for its features alone."""

    def __init__(self, with_features, reads_features: bool):
        self.widths, self.reads_features, self.forward = set(), reads_features, None
        if with_features is not None:
            self.forward = jax.jit(lambda target, batch: with_features(target, batch)[1]["features"])

    def line(self, run: _Run, touter, batch, vocab, key, step_index, width: int) -> str:
        self.widths.add(width)
        step_s = _warm_median_s(lambda: run.step_fn(run.dparams, run.opt_state, touter, batch, vocab, key, step_index))
        text = f"step split at width {width}: the step {step_s:#.3g} s"
        if self.forward is None:
            return text + (" (its features read from the cache)" if self.reads_features else " (no target features)")
        forward_s = _warm_median_s(lambda: self.forward(touter, batch))
        return (text + f", of which the target's forward for the features {forward_s:#.3g} s ({forward_s / step_s:.0%})"
                f" and the rest {step_s - forward_s:#.3g} s")


def _warm_median_s(fn) -> float:
    """Median wall seconds (the loop's clock) of SPLIT_REPS calls of fn() (blocked), after one warm-up call."""
    jax.block_until_ready(fn())
    times = []
    for _ in range(SPLIT_REPS):
        t = time.time()
        jax.block_until_ready(fn())
        times.append(time.time() - t)
    return float(np.median(times))


class _FitTimer:
    """The step time a time-boxed run's schedule is fitted with (`train`'s `fit_steps`): each step's seconds,
    those of a step at a batch width the run had not run yet (it compiled) apart from the others, until
    FIT_TIMED_STEPS steps ran at a width already compiled. `widths_between(a, b)`: the distinct batch
    widths steps a..b-1 use (one, or a grouped set's few: `TrainSet.widths_between`); the refit schedule
    compiles each of them once more. `widths`: that count for the fitted schedule (set by `length`)."""

    def __init__(self, widths_between, start: float):
        self.widths_between, self.widths = widths_between, 0
        self.seen, self.steps, self.compiles, self.last = set(), [], [], start

    def add(self, width: int, now: float) -> bool:
        """Record the step that ended at `now` (it began when the previous one ended, the first at `start`);
        True once FIT_TIMED_STEPS steps are timed."""
        (self.steps if width in self.seen else self.compiles).append(now - self.last)
        self.seen.add(width)
        self.last = now
        return len(self.steps) >= FIT_TIMED_STEPS

    def length(self, done: int, deadline: float) -> tuple[int, float, float]:
        """(the schedule length the time left buys, seconds a step, seconds a compile): the mean of the timed
        steps; the time left less a compile (the largest excess of a compiling step over a step) for every width
        the rest of the run can meet, 3 % spare. Those widths are counted over the steps the whole time left would
        buy without compiles, a superset of the fitted schedule's, so the count errs high and the run ends early
        rather than late (a later epoch's batches may be grouped into a width the first epoch's were not)."""
        step_s = float(np.mean(self.steps))
        compile_s = max([t - step_s for t in self.compiles] + [0.0])
        now = time.time()
        self.widths = len(self.widths_between(done, done + 1 + int(max(deadline - now, 0.0) / step_s)))
        left = deadline - now - self.widths * compile_s
        return max(done + 1, done + int(0.97 * left / step_s)), step_s, compile_s


def _log_record(eval_fn, dparams, held_out: _HeldOut, vocab, recent: list, done: int, lr: float,
                seconds: float) -> tuple[dict, float]:
    """(the log record of step `done`, its held-out τ estimate): the mean of the `recent` train losses, and the
    held-out loss, τ estimate, per-position accuracy and the kind's other metrics (`_evaluate`), and the seconds
    that evaluation took ("eval_seconds"; the first includes its compile and, online, computing the held-out set's
    features: `_HeldOut`)."""
    jax.block_until_ready(dparams)  # the steps dispatched before it are not the evaluation's time
    t = time.time()
    vloss, vm = jax.device_get(_evaluate(eval_fn, dparams, held_out, vocab))
    eval_seconds = time.time() - t
    return {"step": done, "train_loss": round(float(np.mean(recent)), 5), "valid_loss": round(float(vloss), 5),
            "valid_tau_estimate": round(float(vm["tau"]), 4), "valid_acc": [round(float(a), 4) for a in vm["acc"]],
            "lr": lr, "seconds": round(seconds, 1), "eval_seconds": round(eval_seconds, 1),
            **{f"valid_{k}": round(float(v), 4) for k, v in vm.items() if k not in ("acc", "tau")}}, float(vm["tau"])
