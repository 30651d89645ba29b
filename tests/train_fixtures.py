"""The tiny target and its own answers that the drafter-training tests share (not a test module).

A random GPT-NeoX target (vocab 24) answers 24 random prompts (half greedy, half at T = 1):
`dense_data()` is `specjax.train.dflash.make_dataset`'s dense form, `trainset(layers)` the
same sequences as a `TrainSet` with their features computed in memory (float16, as a cache).
"""

import functools

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
    return TrainSet.from_dense((TARGET, TARGET_PARAMS), d["tokens"], d["loss_mask"], layers, valid_rows=VALID_ROWS)
