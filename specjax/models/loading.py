"""Load and save checkpoints in the Hugging Face layout, strictly.

A checkpoint directory holds `config.json` and either `model.safetensors` or a sharded
`model.safetensors.index.json` + shards. Loading maps every tensor through the
architecture's explicit key map (`param_maps` in the model file), checks every shape,
and raises `CheckpointError` naming the keys when a tensor is missing, unexpected,
duplicated across shards or of the wrong shape. Pickled `pytorch_model.bin`
checkpoints are refused unless the caller opts in with `allow_pickle=True` (and even
then are read with torch's `weights_only=True`).

`save_checkpoint` writes the same layout back (config.json + model.safetensors), so a
params pytree round-trips and the directory loads in transformers.

Drafters that project with their target's LM head (DFlash, Domino, EAGLE-3: `TargetBound`
configs) may carry a reduced draft vocabulary, params["draft_vocab"]["ids"] int32[K]
(`specjax.draft_vocab`); it is saved as the optional int32 tensor `draft_vocab.ids` and
loaded back when present (absent: the full vocabulary).
"""

from __future__ import annotations

import json
import os
import re
import struct
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np

from specjax.models.model import ModelConfig, config_from_hf, family, param_shapes
from specjax.models.target_bound import TargetBound

DRAFT_VOCAB_TENSOR = "draft_vocab.ids"  # optional int32[K]: a drafter's draft vocabulary (`specjax.draft_vocab`)


class CheckpointError(ValueError):
    """The checkpoint does not match the architecture's key map."""


_DTYPES = {
    "F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": ml_dtypes.bfloat16,
    "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_,
}
_DTYPE_NAMES = {np.dtype(v): k for k, v in _DTYPES.items()}


def read_safetensors(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """All tensors of one .safetensors file as numpy arrays (memory-mapped, bf16 supported)."""
    path = Path(path)
    with open(path, "rb") as f:
        (header_len,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(header_len))
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + header_len)
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] not in _DTYPES:
            raise CheckpointError(f"{path.name}: tensor {name!r} has unsupported dtype {info['dtype']}")
        start, end = info["data_offsets"]
        out[name] = np.frombuffer(data[start:end], dtype=_DTYPES[info["dtype"]]).reshape(info["shape"])
    return out


def write_safetensors(path: str | os.PathLike, tensors: dict[str, np.ndarray]) -> None:
    """Write tensors to a .safetensors file (sorted keys, 8-byte aligned header)."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset, blobs = 0, []
    for name in sorted(tensors):
        arr = np.ascontiguousarray(tensors[name])
        blob = arr.tobytes()
        header[name] = {"dtype": _DTYPE_NAMES[arr.dtype], "shape": list(arr.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
        blobs.append(blob)
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for blob in blobs:
            f.write(blob)


def read_tensors(directory: Path, allow_pickle: bool = False) -> dict[str, np.ndarray]:
    """Every tensor of a checkpoint directory; duplicates across shards raise."""
    index = directory / "model.safetensors.index.json"
    single = directory / "model.safetensors"
    if index.exists():
        weight_map: dict[str, str] = json.loads(index.read_text())["weight_map"]
        tensors: dict[str, np.ndarray] = {}
        for shard in sorted(set(weight_map.values())):
            for name, arr in read_safetensors(directory / shard).items():
                if name in tensors:
                    raise CheckpointError(f"duplicate tensor {name!r}: found in more than one shard (again in {shard})")
                if weight_map.get(name) != shard:
                    raise CheckpointError(f"tensor {name!r} is in {shard} but the index maps it to {weight_map.get(name)!r}")
                tensors[name] = arr
        missing = sorted(set(weight_map) - set(tensors))
        if missing:
            raise CheckpointError(f"index lists tensors absent from the shards: {missing}")
        return tensors
    if single.exists():
        return read_safetensors(single)
    pickled = sorted(directory.glob("pytorch_model*.bin"))
    if pickled:
        if not allow_pickle:
            raise CheckpointError(
                f"{directory} only has pickled weights ({pickled[0].name}); pickle can run arbitrary code, "
                f"so specjax refuses it by default. Convert to safetensors or pass allow_pickle=True."
            )
        import torch  # only for the explicit opt-in

        tensors = {}
        for f in pickled:
            for name, t in torch.load(f, map_location="cpu", weights_only=True).items():
                if name in tensors:
                    raise CheckpointError(f"duplicate tensor {name!r} in {f.name}")
                tensors[name] = t.float().numpy() if t.is_floating_point() else t.numpy()
        return tensors
    raise CheckpointError(f"no model.safetensors, model.safetensors.index.json or pytorch_model*.bin in {directory}")


def raise_on_mismatch(error: type[Exception], what: str, missing: list, unexpected: list, bad_shapes: list[str],
                      unexpected_label: str = "unexpected tensors") -> None:
    """Raise `error` listing every missing, unexpected and wrongly shaped tensor at once."""
    problems = []
    if missing:
        problems.append(f"missing tensors: {missing}")
    if unexpected:
        problems.append(f"{unexpected_label}: {unexpected}")
    if bad_shapes:
        problems.append("wrong shapes: " + "; ".join(bad_shapes))
    if problems:
        raise error(f"{what}: " + " | ".join(problems))


def check_draft_vocab_ids(ids, vocab_size: int, error: type[Exception] = ValueError) -> np.ndarray:
    """A draft vocabulary's token ids as int32[K]: raises `error` naming the problem unless they are
    K >= 1 integers, strictly increasing (sorted, no repeats) and inside the vocabulary [0, vocab_size)."""
    arr = np.asarray(ids)
    if arr.ndim != 1 or arr.size == 0 or not np.issubdtype(arr.dtype, np.integer):
        raise error(f"draft vocabulary ids must be a non-empty 1-D integer array, got {arr.dtype}{list(arr.shape)}")
    if arr.min() < 0 or arr.max() >= vocab_size:
        raise error(f"draft vocabulary ids must lie in [0, {vocab_size}) (the target's vocabulary), got "
                    f"min {arr.min()}, max {arr.max()}")
    if np.any(np.diff(arr) <= 0):
        raise error("draft vocabulary ids must be sorted ascending without repeats (use np.unique)")
    return arr.astype(np.int32)


def _get(tree: dict, path: tuple[str, ...]):
    for p in path:
        tree = tree[p]
    return tree


def _set(tree: dict, path: tuple[str, ...], value) -> None:
    for p in path[:-1]:
        tree = tree.setdefault(p, {})
    tree[path[-1]] = value


def load_config(directory: str | os.PathLike) -> ModelConfig:
    """The strict `ModelConfig` of a checkpoint directory's config.json (unknown settings raise)."""
    path = Path(directory) / "config.json"
    if not path.exists():
        raise CheckpointError(f"no config.json in {directory}")
    return config_from_hf(json.loads(path.read_text()))


def params_from_tensors(cfg: ModelConfig, tensors: dict[str, np.ndarray], dtype=jnp.float32) -> dict:
    """Map HF-named tensors onto the params pytree of `cfg`, checking keys and shapes."""
    fam = family(cfg)
    outer_maps, layer_maps = fam.param_maps(cfg)
    shapes = param_shapes(cfg, dtype)
    remaining = dict(tensors)
    draft_ids = remaining.pop(DRAFT_VOCAB_TENSOR, None) if isinstance(cfg, TargetBound) else None
    missing, bad_shapes, params = [], [], {}

    def take(key: str, expected_ours: tuple[int, ...], transform):
        if key not in remaining:
            missing.append(key)
            return np.zeros(expected_ours, np.float32)
        arr = remaining.pop(key)
        want = transform.hf_shape(expected_ours)
        if tuple(arr.shape) != tuple(want):
            bad_shapes.append(f"{key}: checkpoint {tuple(arr.shape)} vs expected {tuple(want)}")
            return np.zeros(expected_ours, np.float32)
        return transform.to_ours(np.asarray(arr, np.float32))

    for m in outer_maps:
        _set(params, m.path, take(m.hf_key, _get(shapes, m.path).shape, m.transform))
    for m in layer_maps:
        per_layer_shape = _get(shapes["layers"], m.path).shape[1:]
        stacked = np.stack([take(m.hf_key.format(i=i), per_layer_shape, m.transform) for i in range(cfg.num_layers)])
        _set(params.setdefault("layers", {}), m.path, stacked)

    if cfg.tie_word_embeddings:  # some exporters also write the tied output matrix: accept it only if equal
        embedding = _get(params, outer_maps[0].path)
        for key in ("lm_head.weight", "embed_out.weight"):
            if key in remaining:
                if remaining[key].shape != embedding.shape or not np.array_equal(np.asarray(remaining[key], np.float32), embedding):
                    raise CheckpointError(f"config ties embeddings but the checkpoint has a different {key!r}")
                remaining.pop(key)
    ignored = [re.compile(p) for p in fam.IGNORED_KEYS]
    unexpected = sorted(k for k in remaining if not any(p.fullmatch(k) for p in ignored))
    raise_on_mismatch(CheckpointError, f"checkpoint does not match {cfg.model_type}", missing, unexpected, bad_shapes,
                      f"unexpected tensors (not in the {cfg.model_type} key map)")
    if jax.tree.structure(params) != jax.tree.structure(shapes):
        raise CheckpointError("internal error: key map does not cover every parameter")  # a bug in a key map
    params = jax.tree.map(lambda a, s: jnp.asarray(a, dtype=s.dtype), params, shapes)
    if draft_ids is not None:  # never cast to the params' dtype
        ids = check_draft_vocab_ids(draft_ids, cfg.vocab_size, CheckpointError)
        params["draft_vocab"] = {"ids": jnp.asarray(ids)}
    return params


def load_checkpoint(directory: str | os.PathLike, dtype=jnp.float32, allow_pickle: bool = False):
    """Load a HF checkpoint directory. Returns (cfg, params) with params cast to `dtype`."""
    directory = Path(directory)
    cfg = load_config(directory)
    return cfg, params_from_tensors(cfg, read_tensors(directory, allow_pickle), dtype)


def tensors_from_params(cfg: ModelConfig, params: dict, dtype=None) -> dict[str, np.ndarray]:
    """The inverse of `params_from_tensors`: HF-named numpy tensors."""
    outer_maps, layer_maps = family(cfg).param_maps(cfg)
    cast = (lambda a: np.asarray(a, dtype)) if dtype is not None else np.asarray
    out = {m.hf_key: cast(m.transform.to_hf(np.asarray(_get(params, m.path)))) for m in outer_maps}
    for m in layer_maps:
        stacked = np.asarray(_get(params["layers"], m.path))
        for i in range(cfg.num_layers):
            out[m.hf_key.format(i=i)] = cast(m.transform.to_hf(stacked[i]))
    if "draft_vocab" in params:  # int32 whatever `dtype`
        if not isinstance(cfg, TargetBound):
            raise ValueError(f"params carry a draft vocabulary, but a {cfg.model_type} model has no shared LM head to "
                             f"restrict (only DFlash, Domino and EAGLE-3 drafters do)")
        out[DRAFT_VOCAB_TENSOR] = check_draft_vocab_ids(params["draft_vocab"]["ids"], cfg.vocab_size)
    return out


def save_checkpoint(directory: str | os.PathLike, cfg: ModelConfig, params: dict, dtype=None) -> Path:
    """Write config.json + model.safetensors (tensors in `dtype`, default: as stored)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tensors = tensors_from_params(cfg, params, dtype)
    hf = cfg.to_hf()
    hf["torch_dtype"] = {np.dtype(np.float32): "float32", np.dtype(np.float16): "float16",
                         np.dtype(ml_dtypes.bfloat16): "bfloat16"}.get(next(iter(tensors.values())).dtype, "float32")
    (directory / "config.json").write_text(json.dumps(hf, indent=2) + "\n")
    write_safetensors(directory / "model.safetensors", tensors)
    return directory
