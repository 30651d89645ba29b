"""`python -m specjax.train {dflash,eagle3,domino}`: train a drafter from a data directory, resumable.

    python -m specjax.train data    --target smollm2-135m --out DATA                      # once (committed shards)
    python -m specjax.train dflash  --target smollm2-135m --data DATA --out RUN --draft-vocab 8192 \\
        --layers 1 --target-layers 2,14,27 --steps 3000 --export DIR [--resume] [--stop-after N]

The target's features for the data are computed once into `--cache` (default: a directory under
`$SPECJAX_CACHE/features` named by the target's checksum and the data's first shard; only missing
layers, and the shards the data gained since, are computed) and memory-mapped by every step. `--draft-vocab K` restricts the drafter to the K most
frequent response tokens (0: the full vocabulary). `--mesh data=D,model=M` runs the same step over
D x M devices (batch on "data", the target's head vocab-parallel on "model"). `--export` writes the
float16 drafter, its config.json and recipe.json (data, compute, the log, and τ measured by decoding
`--eval-prompts` held-out prompts of the data).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import time

import jax
import numpy as np

from specjax.data.assets import cache_root
from specjax.decode import generate
from specjax.draft_vocab import with_draft_vocab
from specjax.drafters.dflash import DFlashDrafter
from specjax.drafters.domino import DominoDrafter
from specjax.drafters.eagle3 import eagle3_drafter
from specjax.models import pad_prompts
from specjax.models.dflash import DFlashConfig
from specjax.models.dflash_net import target_outer
from specjax.models.domino import DominoConfig
from specjax.models.eagle3 import Eagle3Config
from specjax.sharding import make_mesh
from specjax.train import dflash as dflash_train
from specjax.train import domino as domino_train
from specjax.train import eagle3 as eagle3_train
from specjax.train.data import load_shards, load_target, params_sha256
from specjax.train.features import build_feature_cache, data_sha256
from specjax.train.loop import TrainSet, export, init_vocab_ids, machine, train, warm_start
from specjax.train.vocab import tables_of_ids, vocab_tables

__all__ = ["KINDS", "add_arguments", "run"]


@dataclasses.dataclass(frozen=True)
class DrafterKind:
    """How to train one drafter kind.

    Fields:
      train_config: its training config class (`DrafterTrainConfig` and the loss's fields).
      make_step: (dcfg, tcfg, opt, tc) -> (step, evaluate), `specjax.train.loop`'s contract.
      build_config: (parsed flags, target config, mask token id) -> the drafter's config.
      layers: (dcfg, tcfg) -> the feature layers a batch carries, in the step's order.
      drafter: (dcfg, tcfg) -> a Drafter that decodes with it (the measured τ at export).
      help: one line for the command's help.
    """

    train_config: type
    make_step: object
    build_config: object  # (args, tcfg, mask_id) -> drafter config
    layers: object  # (dcfg, tcfg) -> feature layers of a batch
    drafter: object  # (dcfg, tcfg) -> a Drafter for the measured τ
    help: str


def _dflash_config(args, tcfg, mask_id, cls=None, **extra):
    ids = tuple(int(x) for x in args.target_layers.split(",")) if args.target_layers else None
    return (cls or DFlashConfig).for_target(tcfg, num_layers=args.layers, target_layer_ids=ids,
                                            block_size=args.block_size, mask_token_id=mask_id, **extra)


def _domino_config(args, tcfg, mask_id):
    return _dflash_config(args, tcfg, mask_id, DominoConfig, gru_hidden=args.gru_hidden, head_rank=args.head_rank,
                          shift_label=args.shift_label, pure_prefix_len=args.pure_prefix_len)


def _eagle3_config(args, tcfg, mask_id):
    ids = tuple(int(x) for x in args.target_layers.split(",")) if args.target_layers else None
    # the paper's drafter: its own lm_head over the draft vocabulary (K = --draft-vocab, or the full vocabulary)
    return Eagle3Config.for_target(tcfg, target_layer_ids=ids, draft_vocab_size=args.draft_vocab or tcfg.vocab_size)


def _dflash_drafter(dcfg, tcfg):
    return DFlashDrafter(dcfg, tcfg)


def _domino_drafter(dcfg, tcfg):
    return DominoDrafter(dcfg, tcfg)


def _eagle3_drafter(dcfg, tcfg):
    return eagle3_drafter(dcfg, tcfg)


KINDS = {
    "dflash": DrafterKind(dflash_train.DFlashTrainConfig, dflash_train.make_step, _dflash_config,
                          lambda d, t: dflash_train.feature_layers(d), _dflash_drafter,
                          "a DFlash block drafter (also the backbone DDTree drafts with)"),
    "domino": DrafterKind(domino_train.DominoTrainConfig, domino_train.make_step, _domino_config,
                          lambda d, t: dflash_train.feature_layers(d), _domino_drafter,
                          "a Domino drafter: DFlash backbone + GRU head, base-anchored curriculum"),
    "eagle3": DrafterKind(eagle3_train.Eagle3TrainConfig, eagle3_train.make_step, _eagle3_config,
                          eagle3_train.feature_layers, _eagle3_drafter,
                          "an EAGLE-3 drafter with the training-time test"),
}


def add_arguments(ap: argparse.ArgumentParser, kind: str) -> None:
    """The flags of `python -m specjax.train KIND`, each with its help and default."""
    ap.add_argument("--target", default="smollm2-135m", help="zoo | smollm2-135m | HF checkpoint directory "
                    "(default: %(default)s)")
    ap.add_argument("--data", required=True, help="data directory of `python -m specjax.train data`")
    ap.add_argument("--cache", default=None, help="feature cache directory (default: under $SPECJAX_CACHE/features, "
                    "named by the target and data checksums)")
    ap.add_argument("--out", required=True, help="run directory: checkpoint (ckpt/) and log")
    ap.add_argument("--export", default=None, help="write the trained drafter + recipe.json here (default: none)")
    ap.add_argument("--resume", action="store_true", help="continue from OUT/ckpt (bit-exact)")
    ap.add_argument("--init", default=None, help="start from this exported drafter's weights (same architecture "
                    "and draft vocabulary; a fresh optimiser and schedule) instead of a fresh initialisation; domino also "
                    "takes a DFlash drafter of its backbone's exact architecture (the head starts fresh) (default: a fresh "
                    "initialisation)")
    ap.add_argument("--stop-after", type=int, default=None, help="run at most this many steps now, then "
                    "checkpoint (continue with --resume) (default: to the end)")
    ap.add_argument("--seq-len", type=int, default=448, help="padded sequence length S (default: %(default)s)")
    ap.add_argument("--valid-rows", type=int, default=64, help="held-out sequences (default: %(default)s)")
    ap.add_argument("--draft-vocab", type=int, default=0, help="K most frequent response tokens the drafter "
                    "predicts over; 0 = the full vocabulary (default: %(default)s)")
    ap.add_argument("--mesh", default=None, help="data=D,model=M: run the step over D x M devices (default: one)")
    ap.add_argument("--eval-prompts", type=int, default=0, help="at export, measure τ by decoding this many "
                    "held-out prompts of the data, 64 new tokens each (default: %(default)s)")
    if kind in ("dflash", "domino"):
        ap.add_argument("--layers", type=int, default=1, help="draft layers (default: %(default)s)")
        ap.add_argument("--block-size", type=int, default=16, help="block size (default: %(default)s)")
        ap.add_argument("--mask-token", type=int, default=None, help="mask token id (default: the least "
                        "frequent id of the data outside the special tokens)")
    ap.add_argument("--target-layers", default=None, help="comma-separated target layer ids (default: the "
                    "method's rule)")
    if kind == "domino":
        ap.add_argument("--gru-hidden", type=int, default=64, help="d_s (paper: H/4) (default: %(default)s)")
        ap.add_argument("--head-rank", type=int, default=32, help="r (paper: H/16, floored at 32) "
                        "(default: %(default)s)")
        ap.add_argument("--shift-label", action="store_true", help="the released checkpoints' alignment")
        ap.add_argument("--pure-prefix-len", type=int, default=0, help="drafts 1..P use base logits "
                        "(default: %(default)s)")
    for f in dataclasses.fields(KINDS[kind].train_config):
        doc = f"train config field {f.name} (default: %(default)s)"
        ap.add_argument("--" + f.name.replace("_", "-"), type=type(f.default), default=f.default, help=doc)


def _mesh(spec: str | None):
    if not spec:
        return None

    sizes = dict(kv.split("=") for kv in spec.split(","))
    return make_mesh(data=int(sizes.get("data", 1)), model=int(sizes.get("model", 1)))


def _measured_tau(kind: DrafterKind, dcfg, tcfg, tparams, dparams, trainset: TrainSet, n: int) -> dict:
    """Mean accepted length of greedy decoding with the drafter on the first n held-out prompts (those
    that reach a verification round)."""
    rows = np.arange(trainset.num_train, len(trainset.shards))[:n]
    prompts = [trainset.shards.tokens[trainset.shards.offsets[i]:trainset.shards.offsets[i] +
                                      trainset.shards.prompt_lengths[i]].tolist() for i in rows]
    toks, lens = pad_prompts(prompts)
    out = generate(tparams, tcfg, kind.drafter(dcfg, tcfg), dparams, toks, lens, 64)
    rounds = np.asarray(out.stats.num_rounds)
    taus = [float(t) for t, r in zip(np.asarray(out.stats.mean_accepted_length()), rounds) if r > 0]
    # a prompt whose answer ends at its first token (EOS from the prefill) has no round: no τ
    return {"prompts": len(prompts), "new_tokens": 64, "temperature": 0,
            "tau_mean": round(float(np.mean(taus)), 3) if taus else None,
            "tau_per_prompt": [round(t, 3) for t in taus], "prompts_without_rounds": int((rounds == 0).sum())}


def run(kind_name: str, args, argv) -> None:
    """Train (and export) one drafter from parsed flags."""
    kind = KINDS[kind_name]
    tc = kind.train_config(**{f.name: getattr(args, f.name) for f in dataclasses.fields(kind.train_config)})
    t_start = time.time()
    tcfg, tparams, _, reserved = load_target(args.target)
    shards = load_shards(args.data)
    tsha, dsha = params_sha256(tparams), data_sha256(shards)
    counts = np.bincount(shards.tokens, minlength=tcfg.vocab_size)
    mask_id = getattr(args, "mask_token", None)
    if mask_id is None:
        mask_id = dflash_train.choose_mask_token(counts, reserved)
    dcfg = kind.build_config(args, tcfg, mask_id)
    layers = kind.layers(dcfg, tcfg)
    first = shards.manifest["shards"][0]["sha256"][:12] if shards.manifest["shards"] else "empty"  # grows with the data
    cache = args.cache or str(cache_root() / "features" / f"{args.target.replace('/', '_')}-{tsha[:12]}-{first}")
    build_feature_cache((tcfg, tparams), args.target, shards, args.data, layers, cache)
    trainset = TrainSet.from_directories(args.data, cache, layers, seq_len=args.seq_len, valid_rows=args.valid_rows,
                                         target_sha=tsha)
    responses = trainset.response_token_counts(tcfg.vocab_size)
    vocab, init_ids = None, (init_vocab_ids(args.init) if args.init else None)
    if args.draft_vocab and init_ids is not None:  # a warm start keeps its vocabulary as the data grows
        if len(init_ids) != args.draft_vocab:
            raise ValueError(f"--init {args.init} has a draft vocabulary of {len(init_ids)} ids, "
                             f"not --draft-vocab {args.draft_vocab}")
        vocab = tables_of_ids(init_ids, tcfg.vocab_size)
    elif args.draft_vocab:
        vocab = vocab_tables(responses, args.draft_vocab, always=tuple(tcfg.eos_token_ids))
    touter = target_outer(tparams)
    if args.init:
        init = warm_start(args.init, dcfg, None if vocab is None else vocab.ids)
    else:
        init = (dflash_train.init_norm_from_target(touter) if kind_name != "eagle3"
                else eagle3_train.init_head_from_target(touter, tcfg, vocab))
    dparams, log = train((tcfg, touter), dcfg, trainset, tc, args.out, step_factory=kind.make_step, vocab=vocab,
                         resume=args.resume, stop_after=args.stop_after, mesh=_mesh(args.mesh), init=init)
    if not args.export:
        return

    full = dparams if vocab is None else with_draft_vocab(dparams, np.asarray(vocab.ids))
    state = json.loads((pathlib.Path(args.out) / "ckpt" / "state.json").read_text())
    recipe = {
        "target": {"name": args.target, "params_sha256": tsha},
        "data": {"directory": args.data, "sha256": dsha, **shards.manifest.get("totals", {}),
                 "recipe": shards.manifest.get("recipe")},
        "features": {"cache": cache, "layers": list(layers)},
        "draft_vocab": {"k": args.draft_vocab or tcfg.vocab_size, "from_init": init_ids is not None,
                        "covers_response_tokens": round(float(
                            responses[np.asarray(vocab.ids)].sum() / responses.sum()), 4) if vocab is not None else 1.0},
        "train_config": dataclasses.asdict(tc), "drafter": dcfg.to_hf(),
        "mask_token": {"id": int(mask_id), "count_in_data": int(counts[mask_id])},
        "params": int(sum(np.prod(x.shape) for x in jax.tree.leaves(dparams))),
        "compute": {"train_seconds": state["seconds"], "steps": state["step"], "machine": machine(),
                    "this_call_seconds": round(time.time() - t_start, 1)},
        "measured_tau": (_measured_tau(kind, dcfg, tcfg, tparams, full, trainset, args.eval_prompts)
                         if args.eval_prompts else None),
        "log": log, "command": f"python -m specjax.train {kind_name} " + " ".join(argv),
    }
    print(f"exported -> {export(args.export, dcfg, dparams, recipe, None if vocab is None else vocab.ids)}",
          flush=True)
