"""`specjax bench` (the paper's protocol over held-out prompt sets) and `specjax bench-device` (raw device
costs on random weights): flags in, `specjax.bench.suite.BenchPlan` / `specjax.bench.device.Settings` out.
`bench`'s flags are made from `BenchPlan`'s fields (`specjax.cli.plans`), which validates itself."""

from __future__ import annotations

import jax

from specjax.bench import device
from specjax.bench.suite import BenchPlan, bench_models, run_suite
from specjax.cli.common import (LOAD_ERRORS, UsageError, check_draft_flag, check_drafter_kinds, check_method,
                                check_unused_drafters, load_methods_from, methods_from_flag, model_name, reader_dirs,
                                source_flags)
from specjax.cli.plans import as_flags, flags_of, plan_from
from specjax.drafters.spec import Parsed
from specjax.pipeline import check_source, default_layout

__all__ = ["add_parsers"]


def add_parsers(sub) -> None:
    bench = sub.add_parser("bench", help="the paper's benchmark protocol: methods x held-out prompts, one table")
    flags_of(bench, BenchPlan, defaults={"num_prompts": None})  # None: 10, or the number of --prompt texts
    models = bench.add_mutually_exclusive_group()
    models.add_argument("--random", action="store_true",
                        help="random tiny models and random token prompts of --prompt-len tokens")
    source_flags(bench, models)
    methods_from_flag(bench)
    bench.add_argument("--self-draft", action="store_true", help="draft = target (every draft token is accepted)")
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
    dev.add_argument("--select-budget", type=int, help="tree nodes N of the select part (default 512)")
    dev.add_argument("--verify-widths", help="comma-separated token counts T of the verify part (default "
                                             "1,64,128,256,512)")
    dev.add_argument("--long-cache", type=int, help="cache slots of the AR part's long-cache timing (default 16384; "
                                                   "0 skips it)")
    dev.add_argument("--batch", type=int, help="batch of the AR / verify / compile / round parts (default 1)")
    dev.add_argument("--reps", type=int, help="timed repetitions per figure, medians (default 10)")
    dev.add_argument("--methods", help="compile-part method specs (default ar,chain4,dynatree-p3,ddtree-64)")
    dev.add_argument("--layouts", help="comma-separated layer layouts of the target timed by ar, verify, compile and "
                                       "round: stacked, unstacked, dual (default: all on CPU, stacked and unstacked elsewhere)")
    dev.add_argument("--json", help="write settings, environment, units and every figure here")
    dev.set_defaults(run=run_bench_device)


def plan_of(args) -> tuple[BenchPlan, tuple[Parsed, ...], set[str]]:
    """The `BenchPlan` of `specjax bench`'s flags, its methods as read (`BenchPlan.check`, run once: UsageError
    naming the flag) and the drafters they need ("draft", reader kinds), after what the flags bound beyond the
    plan: the models at hand."""
    load_methods_from(args)
    check_draft_flag(args)
    texts = tuple(args.prompts) if args.prompts and not args.random else None
    num = args.num_prompts if args.num_prompts is not None else (len(texts) if texts else 10)
    plan = plan_from(args, BenchPlan, prompts=texts, num_prompts=num)
    try:
        parsed = plan.check()
    except ValueError as e:
        raise UsageError(as_flags(str(e), BenchPlan)) from None
    if not args.random:
        try:
            available = check_source(model_name(args), args.draft, **reader_dirs(args))
        except ValueError as e:
            raise UsageError(str(e)) from None
        needs = {k for text, p in zip(plan.methods, parsed) for k in check_method(text, available, p)} - {"target"}
        check_unused_drafters(tuple(needs), args, f"--methods {args.methods!r}")
        check_drafter_kinds(args)
    else:
        needs = set()
        check_unused_drafters((), args, "--random (random tiny models, no trained drafter)")
    return plan, parsed, needs


def run_bench(args) -> int:
    plan, parsed, needs = plan_of(args)
    layout = args.layout or default_layout(model_name(args))  # the model's serving layout on this backend
    try:  # only the drafters the methods draft with are read (a model's others may be absent, or large)
        models = bench_models(model_name(args), draft=args.draft, layout=layout, random=args.random,
                              self_draft=args.self_draft, needs=tuple(sorted(needs)), **reader_dirs(args))
    except LOAD_ERRORS as e:
        raise UsageError(f"cannot load {model_name(args)}: {e}") from None
    try:  # the plan's own checks name its fields; the models bound num_prompts and the widths (`prompt_sets`)
        suite = run_suite(plan, models, layout=layout, parsed=parsed)
    except ValueError as e:
        raise UsageError(as_flags(str(e), BenchPlan)) from None
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
                                                layouts=split(args.layouts), select_budget=args.select_budget,
                                                verify_widths=_ints(split(args.verify_widths), "--verify-widths"))
    except ValueError as e:
        raise UsageError(str(e)) from None
    save = (lambda report: device.write_json(args.json, report)) if args.json else None  # after every part
    device.run(shapes, parts, settings, save=save)
    return 0


def _ints(items, flag: str):
    """A comma-split flag's items as ints (None stays None); a UsageError naming the flag otherwise."""
    try:
        return None if items is None else tuple(int(x) for x in items)
    except ValueError:
        raise UsageError(f"{flag} takes comma-separated whole numbers, got {','.join(items)}") from None
