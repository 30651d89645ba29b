"""CLI: train one zoo language model.

    python -m specjax.train.tokenizer --out specjax/zoo/tokenizer.json     # once, first
    python -m specjax.train --model target --tokenizer TOK.json --steps 1500 --out runs/target \\
        --export specjax/zoo/tiny-neox-target

    python -m specjax.train eval --target DIR --draft DIR [--prompts 20 --k 4]   # held-out report (JSON)
    python -m specjax.train dflash --target zoo --out RUN --export DIR [...]     # a DFlash drafter (dflash_cli.py)
    python -m specjax.train eagle3 --target zoo --out RUN --export DIR [...]     # an EAGLE-3 drafter (eagle3_cli.py)
    python -m specjax.train domino --target zoo --out RUN --export DIR [...]     # a Domino drafter (domino_cli.py)

`--resume` continues from OUT/ckpt (saved every --ckpt-every steps). Model overrides:
--hidden/--layers/--heads/--ffn replace the preset's sizes.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from specjax.train.lm import PRESETS, TrainConfig, train


def eval_main(argv) -> None:
    import json

    from specjax.train.lm import report

    ap = argparse.ArgumentParser(prog="python -m specjax.train eval")
    ap.add_argument("--target", required=True)
    ap.add_argument("--draft", required=True)
    ap.add_argument("--prompts", type=int, default=20)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    args = ap.parse_args(argv)
    print(json.dumps(report(args.target, args.draft, args.prompts, args.k, args.max_new_tokens), indent=2,
                     ensure_ascii=False))


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["eval"]:
        return eval_main(argv[1:])
    if argv[:1] == ["dflash"]:
        from specjax.train.dflash_cli import main as dflash_main

        return dflash_main(argv[1:])
    if argv[:1] == ["domino"]:
        from specjax.train.domino_cli import main as domino_main

        return domino_main(argv[1:])
    if argv[:1] == ["eagle3"]:
        from specjax.train.eagle3_cli import main as eagle3_main

        return eagle3_main(argv[1:])
    ap = argparse.ArgumentParser(prog="python -m specjax.train", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=sorted(PRESETS), required=True)
    ap.add_argument("--tokenizer", required=True, help="tokenizer.json from python -m specjax.train.tokenizer")
    ap.add_argument("--out", required=True, help="run directory (checkpoints, summary.json)")
    ap.add_argument("--export", default=None, help="write the final 16-bit HF checkpoint + tokenizer here")
    ap.add_argument("--export-dtype", choices=("float16", "bfloat16"), default="float16")
    ap.add_argument("--resume", action="store_true")
    d = TrainConfig()
    for f in ("steps", "batch_size", "seq_len", "warmup", "eval_every", "eval_windows", "ckpt_every", "seed",
              "sharegpt_chars"):
        ap.add_argument("--" + f.replace("_", "-"), type=int, default=getattr(d, f))
    for f in ("lr", "min_lr_ratio", "weight_decay", "clip"):
        ap.add_argument("--" + f.replace("_", "-"), type=float, default=getattr(d, f))
    ap.add_argument("--hidden", type=int)
    ap.add_argument("--layers", type=int)
    ap.add_argument("--heads", type=int)
    ap.add_argument("--ffn", type=int)
    args = ap.parse_args(argv)
    tc = TrainConfig(**{f: getattr(args, f) for f in TrainConfig.__dataclass_fields__})
    overrides = {k: v for k, v in (("hidden_size", args.hidden), ("num_layers", args.layers),
                                   ("num_heads", args.heads), ("intermediate_size", args.ffn)) if v is not None}
    if args.export_dtype == "bfloat16":
        import ml_dtypes

        dtype = ml_dtypes.bfloat16
    else:
        dtype = np.float16
    train(args.model, args.out, args.tokenizer, tc, resume=args.resume, export_dir=args.export,
          export_dtype=dtype, **overrides)


if __name__ == "__main__":
    main()
