"""The tiny target and its own answers that the drafter-training tests share (not a test module).

A random GPT-NeoX target (vocab 24) answers 24 random prompts (half greedy, half at T = 1):
`dense_data()` is `specjax.train.dflash.make_dataset`'s dense form, `trainset(layers)` the
same sequences as a `TrainSet` with their features computed in memory (float16, as a cache);
`tiny_data_directory(path)` a data directory as `python -m specjax.train data` writes it, for the zoo target.
`ScriptedClock` stands in for the training loop's clock.
"""

import functools
import hashlib
import io
import json

import numpy as np

from specjax.models import GPTNeoXConfig
from specjax.models.dflash import DFlashConfig
from specjax.testing import random_params
from specjax.train import dflash as TD
from specjax.train.loop import TrainSet

TARGET = GPTNeoXConfig(vocab_size=24, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64, rotary_dim=4,
                       eos_token_ids=(0,))
TARGET_PARAMS = random_params(TARGET, 0, 0.5)
DRAFTER = DFlashConfig.for_target(TARGET, num_layers=1, target_layer_ids=(0, 1), block_size=4, mask_token_id=23)
VALID_ROWS = 8


@functools.lru_cache(maxsize=None)
def dense_data() -> dict:
    rng = np.random.default_rng(0)
    prompts = [rng.integers(1, 23, rng.integers(2, 6)).tolist() for _ in range(24)]
    return TD.make_dataset((TARGET, TARGET_PARAMS), prompts, seq_len=20, max_new_tokens=12, batch_size=12,
                           sampled_fraction=0.5, progress=False)


@functools.lru_cache(maxsize=None)
def trainset(layers: tuple[int, ...]) -> TrainSet:
    d = dense_data()
    return TrainSet.from_dense((TARGET, TARGET_PARAMS), d["tokens"], d["loss_mask"], layers, valid_rows=VALID_ROWS,
                               temperature=d["temperature"])


def tiny_data_directory(directory, rows: int = 12, length: int = 24, prompt: int = 5, vocab: int = 8192):
    """A data directory as `python -m specjax.train data` writes it (manifest + one shard), of random
    sequences of the zoo target's vocabulary: what a run reads, without the registry's prompts."""
    directory.mkdir()
    (directory / "manifest.json").write_text(json.dumps({
        "recipe": {"target": "zoo"}, "target": {"name": "zoo", "params_sha256": "-"}, "cursor": 0,
        "skipped_prompts": 0, "totals": {"sequences": 0, "response_tokens": 0}, "shards": []}))
    return add_tiny_shard(directory, rows, length, prompt, vocab, seed=0)


def add_tiny_shard(directory, rows: int = 12, length: int = 24, prompt: int = 5, vocab: int = 8192, seed: int = 1):
    """Append a shard of `rows` random sequences (`seed`) to a `tiny_data_directory`, as a generator resumed there
    would."""
    manifest = json.loads((directory / "manifest.json").read_text())
    index, start = len(manifest["shards"]), manifest["cursor"]
    tokens = np.random.default_rng(seed).integers(1, vocab, rows * length).astype(np.uint16)
    buf = io.BytesIO()
    np.savez_compressed(buf, tokens=tokens, offsets=np.arange(0, rows * length + 1, length, dtype=np.int64),
                        prompt_lengths=np.full(rows, prompt, np.int32), temperature=np.zeros(rows, np.float32),
                        prompt_index=np.arange(start, start + rows, dtype=np.int32))
    name = f"shard-{index:05d}.npz"
    (directory / name).write_bytes(buf.getvalue())
    response = rows * (length - prompt)
    manifest["shards"].append({"file": name, "sha256": hashlib.sha256(buf.getvalue()).hexdigest(), "sequences": rows,
                               "prompt_range": [start, start + rows], "response_tokens": response})
    manifest["cursor"] = start + rows
    manifest["totals"] = {"sequences": manifest["totals"]["sequences"] + rows,
                          "response_tokens": manifest["totals"]["response_tokens"] + response}
    (directory / "manifest.json").write_text(json.dumps(manifest))
    return directory


def record_bars(monkeypatch, module) -> list:
    """Every tqdm progress bar `module` makes from now on, appended to the returned list as it is made."""
    bars = []

    class Bar(module.tqdm):
        def __init__(self, *args, **kw):
            super().__init__(*args, **kw)
            bars.append(self)

    monkeypatch.setattr(module, "tqdm", Bar)
    return bars


class ScriptedClock:
    """A stand-in for the `time` module the training loop reads: `time()` is a clock that moves only when a
    scripted step says so (`advance`), so what the loop times (a time-boxed run's fit and stop, a step split) is
    known exactly, on any machine."""

    def __init__(self, now: float = 1000.0):
        self.now = now

    def time(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
