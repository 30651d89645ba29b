"""`python -m specjax.train COMMAND`: training data, feature caches, drafters, and the zoo's language models.

    python -m specjax.train data     --target smollm2-135m --out DATA --tokens 500000   # the target's answers
    python -m specjax.train features --target smollm2-135m --data DATA --layers 2,14,27  # optional: prebuild
    python -m specjax.train dflash   --target smollm2-135m --data DATA --out RUN --export DIR [--resume]
    python -m specjax.train eagle3   ...        python -m specjax.train domino ...      # every trained kind
    python -m specjax.train draft-lm --target smollm2-135m --data DATA --out RUN --export DIR  # a draft LM
    python -m specjax.train lm       --model target --tokenizer TOK.json --out RUN       # a zoo language model
    python -m specjax.train eval     --target DIR --draft DIR                           # held-out LM report
    python -m specjax.train tokenizer --out TOK.json                                    # the zoo's BPE tokenizer
    python -m specjax.train recipe   --target smollm2-135m --minutes 10 --out DIR      # data -> drafters -> τ, timed
    python -m specjax.train recipe   --target smollm2-135m --plan-only --device h100   # its plan, on any machine
    python -m specjax.train scaling dflash --data DATA --out DIR --budgets 1e6,3e6 --patience 4  # τ against data
    python -m specjax.train compare dflash --data DATA --drafters NEW,OLD             # held-out τ, T = 0 and 1

`python -m specjax.train COMMAND --help` lists a command's options with their defaults. A drafter
kind's flags are made from its `Trainer` record (`specjax.train.run.TRAINERS`): its architecture's
and its training config's fields; ``--methods-from FILE`` before COMMAND adds the kinds a module outside
the package declares (its ``TRAINER``: `specjax.declared`). Every error is one line, ``specjax.train <command>: error: <what
to fix>``, exit status 2, with every value checked before anything loads; `--resume` with a changed
recipe field (seed included) is refused unless `--override FIELD,...` allows it (recorded in
run.json and recipe.json with every command of the run).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import sys
import time

import ml_dtypes
import numpy as np

from specjax.cli.common import UsageError, load_methods_from, methods_from_flag
from specjax.cli.plans import as_flags, flags_of, plan_from
from specjax.cli.plans import number as _number
from specjax.data import compile_cache
from specjax.data.train_sources import write_prompt_order
from specjax.train import data
from specjax.train.continuous import PRECOMPILE_CHOICES
from specjax.train.data import (ENGINES, DataRecipe, generate_shards, load_shards, load_target, parse_weights)
from specjax.train.features import build_feature_cache
from specjax.train.lm import PRESETS, TrainConfig, report, train
from specjax.recipe import RecipeConfig, plan, run_recipe
from specjax.train.run import TRAINERS, TrainPlan
from specjax.train.run import check as check_run
from specjax.train.run import run as run_drafter
from specjax.train.scaling import (TABLE_FILE, ScalingPlan, check_one_run, compare_drafters, paired_difference,
                                   run_scaling)
from specjax.train.tokenizer import DEFAULT_SHAREGPT_CHARS, DEFAULT_VOCAB, build

__all__ = ["main", "parser"]

PROG = "specjax.train"


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


# ---------------------------------------------------------------------------------------------- data


def _data_flags(ap) -> None:
    d = DataRecipe(target="smollm2-135m")
    ap.add_argument("--target", default=d.target, help="zoo | smollm2-135m | HF checkpoint directory "
                    "(default: %(default)s)")
    ap.add_argument("--out", required=True, help="data directory (manifest.json + shards); an existing one is "
                    "continued")
    ap.add_argument("--tokens", type=_number(int), default=500_000, help="generate until it holds this many response "
                    "tokens (default: %(default)s)")
    ap.add_argument("--seed", type=_number(int), default=d.seed, help="prompt order and sampling keys "
                    "(default: %(default)s)")
    ap.add_argument("--max-new-tokens", type=_number(int), default=d.max_new_tokens, help="response tokens per "
                    "prompt at most (default: %(default)s)")
    ap.add_argument("--max-prompt-tokens", type=_number(int), default=d.max_prompt_tokens, help="templated prompt "
                    "tokens at most (default: %(default)s)")
    ap.add_argument("--batch-size", type=_number(int), default=d.batch_size, help="rows generated together "
                    "(default: %(default)s)")
    ap.add_argument("--sampled-fraction", type=_number(float), default=None, help="fraction of sequences sampled "
                    f"at T = 1 (default: an existing --out's own, else {d.sampled_fraction}: "
                    "specjax.train.data.DataRecipe says why)")
    ap.add_argument("--no-chat", action="store_true", help="plain prompts, no chat template")
    ap.add_argument("--engine", choices=ENGINES, default="continuous", help="continuous: finished rows are "
                    "refilled at once (needs EOS ids); batched: generate_ar per batch (default: %(default)s)")
    ap.add_argument("--chunk", type=_number(int), default=16, help="continuous engine: decode steps between refills "
                    "(default: %(default)s)")
    ap.add_argument("--precompile", choices=PRECOMPILE_CHOICES, default="auto", help="continuous engine: compile "
                    "every refill shape and the decode chunk before the first shard, concurrently (on), or each when "
                    "first needed (off); auto: on unless jax runs on the CPU (default: %(default)s)")
    ap.add_argument("--shard-batches", type=_number(int), default=4, help="batches per shard: the unit of "
                    "resumption (default: %(default)s)")
    ap.add_argument("--prompt-order", default=None, metavar="FILE", help="read the prompt order from FILE (made "
                    "by --write-prompt-order) instead of the registry's sources: a machine without the registry (default: the "
                    "registry's)")
    ap.add_argument("--write-prompt-order", default=None, metavar="FILE", help="write the recipe's prompt order "
                    "from --out's cursor to FILE (.gz: compressed) and exit, loading no target (default: generate)")
    ap.add_argument("--minutes", type=_number(float), default=None, help="time box: start no shard after this many "
                    "minutes (the shard under way finishes; continue later with the same command) (default: no time box)")
    ap.add_argument("--weights", default=",".join(f"{k}={v}" for k, v in sorted(data.DEFAULT_WEIGHTS.items())),
                    help="source mixture, name=weight,... (default: %(default)s)")


def _data(args) -> int:
    for name in ("tokens", "max_new_tokens", "max_prompt_tokens", "batch_size", "shard_batches", "chunk"):
        if getattr(args, name) < 1:
            raise UsageError(f"{_flag(name)} must be >= 1, got {getattr(args, name)}")
    if args.seed < 0:
        raise UsageError(f"--seed must be >= 0, got {args.seed}")
    if args.minutes is not None and not 0 < args.minutes < float("inf"):
        raise UsageError(f"--minutes must be a number > 0, got {args.minutes}")
    deadline = None if args.minutes is None else time.time() + 60 * args.minutes
    args.sampled_fraction = data.fraction_for(args.out, args.sampled_fraction)
    if not 0 <= args.sampled_fraction <= 1:
        raise UsageError(f"--sampled-fraction must be in [0, 1], got {args.sampled_fraction}")
    try:
        weights = parse_weights(args.weights)
    except ValueError as e:
        raise UsageError(f"--{e}") from None
    if args.write_prompt_order:
        manifest = data.read_manifest_file(args.out)
        start = manifest["cursor"] if manifest else 0
        n = write_prompt_order(args.write_prompt_order, dict(weights), args.seed, start)
        print(f"{args.write_prompt_order}: {n} prompts from {start}")
        return 0
    cfg, params, enc, _ = load_target(args.target, chat=not args.no_chat)
    recipe = DataRecipe(target=args.target, weights=weights, seed=args.seed, max_new_tokens=args.max_new_tokens,
                        max_prompt_tokens=args.max_prompt_tokens, batch_size=args.batch_size,
                        sampled_fraction=args.sampled_fraction, chat=enc.chat)
    manifest = generate_shards((cfg, params), enc, recipe, args.out, response_tokens=args.tokens,
                               shard_batches=args.shard_batches, engine=args.engine, chunk=args.chunk,
                               prompt_order=args.prompt_order, deadline=deadline, precompile=args.precompile)
    print(json.dumps(manifest["totals"]))
    return 0


# ------------------------------------------------------------------------------------------- drafters


def _drafter_flags(ap, kind: str) -> None:
    """The flags of `TrainPlan` and of the kind's architecture and training config (`specjax.cli.plans`)."""
    trainer = TRAINERS[kind]
    flags_of(ap, TrainPlan, skip=("command",))
    flags_of(ap, trainer.arch)
    flags_of(ap, trainer.train_config)


def _drafter(args, argv) -> int:
    kind = args.command
    trainer = TRAINERS[kind]
    classes = (TrainPlan, trainer.arch, trainer.train_config)
    plan = plan_from(args, TrainPlan, command=f"python -m specjax.train {' '.join(argv)}")
    arch, tc = plan_from(args, trainer.arch), plan_from(args, trainer.train_config)
    try:
        check_run(kind, plan, arch, tc)
    except (ValueError, TypeError) as e:  # the plan's and the configs' messages name their fields
        raise UsageError(as_flags(str(e), *classes)) from None
    run_drafter(kind, plan, arch, tc)
    return 0


# ------------------------------------------------------------------------------------------------ scaling

# the TrainPlan fields a τ-against-data table sets per budget (`specjax.train.scaling`): not flags of `scaling`
_SCALING_SETS = ("command", "export", "resume", "init", "stop_after", "train_tokens", "skip_sequences", "unseen_only",
                 "eval_prompts", "minutes", "fit_steps", "override")


def _scaling_flags(ap) -> None:
    """`scaling KIND`: one sub-command per drafter kind, with the flags of `TrainPlan` (less what each budget
    sets), `ScalingPlan` and the kind's architecture and training config."""
    kinds = ap.add_subparsers(dest="kind", required=True, metavar="KIND")
    for kind, trainer in TRAINERS.items():
        p = kinds.add_parser(kind, help=f"the table for {trainer.help}",
                             formatter_class=argparse.RawDescriptionHelpFormatter)
        flags_of(p, TrainPlan, skip=_SCALING_SETS)
        flags_of(p, ScalingPlan)
        flags_of(p, trainer.arch)
        flags_of(p, trainer.train_config)


def _scaling(args, argv) -> int:
    trainer = TRAINERS[args.kind]
    classes = (TrainPlan, ScalingPlan, trainer.arch, trainer.train_config)
    base = plan_from(args, TrainPlan, command=f"python -m specjax.train {' '.join(argv)}")
    sp, arch, tc = plan_from(args, ScalingPlan), plan_from(args, trainer.arch), plan_from(args, trainer.train_config)
    try:
        sp.check()
        check_run(args.kind, dataclasses.replace(base, train_tokens=sp.budgets[0] if sp.budgets else None), arch, tc)
        if sp.one_run:
            check_one_run(tc)
    except (ValueError, TypeError) as e:  # the plans' and the configs' messages name their fields
        raise UsageError(as_flags(str(e), *classes)) from None
    run_scaling(args.kind, base, arch, tc, sp)
    print((pathlib.Path(base.out) / TABLE_FILE).read_text(), end="")
    return 0


def _compare_flags(ap) -> None:
    ap.add_argument("kind", choices=list(TRAINERS), metavar="KIND", help="the drafters' kind: "
                    + ", ".join(TRAINERS))
    ap.add_argument("--drafters", required=True, help="comma-separated exported drafter directories")
    ap.add_argument("--target", default="smollm2-135m", help="zoo | smollm2-135m | HF checkpoint directory "
                    "(default: %(default)s)")
    ap.add_argument("--data", required=True, help="data directory whose last --valid-rows sequences are the prompts")
    ap.add_argument("--valid-rows", type=_number(int), default=64, help="held-out sequences (default: %(default)s)")
    ap.add_argument("--seq-len", type=_number(int), default=448, help="(default: %(default)s)")
    ap.add_argument("--data-shards", type=_number(int), default=None, help="read only the data's first N shards (a "
                    "run's own held-out rows: its run.json's data_shards_read) (default: all)")
    flags_of(ap, ScalingPlan, skip=("budgets", "epochs", "minutes", "reference"))
    ap.add_argument("--json", default=None, metavar="FILE", help="also write the measurements here (default: none)")


def _compare(args) -> int:
    sp = plan_from(args, ScalingPlan)
    drafters = tuple(d.strip() for d in args.drafters.split(",") if d.strip())
    try:
        rows = compare_drafters(args.kind, args.target, args.data, drafters, sp, seq_len=args.seq_len,
                                valid_rows=args.valid_rows, data_shards=args.data_shards)
    except ValueError as e:
        raise UsageError(as_flags(str(e), ScalingPlan)) from None
    temps = [f"T={t:g}" for t in sp.temperatures]
    print(f"τ of {args.kind} drafters on the last {args.valid_rows} sequences of {args.data}"
          + ("" if args.data_shards is None else f" (its first {args.data_shards} shards)") + ": the first "
          f"{sp.eval_prompts} prompts, {sp.new_tokens} new tokens\n")
    print("| drafter | " + " | ".join(f"τ {t}" for t in temps) + " |\n|---|" + "---|" * len(temps))
    for d, taus in rows.items():
        print(f"| {d} | " + " | ".join("-" if taus[t]["tau_mean"] is None else f"{taus[t]['tau_mean']:.3f}"
                                       for t in temps) + " |")
    *others, last = rows
    for d in others:  # the last drafter is the reference (the one a new drafter would replace)
        pairs = [paired_difference(rows[d][t]["tau_per_prompt"], rows[last][t]["tau_per_prompt"]) for t in temps]
        print(f"| {d} - {last}, paired | " + " | ".join(
            "-" if p is None else f"{p['mean']:+.3f} ± {p['se']:.3f} ({p['higher']} of {p['prompts']} higher)"
            for p in pairs) + " |")
    if args.json:
        measured = {k: getattr(sp, k) for k in ("eval_prompts", "new_tokens", "temperatures")}  # no table's budgets
        pathlib.Path(args.json).write_text(json.dumps({"kind": args.kind, "target": args.target, "data": args.data,
                                                       "valid_rows": args.valid_rows, "data_shards": args.data_shards,
                                                       **measured, "drafters": rows}, indent=1) + "\n")
    return 0


# ------------------------------------------------------------------------------- features, lm, eval, tokenizer


def _read(parse, text: str, says: str):
    """`parse(text)`, or UsageError `says`, naming the text."""
    try:
        return parse(text)
    except ValueError:
        raise UsageError(f"{says}, got {text!r}") from None


def _features(args) -> int:
    layers = _read(lambda t: tuple(int(x) for x in t.split(",")), args.layers,
                   "--layers must be comma-separated layer ids")
    cfg, params, _, _ = load_target(args.target)
    cache = build_feature_cache((cfg, params), args.target, load_shards(args.data), args.data, layers, args.out)
    print(json.dumps({k: cache.manifest[k] for k in ("total_tokens", "build_seconds", "bytes")}))
    return 0


def _lm_flags(ap) -> None:
    ap.add_argument("--model", choices=sorted(PRESETS), required=True, help="the preset to train")
    ap.add_argument("--tokenizer", required=True, help="tokenizer.json from python -m specjax.train tokenizer")
    ap.add_argument("--out", required=True, help="run directory (checkpoints, summary.json)")
    ap.add_argument("--export", default=None, help="write the final 16-bit HF checkpoint + tokenizer here "
                    "(default: no export)")
    ap.add_argument("--export-dtype", choices=("float16", "bfloat16"), default="float16", help="(default: %(default)s)")
    ap.add_argument("--resume", action="store_true", help="continue from OUT/ckpt")
    flags_of(ap, TrainConfig)
    for flag, what in (("--hidden", "hidden size"), ("--layers", "layers"), ("--heads", "heads"),
                       ("--ffn", "MLP width")):
        ap.add_argument(flag, type=_number(int), default=None, help=f"override the preset's {what} (default: the "
                        f"preset's)")


def _lm(args) -> int:
    tc = plan_from(args, TrainConfig)
    for f in dataclasses.fields(TrainConfig):
        value = getattr(tc, f.name)
        if isinstance(value, (int, float)) and (value < 0 or (value == 0 and f.name not in ("min_lr_ratio", "weight_decay",
                                                                                          "seed", "warmup"))):
            raise UsageError(f"{_flag(f.name)} must be {'>= 0' if f.name in ('min_lr_ratio', 'weight_decay', 'seed', 'warmup') else '> 0'}, got {value}")
    overrides = {k: v for k, v in (("hidden_size", args.hidden), ("num_layers", args.layers),
                                   ("num_heads", args.heads), ("intermediate_size", args.ffn)) if v is not None}
    if any(v < 1 for v in overrides.values()):
        raise UsageError(f"model size overrides must be >= 1, got {overrides}")
    dtype = ml_dtypes.bfloat16 if args.export_dtype == "bfloat16" else np.float16
    train(args.model, args.out, args.tokenizer, tc, resume=args.resume, export_dir=args.export, export_dtype=dtype,
          **overrides)
    return 0


def _eval(args) -> int:
    if args.prompts < 1 or args.k < 1 or args.max_new_tokens < 1:
        raise UsageError("--prompts, --k and --max-new-tokens must be >= 1")
    print(json.dumps(report(args.target, args.draft, args.prompts, args.k, args.max_new_tokens), indent=2,
                     ensure_ascii=False))
    return 0


def _tokenizer(args) -> int:
    if args.vocab < 2 or args.sharegpt_chars < 0:
        raise UsageError("--vocab must be >= 2 and --sharegpt-chars >= 0")
    print(build(args.out, args.vocab, args.sharegpt_chars))
    return 0


class _Parser(argparse.ArgumentParser):
    """argparse's parser with one-line errors naming the command: ``specjax.train <command>: error: ...``."""

    def error(self, message: str):
        words = self.prog.split()
        command = words[-1] if len(words) > 3 else "COMMAND"  # "python -m specjax.train <command>"
        self.exit(2, f"{PROG} {command}: error: {message}\n")


def _recipe_flags(ap) -> None:
    flags_of(ap, RecipeConfig)
    ap.add_argument("--plan-only", action="store_true", help="print the plan (device, dtype, batch sizes, memory, "
                    "expected tokens and steps) and exit, loading no weights")


def _recipe(args) -> int:
    cfg = plan_from(args, RecipeConfig)
    try:
        cfg.check()
    except ValueError as e:
        raise UsageError(as_flags(str(e), RecipeConfig)) from None
    if args.plan_only:
        print(json.dumps(plan(cfg), indent=1))
        return 0
    if args.device is not None:
        raise UsageError("--device plans for another machine: use it with --plan-only")
    run_recipe(cfg)
    return 0


def parser() -> argparse.ArgumentParser:
    ap = _Parser(prog=f"python -m {PROG}", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    methods_from_flag(ap)  # before COMMAND: a drafter kind declared outside the package gets its command
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name, help, run, flags, description=None):
        p = sub.add_parser(name, help=help, description=description,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        flags(p)
        p.set_defaults(run=run)

    command("data", "generate the target's answers to training prompts (resumable shards)", lambda a, argv: _data(a),
            _data_flags, data.__doc__)

    def features_flags(p):
        p.add_argument("--target", default="smollm2-135m", help="zoo | smollm2-135m | HF checkpoint directory "
                       "(default: %(default)s)")
        p.add_argument("--data", required=True, help="data directory of `python -m specjax.train data`")
        p.add_argument("--layers", required=True, help="comma-separated target layer ids to cache")
        p.add_argument("--out", required=True, help="cache directory (missing layers are added)")

    command("features", "compute a data directory's target features once (float16 cache)", lambda a, argv: _features(a),
            features_flags)
    for kind, trainer in TRAINERS.items():
        command(kind, f"train {trainer.help}", _drafter, (lambda k: lambda p: _drafter_flags(p, k))(kind),
                sys.modules[trainer.make_step.__module__].__doc__)
    command("lm", "train a zoo language model (target or draft LM) from a preset", lambda a, argv: _lm(a), _lm_flags)

    def eval_flags(p):
        p.add_argument("--target", required=True, help="target checkpoint directory")
        p.add_argument("--draft", required=True, help="draft LM checkpoint directory")
        p.add_argument("--prompts", type=_number(int), default=20, help="held-out prompts (default: %(default)s)")
        p.add_argument("--k", type=_number(int), default=4, help="chain length (default: %(default)s)")
        p.add_argument("--max-new-tokens", type=_number(int), default=64, help="(default: %(default)s)")

    command("eval", "held-out report of a zoo target / draft LM pair (JSON)", lambda a, argv: _eval(a), eval_flags)

    def tokenizer_flags(p):
        p.add_argument("--out", required=True, help="where to write tokenizer.json")
        p.add_argument("--vocab", type=_number(int), default=DEFAULT_VOCAB, help="(default: %(default)s)")
        p.add_argument("--sharegpt-chars", type=_number(int), default=DEFAULT_SHAREGPT_CHARS,
                       help="(default: %(default)s)")

    command("tokenizer", "train the zoo's BPE tokenizer on the train split", lambda a, argv: _tokenizer(a),
            tokenizer_flags)
    command("recipe", "data, drafters, export and τ in one time-boxed run (or its plan)", lambda a, argv: _recipe(a),
            _recipe_flags, sys.modules[plan.__module__].__doc__)
    command("scaling", "τ against training tokens at a fixed architecture (a table)", _scaling, _scaling_flags,
            sys.modules[run_scaling.__module__].__doc__)
    command("compare", "τ of exported drafters on the same held-out prompts, greedy and sampled",
            lambda a, argv: _compare(a), _compare_flags, compare_drafters.__doc__)
    return ap


def main(argv: list[str] | None = None) -> int:
    """Run `python -m specjax.train` on `argv` (default sys.argv[1:]); returns the exit status (2: a user error,
    printed as one line naming the command)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    first = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    methods_from_flag(first)
    try:  # the kinds declared outside the package join before the commands are made from `TRAINERS`
        load_methods_from(first.parse_known_args(argv)[0])
    except UsageError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    try:
        args = parser().parse_args(argv)
    except SystemExit as e:  # argparse printed its usage error (naming the sub-command) or the help
        return e.code if isinstance(e.code, int) else 2
    try:
        compile_cache.enable()  # a later run loads its compiled programs (SPECJAX_COMPILE_CACHE=0: off)
        return args.run(args, argv)
    except UsageError as e:
        print(f"{PROG} {args.command}: error: {e}", file=sys.stderr)
        return 2
    except (FileNotFoundError, ValueError) as e:  # bad files met while loading (a truncated manifest, ...)
        print(f"{PROG} {args.command}: error: {e}", file=sys.stderr)
        return 2
