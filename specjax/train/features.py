"""The target's features for a data directory, computed once and memory-mapped (float16).

    python -m specjax.train features --target smollm2-135m --data DATA_DIR --layers 1,14,27 --out CACHE_DIR

A drafter that reads the target (DFlash, Domino, EAGLE-3) trains on the tapped layers'
outputs at every position of every sequence. Computing them in every training step costs a
target forward per step; here one pass writes them to disk and every epoch, and every drafter
kind that reads the same layers, memory-maps them.

On disk (`out/`):
  manifest.json      target (name, params sha256), data (directory, manifest sha256), hidden size,
                     dtype, total tokens, build seconds, and per layer: file, bytes, sha256
  layer-LL.f16       float16[total tokens, E]: row t is the output of decoder layer LL (the residual
                     stream after it, before the final norm: `forward_tapped`'s features) at flat
                     position t of the data (`TokenShards.tokens`' layout)

A cache is tied to the exact target weights and data (checked on open); layers can be added to
an existing cache (only the missing ones are computed), and so can data: when `python -m
specjax.train data` has appended shards since, the cache's shards are a prefix of the data's and
only the new sequences are computed (the layer files grow in place). Caches are large (SmolLM2,
600k tokens: ~0.7 GB per layer) and cheap to rebuild: never commit them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pathlib
import time

import jax.numpy as jnp
import numpy as np
from tqdm.auto import tqdm

from specjax.data.assets import sha256_file
from specjax.models.model import layer_features
from specjax.train.data import TokenShards, params_sha256

__all__ = ["FeatureCache", "build_feature_cache", "compute_features", "open_feature_cache", "data_sha256",
           "length_batches", "shard_checksums", "covered_shards"]

MANIFEST = "manifest.json"


def data_sha256(shards: TokenShards) -> str:
    """sha256 over the data manifest's shard checksums (names the exact sequences)."""
    return hashlib.sha256("".join(s["sha256"] for s in shards.manifest["shards"]).encode()).hexdigest()


def shard_checksums(shards: TokenShards) -> list[str]:
    """The data manifest's shard sha256s, in order."""
    return [s["sha256"] for s in shards.manifest["shards"]]


def covered_shards(manifest: dict, checksums: list[str]) -> int | None:
    """How many leading shards of the data (`checksums`) a feature cache's manifest holds, or None when
    its data is not a prefix of these shards (other data). Caches written before the manifest listed
    its shards are matched by their combined checksum."""
    data = manifest["data"]
    if "shards" in data:
        n = len(data["shards"])
        return n if data["shards"] == checksums[:n] else None
    for n in range(len(checksums), -1, -1):
        if hashlib.sha256("".join(checksums[:n]).encode()).hexdigest() == data["sha256"]:
            return n
    return None


def length_batches(lengths: np.ndarray, max_tokens: int, multiple: int = 32) -> list[tuple[np.ndarray, int]]:
    """Sequences grouped by length: [(indices, padded width)], each group's rows x width <= max_tokens
    (at least one row), widths rounded up to `multiple` (few widths: few compiles)."""
    order = np.argsort(lengths, kind="stable")
    groups, i = [], 0
    while i < len(order):
        width = int(-(-lengths[order[i]] // multiple) * multiple)
        j = i
        while j < len(order):
            w = int(-(-lengths[order[j]] // multiple) * multiple)
            if (j - i + 1) * w > max_tokens and j > i:
                break
            width, j = w, j + 1
        groups.append((order[i:j], width))
        i = j
    return groups


@dataclasses.dataclass(frozen=True)
class FeatureCache:
    """Memory-mapped features of a data directory.

    Fields:
      layers: the cached layer ids, ascending.
      arrays: layer id -> float16[total tokens, E] (read-only memmap; `TokenShards.tokens`' flat layout).
      manifest: the cache's manifest.
    """

    layers: tuple[int, ...]
    arrays: dict
    manifest: dict

    def gather(self, layers: tuple[int, ...], starts: np.ndarray, lengths: np.ndarray, width: int) -> np.ndarray:
        """float16[B, width, n, E]: row b holds positions starts[b] .. starts[b] + lengths[b] - 1 of the
        requested layers (in the given order), zero-padded to `width`."""
        missing = [l for l in layers if l not in self.arrays]
        if missing:
            raise KeyError(f"layers {missing} are not in the feature cache (it has {self.layers}); "
                           f"add them with python -m specjax.train features --layers ...")
        e = self.manifest["hidden_size"]
        out = np.zeros((len(starts), width, len(layers), e), np.float16)
        for b, (s, n) in enumerate(zip(starts, lengths)):
            n = min(int(n), width)
            for k, l in enumerate(layers):
                out[b, :n, k] = self.arrays[l][s:s + n]
        return out


def open_feature_cache(directory: str | pathlib.Path, *, target_sha: str | None = None,
                       data_sha: str | None = None, verify: bool = False) -> FeatureCache:
    """Open a cache; `target_sha` / `data_sha` (when given) must match the manifest's, and `verify`
    re-hashes every layer file (a mismatch names the file)."""
    directory = pathlib.Path(directory)
    path = directory / MANIFEST
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: build the cache with python -m specjax.train features ...")
    manifest = json.loads(path.read_text())
    if target_sha is not None and manifest["target"]["params_sha256"] != target_sha:
        raise ValueError(f"{path}: built from other target weights; rebuild it (or use another --cache directory)")
    if data_sha is not None and manifest["data"]["sha256"] != data_sha:
        raise ValueError(f"{path}: built from other data; rebuild it (or use another --cache directory)")
    arrays = {}
    shape = (manifest["total_tokens"], manifest["hidden_size"])
    for key, entry in manifest["layers"].items():
        f = directory / entry["file"]
        if f.stat().st_size != entry["bytes"]:
            raise ValueError(f"{f}: {f.stat().st_size} bytes, the manifest says {entry['bytes']}; rebuild the cache")
        if verify and sha256_file(f) != entry["sha256"]:
            raise ValueError(f"{f}: sha256 differs from {path}; rebuild the cache")
        arrays[int(key)] = np.memmap(f, np.float16, "r", shape=shape)
    return FeatureCache(layers=tuple(sorted(arrays)), arrays=arrays, manifest=manifest)


def _fill(arrays: dict, target, shards: TokenShards, layers: tuple[int, ...], max_tokens: int, progress: bool,
          first: int = 0):
    """Write layer l's features of sequences first.. into arrays[l] (float16[total tokens, E]), one causal
    forward (`layer_features`) per length group."""
    cfg, params = target
    lengths = np.diff(shards.offsets)
    todo = np.arange(first, len(lengths))
    bar = tqdm(total=int(lengths[todo].sum()), unit="tok", desc=f"features {list(layers)}", disable=not progress)
    for group, width in length_batches(lengths[todo], max_tokens):
        idx = todo[group]
        toks = np.zeros((len(idx), width), np.int32)
        for r, i in enumerate(idx):
            toks[r, :lengths[i]] = shards.tokens[shards.offsets[i]:shards.offsets[i + 1]]
        feats = np.asarray(layer_features(params, cfg, jnp.asarray(toks), layers).astype(jnp.float16))
        for r, i in enumerate(idx):
            a, n = int(shards.offsets[i]), int(lengths[i])
            for k, l in enumerate(layers):
                arrays[l][a:a + n] = feats[r, :n, k]
        bar.update(int(lengths[idx].sum()))
    bar.close()


def compute_features(target, shards: TokenShards, layers: tuple[int, ...], *, max_tokens: int = 4096,
                     progress: bool = False) -> FeatureCache:
    """The same features in memory (no files): for small data and tests. target: (cfg, params)."""
    cfg, _ = target
    total = int(shards.offsets[-1])
    arrays = {l: np.zeros((total, cfg.hidden_size), np.float16) for l in sorted(set(layers))}
    _fill(arrays, target, shards, tuple(sorted(arrays)), max_tokens, progress)
    return FeatureCache(layers=tuple(sorted(arrays)), arrays=arrays,
                        manifest={"hidden_size": cfg.hidden_size, "total_tokens": total, "in_memory": True})


def build_feature_cache(target, target_name: str, shards: TokenShards, data_dir: str, layers: tuple[int, ...],
                        out: str | pathlib.Path, *, max_tokens: int = 4096, progress: bool = True) -> FeatureCache:
    """Compute what `out` lacks of `layers` for every sequence of `shards` (one causal forward per length
    group, `layer_features`: only the layers up to the deepest requested one, no LM head) and write
    it: the missing layers, and the sequences of shards added to the data since the cache was built
    (its cached layers grow in place). Returns the opened cache. target: (cfg, params)."""
    cfg, params = target
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tsha, dsha, checksums = params_sha256(params), data_sha256(shards), shard_checksums(shards)
    path = out / MANIFEST
    total = int(shards.offsets[-1])
    data = {"directory": str(data_dir), "sha256": dsha, "sequences": len(shards), "shards": checksums}
    t0, on_disk = time.time(), None
    if path.exists():
        on_disk = path.read_text()
        manifest = json.loads(on_disk)
        held = covered_shards(manifest, checksums)
        if manifest["target"]["params_sha256"] != tsha or held is None:
            raise ValueError(f"{path} belongs to other target weights or data: use another --out directory")
        if held < len(checksums):
            _extend(manifest, out, target, shards, held, max_tokens, progress)
    else:
        manifest = {"target": {"name": target_name, "params_sha256": tsha},
                    "hidden_size": cfg.hidden_size, "dtype": "float16", "layers": {}, "build_seconds": 0.0}
    manifest.update(data=data, total_tokens=total)
    todo = tuple(sorted(set(layers) - {int(k) for k in manifest["layers"]}))
    if todo:
        files = {l: out / f"layer-{l:02d}.f16" for l in todo}
        tmps = {l: files[l].with_name(files[l].name + ".tmp") for l in todo}
        maps = {l: np.memmap(tmps[l], np.float16, "w+", shape=(total, cfg.hidden_size)) for l in todo}
        _fill(maps, target, shards, todo, max_tokens, progress)
        for l in todo:
            maps[l].flush()
            del maps[l]
            os.replace(tmps[l], files[l])
            manifest["layers"][str(l)] = _layer_entry(files[l])
    manifest["bytes"] = sum(e["bytes"] for e in manifest["layers"].values())
    if on_disk is None or json.loads(on_disk) != manifest:
        manifest["build_seconds"] = round(manifest["build_seconds"] + time.time() - t0, 1)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(manifest, indent=1) + "\n")
        os.replace(tmp, path)
    return open_feature_cache(out, target_sha=tsha, data_sha=dsha)


def _layer_entry(file: pathlib.Path) -> dict:
    return {"file": file.name, "bytes": file.stat().st_size, "sha256": sha256_file(file)}


def _extend(manifest: dict, out: pathlib.Path, target, shards: TokenShards, held: int, max_tokens: int,
            progress: bool) -> None:
    """Grow every cached layer file to the data's tokens and compute the sequences of shards held..
    (the rows before them are kept); updates the manifest's layer entries. An interrupted extension
    leaves files longer than the manifest says: the next call extends them again."""
    cfg, _ = target
    first = sum(s["sequences"] for s in shards.manifest["shards"][:held])  # first sequence not cached
    if int(shards.offsets[first]) != manifest["total_tokens"]:
        raise ValueError(f"{out}: caches {manifest['total_tokens']} tokens but the data's first {held} shards hold "
                         f"{int(shards.offsets[first])}: use another --out directory")
    total = int(shards.offsets[-1])
    layers = tuple(sorted(int(k) for k in manifest["layers"]))
    maps = {}
    for l in layers:
        file = out / manifest["layers"][str(l)]["file"]
        with open(file, "r+b") as f:
            f.truncate(total * cfg.hidden_size * 2)
        maps[l] = np.memmap(file, np.float16, "r+", shape=(total, cfg.hidden_size))
    _fill(maps, target, shards, layers, max_tokens, progress, first=first)
    for l in layers:
        maps[l].flush()
        del maps[l]
        manifest["layers"][str(l)] = _layer_entry(out / manifest["layers"][str(l)]["file"])
