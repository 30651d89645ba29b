"""Load and save checkpoints in the Hugging Face layout, strictly.

A checkpoint directory holds `config.json` and either `model.safetensors` or a sharded
`model.safetensors.index.json` + shards, read and written with the `safetensors` package
(numpy arrays; bf16 as `ml_dtypes.bfloat16`). Loading maps every tensor through the
architecture's explicit key map (`param_maps` in the model file), checks every shape,
and raises `CheckpointError` naming the file and the keys when a tensor is missing,
unexpected (every one of them at once), duplicated across shards, of the wrong shape or
dtype, and naming the file (and the tensor at fault) when a file is truncated, its header
is not JSON or its offsets or a dtype are wrong, or config.json is not valid JSON. Pickled `pytorch_model.bin`
checkpoints are refused unless the caller opts in with `allow_pickle=True` (and even
then are read with torch's `weights_only=True`).

`save_checkpoint` writes the same layout back (config.json + model.safetensors), so a
params pytree round-trips and the directory loads in transformers. DFlash, Domino and EAGLE-3
drafters also load from, and save to (`layout="reference"`), their reference code's own layout,
recognised by its config keys (`reference_layout`): z-lab/dflash's DFlash (a Qwen3 config.json
with `dflash_config`; the same tensor names), SpecForge's Domino (DFlash's + the head's
`dflash_config` entries; head tensors `prefix_gru.*`, `embed_proj.{0,2}.weight`), SpecForge /
EAGLE's EAGLE-3 (a Llama config.json with `draft_vocab_size`; `lm_head.weight` [K, E] and the
draft vocabulary as `d2t` int64[K] offsets + `t2d` bool[V] instead of `draft_vocab.ids`). DFlash's and
Domino's layouts hold no draft vocabulary: a save leaves it out with a `ReferenceLayoutWarning`. A
reference config that leaves a fact to the target (EAGLE-3's taps without `eagle_config`) takes it from
`load_checkpoint(..., target_cfg=)`.

Drafters that project with their target's LM head (DFlash, Domino, EAGLE-3: `TargetBound`
configs), and draft LMs (a causal LM drafting with its own head, e.g. `python -m specjax.train
draft-lm`), may carry a reduced draft vocabulary, params["draft_vocab"]["ids"] int32[K]
(`specjax.models.draft_vocab`); it is saved as the optional int32 tensor `draft_vocab.ids` and
loaded back when present (absent: the full vocabulary). A causal LM used as a target ignores it.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import types
import typing
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from safetensors import SafetensorError, safe_open
from safetensors.numpy import save_file

from specjax.atomic import write_files
from specjax.inputs import raise_on_mismatch
from specjax.models import dflash, domino, eagle3
from specjax.models.dflash import DFlashConfig
from specjax.models.eagle3 import Eagle3Config
from specjax.models.hf_config import ConfigTypeError, UnsupportedConfigError
from specjax.models.model import ModelConfig, config_from_hf, family, param_shapes, stack_layers
from specjax.models.target_bound import TargetBound

DRAFT_VOCAB_TENSOR = "draft_vocab.ids"  # optional int32[K]: a drafter's draft vocabulary (`specjax.models.draft_vocab`)


class CheckpointError(ValueError):
    """The checkpoint does not match the architecture's key map, or a file of it cannot be read."""


# Bytes per element of the safetensors dtypes, for naming the tensor a rejected header gets wrong.
_ITEMSIZE = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
             "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8, "C64": 8}


def read_safetensors(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """All tensors of one .safetensors file as numpy arrays (the `safetensors` package; bf16 arrays
    as `ml_dtypes.bfloat16`). A file the package rejects (truncated, a header that is not JSON or
    whose offsets do not fit, an unknown dtype) raises CheckpointError naming the file and, where
    one is at fault, the tensor."""
    path = Path(path)
    try:
        with safe_open(path, framework="numpy") as f:
            return {name: _get_tensor(f, name, path) for name in f.keys()}
    except SafetensorError as e:
        raise CheckpointError(f"{path}: not a readable safetensors file: {_header_problem(path) or e}") from e
    except OSError as e:
        raise CheckpointError(f"{path}: cannot read it ({e.strerror or e})") from e


def _get_tensor(f, name: str, path: Path) -> np.ndarray:
    try:
        return f.get_tensor(name)
    except (SafetensorError, TypeError, ValueError) as e:  # a dtype numpy cannot hold (this package version)
        raise CheckpointError(f"{path}: tensor {name!r} of dtype {f.get_slice(name).get_dtype()} cannot be read "
                              f"as a numpy array: {e}") from e


def _header_problem(path: Path) -> str:
    """After the package rejected `path`: what in its header is wrong, naming the tensor ("" if nothing found)."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        if size < 8 or n > size - 8:
            return f"the header length field says {n} bytes but the file has {size} (truncated, or not safetensors)"
        try:
            header = json.loads(f.read(n))
        except ValueError as e:
            return f"its header is not valid JSON ({e})"
    if not isinstance(header, dict):
        return f"its header is a JSON {type(header).__name__}, not an object of tensors"
    data, covered, past_end = size - 8 - n, 0, []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape, (start, end) = info["dtype"], [int(d) for d in info["shape"]], map(int, info["data_offsets"])
        except (TypeError, KeyError, ValueError):
            return f"tensor {name!r}: header entry {info!r} needs dtype, shape and data_offsets [start, end]"
        if dtype not in _ITEMSIZE:
            return f"tensor {name!r} has unknown dtype {dtype!r} (specjax reads {sorted(_ITEMSIZE)})"
        need = math.prod(shape) * _ITEMSIZE[dtype]
        if end - start != need:
            return (f"tensor {name!r}: {dtype}{shape} needs {need} bytes but its data_offsets [{start}, {end}] "
                    f"hold {end - start}")
        past_end += [name] if end > data else []
        covered = max(covered, end)
    if past_end:
        return f"truncated: the file holds {data} data bytes, tensors {past_end} lie past its end"
    return f"the tensors cover {covered} data bytes but the file holds {data}" if covered != data else ""


def write_safetensors(path: str | os.PathLike, tensors: dict[str, np.ndarray]) -> None:
    """Write tensors to a .safetensors file (the `safetensors` package; dtypes kept: int32 stays int32)."""
    save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, path, metadata={"format": "pt"})


def _weights_source(directory: Path) -> Path:
    """Where a directory's weights are: the shard index, else model.safetensors, else the directory itself."""
    for name in ("model.safetensors.index.json", "model.safetensors"):
        if (directory / name).exists():
            return directory / name
    return directory


def read_tensors(directory: Path, allow_pickle: bool = False) -> dict[str, np.ndarray]:
    """Every tensor of a checkpoint directory; duplicates across shards raise."""
    source = _weights_source(directory)
    if source.name == "model.safetensors.index.json":
        weight_map = _read_json(source).get("weight_map")
        if not isinstance(weight_map, dict):
            raise CheckpointError(f"{source}: needs a \"weight_map\" object (tensor name -> shard file)")
        tensors: dict[str, np.ndarray] = {}
        for shard in sorted(set(weight_map.values())):
            if not (directory / shard).is_file():
                raise CheckpointError(f"{source} maps tensors to {shard}, which is not in {directory}")
            for name, arr in read_safetensors(directory / shard).items():
                if name in tensors:
                    raise CheckpointError(f"duplicate tensor {name!r}: found in more than one shard (again in {shard})")
                if weight_map.get(name) != shard:
                    raise CheckpointError(f"tensor {name!r} is in {shard} but the index maps it to {weight_map.get(name)!r}")
                tensors[name] = arr
        missing = sorted(set(weight_map) - set(tensors))
        if missing:
            raise CheckpointError(f"{source} lists tensors absent from the shards: {missing}")
        return tensors
    if source.name == "model.safetensors":
        return read_safetensors(source)
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


def _read_json(path: Path) -> dict:
    """A JSON object file of a checkpoint (config.json, the shard index); anything else raises CheckpointError."""
    try:
        value = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{path} is not valid JSON: {e}") from None
    if not isinstance(value, dict):
        raise CheckpointError(f"{path} must hold a JSON object, got a JSON {type(value).__name__}")
    return value


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


def load_config(directory: str | os.PathLike, target_cfg: ModelConfig | None = None) -> ModelConfig:
    """The strict `ModelConfig` of a checkpoint directory's config.json (unknown settings raise).

    target_cfg: the config of the target a drafter's checkpoint is used with, or None. A reference layout
    that leaves a fact to its target takes it from there, as its reference code does (EAGLE-3 without
    `eagle_config`: the taps, `specjax.models.eagle3.with_target_taps`), and the drafter is checked against
    it (`check_target`, ValueError naming every mismatch). Given for a checkpoint that is not a drafter
    reading a target, it raises ValueError."""
    path = Path(directory) / "config.json"
    if not path.exists():
        raise CheckpointError(f"no config.json in {directory}")
    cfg = _config_at(path, target_cfg)
    if target_cfg is not None:
        if not isinstance(cfg, TargetBound):
            raise ValueError(f"{path}: target_cfg is for a drafter that reads a target (DFlash, Domino, EAGLE-3); "
                             f"this is a {cfg.model_type} model")
        cfg.check_target(target_cfg)
    return cfg


def _config_at(path: Path, target_cfg: ModelConfig | None = None) -> ModelConfig:
    """The strict config of the config.json file `path` (its name may be a save's temporary one); `target_cfg`:
    `load_config`'s."""
    hf = _read_json(path)
    try:
        cfg = config_from_hf(hf if target_cfg is None else eagle3.with_target_taps(hf, target_cfg.num_layers))
    except UnsupportedConfigError as e:
        raise UnsupportedConfigError(f"{path}: {e}") from None
    except ConfigTypeError as e:  # names the field: the file is all it lacks
        raise CheckpointError(f"{path}: invalid config: {e}") from None
    except (KeyError, TypeError, ValueError) as e:  # a field missing, of the wrong type, or out of range
        raise CheckpointError(f"{path}: invalid config ({type(e).__name__}: {e})") from e
    _check_field_types(cfg, path)
    return cfg


def _check_field_types(cfg, path: Path) -> None:
    """Every scalar field of the config (int, float, bool, str, or None where allowed) holds that type:
    a string where a number belongs would otherwise fail deep inside the first shape computation."""
    hints = typing.get_type_hints(type(cfg))
    for field in dataclasses.fields(cfg):
        hint, value = hints[field.name], getattr(cfg, field.name)
        allowed = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
        if not all(t in (int, float, bool, str, type(None)) for t in allowed):
            continue  # tuples and other structured fields: their parsers check them
        if isinstance(value, bool) and bool not in allowed:  # true is not a layer count, nor 1.0
            ok = False
        else:
            ok = isinstance(value, allowed) or (float in allowed and isinstance(value, int))
        if not ok:
            raise CheckpointError(f"{path}: invalid config: {field.name} = {value!r}, expected "
                                  f"{' or '.join(t.__name__ for t in allowed)}")


def reference_layout(hf: dict) -> bool:
    """Whether a config.json dict is in a reference implementation's own layout (DFlash, Domino or EAGLE-3)."""
    return dflash.is_reference_config(hf) or eagle3.is_reference_config(hf)


def _ids_from_reference_maps(d2t: np.ndarray, t2d: np.ndarray | None, cfg: Eagle3Config, where: str) -> np.ndarray:
    """The draft vocabulary's ids int32[K] of EAGLE-3's maps: ids[k] = k + d2t[k], checked against t2d [V]."""
    if d2t.ndim != 1 or not np.issubdtype(d2t.dtype, np.integer) or d2t.size != cfg.draft_vocab_size:
        raise CheckpointError(f"{where}tensor 'd2t' must be integer [{cfg.draft_vocab_size}] (draft_vocab_size), got "
                              f"{d2t.dtype}{list(d2t.shape)}")
    ids = check_draft_vocab_ids(np.arange(d2t.size, dtype=np.int64) + d2t.astype(np.int64), cfg.vocab_size,
                                CheckpointError)
    if t2d is not None:
        if t2d.shape != (cfg.vocab_size,):
            raise CheckpointError(f"{where}tensor 't2d' must be [{cfg.vocab_size}] (vocab_size), got {list(t2d.shape)}")
        if not np.array_equal(np.flatnonzero(t2d), ids):
            raise CheckpointError(f"{where}tensors 'd2t' and 't2d' disagree: t2d marks {int(np.count_nonzero(t2d))} "
                                  f"tokens, not exactly the {ids.size} that d2t maps to")
    return ids


def params_from_tensors(cfg: ModelConfig, tensors: dict[str, np.ndarray], dtype=jnp.float32,
                        source: str | os.PathLike | None = None, layout: str = "specjax") -> dict:
    """Map HF-named tensors onto the params pytree of `cfg`, checking keys, shapes and dtypes (every
    problem at once, as CheckpointError; `source`, the file they came from, prefixes the message).
    layout "reference": the tensors are named as the reference code names them (module docstring)."""
    fam = family(cfg)
    outer_maps, layer_maps = fam.param_maps(cfg)
    shapes = param_shapes(cfg, dtype)
    remaining = dict(tensors)
    where = f"{source}: " if source is not None else ""
    draft_ids = remaining.pop(DRAFT_VOCAB_TENSOR, None) if layout == "specjax" else None
    missing, bad_shapes, bad_dtypes, params = [], [], [], {}
    if layout == "reference" and isinstance(cfg, domino.DominoConfig):
        remaining = domino.from_reference_names(remaining)
    if layout == "reference" and isinstance(cfg, Eagle3Config) and cfg.own_head:
        d2t, t2d = remaining.pop("d2t", None), remaining.pop("t2d", None)
        missing += [k for k, v in (("d2t", d2t), ("t2d", t2d)) if v is None]
        if d2t is not None:
            draft_ids = _ids_from_reference_maps(np.asarray(d2t), None if t2d is None else np.asarray(t2d), cfg, where)

    def take(key: str, expected_ours: tuple[int, ...], transform):
        if key not in remaining:
            missing.append(key)
            return np.zeros(expected_ours, np.float32)
        arr = remaining.pop(key)
        want = transform.hf_shape(expected_ours)
        if tuple(arr.shape) != tuple(want):
            bad_shapes.append(f"{key}: checkpoint {tuple(arr.shape)} vs expected {tuple(want)}")
            return np.zeros(expected_ours, np.float32)
        if arr.dtype.kind in "biuc":  # weights are real floating point (f16, bf16, f32, f64, f8)
            bad_dtypes.append(f"{key}: {arr.dtype}, expected a floating-point dtype")
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
                    raise CheckpointError(f"{where}config ties embeddings but the checkpoint has a different {key!r}")
                remaining.pop(key)
    if not getattr(cfg, "tie_word_embeddings", True):  # say why an untied checkpoint needs its output matrix
        missing = [f"{k} (config.json has tie_word_embeddings false, so the checkpoint must store the LM head)"
                   if k in ("lm_head.weight", "embed_out.weight") else k for k in missing]
    ignored = [re.compile(p) for p in fam.IGNORED_KEYS]
    unexpected = sorted(k for k in remaining if not any(p.fullmatch(k) for p in ignored))
    if layout == "reference" and isinstance(cfg, domino.DominoConfig):  # say it with the file's own names
        missing, unexpected = list(domino.to_reference_names(dict.fromkeys(missing))), sorted(
            domino.to_reference_names(dict.fromkeys(unexpected)))
    raise_on_mismatch(CheckpointError, f"{where}checkpoint does not match {cfg.model_type}", missing, unexpected,
                      bad_shapes, f"unexpected tensors (not in the {cfg.model_type} key map)", bad_dtypes)
    if jax.tree.structure(params) != jax.tree.structure(shapes):
        raise CheckpointError("internal error: key map does not cover every parameter")  # a bug in a key map
    params = jax.tree.map(lambda a, s: jnp.asarray(a, dtype=s.dtype), params, shapes)
    if draft_ids is not None:  # never cast to the params' dtype
        try:
            ids = check_draft_vocab_ids(draft_ids, cfg.vocab_size, CheckpointError)
        except CheckpointError as e:
            raise CheckpointError(f"{where}tensor {DRAFT_VOCAB_TENSOR!r}: {e}") from None
        params["draft_vocab"] = {"ids": jnp.asarray(ids)}
    return params


def load_checkpoint(directory: str | os.PathLike, dtype=jnp.float32, allow_pickle: bool = False,
                    target_cfg: ModelConfig | None = None):
    """Load a HF checkpoint directory. Returns (cfg, params) with params cast to `dtype`. target_cfg: for a
    drafter, the config of the target it is used with (`load_config`: a reference layout's facts left to the
    target, e.g. EAGLE-3's taps without `eagle_config`, come from it, and the drafter is checked against it)."""
    directory = Path(directory)
    cfg = load_config(directory, target_cfg)
    layout = "reference" if reference_layout(_read_json(directory / "config.json")) else "specjax"
    return cfg, params_from_tensors(cfg, read_tensors(directory, allow_pickle), dtype, _weights_source(directory),
                                    layout)


def tensors_from_params(cfg: ModelConfig, params: dict, dtype=None, layout: str = "specjax") -> dict[str, np.ndarray]:
    """The inverse of `params_from_tensors`: HF-named numpy tensors (layout "reference": the reference
    code's names; EAGLE-3's draft vocabulary as `d2t` int64[K] + `t2d` bool[V])."""
    outer_maps, layer_maps = family(cfg).param_maps(cfg)
    params = stack_layers(params)  # either layout (`specjax.models.model.LAYOUTS`)
    cast = (lambda a: np.asarray(a, dtype)) if dtype is not None else np.asarray
    out = {m.hf_key: cast(m.transform.to_hf(np.asarray(_get(params, m.path)))) for m in outer_maps}
    for m in layer_maps:
        stacked = np.asarray(_get(params["layers"], m.path))
        for i in range(cfg.num_layers):
            out[m.hf_key.format(i=i)] = cast(m.transform.to_hf(stacked[i]))
    if layout == "reference":
        if isinstance(cfg, domino.DominoConfig):
            out = domino.to_reference_names(out)
        if isinstance(cfg, Eagle3Config):
            ids = (check_draft_vocab_ids(params["draft_vocab"]["ids"], cfg.vocab_size) if "draft_vocab" in params
                   else np.arange(cfg.vocab_size, dtype=np.int32))
            if ids.size != cfg.draft_vocab_size:
                raise ValueError(f"the EAGLE-3 drafter's lm_head has {cfg.draft_vocab_size} columns but its draft "
                                 f"vocabulary holds {ids.size} ids (params['draft_vocab']['ids'])")
            t2d = np.zeros((cfg.vocab_size,), bool)
            t2d[ids] = True
            out["d2t"], out["t2d"] = ids.astype(np.int64) - np.arange(ids.size, dtype=np.int64), t2d
        return out
    if "draft_vocab" in params:  # int32 whatever `dtype`; a causal LM's restricts its own head where it drafts
        out[DRAFT_VOCAB_TENSOR] = check_draft_vocab_ids(params["draft_vocab"]["ids"], cfg.vocab_size)
    return out


def check_params_match(cfg: ModelConfig, params: dict) -> None:
    """Raise `CheckpointError` unless `params` is a params pytree of `cfg` (either layer layout; an
    optional draft vocabulary): it names every tensor `cfg` expects and `params` lack, every tensor
    `params` hold that `cfg` has no place for, and every shape that differs (params of another config:
    a save would otherwise fail halfway, or write tensors its config.json contradicts)."""
    def shapes(tree) -> dict[str, tuple[int, ...]]:
        return {jax.tree_util.keystr(k): tuple(np.shape(v)) for k, v in jax.tree_util.tree_leaves_with_path(tree)}

    if not isinstance(params, dict):
        raise CheckpointError(f"params must be a dict pytree of a {type(cfg).__name__}, got {type(params).__name__}")
    want = shapes(param_shapes(cfg))
    got = shapes({k: v for k, v in stack_layers(params).items() if k != "draft_vocab"})
    bad = [f"{k} is {list(got[k])}, the config's is {list(want[k])}" for k in want if k in got and got[k] != want[k]]
    raise_on_mismatch(CheckpointError, f"these params do not belong to the {type(cfg).__name__} given (layers "
                      f"{getattr(cfg, 'num_layers', '?')}, hidden size {getattr(cfg, 'hidden_size', '?')}, vocabulary "
                      f"{getattr(cfg, 'vocab_size', '?')}); nothing was written", sorted(set(want) - set(got)),
                      sorted(set(got) - set(want)), bad, unexpected_label="params the config has no place for")


def save_checkpoint(directory: str | os.PathLike, cfg: ModelConfig, params: dict, dtype=None,
                    layout: str = "specjax") -> Path:
    """Write config.json + model.safetensors (tensors in `dtype`, default: as stored), atomically
    (`specjax.atomic.write_files`): each file goes to a temporary name beside its target, the written
    weights' header (names, shapes) and config are read back, a shard index and shards of an older save in
    `directory` are removed (the index would win on load), and only then are the files renamed into
    place, weights first. A save that fails -- a full disk, a dtype the loader cannot read (refused before
    anything is written: `SAVE_DTYPES`) -- leaves the previous checkpoint as it was, byte for byte.

    layout: "specjax" (`cfg.to_hf()`) or "reference", for a DFlash, Domino or EAGLE-3 drafter: the layout
      its reference code writes and loads with strict=True (exactly its tensor keys; `cfg.to_reference()`):
      z-lab/dflash `DFlashDraftModel` and SpecForge `DominoDraftModel` (Qwen3 config.json with
      `dflash_config`; no draft vocabulary: a drafter's ids are left out, with a `ReferenceLayoutWarning`),
      SpecForge / EAGLE `LlamaForCausalLMEagle3` (Llama config.json,
      the own `lm_head` and `d2t` / `t2d`; without `embed_tokens.weight`, which the reference takes from the
      target, as SpecForge's own saved checkpoints).

    Params that belong to another config (another layer count, width, vocabulary: `check_params_match`)
    raise `CheckpointError` naming every differing tensor before anything is written."""
    if layout not in ("specjax", "reference"):
        raise ValueError(f"layout must be 'specjax' or 'reference', got {layout!r}")
    check_params_match(cfg, params)
    if layout == "reference":
        if not isinstance(cfg, (DFlashConfig, Eagle3Config)):
            raise ValueError(f"layout='reference' is a DFlash, Domino or EAGLE-3 drafter's reference layout; a "
                             f"{type(cfg).__name__} has none")
        hf = cfg.to_reference()  # raises first: nothing is written for a drafter the layout cannot hold
        if "draft_vocab" in params and isinstance(cfg, DFlashConfig):
            params = _without_draft_vocab(cfg, params)
    directory = Path(directory)
    if dtype is not None:
        _check_save_dtype(np.dtype(dtype), "dtype")
    tensors = tensors_from_params(cfg, params, dtype, layout)  # may raise too: before anything is written
    for name, arr in tensors.items():
        if name not in _INTEGER_TENSORS:
            _check_save_dtype(arr.dtype, f"tensor {name!r}")
    if layout == "specjax":
        hf = cfg.to_hf()
    hf["torch_dtype"] = {np.dtype(np.float32): "float32", np.dtype(np.float16): "float16",
                         np.dtype(ml_dtypes.bfloat16): "bfloat16"}.get(next(iter(tensors.values())).dtype, "float32")
    # Every file to a temporary name first, verified; then a shard index of an older save (it would win on
    # load) and its shards are removed, and the files renamed: weights before the config that describes them.
    write_files(directory, {"model.safetensors": lambda path: write_safetensors(path, tensors),
                            "config.json": (json.dumps(hf, indent=2) + "\n").encode()},
                verify=lambda staged: _verify_saved(staged, tensors, hf), stale=_stale_weight_files(directory))
    return directory


def _without_draft_vocab(cfg: DFlashConfig, params: dict) -> dict:
    """A DFlash / Domino drafter's params for the reference layout, which has no draft vocabulary: the ids
    dropped, with a warning saying what that changes and how to restore it."""
    k = int(np.asarray(params["draft_vocab"]["ids"]).size)
    warnings.warn(f"the {cfg.kind} reference layout has no draft vocabulary (the reference projects with the "
                  f"target's whole LM head): saved without this drafter's {k} ids, so the saved drafter drafts over "
                  f"all {cfg.vocab_size} tokens (the same logits on those {k}); to restrict it again after loading: "
                  f"specjax.models.draft_vocab.with_draft_vocab(params, ids)", ReferenceLayoutWarning, stacklevel=3)
    return {key: v for key, v in params.items() if key != "draft_vocab"}


class ReferenceLayoutWarning(UserWarning):
    """A save to a reference layout left out something the layout cannot hold (the message says what)."""


# Dtypes a saved weight may have: the ones `params_from_tensors` reads back (real floating point that
# safetensors stores). Integer tensors are the draft vocabulary's ids and maps, never weights.
SAVE_DTYPES = tuple(np.dtype(d) for d in (np.float32, np.float16, ml_dtypes.bfloat16, np.float64))
_INTEGER_TENSORS = (DRAFT_VOCAB_TENSOR, *eagle3.REFERENCE_TENSORS)
_INDEX = "model.safetensors.index.json"
_SHARD = re.compile(r"model-\d+-of-\d+\.safetensors")


def _check_save_dtype(dtype: np.dtype, what: str) -> None:
    if dtype not in SAVE_DTYPES:
        raise ValueError(f"save_checkpoint: {what} is {dtype}, which load_checkpoint cannot read back as weights; "
                         f"save in one of {[d.name for d in SAVE_DTYPES]} (nothing was written)")


def _stale_weight_files(directory: Path) -> list[str]:
    """The weight files of an older sharded save in `directory` that a single-file save must remove: the
    shard index first (it wins on load), then the shards it lists and any `model-XXXXX-of-YYYYY.safetensors`."""
    if not directory.is_dir():
        return []
    listed: list[str] = []
    if (directory / _INDEX).is_file():
        try:
            weight_map = json.loads((directory / _INDEX).read_text()).get("weight_map", {})
            listed = [s for s in dict(weight_map).values() if isinstance(s, str) and Path(s).name == s]
        except (ValueError, TypeError, AttributeError, UnicodeDecodeError):
            listed = []  # an unreadable index: still removed, with the shards its names follow
    shards = {f.name for f in directory.iterdir() if _SHARD.fullmatch(f.name)} | set(listed)
    return ([_INDEX] if (directory / _INDEX).exists() else []) + sorted(shards - {"model.safetensors"})


def _verify_saved(staged: dict[str, Path], tensors: dict[str, np.ndarray], hf: dict) -> None:
    """Before a save replaces anything: its config.json parses back to a config, and its weights file
    holds exactly `tensors`' names, shapes and dtypes (the header only; no tensor data is read)."""
    if _read_json(staged["config.json"]) != json.loads(json.dumps(hf)):
        raise CheckpointError(f"{staged['config.json']}: the written config.json does not read back as written")
    _config_at(staged["config.json"])
    path = staged["model.safetensors"]
    try:
        with safe_open(path, framework="numpy") as f:
            got = {k: (tuple(f.get_slice(k).get_shape()), f.get_slice(k).get_dtype()) for k in f.keys()}
    except SafetensorError as e:
        raise CheckpointError(f"{path}: the written weights are not a readable safetensors file: {e}") from e
    want = {k: tuple(v.shape) for k, v in tensors.items()}
    if {k: s for k, (s, _) in got.items()} != want:
        raise CheckpointError(f"{path}: the written weights do not hold the tensors saved (names or shapes differ)")
