"""An online run's held-out evaluations (`specjax.train.loop._HeldOut`): the fixed held-out set's target features
computed once, at the first evaluation, when they fit `HELD_OUT_FEATURES_BYTES`, instead of the frozen target's
forward over the whole set at every evaluation; the evaluations and the training as before."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax.models.dflash_net import target_outer
from specjax.train import dflash as T
from specjax.train import loop as train_loop
from specjax.train.loop import train
from tests.train_fixtures import DRAFTER, TARGET, TARGET_PARAMS, VALID_ROWS, ScriptedClock, trainset

BATCH = 2
LAYERS = DRAFTER.target_layer_ids


def _no_recomputing_evaluate(monkeypatch):
    """`online_steps` whose evaluate (the target's forward inside every evaluation) fails when called."""
    real = train_loop.online_steps

    def online_steps(step_fn, eval_fn, tcfg, layers, target_dtype=None):
        step, _ = real(step_fn, eval_fn, tcfg, layers, target_dtype)

        def evaluate(*args):
            raise AssertionError("an evaluation recomputed the held-out set's target features")

        return step, evaluate

    monkeypatch.setattr(train_loop, "online_steps", online_steps)


def _run(tmp_path, name: str, data):
    tc = T.DFlashTrainConfig(steps=6, batch_size=BATCH, anchors=4, log_every=3, ckpt_every=1000)
    return train((TARGET, target_outer(TARGET_PARAMS)), DRAFTER, data, tc, tmp_path / name, step_factory=T.make_step,
                 progress=False, target_params=TARGET_PARAMS)


def test_an_online_run_evaluates_on_held_out_features_computed_once(tmp_path, monkeypatch):
    """Three runs of the same 6 steps with two evaluations: features from a cache on disk (`TrainSet.from_dense`),
    online with the held-out features recomputed in every evaluation (the bound set to 0 bytes), and online with
    them cached (the default; an evaluation that recomputes them fails here). The online runs' weights are
    bit-identical (evaluations do not touch training), and the three logs' held-out loss and τ estimate agree to
    float32 rounding (rtol 1e-5: the same float16 features, the forward compiled in another program)."""
    cached = trainset(LAYERS)
    online = dataclasses.replace(cached, features=None)
    runs = {"cache": _run(tmp_path, "cache", cached)}
    monkeypatch.setattr(train_loop, "HELD_OUT_FEATURES_BYTES", 0)
    runs["recomputed"] = _run(tmp_path, "recomputed", online)
    monkeypatch.undo()
    _no_recomputing_evaluate(monkeypatch)
    runs["kept"] = _run(tmp_path, "kept", online)
    jax.tree.map(lambda x, y: np.testing.assert_array_equal(np.asarray(x), np.asarray(y)), runs["recomputed"][0],
                 runs["kept"][0])
    logs = {name: log for name, (_, log) in runs.items()}
    assert [r["step"] for r in logs["kept"]] == [3, 6]
    for name in ("cache", "recomputed"):
        for a, b in zip(logs[name], logs["kept"], strict=True):
            for field in ("valid_loss", "valid_tau_estimate"):
                assert a[field] == pytest.approx(b[field], rel=1e-5, abs=1e-4), (name, field, a, b)
            assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-4), (name, a, b)


def test_the_size_bound_decides_before_any_compute_and_the_forward_runs_once(monkeypatch):
    """`_HeldOut` keeps the features when the whole chunks' rows x bytes a row fit the bound, at the bound exactly
    too; kept, the first `chunks()` computes them (float16, equal to `online_features`' own) and later calls
    return the same arrays; over the bound the chunks carry tokens only and the evaluation takes (touter, the
    target's params), as a step does."""
    online = dataclasses.replace(trainset(LAYERS), features=None)
    valid = online.valid_batch()
    touter = target_outer(TARGET_PARAMS)
    with_features = train_loop.online_features(TARGET, LAYERS)
    per_row = valid["tokens"].shape[1] * len(LAYERS) * TARGET.hidden_size * 2
    rows = 3  # VALID_ROWS = 8: two whole chunks of 3 rows, 6 rows used
    assert VALID_ROWS == 8
    monkeypatch.setattr(train_loop, "HELD_OUT_FEATURES_BYTES", 6 * per_row)
    kept = train_loop._HeldOut(valid, rows, None, (touter, TARGET_PARAMS), with_features, per_row)
    over = train_loop._HeldOut(valid, rows, None, (touter, TARGET_PARAMS), with_features, per_row + 1)
    assert kept.cached and kept.target is touter
    assert not over.cached and over.target == (touter, TARGET_PARAMS)
    chunks = kept.chunks()
    assert [len(c["tokens"]) for c in chunks] == [3, 3] and kept.chunks() is chunks
    for i, c in enumerate(chunks):
        rows_i = {k: jnp.asarray(v[3 * i:3 * i + 3]) for k, v in valid.items()}
        expect = jax.jit(with_features)((touter, TARGET_PARAMS), rows_i)[1]["features"]
        assert c["features"].dtype == jnp.float16
        np.testing.assert_array_equal(np.asarray(c["features"]), np.asarray(expect))
    assert all("features" not in c for c in over.chunks())
    assert not train_loop._HeldOut(valid, rows, None, touter, None, 0).cached  # features from a cache: nothing to keep


def test_each_record_gives_its_evaluations_own_seconds_on_a_scripted_clock(tmp_path, monkeypatch):
    """"eval_seconds" is the evaluation's time alone: each of the 4 held-out chunks' evaluations (8 rows, 2 a
    chunk) takes a scripted 0.75 s and each step 0.25 s, so every record says 3.0, not the steps' time."""
    clock = ScriptedClock()
    monkeypatch.setattr(train_loop, "time", clock)

    def factory(dcfg, tcfg, opt, tc, **kw):
        step, evaluate = T.make_step(dcfg, tcfg, opt, tc, **kw)

        def timed_step(*args):
            clock.advance(0.25)
            return step(*args)

        def timed_evaluate(*args):
            clock.advance(0.75)
            return evaluate(*args)

        return timed_step, timed_evaluate

    tc = T.DFlashTrainConfig(steps=4, batch_size=BATCH, anchors=4, log_every=2, ckpt_every=1000)
    _, log = train((TARGET, target_outer(TARGET_PARAMS)), DRAFTER, trainset(LAYERS), tc, tmp_path, step_factory=factory,
                   progress=False)
    assert [(r["step"], r["eval_seconds"]) for r in log] == [(2, 3.0), (4, 3.0)]
