"""CLI: `python -m specjax.train dflash` — generate the target's training data, train, export.

    python -m specjax.train dflash --target zoo --out runs/dflash-zoo --export specjax/zoo/dflash-tiny-neox \\
        --layers 2 --target-layers 1,3 --prompts 3000 --max-new-tokens 96 --seq-len 160 --steps 1200

Targets: `zoo` (tiny-neox-target), `smollm2-135m` (registry GGUF; prompts go through its chat
template), or an HF checkpoint directory with tokenizer.json. Training prompts are the
*train* splits of the wiki openings and ShareGPT first user turns (never test prompts).
OUT/data.npz (+ data.json, the data recipe) is reused when it exists with the same recipe;
`--resume` continues training from OUT/ckpt. The export directory gets the float16 drafter,
its config.json (naming the target) and recipe.json (data + training recipe + final log).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import time

import jax
import numpy as np

from specjax.train.dflash import DFlashTrainConfig, choose_mask_token, export, make_dataset, train


def load_target(name: str):
    """(cfg, params, encode(text) -> ids, reserved special ids, name)."""
    if name == "zoo":
        from specjax import zoo

        cfg, params, tok = zoo.load("tiny-neox-target")
        return cfg, params, (lambda t: zoo.encode(tok, t)), (zoo.EOS_ID,), "tiny-neox-target"
    if name == "smollm2-135m":
        from specjax.data.assets import fetch
        from specjax.models.gguf import load_gguf

        cfg, params, tok = load_gguf(fetch("smollm2_135m_instruct_q4_1"))

        def encode(text):
            return tok.encode(tok.apply_chat_template([{"role": "user", "content": text}]), add_special_tokens=False)

        reserved = tuple(i for i in range(cfg.vocab_size) if tok.tokenizer.id_to_token(i).startswith("<|"))
        return cfg, params, encode, reserved, "smollm2-135m-instruct"
    from tokenizers import Tokenizer

    from specjax.models import load_checkpoint

    cfg, params = load_checkpoint(name)
    tok = Tokenizer.from_file(str(pathlib.Path(name) / "tokenizer.json"))
    return cfg, params, (lambda t: tok.encode(t).ids), tuple(cfg.eos_token_ids), name


def training_prompts(num: int, seed: int) -> list[str]:
    """`num` train-split prompts, half wiki openings and half ShareGPT first user turns (seeded shuffle)."""
    from specjax.data.prompts import sharegpt_prompts, wiki_prompts

    rng = np.random.default_rng(seed)
    wiki = [p.prompt for p in wiki_prompts("train")]
    chat = [p.prompt[:2000] for p in sharegpt_prompts("train")]
    rng.shuffle(wiki)
    rng.shuffle(chat)
    half = num // 2
    return wiki[: num - min(half, len(chat))] + chat[:half]


def add_data_args(ap: argparse.ArgumentParser) -> None:
    """The target and data-recipe flags every drafter CLI shares."""
    ap.add_argument("--target", default="zoo", help="zoo | smollm2-135m | HF checkpoint dir")
    ap.add_argument("--out", required=True)
    ap.add_argument("--export", help="write the trained drafter here")
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--stop-after", type=int, default=None, help="run at most this many steps now (then --resume)")
    ap.add_argument("--prompts", type=int, default=3000)
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--seq-len", type=int, default=160)
    ap.add_argument("--gen-batch", type=int, default=64)
    ap.add_argument("--sampled-fraction", type=float, default=0.25)


def add_config_args(ap: argparse.ArgumentParser, config_cls) -> None:
    for f in dataclasses.fields(config_cls):
        ap.add_argument("--" + f.name.replace("_", "-"), type=type(f.default), default=f.default)


def config_from_args(args, config_cls):
    return config_cls(**{f.name: getattr(args, f.name) for f in dataclasses.fields(config_cls)})


def prepare(args, seed: int):
    """Load the target and its regenerated data (OUT/data.npz, reused when its recipe matches):
    (tcfg, tparams, target name, reserved ids, data, data recipe + stats)."""
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tcfg, tparams, encode, reserved, target_name = load_target(args.target)
    data_recipe = {"target": target_name, "prompts": args.prompts, "prompt_source": "train splits: wiki openings "
                   "(first sentence) + ShareGPT first user turns, half each, seeded shuffle", "seed": seed,
                   "max_new_tokens": args.max_new_tokens, "seq_len": args.seq_len,
                   "sampled_fraction_T1": args.sampled_fraction, "rest": "greedy", "stop": "target EOS"}
    data_path, recipe_path = out / "data.npz", out / "data.json"
    if data_path.exists() and recipe_path.exists() and json.loads(recipe_path.read_text())["recipe"] == data_recipe:
        with np.load(data_path) as z:
            data = {k: z[k] for k in z.files}
        print(f"data: reusing {data_path}", flush=True)
    else:
        t0 = time.time()
        prompts = [encode(t) for t in training_prompts(args.prompts, seed)]
        data = make_dataset((tcfg, tparams), prompts, seq_len=args.seq_len, max_new_tokens=args.max_new_tokens,
                            batch_size=args.gen_batch, sampled_fraction=args.sampled_fraction, seed=seed)
        np.savez(data_path, **data)
        stats = {"sequences": int(len(data["tokens"])), "response_tokens": int(data["loss_mask"].sum()),
                 "seconds": round(time.time() - t0, 1)}
        recipe_path.write_text(json.dumps({"recipe": data_recipe, "stats": stats}, indent=2))
        print(f"data: {stats}", flush=True)
    return tcfg, tparams, target_name, reserved, data, json.loads(recipe_path.read_text())


def export_recipe(target_name: str, data_recipe: dict, tc, dcfg, dparams, t0: float, log, command: str, **extra):
    return {"target": target_name, "data": data_recipe, **extra, "train_config": dataclasses.asdict(tc),
            "drafter": dcfg.to_hf(), "params": int(sum(np.prod(x.shape) for x in jax.tree.leaves(dparams))),
            "train_seconds_this_run": round(time.time() - t0, 1), "device": jax.devices()[0].device_kind,
            "log": log, "command": command}


def main(argv, *, command: str = "dflash", doc: str | None = None, train_config=DFlashTrainConfig,
         drafter_config=None, add_drafter_args=None, drafter_fields=None, step_factory=None) -> None:
    """The DFlash CLI; Domino's (`domino_cli.py`) is this with its own configs, flags and step:
    add_drafter_args(ap) adds flags, drafter_fields(args) -> extra drafter config fields."""
    from specjax.models.dflash import DFlashConfig

    drafter_config = drafter_config or DFlashConfig
    ap = argparse.ArgumentParser(prog=f"python -m specjax.train {command}", description=doc or __doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_data_args(ap)
    ap.add_argument("--layers", type=int, default=2, help="draft layers N_d")
    ap.add_argument("--target-layers", default=None, help="comma-separated target layer ids (default: DFlash's rule)")
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--mask-token", type=int, default=None, help="default: the least frequent id in the data")
    if add_drafter_args:
        add_drafter_args(ap)
    add_config_args(ap, train_config)
    args = ap.parse_args(argv)
    tc = config_from_args(args, train_config)
    tcfg, tparams, target_name, reserved, data, data_recipe = prepare(args, tc.seed)
    counts = np.bincount(data["tokens"][data["tokens"] > 0].ravel(), minlength=tcfg.vocab_size)
    mask_id = args.mask_token if args.mask_token is not None else choose_mask_token(counts, reserved)
    print(f"mask token id {mask_id}: occurs {int(counts[mask_id])} times in the data", flush=True)

    ids = tuple(int(x) for x in args.target_layers.split(",")) if args.target_layers else None
    dcfg = drafter_config.for_target(tcfg, num_layers=args.layers, target_layer_ids=ids, block_size=args.block_size,
                                     mask_token_id=mask_id, **(drafter_fields(args) if drafter_fields else {}))
    t0 = time.time()
    dparams, log = train((tcfg, tparams), dcfg, data, tc, args.out, resume=args.resume, stop_after=args.stop_after,
                         step_factory=step_factory)
    if args.export:
        recipe = export_recipe(target_name, data_recipe, tc, dcfg, dparams, t0, log,
                               f"python -m specjax.train {command} " + " ".join(argv),
                               mask_token={"id": mask_id, "count_in_data": int(counts[mask_id])})
        print(f"exported -> {export(args.export, dcfg, dparams, recipe)}", flush=True)
