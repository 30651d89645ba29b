"""CLI: `python -m specjax.train eagle3` — the target's training data, training-time-test training, export.

    python -m specjax.train eagle3 --target zoo --out runs/eagle3-zoo --export specjax/zoo/tiny-neox-eagle3 \\
        --prompts 4000 --max-new-tokens 128 --seq-len 192 --steps 1500

Targets and data are the DFlash CLI's (`specjax/train/dflash_cli.py`: the same flags, the
same OUT/data.npz reuse, so a run directory can serve both drafters of one target).
`--target-layers` defaults to EAGLE-3's low / mid / high choice. The export directory gets
the float16 drafter, config.json (naming the target) and recipe.json.
"""

from __future__ import annotations

import argparse
import time

from specjax.train.dflash import export, train
from specjax.train.dflash_cli import add_config_args, add_data_args, config_from_args, export_recipe, prepare
from specjax.train.eagle3 import Eagle3TrainConfig, make_step


def main(argv) -> None:
    ap = argparse.ArgumentParser(prog="python -m specjax.train eagle3", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_data_args(ap)
    ap.add_argument("--target-layers", default=None, help="comma-separated target layer ids (default: low/mid/high)")
    add_config_args(ap, Eagle3TrainConfig)
    args = ap.parse_args(argv)
    tc = config_from_args(args, Eagle3TrainConfig)
    tcfg, tparams, target_name, _, data, data_recipe = prepare(args, tc.seed)

    from specjax.models.eagle3 import Eagle3Config

    ids = tuple(int(x) for x in args.target_layers.split(",")) if args.target_layers else None
    dcfg = Eagle3Config.for_target(tcfg, target_layer_ids=ids)
    t0 = time.time()
    dparams, log = train((tcfg, tparams), dcfg, data, tc, args.out, resume=args.resume, stop_after=args.stop_after,
                         step_factory=make_step)
    if args.export:
        recipe = export_recipe(target_name, data_recipe, tc, dcfg, dparams, t0, log,
                               "python -m specjax.train eagle3 " + " ".join(argv))
        print(f"exported -> {export(args.export, dcfg, dparams, recipe)}", flush=True)
