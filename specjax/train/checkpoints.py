"""A drafter run's checkpoints and exports: the resumable state `specjax.train.loop.train` writes and reads, the
float16 export with its recipe.json, and the warm starts that begin a run from an export.

    save_state(ckpt, cfg, params, opt_state, step, tc, log, seconds)   # atomically, every `ckpt_every` steps
    cfg, params, opt_state, step, log, seconds, vocab_ids = load_state(ckpt, opt_state_template)
    export(directory, dcfg, dparams, recipe)                           # config.json + model.safetensors (float16)
    record = save_sequences_read(directory / SEQUENCES_READ, ids, n, checksums)  # what its weights learned from
    ids = load_sequences_read(directory / SEQUENCES_READ, record, checksums)     # a continuation's exclusions
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import pathlib

import jax
import jax.numpy as jnp
import numpy as np

from specjax.atomic import replace_directory, staging_path, write_bytes
from specjax.models import load_checkpoint, save_checkpoint
from specjax.models.draft_vocab import split_draft_vocab, with_draft_vocab

__all__ = ["BEST_DIR", "SEQUENCES_READ", "save_state", "load_state", "load_best", "export", "init_vocab_ids",
           "warm_start", "save_sequences_read", "load_sequences_read"]

BEST_DIR = "best"  # the checkpoint's subdirectory holding the best evaluation's weights (early stopping)
SEQUENCES_READ = "sequences_read.npy"  # an export's record of the data sequences its weights learned from


def save_state(ckpt: pathlib.Path, cfg, params, opt_state, step: int, tc, log: list, seconds: float,
               vocab_ids: np.ndarray | None = None, fitted: bool = False, best_params=None,
               stopped_early: int | None = None) -> None:
    """Atomically replace `ckpt` with the drafter (safetensors), optimiser state, step, log, wall seconds (and,
    stopping early, the best evaluation's weights in ckpt/best and the step it stopped at): written whole into a
    fresh directory beside it, then swapped in (`specjax.atomic.replace_directory`): a crash at any point
    leaves the previous checkpoint or the new one, never neither, nor a best that its log does not name."""
    tmp = staging_path(ckpt)
    save_checkpoint(tmp, cfg, jax.device_get(params))
    if best_params is not None:
        save_checkpoint(tmp / BEST_DIR, cfg, best_params)
    np.savez(tmp / "opt_state.npz", *[np.asarray(x) for x in jax.tree.leaves(opt_state)])
    if vocab_ids is not None:
        np.save(tmp / "draft_vocab_ids.npy", np.asarray(vocab_ids, np.int32))
    (tmp / "state.json").write_text(json.dumps({"step": step, "train_config": dataclasses.asdict(tc), "log": log,
                                                "seconds": round(seconds, 1), "fitted": fitted,
                                                "stopped_early": stopped_early}))
    replace_directory(tmp, ckpt)


def load_best(ckpt: pathlib.Path):
    """The best evaluation's weights a checkpoint keeps (`DrafterTrainConfig.patience`), or None."""
    return load_checkpoint(ckpt / BEST_DIR, jnp.float32)[1] if (ckpt / BEST_DIR).exists() else None


def load_state(ckpt: pathlib.Path, opt_state_template):
    """(cfg, params, opt_state, step, log, seconds, draft vocab ids or None) of a checkpoint."""
    cfg, params = load_checkpoint(ckpt, jnp.float32)
    with np.load(ckpt / "opt_state.npz") as z:
        leaves = [z[f"arr_{i}"] for i in range(len(z.files))]
    template = jax.tree.leaves(opt_state_template)
    if len(leaves) != len(template):
        raise ValueError(f"{ckpt}: optimizer state has {len(leaves)} leaves, expected {len(template)}")
    opt_state = jax.tree.unflatten(jax.tree.structure(opt_state_template),
                                   [jnp.asarray(a, t.dtype) for a, t in zip(leaves, template)])
    state = json.loads((ckpt / "state.json").read_text())
    ids_file = ckpt / "draft_vocab_ids.npy"
    ids = np.load(ids_file) if ids_file.exists() else None
    return cfg, params, opt_state, state["step"], state.get("log", []), state.get("seconds", 0.0), ids


def export(directory: str | pathlib.Path, dcfg, dparams, recipe: dict, vocab_ids=None) -> pathlib.Path:
    """float16 drafter checkpoint (config.json + model.safetensors, with the draft vocabulary's ids
    when it has one) + recipe.json."""
    directory = pathlib.Path(directory)
    params = dparams if vocab_ids is None else with_draft_vocab(dparams, np.asarray(vocab_ids, np.int32))
    save_checkpoint(directory, dcfg, params, dtype=np.float16)
    (directory / "recipe.json").write_text(json.dumps(recipe, indent=2) + "\n")
    return directory


def init_vocab_ids(directory: str | pathlib.Path) -> np.ndarray | None:
    """The draft vocabulary ids int32[K] of an exported drafter, or None (full vocabulary): a warm
    start trains on in the vocabulary its weights learned, whatever the grown data's top K is."""
    _, params = load_checkpoint(directory)
    ids = split_draft_vocab(params)[1]
    return None if ids is None else np.asarray(ids)


def warm_start(directory: str | pathlib.Path, dcfg, vocab_ids=None):
    """`train`'s `init` that starts from an exported drafter (`export`'s directory): its weights, cast to
    the training params' dtypes. The drafter must have exactly `dcfg` and the same draft vocabulary
    (`vocab_ids`, or none); a run continued on another machine, where its checkpoint is gone, starts here.

    A Domino run (`dcfg.backbone()`) may also start from a DFlash drafter whose config is exactly its
    backbone's: the backbone's weights are the DFlash drafter's, the head (`head`, absent from a DFlash
    drafter) keeps its fresh initialisation. That is Domino on a trained DFlash backbone: the head is
    what the run has to learn (Domino, arXiv 2605.29707, §4.1: the head corrects the backbone's logits)."""
    cfg, params = load_checkpoint(directory)
    backbone = getattr(dcfg, "backbone", None)
    backbone_only = cfg != dcfg and backbone is not None and cfg == backbone()
    if cfg != dcfg and not backbone_only:
        diff = {f.name: (getattr(cfg, f.name, None), getattr(dcfg, f.name, None))
                for f in dataclasses.fields(dcfg) if getattr(cfg, f.name, None) != getattr(dcfg, f.name, None)}
        raise ValueError(f"--init {directory}: its drafter config differs from this run's in (init, run): {diff}; "
                         f"pass the same architecture flags")
    params, ids = split_draft_vocab(params)
    same = (ids is None and vocab_ids is None) or (
        ids is not None and vocab_ids is not None and np.array_equal(np.asarray(ids), np.asarray(vocab_ids)))
    if not same:
        raise ValueError(f"--init {directory}: its draft vocabulary differs from this run's (same --draft-vocab "
                         f"and data give the same ids)")

    def init(dparams: dict) -> dict:
        saved = {**params, "head": dparams["head"]} if backbone_only else params
        if jax.tree.structure(dparams) != jax.tree.structure(saved):
            raise ValueError(f"--init {directory}: its params tree differs from this run's drafter")
        return jax.tree.map(lambda fresh, old: jnp.asarray(old, fresh.dtype), dparams, saved)

    return init


def _shards_sha256(checksums: list[str]) -> str:
    return hashlib.sha256("".join(checksums).encode()).hexdigest()


def save_sequences_read(path: str | pathlib.Path, ids: np.ndarray, num_sequences: int, checksums: list[str]) -> dict:
    """Write which of a data directory's first `num_sequences` sequences (those of its shards `checksums`, in
    order) a drafter learned from, `ids` (int[n], any order), as a bit mask (np.packbits: 6 kB for 50k
    sequences); return the record recipe.json keeps beside it: the file's name, the count, and the shards it
    indexes (their number and combined sha256), so a continuation on a grown directory can check that ids name
    the same sequences."""
    ids = np.asarray(ids, np.int64)
    if len(ids) and (ids.min() < 0 or ids.max() >= num_sequences):
        raise ValueError(f"sequence ids must be in 0..{num_sequences - 1}, got {ids.min()}..{ids.max()}")
    mask = np.zeros(num_sequences, bool)
    mask[ids] = True
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    np.save(buf, np.packbits(mask))
    write_bytes(path, buf.getvalue())  # atomically: a failed write leaves the old record whole
    return {"file": path.name, "count": int(mask.sum()), "of_sequences": int(num_sequences),
            "shards": len(checksums), "shards_sha256": _shards_sha256(checksums)}


def load_sequences_read(path: str | pathlib.Path, record: dict, checksums: list[str]) -> np.ndarray:
    """int64[n]: the sorted sequence ids `save_sequences_read` wrote to `path` with `record`, checked against the
    data a run reads now (its shard `checksums`: the recorded shards must be their first ones, else the ids would
    name other answers). ValueError when they are not, or the file does not hold the record's count."""
    k = record["shards"]
    if len(checksums) < k or _shards_sha256(checksums[:k]) != record["shards_sha256"]:
        raise ValueError(f"{path} indexes the sequences of other data (its first {k} shards' sha256 is "
                         f"{record['shards_sha256'][:12]}..., not this data's): continue on the data the drafter was "
                         f"trained on, or leave out the exclusion and skip sequences by hand")
    mask = np.unpackbits(np.load(path, allow_pickle=False))[:record["of_sequences"]].astype(bool)
    if len(mask) != record["of_sequences"] or mask.sum() != record["count"]:
        raise ValueError(f"{path} holds {int(mask.sum())} of {len(mask)} sequences, its record says "
                         f"{record['count']} of {record['of_sequences']}: the file and recipe.json disagree")
    return np.flatnonzero(mask).astype(np.int64)
