"""`specjax generate`: one prompt, AR against a speculative method, timed in one run (the comparison is
`specjax.bench.versus_ar`; this module parses the flags and prints it)."""

from __future__ import annotations

import argparse
import json

import jax
import jax.numpy as jnp
import numpy as np

from specjax.bench.versus_ar import TIMED_RUNS, versus_ar
from specjax.cli.common import (LOAD_ERRORS, UsageError, check_drafter_kinds, check_method, check_sampling,
                                check_unused_drafters, load_methods_from, methods_from_flag, model_name, reader_dirs,
                                source_flags)
from specjax.drafters.registry import forms, method, parse
from specjax.models.model import num_params
from specjax.pipeline import DEFAULT_METHOD, check_source, default_layout, default_method, load_pair, model_entry
from specjax.sampling import Sampling

__all__ = ["TIMED_RUNS", "add_parser", "run"]


def add_parser(sub) -> None:
    gen = sub.add_parser("generate", help="speculative vs AR generation of one prompt (default: embedded pair)")
    source_flags(gen, gen.add_mutually_exclusive_group())
    methods_from_flag(gen)
    gen.add_argument("--method", default=None,
                     help=f"a method spec (`specjax methods` lists their fields): {forms()}. Default: "
                          f"{DEFAULT_METHOD} (the fastest on the embedded pair, README) when a DFlash drafter is "
                          f"available, else dynatree-zoo with a draft LM, else ar")
    gen.add_argument("--prompt", help="prompt text (default: a held-out Wikipedia opening on the zoo pair)")
    gen.add_argument("--max-new-tokens", type=int, default=64, help="tokens to generate, >= 1 (default: %(default)s)")
    gen.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default); > 0 samples")
    gen.add_argument("--top-k", type=int, default=None, help="sample from the k most likely tokens (default: all)")
    gen.add_argument("--top-p", type=float, default=None, help="nucleus sampling threshold in (0, 1] (default: off)")
    gen.add_argument("--stop", action="append", metavar="TEXT",
                     help="cut the printed text before this string (repeatable; default: none)")
    gen.add_argument("--seed", type=int, default=0, help="PRNG seed when sampling (default: %(default)s)")
    gen.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32",
                     help="the params' dtype (default: %(default)s; bfloat16 compares with AR up to classified "
                          "near-ties)")
    gen.add_argument("--json", action="store_true", help="print one JSON object (texts, tokens/s, speedup, tau)")
    gen.add_argument("--rounds", action="store_true", help="print per-round stats and the acceptance histogram")
    gen.add_argument("--check-trees", action=argparse.BooleanOptionalAction, default=None,
                     help="validate every tree the method proposes inside the loop (specjax.tree's rules): a broken "
                          "one stops the run naming its row, round, node and rule; the timings include the checks "
                          "(default: on for a method from outside specjax, e.g. --methods-from, off for its own)")
    gen.set_defaults(run=run)


def _check(args) -> tuple[str, tuple[str, ...], dict]:
    """(method, what it needs, what the model has): every argument checked, nothing loaded."""
    load_methods_from(args)
    check_sampling(args)
    if args.prompt is not None and not args.prompt.strip():
        raise UsageError("--prompt is empty: give the text to continue")
    if any(not s for s in args.stop or ()):
        raise UsageError("--stop needs a non-empty string")
    if not -2**63 <= args.seed < 2**63:  # jax.random.key takes a 64-bit seed: an OverflowError traceback
        raise UsageError(f"--seed must fit 64 bits (-2**63 <= seed < 2**63), got {args.seed}")
    try:
        available = check_source(model_name(args), args.draft, **reader_dirs(args))
    except ValueError as e:
        raise UsageError(str(e)) from None
    spec = args.method or default_method(available, model_name(args))
    needs = check_method(spec, available)
    check_unused_drafters(needs, args, f"method {spec!r}")
    check_drafter_kinds(args)
    if args.check_trees and parse(spec).spec.name == "ar":
        raise UsageError(f"--check-trees checks the trees a speculative method proposes; method {spec!r} proposes "
                         f"none: drop the flag or pick a speculative method")
    return spec, needs, available


def _check_positions(args, cfg, model: str, prompt_len: int) -> None:
    """The prompt + --max-new-tokens must fit the target's positions (`max_position_embeddings`), checked before
    anything compiles, naming the flag to change."""
    limit = getattr(cfg, "max_position_embeddings", None)
    if limit is None or prompt_len + args.max_new_tokens <= limit:
        return
    if prompt_len >= limit:
        raise UsageError(f"--prompt: its {prompt_len} tokens leave no room for a new token in {model}'s {limit} "
                         f"positions (max_position_embeddings): shorten it")
    raise UsageError(f"--max-new-tokens {args.max_new_tokens}: the prompt's {prompt_len} tokens + "
                     f"{args.max_new_tokens} new = {prompt_len + args.max_new_tokens} positions exceed {model}'s "
                     f"{limit} (max_position_embeddings): give --max-new-tokens <= {limit - prompt_len}")


def _print_rounds(stats, max_depth: int) -> None:
    """Per-round statistics of row 0 and its acceptance-length histogram (0..max_depth)."""
    rounds = int(stats.num_rounds[0])
    acc, prop, depth = (np.asarray(x[0, :rounds]) for x in (stats.accepted, stats.proposed, stats.depth))
    for i in range(rounds):
        print(f"  round {i + 1:3d}: accepted {acc[i]:2d}, tree nodes {prop[i]:3d}, tree depth {depth[i]:2d}")
    hist = np.bincount(acc, minlength=max_depth + 1)
    print("  accepted draft tokens per round: " + ", ".join(f"{k}: {c}" for k, c in enumerate(hist)))


def run(args) -> int:
    spec, needs, _ = _check(args)
    model = model_name(args)
    try:
        pair = load_pair(model, needs, draft=args.draft, layout=args.layout or default_layout(model),
                         dtype=jnp.dtype(args.dtype),
                         **reader_dirs(args))
        prompt = args.prompt if args.prompt is not None else model_entry(model).default_prompt()
        m = method(spec, pair.cfg, draft=pair.draft, target_params=pair.params, **pair.readers)
    except LOAD_ERRORS as e:
        raise UsageError(f"cannot run {spec!r} on {model}: {e}") from None
    ids = pair.encode(prompt, pair.has_chat_template)
    _check_positions(args, pair.cfg, model, len(ids))
    try:  # the loops check their inputs before compiling (positions, sizes): one line, not a traceback
        result = versus_ar(pair, m, ids, max_new_tokens=args.max_new_tokens,
                           sampling=Sampling(args.temperature, args.top_k, args.top_p),
                           key=jax.random.key(args.seed), stop=tuple(args.stop or ()), check_trees=args.check_trees,
                           timed_runs=TIMED_RUNS)
    except ValueError as e:
        raise UsageError(str(e)) from None
    report = {"model": model, "prompt": prompt, **result.summary()}
    report = {k: report[k] for k in ("model", "method", "prompt", "sampling", "ar", "speculative") if k in report}
    if args.json:
        print(json.dumps(report, indent=2, ensure_ascii=False))
    else:
        _print(report, pair)
        if args.rounds and not m.is_ar:
            _print_rounds(result.speculative.stats, m.drafter.max_depth)
    return 0 if result.lossless else 1


def _print(report: dict, pair) -> None:
    ar, mode = report["ar"], report["sampling"]
    print(f"target: {pair.cfg.model_type}, {num_params(pair.params):,} params; "
          f"device {jax.devices()[0].platform}; prompt: {report['prompt']!r}")
    print(f"\n[AR {mode}] {ar['tokens']} tokens in {ar['seconds'] * 1e3:.1f} ms (median of {TIMED_RUNS}, "
          f"interleaved) = {ar['tokens_per_s']:.1f} tokens/s")
    print(ar["text"])
    sp = report.get("speculative")
    if sp is None:
        return
    print(f"\n[{report['method']} speculative, {mode}] {sp['tokens']} tokens in {sp['seconds'] * 1e3:.1f} ms = "
          f"{sp['tokens_per_s']:.1f} tokens/s — speedup vs AR {sp['speedup']:.2f}x, mean accepted length "
          f"{sp['tau']:.2f} tokens/round over {sp['rounds']} rounds"
          + (f"; vs AR: {sp['vs_ar']}" if sp["vs_ar"] else ""))
    if mode != "greedy":
        print(sp["text"])
