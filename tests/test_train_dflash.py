"""DFlash training (specjax.train.dflash): target-regenerated data, anchors, the loss, resuming.

A tiny random target answers a few prompts; the drafter's loss must fall when it trains on
them, the anchors obey the recipe, and a run stopped and resumed from its checkpoint ends
with exactly the parameters of an uninterrupted run.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from specjax.models import load_checkpoint
from specjax.models.dflash_net import anchored_hidden, target_outer
from specjax.models.cache import init_cache
from specjax.models.model import causal_mask, forward, project_to_vocab
from specjax.testing import random_params
from specjax.train import dflash as T
from specjax.train.loop import export, init_vocab_ids, train, warm_start
from specjax.train.vocab import tables_of_ids, vocab_tables
from tests.train_fixtures import DRAFTER, TARGET, TARGET_PARAMS, dense_data, trainset


@pytest.fixture(scope="module")
def data():
    return dense_data()


def run(tc, out, **kw):
    return train((TARGET, target_outer(TARGET_PARAMS)), DRAFTER, trainset(DRAFTER.target_layer_ids), tc, out,
                 step_factory=T.make_step, progress=False, **kw)


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


def test_training_reduces_loss_and_resumes_bit_exactly(tmp_path):
    tc = T.DFlashTrainConfig(steps=6, batch_size=4, anchors=4, gamma=2.0, lr=3e-3, log_every=3, ckpt_every=3)
    params, _ = run(tc, tmp_path / "a")
    run(tc, tmp_path / "b", stop_after=2)  # interrupted
    # resuming with the full schedule: the checkpoint holds params + AdamW state + step; batches and
    # anchors are functions of (seed, step): the same bits as the uninterrupted run
    resumed, _ = run(tc, tmp_path / "b", resume=True)
    jax.tree.map(lambda x, y: np.testing.assert_array_equal(np.asarray(x), np.asarray(y)), params, resumed)
    longer = dataclasses.replace(tc, steps=60, log_every=30, ckpt_every=60)
    _, log = run(longer, tmp_path / "c")
    assert log[-1]["train_loss"] < 0.8 * log[0]["train_loss"], log


def test_block_loss_over_a_draft_vocabulary_equals_a_numpy_reference():
    """With a draft vocabulary of K < V ids, the loss is the weighted CE of the softmax over those K
    columns of the full logits, over labels inside it; a label outside counts as a miss in acc and tau."""
    ts = trainset(DRAFTER.target_layer_ids)
    batch = ts.batch(np.arange(6))
    touter = target_outer(TARGET_PARAMS)
    counts = ts.response_token_counts(TARGET.vocab_size)
    vocab = vocab_tables(counts, 10)
    dparams = random_params(DRAFTER, 2, 0.3)
    feats, tokens, mask = (jnp.asarray(batch["features"], jnp.float32), jnp.asarray(batch["tokens"]),
                           jnp.asarray(batch["loss_mask"]))
    anchors, valid = T.draw_anchors(jax.random.key(1), mask, 4)
    loss, metrics = T.block_loss(dparams, DRAFTER, touter, TARGET, feats, tokens, mask, anchors, valid, 2.0, vocab)
    full = np.asarray(project_to_vocab(touter, TARGET, anchored_hidden(dparams, DRAFTER, touter, TARGET, feats, tokens,
                                                                       anchors, valid)[:, :, 1:]), np.float64)
    ids = np.asarray(vocab.ids)
    assert len(ids) == 10 and set(np.argsort(-counts, kind="stable")[:9]) <= set(ids.tolist())
    toks, m, a, v = (np.asarray(x) for x in (tokens, mask, anchors, valid))
    num, den, hits, cnt, prefixes = 0.0, 0.0, np.zeros(3), np.zeros(3), []
    for r in range(toks.shape[0]):
        for j in range(a.shape[1]):
            if not v[r, j]:
                continue
            correct = []
            for i in range(3):  # draft i + 1 of the block predicts x_{a + 1 + i}
                pos = a[r, j] + 1 + i
                if pos >= toks.shape[1] or not m[r, pos]:
                    correct.append(False)
                    continue
                z = full[r, j, i, ids]
                logp = z - z.max() - np.log(np.exp(z - z.max()).sum())
                label = toks[r, pos]
                cnt[i] += 1
                if label in ids:
                    num += -np.exp(-i / 2.0) * logp[list(ids).index(label)]
                    den += np.exp(-i / 2.0)
                correct.append(bool(label in ids and ids[z.argmax()] == label))
                hits[i] += correct[-1]
            prefixes.append(1 + int(np.cumprod(correct).sum()))
    np.testing.assert_allclose(float(loss), num / den, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(metrics["acc"]), hits / np.maximum(cnt, 1), rtol=1e-6)
    np.testing.assert_allclose(float(metrics["tau"]), np.mean(prefixes), rtol=1e-6)


def test_training_with_a_draft_vocabulary_exports_its_ids(tmp_path):
    """A K-token run learns, resumes only with the same vocabulary, and the export carries the ids."""
    ts = trainset(DRAFTER.target_layer_ids)
    vocab = vocab_tables(ts.response_token_counts(TARGET.vocab_size), 12, always=(0,))
    tc = T.DFlashTrainConfig(steps=30, batch_size=4, anchors=4, gamma=2.0, lr=3e-3, log_every=15, ckpt_every=15)
    params, log = run(tc, tmp_path / "v", vocab=vocab)
    assert log[-1]["train_loss"] < log[0]["train_loss"], log
    with pytest.raises(ValueError, match="another draft vocabulary"):
        run(tc, tmp_path / "v", resume=True)
    export(tmp_path / "exp", DRAFTER, params, {"note": "test"}, vocab.ids)
    from specjax.models.draft_vocab import draft_vocab_ids, split_draft_vocab

    cfg, loaded = load_checkpoint(tmp_path / "exp")
    assert cfg == DRAFTER and np.array_equal(np.asarray(draft_vocab_ids(loaded)), np.asarray(vocab.ids))
    # --init: a new run starts from the exported weights (float16 there, float32 here), and learns on
    warm, warm_log = run(dataclasses.replace(tc, steps=2, log_every=1, lr=0.0), tmp_path / "w", vocab=vocab,
                         init=warm_start(tmp_path / "exp", DRAFTER, vocab.ids))
    for got, want in zip(jax.tree.leaves(warm), jax.tree.leaves(split_draft_vocab(loaded)[0])):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want, np.float32))
    assert warm_log[0]["train_loss"] < log[0]["train_loss"]
    with pytest.raises(ValueError, match="draft vocabulary differs"):
        warm_start(tmp_path / "exp", DRAFTER, None)
    # the CLI's warm start keeps the exported vocabulary (the grown data's top K may differ)
    kept = tables_of_ids(init_vocab_ids(tmp_path / "exp"), TARGET.vocab_size)
    np.testing.assert_array_equal(np.asarray(kept.ids), np.asarray(vocab.ids))
    np.testing.assert_array_equal(np.asarray(kept.index), np.asarray(vocab.index))
    with pytest.raises(ValueError, match="ascending distinct ids"):
        tables_of_ids(np.asarray(vocab.ids)[::-1], TARGET.vocab_size)
    with pytest.raises(ValueError, match="config differs"):
        warm_start(tmp_path / "exp", dataclasses.replace(DRAFTER, block_size=DRAFTER.block_size + 1), vocab.ids)


@pytest.mark.parametrize("k", [None, 10])
def test_soft_labels_add_the_kl_from_the_targets_own_next_token_law(k):
    """soft_labels lam: the step's loss is (1 - lam) CE + lam KL(p || q), p the target's own next-token law for
    each label (its full forward's logits at the position before the label, not the features' path), q the
    drafter's, both over the draft vocabulary's columns (renormalised there), weighted as the CE but over every
    valid label, in or out of that vocabulary (float64 numpy); the step reads the target's last layer after the
    drafter's (`teacher_layers`) and lam = 0 reads none and is the CE alone."""
    layers = (*DRAFTER.target_layer_ids, *T.teacher_layers(T.DFlashTrainConfig(soft_labels=0.3), TARGET))
    assert layers[-1] == TARGET.num_layers - 1 and T.teacher_layers(T.DFlashTrainConfig(), TARGET) == ()
    ts = trainset(layers)
    batch = jax.tree.map(jnp.asarray, ts.batch(np.arange(6)))
    touter = target_outer(TARGET_PARAMS)
    vocab = None if k is None else vocab_tables(ts.response_token_counts(TARGET.vocab_size), k)
    dparams = random_params(DRAFTER, 2, 0.3)
    tc = T.DFlashTrainConfig(anchors=4, gamma=2.0, soft_labels=0.3)
    key = jax.random.key(1)
    loss, _ = T.make_step(DRAFTER, TARGET, optax.sgd(0.1), tc)[1](dparams, touter, batch, vocab, key)
    anchors, valid = T.draw_anchors(key, batch["loss_mask"], tc.anchors)
    feats = batch["features"][:, :, :-1].astype(jnp.float32)
    ce, _ = T.block_loss(dparams, DRAFTER, touter, TARGET, feats, batch["tokens"], batch["loss_mask"], anchors, valid,
                         tc.gamma, vocab)
    drafter = np.asarray(project_to_vocab(touter, TARGET, anchored_hidden(dparams, DRAFTER, touter, TARGET, feats,
                                                                          batch["tokens"], anchors, valid)[:, :, 1:]),
                         np.float64)
    b, s = batch["tokens"].shape
    target = np.asarray(forward(TARGET_PARAMS, TARGET, batch["tokens"], jnp.broadcast_to(jnp.arange(s), (b, s)),
                                causal_mask(b, s), init_cache(TARGET, b, s, jnp.float32))[0], np.float64)
    cols = np.arange(TARGET.vocab_size) if vocab is None else np.asarray(vocab.ids)
    log_softmax = lambda z: z - z.max() - np.log(np.exp(z - z.max()).sum())  # noqa: E731
    toks, m, a, v = (np.asarray(x) for x in (batch["tokens"], batch["loss_mask"], anchors, valid))
    num = den = 0.0
    for r in range(b):
        for j in range(a.shape[1]):
            for i in range(DRAFTER.block_size - 1):  # draft i + 1 predicts x_{a + 1 + i}: the target's law at a + i
                pos = a[r, j] + 1 + i
                if not v[r, j] or pos >= s or not m[r, pos]:
                    continue
                logp, logq = log_softmax(target[r, pos - 1, cols]), log_softmax(drafter[r, j, i, cols])
                num += np.exp(-i / tc.gamma) * np.sum(np.exp(logp) * (logp - logq))
                den += np.exp(-i / tc.gamma)
    # the KL term alone, rtol 2 u with u = 2^-11 float16's unit roundoff: the batch holds the last layer in float16,
    # so the target's logits, and to first order the KL, carry its relative error (measured: 2e-5; leaving out the
    # final norm moves the KL by 0.5 %, reading the state one position late by far more)
    np.testing.assert_allclose((float(loss) - 0.7 * float(ce)) / 0.3, num / den, rtol=2 * 2.0 ** -11)
    plain = T.make_step(DRAFTER, TARGET, optax.sgd(0.1), dataclasses.replace(tc, soft_labels=0.0))[1]
    np.testing.assert_allclose(float(plain(dparams, touter, {**batch, "features": batch["features"][:, :, :-1]}, vocab,
                                           key)[0]), float(ce), rtol=1e-6)


def test_grouped_batches_give_each_sequence_the_loss_it_has_at_full_width_and_resume_bit_exactly(tmp_path,
                                                                                             monkeypatch):
    """`group_batches`: a batch cut to its longest sequence gives the loss and metrics of the same rows at the full
    width, for the same anchors (attention is causal and the drafter's context stops before each anchor; rtol
    1e-6); a grouped run, stopped and resumed, ends with the uninterrupted run's bits (its batches, widths
    included, are functions of (seed, step))."""
    from specjax.train import trainset as trainset_module
    monkeypatch.setattr(trainset_module, "WIDTH_QUANTUM", 4)  # the fixture's sequences are 10-17 of 20 tokens
    grouped = dataclasses.replace(trainset(DRAFTER.target_layer_ids), group_batches=2)
    touter, dparams = target_outer(TARGET_PARAMS), random_params(DRAFTER, 2, 0.3)
    narrower = 0
    for step in range(6):
        rows = grouped.rows_at(step, 3, 0)
        narrow, wide = (jax.tree.map(jnp.asarray, grouped.batch(rows, width)) for width in (None, grouped.seq_len))
        narrower += narrow["tokens"].shape[1] < wide["tokens"].shape[1]
        anchors, valid = T.draw_anchors(jax.random.key(step), narrow["loss_mask"], 4)
        a, b = (T.block_loss(dparams, DRAFTER, touter, TARGET, x["features"].astype(jnp.float32), x["tokens"],
                             x["loss_mask"], anchors, valid, 2.0) for x in (narrow, wide))
        np.testing.assert_allclose(float(a[0]), float(b[0]), rtol=1e-6)
        jax.tree.map(lambda x, y: np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-6), a[1], b[1])
    assert narrower >= 2
    tc = T.DFlashTrainConfig(steps=6, batch_size=4, anchors=4, gamma=2.0, lr=3e-3, log_every=3, ckpt_every=3)
    go = lambda out, **kw: train((TARGET, target_outer(TARGET_PARAMS)), DRAFTER, grouped, tc, out,  # noqa: E731
                                 step_factory=T.make_step, progress=False, **kw)[0]
    whole = go(tmp_path / "a")
    go(tmp_path / "b", stop_after=2)
    jax.tree.map(lambda x, y: np.testing.assert_array_equal(np.asarray(x), np.asarray(y)), whole,
                 go(tmp_path / "b", resume=True))
