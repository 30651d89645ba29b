"""One time-boxed command from a target to measured drafters: `python -m specjax.train recipe`.

    python -m specjax.train recipe --target smollm2-135m --minutes 10 --out DIR    # this machine
    python -m specjax.train recipe --target smollm2-135m --plan-only --device h100  # the plan, on any machine
    python -m specjax.train recipe --target zoo --minutes 1 --out DIR              # the embedded pair (CI)

Phases, each with its share of the budget (`RecipeConfig.shares`), each stopped on time:

1. **data**: the target's answers to the training prompts (`specjax.train.data.generate_shards`,
   the continuous engine), continuing the data directory's manifest (`--data`; default DIR/data); it
   stops after the first shard that ends past its deadline.
2. **train**: each drafter kind in turn (`specjax.train.run.run`, DFlash by default; `--kinds
   dflash,eagle3,draft-lm` adds an EAGLE-3 drafter and a draft LM for chains and DynaTree) for its share, the
   schedule sized from the plan's step-time estimate and cut by a deadline at a checkpoint; a second
   run with the same DIR resumes it (same recipe) towards the planned steps, on the data shards its first
   call read (`TrainPlan.data_shards`: the held-out rows stay held out).
3. **export**: the last good weights with `recipe.json` (data, compute, every command, checksums), and
   τ measured by decoding held-out prompts of the data.
4. **measure**: speedup and τ against AR on held-out prompts of the target's evaluation set
   (`specjax.bench.suite.run_suite`) of the methods each trained kind declares (`Trainer.measured`: DDTree
   for DFlash, a chain and DynaTree for a draft LM, ...), the drafter's greedy output checked against AR's.

It first prints its plan: the device, dtype, batch sizes, memory per phase, and the response tokens
and training steps the budget should buy, from measured rates where this project has measured the
device (`DEVICE_PROFILES`: this machine's CPU; the H100 lent on 2026-11-26) and from the published
bandwidth and FLOP/s elsewhere (said so in the plan). DIR/recipe.json records the plan, what each
phase did, and the measurements.

On an accelerator each training step computes the target's features itself (one forward of the frozen
target over its batch: `specjax.train.loop.online_steps`, no feature cache); on a CPU the cache is built
once and memory-mapped; on an accelerator the target's forward and the drafter's products in the step
run in bfloat16 (float32 master weights and optimizer state).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import pathlib
import time

import jax

from specjax.bench.suite import BenchPlan, bench_models, run_suite
from specjax.pipeline import MODELS, model_config, model_entry
from specjax.train.data import DataRecipe, generate_shards, load_target, read_manifest_file
from specjax.train.run import TRAINERS, TrainPlan, run

__all__ = ["DEVICE_PROFILES", "DeviceProfile", "RecipeConfig", "plan", "run_recipe"]


@dataclasses.dataclass(frozen=True)
class DeviceProfile:
    """What the plan knows about a device.

    Fields:
      kind: "cpu", "gpu" or "tpu".
      name: its model.
      device_kind: the part of jax's `device_kind` that names it.
      memory_gib: device memory (host memory for a CPU).
      bandwidth_gbs: memory bandwidth, GB/s.
      tflops: dense bfloat16 matrix TFLOP/s (float32 for a CPU).
      data_pool: the data engine's pool (rows) on it.
      data_tokens_per_s: response tokens/s of the data engine measured at that pool (None: not measured:
        the plan scales the H100's by bandwidth).
      step_s: measured seconds per DFlash training step of the SmolLM2 recipe at `step_layers` drafter layers
        and `step_batch` sequences (None: estimated from FLOP/s); other sizes scale it by their products.
      step_layers: the drafter layers of the measured step.
      step_batch: the sequences of the measured step.
      data_compile_s: seconds the data engine's first shard spends compiling its programs (measured; the plan
        expects tokens only from the time after them).
      source: where the figures come from.
    """

    kind: str
    name: str
    device_kind: str
    memory_gib: float
    bandwidth_gbs: float
    tflops: float
    data_pool: int
    step_layers: int = 1
    step_batch: int = 8
    data_tokens_per_s: float | None = None
    step_s: float | None = None
    data_compile_s: float = 0.0
    source: str = ""


DEVICE_PROFILES = {
    "cpu-2": DeviceProfile("cpu", "2 x86-64 cores", "cpu", memory_gib=24, bandwidth_gbs=35.7, tflops=0.2, data_pool=128,
                           data_tokens_per_s=97.0, step_s=1.0, step_layers=1, step_batch=8, data_compile_s=90.0,
                           source="measured here: data engine 97 response tok/s alone (pool 128) after ~90 s of "
                                  "compiles, a one-layer SmolLM2 DFlash step 1.0 s (zoo/TRAINING.md), bandwidth 35.7 "
                                  "GB/s (bench-device)"),
    "h100": DeviceProfile("gpu", "NVIDIA H100 80GB HBM3", "H100", memory_gib=80, bandwidth_gbs=3350, tflops=989,
                          data_pool=512, data_tokens_per_s=16_400.0, step_s=0.0388, step_layers=3, step_batch=32,
                          data_compile_s=165.0,
                          source="measured 2026-11-26 (docs/results.md): the data engine 14.8-16.6k response tok/s "
                                 "(pool 512, float32), after 165 s of compiles in its first shard (171.8 s for 111,161 "
                                 "tokens, the programs compiled as they came; --precompile compiles them in threads: "
                                 "not measured yet); a 3-layer SmolLM2 DFlash step of 32 sequences with online "
                                 "bfloat16 target features 38.8 ms; bandwidth and FLOP/s published"),
    "h200": DeviceProfile("gpu", "NVIDIA H200", "H200", memory_gib=141, bandwidth_gbs=4800, tflops=989, data_pool=512,
                          data_tokens_per_s=None, step_s=0.0388, step_layers=3, step_batch=32, data_compile_s=165.0,
                          source="published bandwidth and FLOP/s; the data rate scaled from the H100's by bandwidth, "
                                 "its compiles and the training step the H100's (not measured on an H200)"),
}


@dataclasses.dataclass(frozen=True)
class RecipeConfig:
    """A recipe run (`python -m specjax.train recipe`'s flags are made from these fields: `specjax.cli.plans`).

    Fields:
      target: zoo | smollm2-135m | an HF checkpoint directory.
      out: the run directory (DIR): data/, runs/, the exported drafters, recipe.json; an existing one is continued.
      minutes: the whole budget.
      shares: the (data, train, measure) fractions of it, comma-separated on the command line.
      kinds: drafter kinds to train, in turn (`specjax.train.run.TRAINERS`), comma-separated on the command line.
      data: the data directory to continue (None: DIR/data); an existing one is continued with its own recipe.
      device: a `DEVICE_PROFILES` key to plan for, with the plan only (None: this machine's).
      eval_prompts: held-out prompts of the data decoded at export (τ).
      measure_prompts: evaluation prompts of the speedup measurement (after one warm-up prompt).
      steps: training steps per kind (None: what the plan expects the budget to buy).
      prompt_order: a prompt-order file (`python -m specjax.train data --write-prompt-order`) for a machine that
        cannot reach the package registry (None: the registry's sources).
    """

    target: str = "smollm2-135m"
    out: str = "recipe-run"
    minutes: float = 10.0
    shares: tuple[float, float, float] = (0.4, 0.5, 0.1)
    kinds: tuple[str, ...] = ("dflash",)
    data: str | None = None
    device: str | None = dataclasses.field(default=None, metadata={"choices": tuple(sorted(DEVICE_PROFILES))})
    eval_prompts: int = 4
    measure_prompts: int = 3
    steps: int | None = None
    prompt_order: str | None = dataclasses.field(default=None, metadata={"metavar": "FILE"})

    def check(self) -> None:
        """Raise ValueError naming the first bad field (nothing loaded)."""
        if not (isinstance(self.minutes, (int, float)) and math.isfinite(self.minutes) and self.minutes > 0):
            raise ValueError(f"minutes must be a finite number > 0, got {self.minutes!r}")
        if len(self.shares) != 3 or any(not s >= 0 for s in self.shares) or not 0.99 <= sum(self.shares) <= 1.01:
            raise ValueError(f"shares must be three fractions >= 0 summing to 1 (data, train, measure), got {self.shares}")
        unknown = [k for k in self.kinds if k not in TRAINERS]
        if unknown or not self.kinds:
            raise ValueError(f"kinds {list(self.kinds)}: unknown {unknown or 'none given'}; the kinds are "
                             f"{', '.join(TRAINERS)}")
        if self.device is not None and self.device not in DEVICE_PROFILES:
            raise ValueError(f"device {self.device!r}: plan for one of {', '.join(DEVICE_PROFILES)}, or leave it out "
                             f"for this machine")
        if self.target not in MODELS and not pathlib.Path(self.target, "config.json").is_file():
            raise ValueError(f"target {self.target!r}: give one of {', '.join(MODELS)} or a checkpoint directory")
        for name in ("eval_prompts", "measure_prompts"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.steps is not None and self.steps < 1:
            raise ValueError(f"steps must be >= 1, got {self.steps}")


def _target_config(target: str):
    """The target's config without its weights (the plan may run on a machine that never loads them): the
    catalogue entry's (`specjax.pipeline.model_config`)."""
    return model_config(target)


def this_device() -> DeviceProfile:
    """The profile of the machine this runs on: a measured one when its kind matches, else a plain one."""
    d = jax.devices()[0]
    if d.platform == "cpu":
        cores = os.cpu_count() or 1
        base = DEVICE_PROFILES["cpu-2"]
        return dataclasses.replace(base, name=f"{cores} cores ({d.device_kind})",
                                   data_tokens_per_s=base.data_tokens_per_s * cores / 2, step_s=base.step_s * 2 / cores,
                                   source=base.source + f"; scaled to {cores} cores" if cores != 2 else base.source)
    for profile in DEVICE_PROFILES.values():
        if profile.kind == "gpu" and profile.device_kind in d.device_kind:
            return profile
    return DeviceProfile(d.platform, d.device_kind, d.device_kind, 16, 1000, 100, 256,
                         source="unknown device: rough defaults")


def _train_batch(dev: DeviceProfile, cfg, seq_len: int) -> int:
    """Sequences per training step: 8 on a CPU (the measured recipe); on an accelerator the largest power of
    two up to 32 (the H100 run's) whose online step fits in a quarter of the device's memory: the frozen
    target's bfloat16 activations for B x S tokens (~ 16 hidden-size vectors a layer, kept for no backward:
    the features are stopped) plus the drafter's logits over the draft vocabulary at B x anchors x block."""
    if dev.kind == "cpu":
        return 8
    per_row = seq_len * cfg.hidden_size * 16 * 2 + 32 * 8 * 8192 * 4 * 3
    fit = int(dev.memory_gib * 2 ** 30 / 4 // per_row)
    return max(1, min(32, 2 ** max(0, fit.bit_length() - 1)))


def _recipe_defaults(target: str, cfg, dev: DeviceProfile) -> dict:
    """The data recipe, drafter architecture and training sizes of a target: the committed SmolLM2 recipe
    (a 3-layer block-8 DFlash drafter, the zoo's: docs/results.md), a small one for the embedded pair and
    other tiny models. The drafter's target layers follow the method's rule for the target's depth."""
    entry = model_entry(target)
    tiny = cfg.hidden_size < 512
    data = (dict(max_new_tokens=48, max_prompt_tokens=48, chat=False) if tiny
            else dict(max_new_tokens=256, max_prompt_tokens=192, chat=entry.dataset_chat))
    arch = dict(layers=1, block_size=8) if tiny else dict(layers=3, block_size=8)
    train = (dict(batch_size=4, anchors=4, gamma=4.0, lr=1e-3, log_every=10, ckpt_every=10) if tiny else
             dict(batch_size=_train_batch(dev, cfg, 448), anchors=32, gamma=4.0, lr=8e-4, log_every=100,
                  ckpt_every=100, patience=5))  # early stopping: the 9,552-step run's held-out loss rose after 5,000
    return {"data": data, "arch": arch, "train": train, "seq_len": 96 if tiny else 448,
            "valid_rows": 4 if tiny else 64, "draft_vocab": 0 if tiny else 8192}


def _drafter_params(cfg, arch: dict) -> int:
    """Parameters of a DFlash drafter of `arch` for `cfg` (its layers: attention + SwiGLU, norms ignored)."""
    e = cfg.hidden_size
    per_layer = 4 * e * e + 3 * e * getattr(cfg, "intermediate_size", 4 * e)
    return arch["layers"] * per_layer + len(arch.get("target_layers") or (0, 0, 0)) * e * e


def plan(cfg: RecipeConfig) -> dict:
    """What the budget should buy, before anything loads: device, dtype, batch sizes, memory per phase,
    expected response tokens and steps, and where each figure comes from."""
    cfg.check()
    dev = DEVICE_PROFILES[cfg.device] if cfg.device else this_device()
    tcfg = _target_config(cfg.target)
    d = _recipe_defaults(cfg.target, tcfg, dev)
    seconds = cfg.minutes * 60
    data_s, train_s, measure_s = (seconds * s for s in cfg.shares)
    pool = dev.data_pool if tcfg.hidden_size >= 512 else min(dev.data_pool, 32)
    slots = d["data"]["max_prompt_tokens"] + d["data"]["max_new_tokens"] + 1
    kv_per_row = tcfg.num_layers * 2 * getattr(tcfg, "num_kv_heads", tcfg.num_heads) * (tcfg.hidden_size // tcfg.num_heads) * 4 * slots
    weights = 4 * (tcfg.vocab_size * tcfg.hidden_size + tcfg.num_layers * 12 * tcfg.hidden_size ** 2)
    rate = dev.data_tokens_per_s
    rate_source = "measured"
    if rate is None:
        rate = DEVICE_PROFILES["h100"].data_tokens_per_s * dev.bandwidth_gbs / DEVICE_PROFILES["h100"].bandwidth_gbs
        rate_source = "the H100's measured rate scaled by bandwidth"
    compile_s = dev.data_compile_s
    if tcfg.hidden_size < 512:  # a tiny target: the engine is dispatch-bound, ~20x SmolLM2's rate on a CPU
        rate, rate_source = rate * 20, rate_source + ", x20 for a tiny target (estimate)"
        compile_s = min(compile_s, 10.0)  # the zoo pair's first shard compiled in 8-9 s on this CPU
    drafter = _drafter_params(tcfg, d["arch"])
    t = d["train"]
    tokens_per_step = t["batch_size"] * t["anchors"] * d["arch"]["block_size"]
    step_s, step_source = dev.step_s, "measured"
    if step_s is not None and (d["arch"]["layers"], t["batch_size"]) != (dev.step_layers, dev.step_batch):
        step_s *= (t["batch_size"] / dev.step_batch) * ((d["arch"]["layers"] + 1) / (dev.step_layers + 1))
        step_source = (f"measured at {dev.step_layers} layers x {dev.step_batch} sequences, scaled by batch and by "
                       f"layers + 1 (the head and the features' fusion count about one layer)")
    if step_s is None or tcfg.hidden_size < 512:
        head = (d["draft_vocab"] or tcfg.vocab_size) * tcfg.hidden_size
        flops = 6 * (drafter + head) * tokens_per_step
        step_s = max(flops / (0.3 * dev.tflops * 1e12), 0.05)
        step_source = ("estimated: 6 x params x tokens at 30 % of peak FLOP/s, at least 50 ms (the host assembles "
                       "each batch from the memory-mapped feature cache: ~16 MB a step for SmolLM2)")
    steps = cfg.steps or max(1, int(train_s / len(cfg.kinds) / step_s))
    features = t["batch_size"] * d["seq_len"] * (len(d["arch"].get("target_layers") or (1, 3)) + 1) * tcfg.hidden_size * 2
    return {
        "device": {"kind": dev.kind, "name": dev.name, "memory_gib": dev.memory_gib, "source": dev.source,
                   "planned_for": cfg.device or "this machine"},
        "dtype": ("bfloat16 for the frozen target's forward and the drafter's products in each step; float32 "
                  "master weights and optimizer state" if dev.kind != "cpu"
                  else "float32 (target, drafter, optimizer state)"),
        "features": ("computed in each training step (online)" if dev.kind != "cpu"
                     else "a float16 feature cache, built once and memory-mapped"),
        "budget_s": {"data": round(data_s), "train": round(train_s), "measure": round(measure_s)},
        "data": {**d["data"], "pool": pool, "memory_gib": round((pool * kv_per_row + weights) / 2 ** 30, 2),
                 "response_tokens_per_s": round(rate), "rate_source": rate_source,
                 "compile_s": compile_s, "expected_response_tokens": int(rate * max(0.0, data_s - compile_s))},
        "train": {"kinds": list(cfg.kinds), "arch": d["arch"], **t, "seq_len": d["seq_len"], "valid_rows": d["valid_rows"],
                  "draft_vocab": d["draft_vocab"], "drafter_params": drafter,
                  "memory_gib": round((16 * drafter + features + weights) / 2 ** 30, 2),
                  "step_s": round(step_s, 4), "step_source": step_source, "steps_per_kind": steps},
    }


def _data_phase(cfg: RecipeConfig, the_plan: dict, data_dir: pathlib.Path, deadline: float, log) -> dict:
    """Phase 1: the target's answers into `data_dir` (continuing its manifest) until `deadline`; what it made."""
    tcfg, tparams, enc, _ = load_target(cfg.target, chat=the_plan["data"]["chat"])
    existing = read_manifest_file(data_dir)
    d = the_plan["data"]
    recipe = (DataRecipe(**{**existing["recipe"], "weights": tuple(sorted(existing["recipe"]["weights"].items())),
                            "batch_size": d["pool"]}) if existing else
              DataRecipe(target=cfg.target, max_new_tokens=d["max_new_tokens"], max_prompt_tokens=d["max_prompt_tokens"],
                         batch_size=d["pool"], chat=enc.chat))
    before = (existing or {}).get("totals", {}).get("response_tokens", 0)
    t0 = time.time()
    manifest = generate_shards((tcfg, tparams), enc, recipe, data_dir, response_tokens=before + 10 ** 12,
                               shard_batches=1, progress=False, deadline=deadline, prompt_order=cfg.prompt_order,
                               precompile="auto")  # every program compiled before the first shard on an accelerator
    made = manifest["totals"]["response_tokens"] - before
    log(f"data: {made:,} response tokens in {time.time() - t0:.0f} s ({manifest['totals']['response_tokens']:,} in "
        f"{data_dir})")
    return {"directory": str(data_dir), "response_tokens_before": before, "response_tokens_made": made,
            "seconds": round(time.time() - t0, 1), "shards": len(manifest["shards"]),
            "response_tokens": manifest["totals"]["response_tokens"]}


def _train_kind(cfg: RecipeConfig, t: dict, kind: str, data_dir: pathlib.Path, kind_end: float, log) -> dict:
    """Phases 2 and 3 for one kind: trained until `kind_end` (resumed when its run directory has a checkpoint),
    exported with its measured τ; what it did."""
    out = pathlib.Path(cfg.out)
    trainer = TRAINERS[kind]
    arch_fields = {f.name for f in dataclasses.fields(trainer.arch)}
    arch = trainer.arch(**{k: v for k, v in t["arch"].items() if k in arch_fields})
    fields = {f.name for f in dataclasses.fields(trainer.train_config)}
    tc = trainer.train_config(**{k: v for k, v in {**t, "steps": t["steps_per_kind"]}.items() if k in fields})
    # the recipe's step count is the plan's: a resumed run keeps the first run's schedule
    run_dir = out / "runs" / kind
    resume = (run_dir / "ckpt").exists()
    export_dir = out / f"{cfg.target.replace('/', '_')}-{kind}" if cfg.target in MODELS else out / kind
    # the feature cache (CPU path) lives in the run: a shared one is keyed by the data's first shard, and a
    # time-boxed run's data may hold fewer shards than another run's with the same first one
    plan_ = TrainPlan(data=str(data_dir), out=str(run_dir), target=cfg.target, export=str(export_dir),
                      cache=str(out / "runs" / "features"),
                      resume=resume, seq_len=t["seq_len"], valid_rows=t["valid_rows"],
                      draft_vocab=t["draft_vocab"], eval_prompts=cfg.eval_prompts,
                      minutes=max((kind_end - time.time()) / 60, 1e-3), fit_steps=cfg.steps is None,
                      command=f"python -m specjax.train recipe --target {cfg.target} --minutes {cfg.minutes} "
                              f"--out {cfg.out}")
    t0 = time.time()
    result = run(kind, plan_, arch, tc)  # its time box ends at kind_end
    state = json.loads((run_dir / "ckpt" / "state.json").read_text())
    log(f"{kind}: {state['step']} of {tc.steps} steps in {time.time() - t0:.0f} s -> {result['export']}")
    return {"steps_done": state["step"], "steps_planned": tc.steps,
            "steps_fitted": state["train_config"]["steps"] if state.get("fitted") else None,
            "seconds": round(time.time() - t0, 1), "export": str(result["export"]),
            "stopped_by_deadline": (state["step"] < state["train_config"]["steps"]
                                    and state.get("stopped_early") is None),
            "stopped_early_at": state.get("stopped_early"),
            "measured_tau": json.loads((pathlib.Path(result["export"]) / "recipe.json").read_text())["measured_tau"]}


def _measure_phase(cfg: RecipeConfig, exports: dict, log) -> dict:
    """Phase 4: each trained kind's own methods (`Trainer.measured`) against AR on the target's held-out
    evaluation prompts, its export passed as what they need (`Trainer.need`: a draft LM as the draft, a drafter
    reading the target as its reader kind)."""
    t0 = time.time()
    methods = ["ar"] + [m for kind in exports for m in TRAINERS[kind].measured]
    passed = {TRAINERS[kind].need: str(where) for kind, where in exports.items()}
    models = bench_models(cfg.target, draft=passed.pop("draft", None), **passed)
    entry = model_entry(cfg.target)
    suite = run_suite(BenchPlan(methods=tuple(methods), datasets=(entry.held_out,), num_prompts=cfg.measure_prompts + 1,
                                warmup=1, max_new_tokens=64, prompt_len=64, progress=False, ttft=False),
                      models, log=None)
    results = next(iter(suite.per_dataset.values()))
    for r in results:
        log(f"measure: {r.method}: τ {r.tokens_per_iteration:.2f}, speedup {r.speedup or 1:.2f}x, "
            f"{'agrees with AR' if not r.mismatches else 'MISMATCH'}")
    return {"dataset": entry.held_out, "prompts": cfg.measure_prompts, "seconds": round(time.time() - t0, 1),
            "methods": {r.method: {"tau": round(r.tokens_per_iteration, 3),
                                   "speedup": r.speedup and round(r.speedup, 3), "agrees_with_ar": not r.mismatches}
                        for r in results}}


def run_recipe(cfg: RecipeConfig, log=print) -> dict:
    """Run every phase on time (module docstring); returns (and writes to DIR/recipe.json) the plan, what
    each phase did and the measurements."""
    the_plan = plan(cfg)
    out = pathlib.Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    log("plan: " + json.dumps(the_plan, indent=1))
    start = time.time()
    budget = cfg.minutes * 60
    data_end = start + budget * cfg.shares[0]
    train_end = data_end + budget * cfg.shares[1]
    report = {"config": dataclasses.asdict(cfg), "plan": the_plan, "phases": {}}
    data_dir = pathlib.Path(cfg.data or out / "data")
    report["phases"]["data"] = _data_phase(cfg, the_plan, data_dir, data_end, log)
    report["phases"]["train"], exports = {}, {}
    for i, kind in enumerate(cfg.kinds):  # each kind gets an equal share of the training time left
        kind_end = time.time() + (train_end - time.time()) / (len(cfg.kinds) - i)
        report["phases"]["train"][kind] = _train_kind(cfg, the_plan["train"], kind, data_dir, kind_end, log)
        exports[kind] = report["phases"]["train"][kind]["export"]
    report["phases"]["measure"] = _measure_phase(cfg, exports, log)
    report["wall_s"] = round(time.time() - start, 1)
    (out / "recipe.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    return report
