"""Training batches (`specjax.train.trainset`): packing several sequences into a row changes no sequence's loss,
packed batches are a pure function of (seed, step) and read each training sequence at most once an epoch, and the
tokens a run has seen are the batches' own response tokens."""

import dataclasses

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from specjax.testing import random_params
from specjax.train.draft_lm import next_token_loss
from specjax.train.run import TRAINERS, TrainPlan, check
from specjax.train import trainset as trainset_module
from specjax.train.trainset import TrainSet, pack_sequences
from tests.train_fixtures import TARGET, TARGET_PARAMS, dense_data

KIND = TRAINERS["draft-lm"]
DRAFT = KIND.build_config(KIND.arch(hidden_size=16, num_layers=1, num_heads=2, num_kv_heads=1, intermediate_size=32),
                          TARGET)


def _packable(width: int = 40) -> TrainSet:
    """The fixtures' 24 answers (7-17 tokens each) in rows of `width` tokens, packed."""
    d = dense_data()
    ts = TrainSet.from_dense((TARGET, TARGET_PARAMS), d["tokens"], d["loss_mask"], (), valid_rows=4)
    return dataclasses.replace(ts, seq_len=width, pack=True)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 30), max_size=60), st.integers(30, 64), st.integers(1, 5))
def test_packing_puts_every_sequence_whole_in_one_row_in_order(lengths, width, open_rows):
    rows = pack_sequences(np.array(lengths, np.int64), width, open_rows)
    flat = sorted(i for r in rows for i in r)
    assert flat == list(range(len(lengths)))  # each sequence exactly once
    assert all(r and sum(lengths[i] for i in r) <= width and r == sorted(r) for r in rows)
    if open_rows == 1:  # next fit: a new row only when the next sequence does not fit the current one
        for a, b in zip(rows, rows[1:]):
            assert sum(lengths[i] for i in a) + lengths[b[0]] > width


def test_packing_refuses_a_sequence_longer_than_a_row():
    with pytest.raises(ValueError, match="lengths must be 1..8"):
        pack_sequences(np.array([3, 9]), 8)


def test_a_packed_batch_gives_each_sequence_the_loss_it_has_alone():
    """The draft LM's loss, accuracy and τ estimate of a packed batch (several answers a row, positions from 0
    in each, attention inside each) equal those of the same answers one a row."""
    ts = _packable()
    params = random_params(DRAFT, 1, 0.8)
    for step in range(3):
        rows = ts.rows_at(step, 3, seed=0)
        assert rows.ndim == 2 and (rows >= 0).sum(axis=1).max() >= 2  # some row holds several
        packed = ts.batch(rows)
        alone = dataclasses.replace(ts, pack=False).batch(rows[rows >= 0])
        got = next_token_loss(params, DRAFT, jnp.asarray(packed["tokens"]), jnp.asarray(packed["loss_mask"]),
                              positions=jnp.asarray(packed["positions"]), segments=jnp.asarray(packed["segments"]))
        want = next_token_loss(params, DRAFT, jnp.asarray(alone["tokens"]), jnp.asarray(alone["loss_mask"]))
        # the same per-token float32 terms, summed in another order: relative rounding ~ n * 2^-24
        np.testing.assert_allclose(float(got[0]), float(want[0]), rtol=1e-5)
        np.testing.assert_allclose(float(got[1]["acc"][0]), float(want[1]["acc"][0]), rtol=1e-6)
        np.testing.assert_allclose(float(got[1]["tau"]), float(want[1]["tau"]), rtol=1e-6)
        assert packed["loss_mask"].sum() == alone["loss_mask"].sum() == ts.response_tokens_of(rows)


def test_packed_batches_depend_on_seed_and_step_only_and_read_each_sequence_once_an_epoch():
    ts, again = _packable(), _packable()
    per_epoch = ts.steps_per_epoch(2, seed=3)
    steps = [ts.rows_at(s, 2, seed=3) for s in range(per_epoch)]
    assert all(np.array_equal(a, again.rows_at(s, 2, seed=3)) for s, a in enumerate(steps))
    ids = np.concatenate([r[r >= 0] for r in steps])
    assert len(ids) == len(set(ids.tolist())) and set(ids.tolist()) <= set(range(ts.num_train))
    assert per_epoch < ts.num_train // 2  # fewer rows than one sequence a row
    # the next epoch is another packing of another permutation, and the tokens seen are the batches' own
    assert not np.array_equal(ts.rows_at(per_epoch, 2, seed=3), steps[0])
    seen = ts.tokens_seen(per_epoch + 1, 2, seed=3)
    want = np.cumsum([ts.batch(ts.rows_at(s, 2, seed=3))["loss_mask"].sum() for s in range(per_epoch + 1)])
    np.testing.assert_array_equal(seen, want)


def test_unpacked_batches_are_the_seeded_permutation_slices_they_always_were():
    """A run resumed across this change reads the same batches: step s is slice s % E of the permutation seeded
    with (seed, s // E), E = num_train // batch_size (of `train_ids` when set)."""
    ts = dataclasses.replace(_packable(), pack=False)
    sub = ts.with_train_tokens(60)
    for t, ids in ((ts, np.arange(ts.num_train)), (sub, sub.train_ids)):
        e = t.num_train // 3
        for s in (0, 1, e, e + 2, 3 * e + 1):
            perm = np.random.default_rng([7, s // e]).permutation(t.num_train)
            np.testing.assert_array_equal(t.rows_at(s, 3, seed=7), ids[perm[(s % e) * 3:(s % e) * 3 + 3]])


def test_packing_a_set_with_features_is_refused():
    d = dense_data()
    with_features = TrainSet.from_dense((TARGET, TARGET_PARAMS), d["tokens"], d["loss_mask"], (0,), valid_rows=4)
    with pytest.raises(ValueError, match="pack only a kind that reads tokens alone"):
        dataclasses.replace(with_features, pack=True)


def test_packing_a_kind_whose_step_reads_features_is_refused_before_anything_loads(tmp_path):
    t = TRAINERS["dflash"]
    with pytest.raises(ValueError, match="pack: a dflash step takes one sequence a row.*: draft-lm"):
        check("dflash", TrainPlan(data=str(tmp_path), out=str(tmp_path / "run"), pack=True), t.arch(), t.train_config())
    check("draft-lm", TrainPlan(data=str(tmp_path), out=str(tmp_path / "run"), pack=True), KIND.arch(),
          KIND.train_config())


def test_a_late_packed_step_packs_only_its_own_epoch(monkeypatch):
    """Finding a step's epoch reads the row counts of the epochs before it, kept for all of them, so a step far into a
    long run packs no earlier epoch again (a host cost on every step otherwise)."""
    ts = _packable()
    late = 9 * ts.steps_per_epoch(2, seed=0) + 1  # past the 4 epochs whose rows the cache keeps
    ts.rows_at(late, 2, seed=0)
    calls = []
    monkeypatch.setattr(trainset_module, "pack_sequences", lambda *a, **kw: calls.append(a) or pack_sequences(*a, **kw))
    for s in (late, late + 1, late - 1):
        ts.rows_at(s, 2, seed=0)
    assert calls == []
