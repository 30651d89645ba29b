"""EAGLE-3 training (specjax.train.eagle3): the training-time-test loss against a slow numpy
reference, the target logits rebuilt from the cached last layer, learning and resuming exactly.

The data is DFlash's (tests/train_fixtures.py): the same tiny random target's own answers.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax.models import causal_mask, forward_tapped, init_cache, init_params
from specjax.models.dflash_net import target_outer
from specjax.models.eagle3 import Eagle3Config
from specjax.models.eagle3_net import unrolled_hidden
from specjax.models.model import final_norm
from specjax.testing import random_params
from specjax.train import eagle3 as T
from specjax.train.loop import train
from specjax.train.vocab import subset_logits, vocab_tables
from tests.train_fixtures import TARGET, TARGET_PARAMS, trainset

DRAFTER = Eagle3Config.for_target(TARGET, target_layer_ids=(0, 1))
TOUTER = target_outer(TARGET_PARAMS)


def view(rows, vocab=None):
    """(features f32[B, S, n, E], target logits over the vocab's columns, tokens, mask) as a step sees them."""
    batch = trainset(T.feature_layers(DRAFTER, TARGET)).batch(np.asarray(rows))
    feats = jnp.asarray(batch["features"], jnp.float32)
    n = len(DRAFTER.target_layer_ids)
    zl = subset_logits(TOUTER, TARGET, final_norm(TOUTER, TARGET, feats[:, :, n]), vocab)
    return feats[:, :, :n], zl, jnp.asarray(batch["tokens"]), jnp.asarray(batch["loss_mask"])


def test_target_logits_from_the_cached_last_layer_equal_the_live_forward():
    feats, zl, tokens, _ = view([0, 1, 2])
    b, s = tokens.shape
    pos = jnp.broadcast_to(jnp.arange(s), (b, s))
    live, _, live_feats = forward_tapped(TARGET_PARAMS, TARGET, tokens, pos, causal_mask(b, s),
                                         init_cache(TARGET, b, s, jnp.float32), DRAFTER.target_layer_ids)
    ts = trainset(T.feature_layers(DRAFTER, TARGET))
    for r in range(3):  # each row up to its length (the batch pads features with zeros past it)
        n = int(ts.shards.offsets[r + 1] - ts.shards.offsets[r])
        np.testing.assert_allclose(np.asarray(feats[r, :n]), np.asarray(live_feats[r, :n]), atol=2e-2, rtol=2e-3)
        np.testing.assert_allclose(np.asarray(zl[r, :n]), np.asarray(live[r, :n]), atol=5e-2, rtol=2e-3)


@pytest.mark.parametrize("k", [None, 10])
def test_ttt_loss_equals_a_numpy_reference(k):
    """loss = sum_j 0.8^j mean over rows t with m[t+2+j] of CE(softmax z_{t+1+j}, q_j(row t)); tau and
    acc from the argmaxes: recomputed in float64 numpy from the same logits (over the K columns of a
    draft vocabulary, both laws renormalised there, when k is given)."""
    vocab = None if k is None else vocab_tables(
        trainset(T.feature_layers(DRAFTER, TARGET)).response_token_counts(TARGET.vocab_size), k)
    if vocab is not None:
        assert np.asarray(view([0], vocab)[1]).shape[-1] == k
    dparams = random_params(DRAFTER, 3, 0.3)
    feats, zl, tokens, mask = view([0, 1, 2], vocab)
    steps = 3
    loss, metrics = T.ttt_loss(dparams, DRAFTER, TOUTER, TARGET, feats, zl, tokens, mask, steps, 0.8, vocab)
    q = np.asarray(T.draft_logits(dparams, DRAFTER, TOUTER, TARGET,
                                  unrolled_hidden(dparams, DRAFTER, TOUTER, TARGET, feats, tokens, steps), vocab),
                   np.float64)
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


def test_training_reduces_loss_and_resumes_bit_exactly(tmp_path):
    tc = T.Eagle3TrainConfig(steps=6, batch_size=4, ttt_steps=3, lr=3e-3, log_every=3, ckpt_every=3)
    ts = trainset(T.feature_layers(DRAFTER, TARGET))
    run = lambda tc, out, **kw: train((TARGET, TOUTER), DRAFTER, ts, tc, tmp_path / out,  # noqa: E731
                                      step_factory=T.make_step, progress=False, **kw)
    params, _ = run(tc, "a")
    run(tc, "b", stop_after=2)  # interrupted, then resumed on the same schedule
    resumed, _ = run(tc, "b", resume=True)
    jax.tree.map(lambda x, y: np.testing.assert_array_equal(np.asarray(x), np.asarray(y)), params, resumed)
    _, log = run(dataclasses.replace(tc, steps=60, log_every=30, ckpt_every=60), "c")
    assert log[-1]["train_loss"] < 0.9 * log[0]["train_loss"], log
    assert log[-1]["valid_tau_estimate"] > log[0]["valid_tau_estimate"], log


@pytest.mark.parametrize("k", [None, 10])
def test_own_head_starts_at_the_target_heads_columns_and_trains(k):
    """The paper's drafter (own lm_head [E, K]): `init_head_from_target` starts it at the target head's
    columns of the draft vocabulary, so its training logits equal the target-head drafter's; the head
    gets gradients; a K that does not match the scored columns is refused."""
    vocab = None if k is None else vocab_tables(
        trainset(T.feature_layers(DRAFTER, TARGET)).response_token_counts(TARGET.vocab_size), k)
    own = dataclasses.replace(DRAFTER, draft_vocab_size=k or TARGET.vocab_size)
    base = random_params(DRAFTER, 3, 0.3)
    dparams = T.init_head_from_target(TOUTER, TARGET, vocab)({**base, "lm_head": init_params(own, jax.random.key(0))[
        "lm_head"]})
    hidden = jax.random.normal(jax.random.key(4), (2, 3, TARGET.hidden_size))
    np.testing.assert_allclose(np.asarray(T.draft_logits(dparams, own, TOUTER, TARGET, hidden, vocab)),
                               np.asarray(T.draft_logits(base, DRAFTER, TOUTER, TARGET, hidden, vocab)),
                               rtol=1e-5, atol=1e-5)
    feats, zl, tokens, mask = view([0, 1], vocab)
    grads = jax.grad(lambda p: T.ttt_loss(p, own, TOUTER, TARGET, feats, zl, tokens, mask, 2, 0.8, vocab)[0])(dparams)
    assert float(jnp.abs(grads["lm_head"]["kernel"]).max()) > 0
    wrong = dataclasses.replace(DRAFTER, draft_vocab_size=(k or TARGET.vocab_size) - 1)
    with pytest.raises(ValueError, match="columns"):
        T.draft_logits({**base, "lm_head": init_params(wrong, jax.random.key(0))["lm_head"]}, wrong, TOUTER, TARGET,
                       hidden, vocab)
