"""EAGLE-3 training (specjax.train.eagle3): the training-time-test loss against a slow numpy
reference, learning, resuming exactly, and the CLI export.

The data fixture is DFlash's (tests/test_train_dflash.py): the same tiny random target's own
answers, as the two CLIs share one data recipe.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from specjax.drafters.dflash import target_outer
from specjax.drafters.eagle3 import logits_of, unrolled_hidden
from specjax.models import init_params
from specjax.models.eagle3 import Eagle3Config
from specjax.train import dflash as TD
from specjax.train import eagle3 as T
from tests.test_train_dflash import TARGET, TARGET_PARAMS, data  # noqa: F401  # pyflakes: ignore (a fixture)
from tests.tiny_models import perturbed

DRAFTER = Eagle3Config.for_target(TARGET, target_layer_ids=(0, 1))


def test_ttt_loss_equals_a_numpy_reference(data):  # noqa: F811
    """loss = sum_j 0.8^j mean over rows t with m[t+2+j] of CE(softmax z_{t+1+j}, q_j(row t)); tau and
    acc from the argmaxes: recomputed in float64 numpy from the same logits."""
    dparams = perturbed(init_params(DRAFTER, jax.random.key(3)), 4, 0.3)
    tokens, mask = jnp.asarray(data["tokens"][:3]), jnp.asarray(data["loss_mask"][:3])
    feats, zl = T.target_view(TARGET_PARAMS, TARGET, DRAFTER, tokens)
    steps = 3
    loss, metrics = T.ttt_loss(dparams, DRAFTER, target_outer(TARGET_PARAMS), TARGET, feats, zl, tokens, mask, steps,
                               0.8)
    q = np.asarray(logits_of(dparams, DRAFTER, target_outer(TARGET_PARAMS), TARGET,
                             unrolled_hidden(dparams, DRAFTER, target_outer(TARGET_PARAMS), TARGET, feats, tokens,
                                             steps)), np.float64)
    z, m = np.asarray(zl, np.float64), np.asarray(mask)
    b, s = m.shape
    want, correct, valid = 0.0, np.zeros((steps, b, s), bool), np.zeros((steps, b, s), bool)
    for j in range(steps):
        terms = []
        for r in range(b):
            for t in range(s):
                if t + 2 + j < s and m[r, t + 2 + j]:
                    p = np.exp(z[r, t + 1 + j] - z[r, t + 1 + j].max())
                    p /= p.sum()
                    logq = q[j, r, t] - q[j, r, t].max() - np.log(np.exp(q[j, r, t] - q[j, r, t].max()).sum())
                    terms.append(-(p * logq).sum())
                    valid[j, r, t] = True
                    correct[j, r, t] = q[j, r, t].argmax() == z[r, t + 1 + j].argmax()
        want += 0.8 ** j * np.mean(terms)
    np.testing.assert_allclose(float(loss), want, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(metrics["acc"]), correct.sum((1, 2)) / valid.sum((1, 2)), rtol=1e-6)
    prefix = np.cumprod(correct, axis=0).sum(0)
    np.testing.assert_allclose(float(metrics["tau"]), (prefix + 1)[valid[0]].mean(), rtol=1e-6)


def test_training_reduces_loss_and_resumes_exactly(data, tmp_path):  # noqa: F811
    tc = T.Eagle3TrainConfig(steps=6, batch_size=4, ttt_steps=3, lr=3e-3, log_every=3, ckpt_every=3)
    run = lambda tc, out, **kw: TD.train((TARGET, TARGET_PARAMS), DRAFTER, data, tc, tmp_path / out, valid_rows=8,  # noqa: E731
                                         step_factory=T.make_step, **kw)
    params, _ = run(tc, "a")
    run(tc, "b", stop_after=2)  # interrupted, then resumed on the same schedule
    resumed, _ = run(tc, "b", resume=True)
    jax.tree.map(lambda x, y: np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=1e-6), params, resumed)
    _, log = run(dataclasses.replace(tc, steps=60, log_every=30, ckpt_every=60), "c")
    assert log[-1]["train_loss"] < 0.9 * log[0]["train_loss"], log
    assert log[-1]["valid_tau_estimate"] > log[0]["valid_tau_estimate"], log
