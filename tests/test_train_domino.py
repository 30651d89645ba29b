"""Domino training (specjax.train.domino): the joint loss against a numpy reference of its
definition, learning with the curriculum (the head's share grows as lambda falls), the TTT
variant, resuming exactly, and the CLI export.

The data is DFlash's (tests/train_fixtures.py): the same tiny random target's own answers.
"""

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax.models import load_checkpoint
from specjax.models.dflash_net import target_outer
from specjax.models.domino import DominoConfig
from specjax.testing import random_params
from specjax.train import dflash as TD
from specjax.train import domino as T
from specjax.train.loop import export, train, warm_start
from tests.train_fixtures import TARGET, TARGET_PARAMS, trainset

DRAFTER = DominoConfig.for_target(TARGET, num_layers=1, target_layer_ids=(0, 1), block_size=4, mask_token_id=23,
                                  gru_hidden=8, head_rank=4)


@pytest.mark.parametrize("prefix", T.PREFIXES)
def test_joint_loss_equals_its_definition_in_numpy(prefix):
    """L = (1 - lam) L_final + lam L_base, each the exp(-(i-1)/gamma)-weighted CE of drafts x_{a+1..a+K}
    over valid labels, recomputed in float64 from the two logit tensors; TTT's final logits come
    from its own argmax drafts, TF's from the truth (they differ)."""
    dparams = random_params(DRAFTER, 3, 0.3)
    batch = trainset(DRAFTER.target_layer_ids).batch(np.arange(3))
    tokens, mask = jnp.asarray(batch["tokens"]), jnp.asarray(batch["loss_mask"])
    feats = jnp.asarray(batch["features"], jnp.float32)
    anchors, valid = TD.draw_anchors(jax.random.key(5), mask, 3)
    tc = T.DominoTrainConfig(gamma=2.0, prefix=prefix)
    lam = 0.3
    loss, metrics = T.domino_loss(dparams, DRAFTER, target_outer(TARGET_PARAMS), TARGET, feats, tokens, mask, anchors,
                                  valid, lam, tc)
    base, final = (np.asarray(x, np.float64) for x in T.block_logits_pair(
        dparams, DRAFTER, target_outer(TARGET_PARAMS), TARGET, feats, tokens, anchors, valid, prefix))
    toks, m, a, v = (np.asarray(x) for x in (tokens, mask, anchors, valid))
    k = DRAFTER.num_draft_positions

    def ce(logits):
        num = den = 0.0
        for r in range(a.shape[0]):
            for j in range(a.shape[1]):
                for i in range(1, k + 1):
                    pos = a[r, j] + i
                    if v[r, j] and pos < toks.shape[1] and m[r, pos]:
                        z = logits[r, j, i - 1]
                        logp = z - z.max() - np.log(np.exp(z - z.max()).sum())
                        w = np.exp(-(i - 1) / tc.gamma)
                        num, den = num - w * logp[toks[r, pos]], den + w
        return num / den

    np.testing.assert_allclose(float(loss), (1 - lam) * ce(final) + lam * ce(base), rtol=1e-5)
    np.testing.assert_allclose(float(metrics["loss_base"]), ce(base), rtol=1e-5)
    _, tf_final = T.block_logits_pair(dparams, DRAFTER, target_outer(TARGET_PARAMS), TARGET, feats, tokens, anchors,
                                      valid, "tf")
    assert (prefix == "tf") == bool(np.allclose(np.asarray(tf_final), final))


def test_training_with_the_curriculum_learns_and_resumes_bit_exactly(tmp_path):
    tc = T.DominoTrainConfig(steps=6, batch_size=4, anchors=4, gamma=2.0, lr=3e-3, log_every=3, ckpt_every=3)
    run = lambda tc, out, **kw: train((TARGET, target_outer(TARGET_PARAMS)), DRAFTER,  # noqa: E731
                                      trainset(DRAFTER.target_layer_ids), tc, tmp_path / out,
                                      step_factory=T.make_step, progress=False, **kw)
    params, _ = run(tc, "a")
    run(tc, "b", stop_after=2)
    resumed, _ = run(tc, "b", resume=True)
    jax.tree.map(lambda x, y: np.testing.assert_array_equal(np.asarray(x), np.asarray(y)), params, resumed)
    _, log = run(dataclasses.replace(tc, steps=60, log_every=30, ckpt_every=60), "c")
    assert log[-1]["train_loss"] < 0.9 * log[0]["train_loss"], log
    assert {"valid_loss_base", "valid_loss_final", "valid_tau_base"} <= set(log[-1]), log[-1]


def test_a_domino_run_starts_from_a_trained_dflash_backbone(tmp_path):
    """--init with a DFlash drafter of exactly the backbone's architecture: every backbone leaf starts at
    the DFlash drafter's weights, the head at this run's fresh initialisation; another architecture is refused."""
    from specjax.models.dflash import DFlashConfig

    backbone = DRAFTER.backbone()
    assert type(backbone) is DFlashConfig
    export(tmp_path / "dflash", backbone, random_params(backbone, 7, 0.3), {"note": "test"})
    _, saved = load_checkpoint(tmp_path / "dflash")
    tc = T.DominoTrainConfig(steps=1, batch_size=4, anchors=4, gamma=2.0, lr=0.0, log_every=1, ckpt_every=1)
    run = lambda out, **kw: train((TARGET, target_outer(TARGET_PARAMS)), DRAFTER,  # noqa: E731
                                  trainset(DRAFTER.target_layer_ids), tc, tmp_path / out,
                                  step_factory=T.make_step, progress=False, **kw)[0]
    fresh, warm = run("fresh"), run("warm", init=warm_start(tmp_path / "dflash", DRAFTER))
    assert set(warm) == set(saved) | {"head"}
    for key in saved:
        jax.tree.map(lambda got, want: np.testing.assert_array_equal(np.asarray(got), np.asarray(want, np.float32)),
                     warm[key], saved[key])
        assert any(np.any(np.asarray(a) != np.asarray(b)) for a, b in
                   zip(jax.tree.leaves(warm[key]), jax.tree.leaves(fresh[key]))), key
    jax.tree.map(lambda got, want: np.testing.assert_array_equal(np.asarray(got), np.asarray(want)),
                 warm["head"], fresh["head"])
    with pytest.raises(ValueError, match="config differs"):
        warm_start(tmp_path / "dflash", dataclasses.replace(DRAFTER, block_size=DRAFTER.block_size + 1))


@pytest.mark.registry
def test_cli_trains_and_exports_a_loadable_domino_drafter(tmp_path):
    """`python -m specjax.train data` then `... domino` end to end on the zoo target (registry train
    prompts: 80 of them, 8-token answers; 2 steps): the export loads strictly as a DominoConfig naming
    the zoo target, with the head flags, the recipe, and τ measured by decoding held-out prompts."""
    from specjax.train.__main__ import main

    data, out, exp = tmp_path / "data", tmp_path / "run", tmp_path / "export"
    main(["data", "--target", "zoo", "--out", str(data), "--tokens", "400", "--max-new-tokens", "8",
          "--max-prompt-tokens", "16", "--batch-size", "16", "--shard-batches", "1"])
    main(["domino", "--target", "zoo", "--data", str(data), "--cache", str(tmp_path / "cache"), "--out", str(out),
          "--export", str(exp), "--seq-len", "24", "--valid-rows", "8", "--steps", "2", "--batch-size", "2",
          "--anchors", "4", "--layers", "1", "--target-layers", "1,3", "--gru-hidden", "8", "--head-rank", "4",
          "--shift-label", "--pure-prefix-len", "1", "--prefix", "ttt", "--lambda0", "0", "--log-every", "1",
          "--eval-prompts", "2"])
    cfg, params = load_checkpoint(exp)
    assert isinstance(cfg, DominoConfig) and cfg.shift_label and cfg.pure_prefix_len == 1
    assert (cfg.gru_hidden, cfg.head_rank, cfg.target_layer_ids) == (8, 4, (1, 3))
    recipe = json.loads((exp / "recipe.json").read_text())
    assert recipe["train_config"]["prefix"] == "ttt" and recipe["train_config"]["lambda0"] == 0.0
    assert len(recipe["log"]) == 2 and recipe["compute"]["steps"] == 2
    assert recipe["measured_tau"]["prompts"] == 2 and recipe["measured_tau"]["tau_mean"] >= 1.0


def test_a_draft_vocabulary_trains_on_its_columns_of_the_full_logits():
    """With a K-id draft vocabulary, the teacher-forced base and final logits are the full-vocabulary
    ones on those K columns (W_2 cut to them), and the loss trains (gradients reach the kept columns)."""
    from specjax.train.vocab import vocab_tables

    ts = trainset(DRAFTER.target_layer_ids)
    batch = ts.batch(np.arange(4))
    dparams = random_params(DRAFTER, 3, 0.3)
    tokens, mask = jnp.asarray(batch["tokens"]), jnp.asarray(batch["loss_mask"])
    feats = jnp.asarray(batch["features"], jnp.float32)
    anchors, valid = TD.draw_anchors(jax.random.key(5), mask, 3)
    vocab = vocab_tables(ts.response_token_counts(TARGET.vocab_size), 9)
    touter = target_outer(TARGET_PARAMS)
    full = T.block_logits_pair(dparams, DRAFTER, touter, TARGET, feats, tokens, anchors, valid, "tf")
    cut = T.block_logits_pair(dparams, DRAFTER, touter, TARGET, feats, tokens, anchors, valid, "tf", vocab)
    ids = np.asarray(vocab.ids)
    for f, c in zip(full, cut):
        np.testing.assert_allclose(np.asarray(c), np.asarray(f)[..., ids], rtol=1e-5, atol=1e-5)
    tc = T.DominoTrainConfig(gamma=2.0)
    grads = jax.grad(lambda p: T.domino_loss(p, DRAFTER, touter, TARGET, feats, tokens, mask, anchors, valid, 0.2,
                                             tc, vocab)[0])(dparams)
    w2 = np.asarray(grads["head"]["w2"]["kernel"])
    assert np.abs(w2[:, ids]).sum() > 0 and not np.delete(w2, ids, axis=1).any()
