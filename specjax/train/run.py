"""Train (and export) one drafter kind from a data directory: `run(kind, plan, arch, train_config)`.

    from specjax.train.run import TRAINERS, TrainPlan, run
    t = TRAINERS["dflash"]
    run("dflash", TrainPlan(target="zoo", data=DATA, out=RUN, export=DIR), t.arch(layers=1, block_size=8),
        t.train_config(steps=400, batch_size=8))

`TRAINERS` holds every kind's `Trainer` record (`specjax.train.trainer`): the `TRAINER` of each module of
`specjax.train` and of each module added from outside the package (`specjax.declared`). The target's features for the data are computed once into the plan's
`cache` (default: a directory under `$SPECJAX_CACHE/features` named by the target's checksum and the
data's first shard; only missing layers, and the shards the data gained since, are computed) and
memory-mapped by every step. `draft_vocab` K restricts the drafter to the K most frequent response tokens
(0: the full vocabulary). `mesh` (data, model) runs the same step over data x model devices. `export`
writes the float16 drafter, its config.json and recipe.json (data, compute, the log, every command of the
run, and τ measured by decoding `eval_prompts` held-out prompts of the data).

A run directory remembers its recipe (`run.json`: the plan's recipe fields, the architecture, the
training config, every command): `resume` with any of them changed is refused, naming the fields, unless
`override` lists them (recorded too).
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import time

import jax
import jax.numpy as jnp
import numpy as np

from specjax.atomic import write_bytes
from specjax.data.assets import cache_root, sha256_file
from specjax.declared import Registry
from specjax.decode import generate
from specjax.distributed import barrier, is_main
from specjax.models import pad_prompts
from specjax.models.draft_vocab import with_draft_vocab
from specjax.models.model import outer_params
from specjax.sampling import Sampling
from specjax.sharding import make_mesh
from specjax.train.checkpoints import SEQUENCES_READ, load_sequences_read, save_sequences_read
from specjax.train.data import load_shards, load_target, params_sha256
from specjax.train.features import build_feature_cache, data_sha256, open_feature_cache, shard_checksums
from specjax.train.loop import ANSWERS, TrainSet, best_record, export, init_vocab_ids, machine, train, warm_start
from specjax.train.trainer import Trainer, check_values, choose_mask_token
from specjax.train.vocab import tables_of_ids, vocab_tables

__all__ = ["FEATURE_MODES", "RUN_FILE", "TRAINERS", "TrainPlan", "check_resume", "early_stopping", "features_online",
           "measured_tau", "read_data_shards", "read_fields", "read_mesh", "run"]

RUN_FILE = "run.json"
# in a run directory: the warm start's sequences_read, as the run's first call took it
INIT_SEQUENCES_READ = "init_sequences_read.npy"
FEATURE_MODES = ("auto", "cache", "online")


def step_dtype(mode: str):
    """A training step's product dtype (`TrainPlan.target_dtype`, `drafter_dtype`): jnp.bfloat16, or None for
    float32, as asked; "auto": bfloat16 off a CPU (where XLA converts bfloat16 products slowly)."""
    if mode == "auto":
        mode = "float32" if jax.default_backend() == "cpu" else "bfloat16"
    return jnp.bfloat16 if mode == "bfloat16" else None


def features_online(mode: str) -> bool:
    """Whether a run computes the target's features in the step: "online", or "auto" off a CPU."""
    return mode == "online" or (mode == "auto" and jax.default_backend() != "cpu")


# kind -> its `Trainer`: every module's ``TRAINER`` (`specjax.declared`), read at each use
TRAINERS = Registry(__package__, "TRAINER", key=lambda trainer: trainer.kind)


def read_mesh(text: str) -> tuple[int, int]:
    """"data=2,model=1" -> (2, 1) (an axis left out: 1); ValueError naming what does not read."""
    try:
        sizes = {k.strip(): int(v) for k, v in (kv.split("=") for kv in text.split(","))}
    except ValueError:
        raise ValueError(f"mesh must look like data=2,model=1, got {text!r}") from None
    if set(sizes) - {"data", "model"}:
        raise ValueError(f"mesh names {sorted(set(sizes) - {'data', 'model'})}; the axes are data and model")
    return sizes.get("data", 1), sizes.get("model", 1)


def read_fields(text: str) -> tuple[str, ...]:
    """"lr, warmup-frac" -> ("lr", "warmup_frac"): field names as a flag's text writes them."""
    return tuple(x.strip().replace("-", "_") for x in text.split(",") if x.strip())


@dataclasses.dataclass(frozen=True)
class TrainPlan:
    """Where a drafter's training reads and writes, and the choices that are not its architecture's or its
    optimiser's (`python -m specjax.train KIND`'s flags are made from these fields: `specjax.cli.plans`).

    Fields:
      data: data directory of `python -m specjax.train data`.
      out: run directory: checkpoint (ckpt/), run.json and log.
      target: zoo | smollm2-135m | an HF checkpoint directory.
      cache: feature cache directory (None: under $SPECJAX_CACHE/features, named by the target and data checksums).
      export: write the trained drafter + recipe.json here (None: no export).
      resume: continue from out/ckpt (bit-exact); a changed recipe field is refused unless `override` names it.
      init: start from this exported drafter's weights instead of a fresh initialisation (same architecture and
        draft vocabulary; a fresh optimiser and schedule); domino also takes a DFlash drafter of its backbone's
        exact architecture.
      stop_after: run at most this many steps now, then checkpoint (continue with resume) (None: to the end).
      seq_len: padded sequence length S.
      valid_rows: held-out sequences (the data's last ones).
      data_shards: read only the data directory's first this many shards (None: all it has when the run starts;
        a resumed run reads as many as its first call did, recorded in run.json, however the directory grew).
      train_tokens: train on the data's first sequences only, as many as hold at most this many response tokens
        (`TrainSet.with_train_tokens`; the held-out sequences stay the same) (None: all of them).
      skip_sequences: leave out the data's first this many sequences (those a warm start, `init`, already trained
        on: a continued run then reads only answers its drafter has not seen; `train_tokens` counts from there).
      unseen_only: with `init`, leave out every sequence the warm start's weights learned from, as its export
        recorded them (recipe.json's data.sequences_read: any ids, not only a prefix; checked to index this
        data's shards): the run reads only answers new to its drafter. Its own export records those sequences
        and the ones it read, so a chain of continuations never reads an answer twice.
      pack: several whole sequences in each training row, each attending only to itself (`TrainSet.pack`): the
        same loss per sequence, ~1.27x the response tokens a step at SmolLM2 data's lengths; only for a kind whose
        step takes packed rows (`Trainer.packs`: the draft LM); the batch size then counts rows.
      group_batches: sort each run of this many batches by length into batches of similar lengths, each only
        as wide as its longest sequence (`TrainSet.group_batches`: the same loss per sequence, ~0.72x the padded
        positions a step's forwards run at SmolLM2 data's lengths with 16-row batches and 8; a few widths, so a
        few compiles); 0: batches of the plain permutation, seq_len wide. Not with pack.
      answers: train on the answers of this kind only: "all", "greedy" (those the data drew at T = 0) or
        "sampled" (at T > 0); `train_tokens` then counts those (the held-out sequences stay the same).
      draft_vocab: K most frequent response tokens the drafter predicts over (0: the full vocabulary).
      mesh: (data, model) device counts of the step's mesh, on the command line data=D,model=M (None: one device).
      eval_prompts: at export, measure τ by decoding this many held-out prompts of the data, 64 new tokens each.
      features: "cache" (the target's features computed once into `cache`, memory-mapped by every step),
        "online" (each step runs the frozen target over its batch: no cache) or "auto" (online on an
        accelerator, the cache on a CPU). Both give the same loss on the same batch.
      target_dtype: the dtype of the online features' target forward: "float32", "bfloat16", or "auto"
        (bfloat16 on an accelerator, float32 on a CPU, where XLA converts bfloat16 products slowly).
      drafter_dtype: the dtype of the drafter's products in a training step: "float32", "bfloat16", or "auto"
        (bfloat16 on an accelerator, float32 on a CPU); its weights and optimizer state stay float32.
      minutes: a time box: training stops at a checkpoint this many minutes after the call starts (loading
        included; the export and its τ come after), and exports what it has (None: no time box).
      fit_steps: with `minutes`, set the schedule's length from the step time measured after the first
        compiled steps so its cosine decay ends at the time box (`specjax.train.loop.train`); the train
        config's `steps` is then only an upper bound of the first compile's schedule.
      step_split: print where a step's time goes at each batch width's first step: the whole step and, online,
        the target's forward for the features alone (warm medians of extra calls of the same step; the run trains
        as without it). Not with fit_steps. Try it on a few steps: `stop_after`, a scratch `out`.
      override: recipe fields a resumed run may change (seed, lr, ...; comma-separated on the command line;
        recorded in run.json and recipe.json).
      command: the command line as run (recorded).
    """

    data: str
    out: str
    target: str = "smollm2-135m"
    cache: str | None = None
    export: str | None = None
    resume: bool = False
    init: str | None = None
    stop_after: int | None = None
    seq_len: int = 448
    valid_rows: int = 64
    data_shards: int | None = None
    train_tokens: int | None = None
    skip_sequences: int = 0
    unseen_only: bool = False
    pack: bool = False
    group_batches: int = 0
    answers: str = dataclasses.field(default="all", metadata={"choices": ANSWERS})
    draft_vocab: int = 0
    mesh: tuple[int, int] | None = dataclasses.field(default=None, metadata={"parse": read_mesh})
    eval_prompts: int = 0
    features: str = "auto"
    target_dtype: str = "auto"
    drafter_dtype: str = "auto"
    minutes: float | None = None
    fit_steps: bool = False
    step_split: bool = False
    override: tuple[str, ...] = dataclasses.field(default=(), metadata={"parse": read_fields})
    command: str = ""

    def check(self) -> None:
        """Raise ValueError naming the first bad field (before anything loads)."""
        for name in ("seq_len", "valid_rows"):
            if isinstance(getattr(self, name), bool) or not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {getattr(self, name)!r}")
        for name in ("draft_vocab", "eval_prompts", "skip_sequences", "group_batches"):
            if isinstance(getattr(self, name), bool) or not isinstance(getattr(self, name), int) or getattr(self, name) < 0:
                raise ValueError(f"{name} must be an integer >= 0, got {getattr(self, name)!r}")
        for name in ("stop_after", "train_tokens", "data_shards"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if self.mesh is not None and (len(self.mesh) != 2 or min(self.mesh) < 1):
            raise ValueError(f"mesh must be (data, model) counts >= 1, got {self.mesh!r}")
        if self.minutes is not None and (isinstance(self.minutes, bool) or not isinstance(self.minutes, (int, float))
                                         or not 0 < self.minutes < float("inf")):
            raise ValueError(f"minutes must be a number > 0, got {self.minutes!r}")
        if self.fit_steps and self.minutes is None:
            raise ValueError("fit_steps fits the schedule to a time box: give minutes too")
        if self.fit_steps and self.step_split:
            raise ValueError("step_split times extra calls of the step, which fit_steps would count as step time: "
                             "give one of them")
        if self.answers not in ANSWERS:
            raise ValueError(f"answers must be one of {', '.join(ANSWERS)}, got {self.answers!r}")
        if self.features not in FEATURE_MODES:
            raise ValueError(f"features must be one of {', '.join(FEATURE_MODES)}, got {self.features!r}")
        for name in ("target_dtype", "drafter_dtype"):
            if getattr(self, name) not in ("auto", "float32", "bfloat16"):
                raise ValueError(f"{name} must be auto, float32 or bfloat16, got {getattr(self, name)!r}")
        if self.init is not None and not (pathlib.Path(self.init) / "config.json").is_file():
            raise ValueError(f"init {self.init}: no exported drafter there (no config.json): give the directory a "
                             f"run exported (--export)")
        if self.unseen_only and self.init is None:
            raise ValueError("unseen_only leaves out what a warm start learned from: give init too")
        if self.unseen_only and not self.resume and _sequences_read_record(self.init) is None:
            raise ValueError(f"unseen_only: init {self.init} has no record of the sequences it learned from "
                             f"(recipe.json data.sequences_read, written by every export): leave out "
                             f"unseen_only and give skip_sequences (the prefix it read) instead")
        if not pathlib.Path(self.data).is_dir():
            raise ValueError(f"data {self.data}: no such directory (make it with python -m specjax.train data)")

    def recipe(self) -> dict:
        """The fields a resumed run must keep (what the drafter learns from, and how)."""
        return {"target": self.target, "data": self.data, "seq_len": self.seq_len, "valid_rows": self.valid_rows,
                "data_shards": self.data_shards, "train_tokens": self.train_tokens,
                "skip_sequences": self.skip_sequences, "unseen_only": self.unseen_only, "pack": self.pack,
                "group_batches": self.group_batches,
                "answers": self.answers,
                "draft_vocab": self.draft_vocab, "init": self.init}


def _sequences_read_record(init: str | None) -> dict | None:
    """An exported drafter's record of the data sequences its weights learned from (None: none recorded)."""
    recipe = pathlib.Path(init or "") / "recipe.json"
    if init is None or not recipe.is_file():
        return None
    return (json.loads(recipe.read_text()).get("data") or {}).get("sequences_read")


def init_record(init: str | None, out: str | pathlib.Path | None = None) -> dict | None:
    """What a warm-started run started from: the directory as given, the sha256 of each of its weight files and
    its export's record of the sequences they learned from (`sequences_read`, None when it has none; the file is
    copied into run directory `out` as INIT_SEQUENCES_READ), taken by the run's first call (run.json's
    "init_read"), so an export that overwrites that directory (a zoo drafter continued in place) still names the
    weights and sequences the run started from, which git history keeps."""
    if init is None:
        return None
    read = _sequences_read_record(init)
    if read is not None and out is not None:
        pathlib.Path(out).mkdir(parents=True, exist_ok=True)
        write_bytes(pathlib.Path(out) / INIT_SEQUENCES_READ, (pathlib.Path(init) / read["file"]).read_bytes())
    return {"directory": init, "weights_sha256": {f.name: sha256_file(f)
                                                  for f in sorted(pathlib.Path(init).glob("*.safetensors"))},
            "sequences_read": read}


def init_sequences_read(out: str | pathlib.Path, init_read: dict | None, checksums: list[str],
                        unseen_only: bool) -> np.ndarray | None:
    """int64[n]: the sequence ids the warm start's weights learned from (`init_record`'s copy in `out`), or None
    when there is no warm start, or it recorded none, or its record indexes other data than `checksums` (then
    `unseen_only`, which needs them, raises ValueError)."""
    record = (init_read or {}).get("sequences_read")
    if record is None:
        if unseen_only:
            raise ValueError(f"unseen_only: the warm start {(init_read or {}).get('directory')} has no record of the "
                             f"sequences it learned from: give skip_sequences instead")
        return None
    try:
        return load_sequences_read(pathlib.Path(out) / INIT_SEQUENCES_READ, record, checksums)
    except ValueError:
        if unseen_only:
            raise
        return None


def _recipe(kind: str, plan: TrainPlan, arch, tc) -> dict:
    return {"kind": kind, **plan.recipe(), "arch": dataclasses.asdict(arch), "train_config": dataclasses.asdict(tc)}


def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = list(v) if isinstance(v, tuple) else v
    return out


def check_resume(out: str | pathlib.Path, recipe: dict, override: tuple[str, ...] = (),
                 defaults: dict | None = None) -> list[str]:
    """The recipe fields a resumed run changes (each `override`n); raises ValueError naming the changed fields
    that are not. A run directory without run.json (a fresh one, or one of an older specjax) passes. `defaults`:
    a recipe of every field's default; a field the run.json does not have (it came after the run began) had
    its default then, so it is unchanged while it keeps it."""
    path = pathlib.Path(out) / RUN_FILE
    if not path.exists():
        return []
    before, now = _flat(json.loads(path.read_text())["recipe"]), _flat(json.loads(json.dumps(recipe)))
    before = {**_flat(json.loads(json.dumps(defaults or {}))), **before}
    changed = sorted(k for k in before.keys() | now.keys() if before.get(k) != now.get(k))
    leaf = lambda k: k.rsplit(".", 1)[-1]  # noqa: E731  (override names a field by its own name)
    refused = [k for k in changed if k not in override and leaf(k) not in override]
    if refused:
        raise ValueError(f"{path}: resuming with changed recipe fields "
                         + ", ".join(f"{k} ({before.get(k)!r} -> {now.get(k)!r})" for k in refused)
                         + "; rerun with the run's own values, or allow the change with --override "
                         + ",".join(leaf(k) for k in refused))
    return changed


def read_data_shards(out: str | pathlib.Path) -> int | None:
    """How many data shards a run directory's first call read (run.json's "data_shards_read"; None: no run yet,
    or one of an older specjax)."""
    path = pathlib.Path(out) / RUN_FILE
    return json.loads(path.read_text()).get("data_shards_read") if path.exists() else None


def _write_run(out: pathlib.Path, recipe: dict, command: str, changed: list[str],
               data_shards: int | None = None, init_read: dict | None = None, fresh: bool = False) -> list[dict]:
    """Append this call to run.json (recipe, every command with the fields it overrode; from the first call, the
    data shards it read and the warm start, `init_record`); a `fresh` call (a run started anew, not resumed)
    begins a new one. Return the commands."""
    path = out / RUN_FILE
    state = json.loads(path.read_text()) if path.exists() and not fresh else {"recipe": recipe, "commands": [],
                                                                 "data_shards_read": data_shards,
                                                                 "init_read": init_read}
    state["commands"].append({"command": command, "overrides": changed, "time": time.strftime("%Y-%m-%d %H:%M:%S")})
    state["recipe"] = recipe
    out.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(state, indent=1) + "\n")
    tmp.replace(path)
    return state["commands"]


def measured_tau(trainer: Trainer, dcfg, tcfg, tparams, dparams, trainset: TrainSet, n: int, *,
                 new_tokens: int = 64, temperature: float = 0.0, seed: int = 0) -> dict:
    """Mean accepted length τ of decoding with the drafter (`generate`, one batch) on the first n held-out prompts
    (those that reach a verification round), greedy or sampled at `temperature` (keys from `seed`)."""
    rows = trainset.valid_ids[:n]
    prompts = [trainset.shards.tokens[trainset.shards.offsets[i]:trainset.shards.offsets[i] +
                                      trainset.shards.prompt_lengths[i]].tolist() for i in rows]
    toks, lens = pad_prompts(prompts)
    sampled = {} if not temperature else {"sampling": Sampling(temperature=temperature), "key": jax.random.key(seed)}
    out = generate(tparams, tcfg, trainer.drafter(dcfg, tcfg), dparams, toks, lens, new_tokens, **sampled)
    rounds = np.asarray(out.stats.num_rounds)
    taus = [float(t) for t, r in zip(np.asarray(out.stats.mean_accepted_length()), rounds) if r > 0]
    # a prompt whose answer ends at its first token (EOS from the prefill) has no round: no τ
    return {"prompts": len(prompts), "new_tokens": new_tokens, "temperature": temperature,
            "tau_mean": round(float(np.mean(taus)), 3) if taus else None,
            "tau_per_prompt": [round(t, 3) for t in taus], "prompts_without_rounds": int((rounds == 0).sum())}


def early_stopping(tc, log: list, state: dict) -> dict | None:
    """What early stopping did in a run (`DrafterTrainConfig.patience`; None: it was off): the best held-out
    evaluation, whose weights the run returned, and the step it stopped at (None: it ran its schedule)."""
    if not getattr(tc, "patience", 0):
        return None
    best = best_record(log)
    return {"patience": tc.patience, "evaluations": len(log), "stopped_early_at": state.get("stopped_early"),
            "best_step": None if best is None else log[best]["step"],
            "best_valid_tau_estimate": None if best is None else log[best]["valid_tau_estimate"]}


def check(kind: str, plan: TrainPlan, arch, tc) -> tuple[Trainer, list[str]]:
    """(the kind's `Trainer`, the recipe fields a resume overrides) after every value is checked (ValueError
    naming the field; nothing loaded)."""
    if kind not in TRAINERS:
        raise ValueError(f"unknown drafter kind {kind!r}; the kinds are {', '.join(TRAINERS)}")
    trainer = TRAINERS[kind]
    if not isinstance(arch, trainer.arch) or not isinstance(tc, trainer.train_config):
        raise TypeError(f"{kind} trains with a {trainer.arch.__name__} and a {trainer.train_config.__name__}")
    plan.check()
    if plan.pack and not trainer.packs:
        raise ValueError(f"pack: a {kind} step takes one sequence a row (its features follow the row); pack only "
                         f"the kinds that read tokens alone: {', '.join(k for k, t in TRAINERS.items() if t.packs)}")
    check_values(arch)
    check_values(tc)
    rows, data = getattr(tc, "batch_size", None), plan.mesh[0] if plan.mesh is not None else 1
    if rows is not None and rows % data:  # else a raw partitioning error at the first step
        raise ValueError(f"batch_size {rows} is not a multiple of the mesh's data axis size {data} (every data "
                         f"shard takes an equal share of each batch): give a multiple of {data}")
    if not plan.resume:
        return trainer, []
    return trainer, check_resume(plan.out, _recipe(kind, plan, arch, tc), plan.override,
                                 _default_recipe(kind, plan, trainer))


def _default_recipe(kind: str, plan: TrainPlan, trainer: Trainer) -> dict | None:
    """`kind`'s recipe with every field at its default (what a field added after a run began resumes at); None
    when its architecture or train config has a field without one (a kind declared outside the package)."""
    try:
        arch, tc = trainer.arch(), trainer.train_config()
    except TypeError:
        return None
    return _recipe(kind, TrainPlan(data=plan.data, out=plan.out), arch, tc)


def run(kind: str, plan: TrainPlan, arch, tc, *, deadline: float | None = None) -> dict:
    """Train (and export) one drafter; returns {"params", "log", "export" (its directory or None)}.
    deadline: a `time.time()` at which training stops at a checkpoint (a time-boxed run; exported as it is)."""
    trainer, changed = check(kind, plan, arch, tc)
    t_start = time.time()
    if plan.minutes is not None:
        deadline = min(deadline or float("inf"), t_start + 60 * plan.minutes)
    out = pathlib.Path(plan.out)
    recipe_fields = _recipe(kind, plan, arch, tc)
    tcfg, tparams, _, reserved = load_target(plan.target)
    # a resumed run reads the data its first call read (the held-out rows, the mask token, the batches), however
    # the directory has grown since
    shards = load_shards(plan.data, plan.data_shards or (read_data_shards(out) if plan.resume else None))
    tsha, dsha = params_sha256(tparams), data_sha256(shards)
    counts = np.bincount(shards.tokens, minlength=tcfg.vocab_size)
    mask_id = getattr(arch, "mask_token", None)
    if mask_id is None:
        mask_id = choose_mask_token(counts, reserved)
    dcfg = trainer.build_config(arch, tcfg, mask_id, plan.draft_vocab)
    layers = (*trainer.layers(dcfg, tcfg), *(trainer.teacher_layers(tc, tcfg) if trainer.teacher_layers else ()))
    first = shards.manifest["shards"][0]["sha256"][:12] if shards.manifest["shards"] else "empty"  # grows with the data
    online = bool(layers) and features_online(plan.features)  # no layers (a draft LM): tokens only
    cache = None if online or not layers else (plan.cache or str(cache_root() / "features" /
                                                                 f"{plan.target.replace('/', '_')}-{tsha[:12]}-{first}"))
    if cache is None:  # nothing cached: the step computes the features, or needs none
        trainset = TrainSet(shards, None, tuple(layers), plan.seq_len, plan.valid_rows, pack=plan.pack,
                            group_batches=plan.group_batches)
    else:
        if is_main():  # one process writes the cache (a directory every process reads), the others wait for it
            build_feature_cache((tcfg, tparams), plan.target, shards, plan.data, layers, cache)
        barrier("specjax-feature-cache")
        trainset = TrainSet(shards, open_feature_cache(cache, target_sha=tsha, data_sha=dsha), tuple(layers),
                            plan.seq_len, plan.valid_rows, group_batches=plan.group_batches)
    before = json.loads((out / RUN_FILE).read_text()) if plan.resume and (out / RUN_FILE).exists() else {}
    # the first call takes the warm start's record (weights, sequences read; one process copies the file); a
    # resumed call keeps what the first took
    init_read = before["init_read"] if "init_read" in before else init_record(plan.init, out if is_main() else None)
    barrier("specjax-init-read")
    init_learned = init_sequences_read(out, init_read, shard_checksums(shards), plan.unseen_only)
    if plan.train_tokens is not None or plan.answers != "all" or plan.skip_sequences or plan.unseen_only:
        trainset = trainset.with_train_tokens(plan.train_tokens, plan.answers, plan.skip_sequences,
                                              exclude=init_learned if plan.unseen_only else None)
    responses = trainset.response_token_counts(tcfg.vocab_size)
    vocab, init_ids = None, (init_vocab_ids(plan.init) if plan.init else None)
    if plan.draft_vocab and init_ids is not None:  # a warm start keeps its vocabulary as the data grows
        if len(init_ids) != plan.draft_vocab:
            raise ValueError(f"init {plan.init} has a draft vocabulary of {len(init_ids)} ids, "
                             f"not draft_vocab {plan.draft_vocab}")
        vocab = tables_of_ids(init_ids, tcfg.vocab_size)
    elif plan.draft_vocab:
        vocab = vocab_tables(responses, plan.draft_vocab, always=tuple(tcfg.eos_token_ids))
    touter = outer_params(tparams)  # the target params a drafter shares: all but the layers
    init = (warm_start(plan.init, dcfg, None if vocab is None else vocab.ids) if plan.init
            else trainer.init(touter, tcfg, vocab))
    commands = (_write_run(out, recipe_fields, plan.command, changed, len(shards.manifest["shards"]), init_read,
                           fresh=not plan.resume)
                if is_main() else [])
    mesh = None if plan.mesh is None else make_mesh(data=plan.mesh[0], model=plan.mesh[1])
    dparams, log = train((tcfg, touter), dcfg, trainset, tc, plan.out, step_factory=trainer.make_step, vocab=vocab,
                         resume=plan.resume, stop_after=plan.stop_after, mesh=mesh, init=init, deadline=deadline,
                         target_params=tparams if online else None, target_dtype=step_dtype(plan.target_dtype),
                         fit_steps=plan.fit_steps, compute_dtype=step_dtype(plan.drafter_dtype),
                         step_split=plan.step_split)
    if not plan.export or not is_main():  # process 0 exports
        barrier("specjax-export")
        return {"params": dparams, "log": log, "export": None}
    full = dparams if vocab is None else with_draft_vocab(dparams, np.asarray(vocab.ids))
    state = json.loads((out / "ckpt" / "state.json").read_text())
    stopping = early_stopping(tc, log, state)
    steps_learned = state["step"] if stopping is None or stopping["best_step"] is None else stopping["best_step"]
    read = trainset.sequences_read(steps_learned, tc.batch_size, tc.seed)  # what the exported weights learned from
    read_record = {**save_sequences_read(pathlib.Path(plan.export) / SEQUENCES_READ,
                                         read if init_learned is None else np.union1d(read, init_learned),
                                         len(shards), shard_checksums(shards)),
                   "includes_init": None if plan.init is None else init_learned is not None}
    recipe = {
        "target": {"name": plan.target, "params_sha256": tsha},
        "data": {"directory": plan.data, "sha256": dsha, **shards.manifest.get("totals", {}),
                 "recipe": shards.manifest.get("recipe"), "train_sequences": trainset.num_train,
                 "answers": plan.answers, "skipped_sequences": plan.skip_sequences,
                 "unseen_only": plan.unseen_only, "sequences_read": read_record,
                 "train_response_tokens": int(trainset.response_lengths()[trainset.training_ids].sum()),
                 "packed": plan.pack, "grouped_batches": plan.group_batches,
                 "response_tokens_seen": int(trainset.tokens_seen(state["step"], tc.batch_size, tc.seed)[-1])
                 if state["step"] else 0,
                 "held_out_sequences": trainset.valid_rows},
        "features": {"cache": cache or ("computed in each step (online)" if layers else "none: tokens only"),
                     "layers": list(layers),
                     "target_dtype": None if not online else jnp.dtype(step_dtype(plan.target_dtype)
                                                                       or jnp.float32).name},
        "init": init_read,  # as the run's first call took it (run.json)
        "draft_vocab": {"k": plan.draft_vocab or tcfg.vocab_size, "from_init": init_ids is not None,
                        "covers_response_tokens": round(float(
                            responses[np.asarray(vocab.ids)].sum() / responses.sum()), 4) if vocab is not None else 1.0},
        "train_config": {**dataclasses.asdict(tc), "steps": state["train_config"]["steps"]},
        "early_stopping": stopping,
        "drafter_products": jnp.dtype(step_dtype(plan.drafter_dtype) or jnp.float32).name,
        "schedule_fitted_to_minutes": plan.minutes if state.get("fitted") else None, "arch": dataclasses.asdict(arch), "drafter": dcfg.to_hf(),
        "mask_token": ({"id": int(mask_id), "count_in_data": int(counts[mask_id])} if trainer.uses_mask_token
                       else None),
        "params": int(sum(np.prod(x.shape) for x in jax.tree.leaves(dparams))),
        "compute": {"train_seconds": state["seconds"], "steps": state["step"], "machine": machine(),
                    "this_call_seconds": round(time.time() - t_start, 1)},
        "measured_tau": (measured_tau(trainer, dcfg, tcfg, tparams, full, trainset, plan.eval_prompts)
                         if plan.eval_prompts else None),
        "log": log, "command": plan.command, "commands": commands,
    }
    where = export(plan.export, dcfg, dparams, recipe, None if vocab is None else vocab.ids)
    barrier("specjax-export")
    print(f"exported -> {where}", flush=True)
    return {"params": dparams, "log": log, "export": where}
