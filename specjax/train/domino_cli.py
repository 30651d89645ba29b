"""CLI: `python -m specjax.train domino` — the target's training data, Domino training, export.

    python -m specjax.train domino --target zoo --out runs/domino-zoo --export specjax/zoo/tiny-neox-domino \\
        --layers 2 --target-layers 1,3 --prompts 4000 --max-new-tokens 128 --seq-len 192 --steps 1200

The DFlash CLI (`specjax/train/dflash_cli.py`: the same targets, data flags, OUT/data.npz
reuse, backbone flags) plus the head (`--gru-hidden`, `--head-rank`, `--shift-label`,
`--pure-prefix-len`) and the training variant (`--prefix tf|ttt`, `--lambda0` 1 = the
base-anchored curriculum, 0 = none, `--anneal-frac`). Backbone and head train jointly
from scratch, as the reference does.
"""

from __future__ import annotations


def _add_head_args(ap) -> None:
    ap.add_argument("--gru-hidden", type=int, default=64, help="d_s (paper: H/4)")
    ap.add_argument("--head-rank", type=int, default=32, help="r (paper: H/16, floored at 32 here)")
    ap.add_argument("--shift-label", action="store_true", help="the released checkpoints' alignment (K = block)")
    ap.add_argument("--pure-prefix-len", type=int, default=0, help="drafts 1..P use base logits (released: 1)")


def _head_fields(args) -> dict:
    return {"gru_hidden": args.gru_hidden, "head_rank": args.head_rank, "shift_label": args.shift_label,
            "pure_prefix_len": args.pure_prefix_len}


def main(argv) -> None:
    from specjax.models.domino import DominoConfig
    from specjax.train.dflash_cli import main as backbone_main
    from specjax.train.domino import DominoTrainConfig, make_step

    backbone_main(argv, command="domino", doc=__doc__, train_config=DominoTrainConfig, drafter_config=DominoConfig,
                  add_drafter_args=_add_head_args, drafter_fields=_head_fields, step_factory=make_step)
