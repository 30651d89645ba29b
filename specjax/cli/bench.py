"""`specjax bench` (the paper's protocol over held-out prompt sets) and `specjax bench-device` (raw device
costs on random weights): flags in, `specjax.bench.suite.BenchPlan` / `specjax.bench.device.Settings` out."""

from __future__ import annotations

import jax

from specjax.bench import device
from specjax.bench.suite import BenchPlan, bench_models, run_suite
from specjax.cli.common import (LOAD_ERRORS, UsageError, check_drafter_kinds, check_method, check_sampling,
                                check_unused_drafters, load_methods_from, methods_from_flag, model_name, reader_dirs,
                                source_flags)
from specjax.data.datasets import DATASETS, dataset_texts
from specjax.drafters.registry import needs_of, parse, split_methods
from specjax.pipeline import check_source

__all__ = ["add_parsers"]


def add_parsers(sub) -> None:
    bench = sub.add_parser("bench", help="the paper's benchmark protocol: methods x held-out prompts, one table")
    bench.add_argument("--methods", default="ar,fixed5x2,dynatree-p1,dynatree-p2,dynatree-p3",
                       help="comma-separated method specs; a method's own overrides continue after it "
                            "(ar,ddtree-8:ret=4,prune=0) (default: the paper's Table 1 rows)")
    bench.add_argument("--dataset", default="wiki", help=f"prompt set, or several comma-separated: each is measured in "
                       f"turn on the same loaded models (a table each, then speedup / τ per dataset and their "
                       f"means); one of {', '.join(DATASETS)} (default: %(default)s)")
    bench.add_argument("--split", choices=["train", "valid", "test"], default="test",
                       help="split of wiki / sharegpt / austen (default: test, held out from training)")
    bench.add_argument("--prompt", action="append", help="prompt text instead of --dataset (repeatable)")
    bench.add_argument("--prompts", type=int,
                       help="prompts run, warm-up ones included (default: 10, or the number of --prompt texts)")
    bench.add_argument("--warmup", type=int, default=2, help="first prompts run and discarded (default 2)")
    bench.add_argument("--batch", type=int, default=1,
                       help="prompts per generate call (default 1); --prompts and --warmup must be multiples of it")
    bench.add_argument("--max-new-tokens", type=int, default=128, help="tokens per prompt (default: %(default)s)")
    bench.add_argument("--prompt-len", type=int, default=64,
                       help="keep each prompt's last N tokens; all are padded to one width (default 64)")
    bench.add_argument("--round-split", action="store_true",
                       help="after the (first) prompt set, time each speculative method's round and its parts "
                            "against an AR step (`specjax.bench.round_split.method_split`): what explains η")
    bench.add_argument("--json", help="write environment, config and results (per prompt too) here")
    bench.add_argument("--csv", help="write one row per method here")
    models = bench.add_mutually_exclusive_group()
    models.add_argument("--random", action="store_true",
                        help="random tiny models and random token prompts of --prompt-len tokens")
    source_flags(bench, models)
    methods_from_flag(bench)
    bench.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default); > 0 samples")
    bench.add_argument("--stop-at-eos", action="store_true", help="stop rows at the target's EOS (default: never)")
    bench.add_argument("--self-draft", action="store_true", help="draft = target (every draft token is accepted)")
    bench.add_argument("--no-ttft", action="store_true", help="skip the TTFT calls (and their compiles)")
    bench.add_argument("--no-progress", action="store_true", help="no progress bar")
    bench.add_argument("--check-trees", action="store_true",
                       help="validate every tree the speculative methods propose inside the loop (specjax.tree's "
                            "rules): a broken one stops the run naming its row, round, node and rule; the timings "
                            "include the checks (default: off)")
    bench.set_defaults(run=run_bench)

    dev = sub.add_parser("bench-device", help="device costs on random weights: AR vs the bandwidth bound, verify vs T, "
                                              "select_tree, compile times, DDTree round split (JSON out)")
    dev.add_argument("--shapes", help="comma-separated: tiny, smollm2-135m, pythia-410m, qwen3-8b "
                                      "(default: tiny on CPU, the three named ones elsewhere)")
    dev.add_argument("--parts", help="comma-separated: ar, verify, select, compile, round (default: all)")
    dev.add_argument("--dtype", choices=["float32", "bfloat16", "float16"],
                     help="params dtype (default: bfloat16 on GPU/TPU, float32 on CPU)")
    dev.add_argument("--new-tokens", type=int, help="AR / compile / round new tokens (default 128)")
    dev.add_argument("--context", type=int, help="verify-forward context length (default 512)")
    dev.add_argument("--long-cache", type=int, help="cache slots of the AR part's long-cache timing (default 16384; "
                                                   "0 skips it)")
    dev.add_argument("--batch", type=int, help="batch of the AR / verify / compile / round parts (default 1)")
    dev.add_argument("--reps", type=int, help="timed repetitions per figure, medians (default 10)")
    dev.add_argument("--methods", help="compile-part method specs (default ar,chain4,dynatree-p3,ddtree-64)")
    dev.add_argument("--layouts", help="comma-separated layer layouts of the target timed by ar, verify, compile and "
                                       "round: stacked, unstacked, dual (default: all on CPU, stacked elsewhere)")
    dev.add_argument("--json", help="write settings, environment, units and every figure here")
    dev.set_defaults(run=run_bench_device)


def plan_of(args) -> BenchPlan:
    """The `BenchPlan` of `specjax bench`'s flags, checked (UsageError naming the flag)."""
    load_methods_from(args)
    check_sampling(args)
    try:
        methods = tuple(split_methods(args.methods))
    except ValueError as e:
        raise UsageError(str(e)) from None
    datasets = tuple(d.strip() for d in args.dataset.split(",") if d.strip())
    if args.prompt and len(datasets) > 1:
        raise UsageError("--prompt replaces --dataset: give one or the other")
    if args.prompt and any(not p.strip() for p in args.prompt):
        raise UsageError("--prompt is empty: give the text to continue")
    unknown = [d for d in datasets if d not in DATASETS]
    if unknown or not datasets:
        raise UsageError(f"--dataset {args.dataset!r}: unknown {', '.join(unknown) or 'empty'}; choose from "
                         f"{', '.join(DATASETS)} (several comma-separated)")
    twice = sorted({d for d in datasets if datasets.count(d) > 1})
    if twice:
        raise UsageError(f"--dataset {args.dataset!r}: {', '.join(twice)} twice")
    num = args.prompts if args.prompts is not None else (len(args.prompt) if args.prompt and not args.random else 10)
    if num < 1 or not 0 <= args.warmup < num:
        raise UsageError(f"need --prompts >= 1 and 0 <= --warmup < --prompts, got {num}, {args.warmup}")
    if args.prompt_len < 1:
        raise UsageError(f"--prompt-len must be >= 1, got {args.prompt_len}")
    plan = BenchPlan(methods=methods, datasets=datasets, split=args.split,
                     prompts=tuple(args.prompt) if args.prompt and not args.random else None, num_prompts=num,
                     warmup=args.warmup, batch=args.batch, max_new_tokens=args.max_new_tokens,
                     prompt_len=args.prompt_len, temperature=args.temperature, stop_at_eos=args.stop_at_eos,
                     ttft=not args.no_ttft, progress=not args.no_progress, round_split=args.round_split,
                     json=args.json, csv=args.csv, check_trees=args.check_trees)
    try:
        plan.check()
    except ValueError as e:  # what is left: the batch grouping
        raise UsageError(f"--batch {args.batch} with --prompts {num} --warmup {args.warmup}: {e}") from None
    if not args.random:
        try:
            available = check_source(model_name(args), args.draft, **reader_dirs(args))
        except ValueError as e:
            raise UsageError(str(e)) from None
        needs = {k for spec in methods for k in check_method(spec, available)}
        check_unused_drafters(tuple(needs), args, f"--methods {args.methods!r}")
        check_drafter_kinds(args)
    else:
        for spec in methods:
            try:
                needs_of(spec)
            except ValueError as e:
                raise UsageError(str(e)) from None
        check_unused_drafters((), args, "--random (random tiny models, no trained drafter)")
    if args.check_trees and all(parse(spec).spec.name == "ar" for spec in methods):
        raise UsageError(f"--check-trees checks the trees speculative methods propose; --methods {args.methods!r} "
                         f"proposes none: drop the flag or add a speculative method")
    return plan


def _check_fits(plan: BenchPlan, models) -> None:
    """What the loaded models bound, before anything compiles: --prompts within each prompt set, and the padded
    prompt width (min(--prompt-len, the longest prompt), as `run_suite` pads) + --max-new-tokens within the
    target's positions (`max_position_embeddings`); UsageError naming the flag."""
    limit = getattr(models.target[0], "max_position_embeddings", None)
    for dataset in ("--prompt",) if plan.prompts else plan.datasets:
        if models.encode is None:  # random models: random prompts of exactly --prompt-len tokens
            dataset, width = "random tokens", plan.prompt_len
        else:
            texts = list(plan.prompts) if plan.prompts else dataset_texts(dataset, plan.split, chat=models.chat)
            if len(texts) < plan.num_prompts:
                raise UsageError(f"--prompts {plan.num_prompts}: {dataset} has {len(texts)} "
                                 f"prompt{'s' * (len(texts) != 1)}; ask for at most {len(texts)}")
            width = min(plan.prompt_len, max(len(models.encode(t)) for t in texts[:plan.num_prompts]))
        if limit is None or width + plan.max_new_tokens <= limit:
            continue
        if width >= limit:  # width <= --prompt-len: a smaller one cuts every prompt
            raise UsageError(f"--prompt-len {plan.prompt_len}: prompts {width} tokens wide ({dataset}) leave no room "
                             f"for a new token in {models.target_name}'s {limit} positions (max_position_embeddings): "
                             f"give --prompt-len < {limit}")
        raise UsageError(f"--max-new-tokens {plan.max_new_tokens}: prompts {width} tokens wide ({dataset}) + "
                         f"{plan.max_new_tokens} new = {width + plan.max_new_tokens} positions exceed "
                         f"{models.target_name}'s {limit} (max_position_embeddings): give --max-new-tokens <= "
                         f"{limit - width}" + (" or a smaller --prompt-len" if width == plan.prompt_len else ""))


def run_bench(args) -> int:
    plan = plan_of(args)
    try:
        models = bench_models(model_name(args), draft=args.draft, layout=args.layout, random=args.random,
                              self_draft=args.self_draft, **reader_dirs(args))
    except LOAD_ERRORS as e:
        raise UsageError(f"cannot load {model_name(args)}: {e}") from None
    _check_fits(plan, models)
    try:
        suite = run_suite(plan, models, layout=args.layout)
    except ValueError as e:
        raise UsageError(str(e)) from None
    return 0 if suite.ok else 1  # near-ties are rounding, not bugs (specjax.equality)


def run_bench_device(args) -> int:
    """`specjax bench-device`: raw device costs on random weights (`specjax.bench.device`)."""
    platform = jax.devices()[0].platform
    split = lambda text: tuple(x.strip() for x in text.split(",") if x.strip()) if text else None  # noqa: E731
    try:
        shapes, parts = split(args.shapes) or device.default_shapes(platform), split(args.parts) or device.PARTS
        device.check_names(shapes, parts)
        settings = device.Settings.for_platform(platform, dtype=args.dtype, new_tokens=args.new_tokens,
                                                context=args.context, long_cache=args.long_cache, batch=args.batch,
                                                reps=args.reps, compile_methods=split(args.methods),
                                                layouts=split(args.layouts))
    except ValueError as e:
        raise UsageError(str(e)) from None
    report = device.run(shapes, parts, settings)
    if args.json:
        device.write_json(args.json, report)
    return 0
