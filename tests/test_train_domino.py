"""Domino training (specjax.train.domino): the joint loss against a numpy reference of its
definition, learning with the curriculum (the head's share grows as lambda falls), the TTT
variant, resuming exactly, and the CLI export.

The data fixture is DFlash's (tests/test_train_dflash.py): the same tiny random target's own
answers, as the CLIs share one data recipe.
"""

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax.drafters.dflash import target_outer
from specjax.models import init_params, load_checkpoint
from specjax.models.domino import DominoConfig
from specjax.train import dflash as TD
from specjax.train import domino as T
from tests.test_train_dflash import TARGET, TARGET_PARAMS, data  # noqa: F401  # pyflakes: ignore (a fixture)
from tests.tiny_models import perturbed

DRAFTER = DominoConfig.for_target(TARGET, num_layers=1, target_layer_ids=(0, 1), block_size=4, mask_token_id=23,
                                  gru_hidden=8, head_rank=4)


@pytest.mark.parametrize("prefix", T.PREFIXES)
def test_joint_loss_equals_its_definition_in_numpy(data, prefix):  # noqa: F811
    """L = (1 - lam) L_final + lam L_base, each the exp(-(i-1)/gamma)-weighted CE of drafts x_{a+1..a+K}
    over valid labels, recomputed in float64 from the two logit tensors; TTT's final logits come
    from its own argmax drafts, TF's from the truth (they differ)."""
    dparams = perturbed(init_params(DRAFTER, jax.random.key(3)), 4, 0.3)
    tokens, mask = jnp.asarray(data["tokens"][:3]), jnp.asarray(data["loss_mask"][:3])
    feats = TD.target_features(TARGET_PARAMS, TARGET, DRAFTER, tokens)
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


def test_training_with_the_curriculum_learns_and_resumes_exactly(data, tmp_path):  # noqa: F811
    tc = T.DominoTrainConfig(steps=6, batch_size=4, anchors=4, gamma=2.0, lr=3e-3, log_every=3, ckpt_every=3)
    run = lambda tc, out, **kw: TD.train((TARGET, TARGET_PARAMS), DRAFTER, data, tc, tmp_path / out,  # noqa: E731
                                         valid_rows=8, step_factory=T.make_step, **kw)
    params, _ = run(tc, "a")
    run(tc, "b", stop_after=2)
    resumed, _ = run(tc, "b", resume=True)
    jax.tree.map(lambda x, y: np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=1e-6), params, resumed)
    _, log = run(dataclasses.replace(tc, steps=60, log_every=30, ckpt_every=60), "c")
    assert log[-1]["train_loss"] < 0.9 * log[0]["train_loss"], log
    assert {"valid_loss_base", "valid_loss_final", "valid_tau_base"} <= set(log[-1]), log[-1]


@pytest.mark.registry
def test_cli_trains_and_exports_a_loadable_domino_drafter(tmp_path):
    """`python -m specjax.train domino` end to end on the zoo target (72 registry train prompts, 64 of
    them the held-out validation rows, 8-token answers, 2 steps): the export loads strictly as a
    DominoConfig naming the zoo target, with the head flags and the recipe."""
    from specjax.train.__main__ import main

    out, exp = tmp_path / "run", tmp_path / "export"
    main(["domino", "--target", "zoo", "--out", str(out), "--export", str(exp), "--prompts", "72",
          "--max-new-tokens", "8", "--seq-len", "24", "--gen-batch", "16", "--steps", "2", "--batch-size", "2",
          "--anchors", "4", "--layers", "1", "--target-layers", "1,3", "--gru-hidden", "8", "--head-rank", "4",
          "--shift-label", "--pure-prefix-len", "1", "--prefix", "ttt", "--lambda0", "0", "--log-every", "1"])
    cfg, params = load_checkpoint(exp)
    assert isinstance(cfg, DominoConfig) and cfg.shift_label and cfg.pure_prefix_len == 1
    assert (cfg.gru_hidden, cfg.head_rank, cfg.target_layer_ids) == (8, 4, (1, 3))
    recipe = json.loads((exp / "recipe.json").read_text())
    assert recipe["train_config"]["prefix"] == "ttt" and recipe["train_config"]["lambda0"] == 0.0
    assert len(recipe["log"]) == 2
