"""DFlash training (specjax.train.dflash): target-regenerated data, anchors, the loss, resuming.

A tiny random target answers a few prompts; the drafter's loss must fall when it trains on
them, the anchors obey the recipe, and a run stopped and resumed from its checkpoint ends
with exactly the parameters of an uninterrupted run.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax.models import GPTNeoXConfig, init_params
from specjax.models.dflash import DFlashConfig
from specjax.train import dflash as T
from tests.tiny_models import perturbed

TARGET = GPTNeoXConfig(vocab_size=24, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64, rotary_dim=4,
                       eos_token_ids=(0,))
TARGET_PARAMS = perturbed(init_params(TARGET, jax.random.key(0)), 1, 0.5)
DRAFTER = DFlashConfig.for_target(TARGET, num_layers=1, target_layer_ids=(0, 1), block_size=4, mask_token_id=23)


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    prompts = [rng.integers(1, 23, rng.integers(2, 6)).tolist() for _ in range(24)]
    return T.make_dataset((TARGET, TARGET_PARAMS), prompts, seq_len=20, max_new_tokens=12, batch_size=12,
                          sampled_fraction=0.5, progress=False)


def test_dataset_is_the_targets_own_answers(data):
    from specjax.decode import generate_ar
    from specjax.models import pad_prompts

    tokens, mask = data["tokens"], data["loss_mask"]
    assert tokens.shape == (24, 20) and mask.any(axis=1).all()
    # The greedy batches (every other one) are exactly plain greedy continuations of their prompts.
    matches = 0
    for r in range(24):
        s, m = int(np.argmax(mask[r])), int(mask[r].sum())
        toks, lens = pad_prompts([tokens[r, :s].tolist()])
        ref = np.asarray(generate_ar(TARGET_PARAMS, TARGET, toks, lens, 12).tokens[0])
        matches += np.array_equal(tokens[r, s:s + m], ref[:m])
    assert 12 <= matches < 24  # the greedy half reproduces exactly; the T=1 half (almost surely) does not


def test_anchors_follow_the_recipe():
    mask = jnp.asarray(np.array([[0, 0, 1, 1, 1, 1, 0, 1, 1, 0], [0, 1, 0, 1, 0, 0, 0, 0, 0, 0]], bool))
    anchors, valid = T.draw_anchors(jax.random.key(0), mask, 4)
    a, v = np.asarray(anchors), np.asarray(valid)
    ok = [{2, 3, 4, 7}, set()]  # m_a and m_{a+1}
    for b in range(2):
        assert set(a[b][v[b]].tolist()) <= ok[b] and v[b].sum() == min(4, len(ok[b]))
        assert np.all(np.diff(a[b][v[b]]) > 0)  # ascending, without replacement


def test_training_reduces_loss_and_resumes_exactly(data, tmp_path):
    tc = T.DFlashTrainConfig(steps=6, batch_size=4, anchors=4, gamma=2.0, lr=3e-3, log_every=3, ckpt_every=3)
    params, log = T.train((TARGET, TARGET_PARAMS), DRAFTER, data, tc, tmp_path / "a", valid_rows=8)
    T.train((TARGET, TARGET_PARAMS), DRAFTER, data, tc, tmp_path / "b", valid_rows=8, stop_after=2)  # interrupted
    # resuming with the full schedule: the checkpoint holds params + AdamW state + step
    resumed, _ = T.train((TARGET, TARGET_PARAMS), DRAFTER, data, tc, tmp_path / "b", resume=True, valid_rows=8)
    jax.tree.map(lambda x, y: np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=1e-6), params, resumed)
    longer = dataclasses.replace(tc, steps=60, log_every=30, ckpt_every=60)
    _, log = T.train((TARGET, TARGET_PARAMS), DRAFTER, data, longer, tmp_path / "c", valid_rows=8)
    assert log[-1]["train_loss"] < 0.8 * log[0]["train_loss"], log
