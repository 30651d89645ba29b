"""`python -m specjax.train COMMAND`: training data, feature caches, drafters, and the zoo's language models.

    python -m specjax.train data     --target smollm2-135m --out DATA --tokens 500000   # the target's answers
    python -m specjax.train features --target smollm2-135m --data DATA --layers 2,14,27  # optional: prebuild
    python -m specjax.train dflash   --target smollm2-135m --data DATA --out RUN --export DIR [--resume]
    python -m specjax.train eagle3   ...        python -m specjax.train domino ...
    python -m specjax.train lm       --model target --tokenizer TOK.json --out RUN       # a zoo language model
    python -m specjax.train eval     --target DIR --draft DIR                           # held-out LM report

`python -m specjax.train COMMAND --help` lists a command's options with their defaults.
"""

from __future__ import annotations

import argparse
import json
import sys

import ml_dtypes
import numpy as np

from specjax.train import data, drafter_cli
from specjax.train.data import load_shards, load_target
from specjax.train.features import build_feature_cache
from specjax.train.lm import PRESETS, TrainConfig, report, train


def _lm_arguments(ap) -> None:
    ap.add_argument("--model", choices=sorted(PRESETS), required=True, help="the preset to train")
    ap.add_argument("--tokenizer", required=True, help="tokenizer.json from python -m specjax.train.tokenizer")
    ap.add_argument("--out", required=True, help="run directory (checkpoints, summary.json)")
    ap.add_argument("--export", default=None, help="write the final 16-bit HF checkpoint + tokenizer here "
                    "(default: no export)")
    ap.add_argument("--export-dtype", choices=("float16", "bfloat16"), default="float16",
                    help="(default: %(default)s)")
    ap.add_argument("--resume", action="store_true", help="continue from OUT/ckpt")
    d = TrainConfig()
    for f in ("steps", "batch_size", "seq_len", "warmup", "eval_every", "eval_windows", "ckpt_every", "seed",
              "sharegpt_chars"):
        ap.add_argument("--" + f.replace("_", "-"), type=int, default=getattr(d, f), help="(default: %(default)s)")
    for f in ("lr", "min_lr_ratio", "weight_decay", "clip"):
        ap.add_argument("--" + f.replace("_", "-"), type=float, default=getattr(d, f), help="(default: %(default)s)")
    for flag, what in (("--hidden", "hidden size"), ("--layers", "layers"), ("--heads", "heads"),
                       ("--ffn", "MLP width")):
        ap.add_argument(flag, type=int, default=None, help=f"override the preset's {what} (default: the preset's)")


def _lm(args) -> None:
    tc = TrainConfig(**{f: getattr(args, f) for f in TrainConfig.__dataclass_fields__})
    overrides = {k: v for k, v in (("hidden_size", args.hidden), ("num_layers", args.layers),
                                   ("num_heads", args.heads), ("intermediate_size", args.ffn)) if v is not None}
    if args.export_dtype == "bfloat16":
        dtype = ml_dtypes.bfloat16
    else:
        dtype = np.float16
    train(args.model, args.out, args.tokenizer, tc, resume=args.resume, export_dir=args.export,
          export_dtype=dtype, **overrides)


def _eval_arguments(ap) -> None:
    ap.add_argument("--target", required=True, help="target checkpoint directory")
    ap.add_argument("--draft", required=True, help="draft LM checkpoint directory")
    ap.add_argument("--prompts", type=int, default=20, help="held-out prompts (default: %(default)s)")
    ap.add_argument("--k", type=int, default=4, help="chain length (default: %(default)s)")
    ap.add_argument("--max-new-tokens", type=int, default=64, help="(default: %(default)s)")


def _eval(args) -> None:
    print(json.dumps(report(args.target, args.draft, args.prompts, args.k, args.max_new_tokens), indent=2,
                     ensure_ascii=False))


def _features_arguments(ap) -> None:
    ap.add_argument("--target", default="smollm2-135m", help="zoo | smollm2-135m | HF checkpoint directory "
                    "(default: %(default)s)")
    ap.add_argument("--data", required=True, help="data directory of `python -m specjax.train data`")
    ap.add_argument("--layers", required=True, help="comma-separated target layer ids to cache")
    ap.add_argument("--out", required=True, help="cache directory (missing layers are added)")


def _features(args) -> None:
    cfg, params, _, _ = load_target(args.target)
    cache = build_feature_cache((cfg, params), args.target, load_shards(args.data), args.data,
                                tuple(int(x) for x in args.layers.split(",")), args.out)
    print(json.dumps({k: cache.manifest[k] for k in ("total_tokens", "build_seconds", "bytes")}))


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m specjax.train", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p = sub.add_parser("data", help="generate the target's answers to training prompts (resumable shards)",
                       description=data.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    data.add_arguments(p)
    p.set_defaults(run=lambda a, argv: data.run(p, a))
    p = sub.add_parser("features", help="compute a data directory's target features once (float16 cache)")
    _features_arguments(p)
    p.set_defaults(run=lambda a, argv: _features(a))
    for kind, spec in drafter_cli.KINDS.items():
        p = sub.add_parser(kind, help=f"train {spec.help}", description=drafter_cli.__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        drafter_cli.add_arguments(p, kind)
        p.set_defaults(run=(lambda k: lambda a, argv: drafter_cli.run(k, a, argv))(kind))
    p = sub.add_parser("lm", help="train a zoo language model (target or draft LM) from a preset")
    _lm_arguments(p)
    p.set_defaults(run=lambda a, argv: _lm(a))
    p = sub.add_parser("eval", help="held-out report of a zoo target / draft LM pair (JSON)")
    _eval_arguments(p)
    p.set_defaults(run=lambda a, argv: _eval(a))
    return ap


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser().parse_args(argv)
    args.run(args, argv[1:])


if __name__ == "__main__":
    main()
