"""`train(..., step_split=True)` (`--step-split`): at each batch width's first step, where the step's time goes —
the whole step and, when the step computes the target's features itself, that forward alone — without changing
what the run trains."""

from __future__ import annotations

import dataclasses
import re

import jax
import numpy as np
import pytest

from specjax.models.dflash_net import target_outer
from specjax.train import dflash as T
from specjax.train import loop as train_loop
from specjax.train import trainset as trainset_module
from specjax.train.loop import SPLIT_REPS, train
from specjax.train.run import TrainPlan
from tests.train_fixtures import DRAFTER, TARGET, TARGET_PARAMS, ScriptedClock, trainset

BATCH = 2


def _grouped(monkeypatch, online: bool):
    """The fixtures' answers in grouped batches of several widths, their features cached or computed online."""
    monkeypatch.setattr(trainset_module, "WIDTH_QUANTUM", 4)
    grouped = dataclasses.replace(trainset(DRAFTER.target_layer_ids), group_batches=2)
    return dataclasses.replace(grouped, features=None) if online else grouped


def _split_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("step split at width ")]


def test_each_width_is_split_once_with_the_steps_own_time_on_a_scripted_clock(tmp_path, monkeypatch, capsys):
    """A scripted step that takes 0.25 s at a compiled width (2 s at its first call, a compile) over cached
    features: one line per width the run meets, in the order met, each timing the step at exactly 0.250 s (the
    warm-up call excluded, the median of SPLIT_REPS); the step runs SPLIT_REPS + 1 more times per width."""
    clock = ScriptedClock()
    monkeypatch.setattr(train_loop, "time", clock)
    grouped = _grouped(monkeypatch, online=False)
    calls = []

    def factory(dcfg, tcfg, opt, tc, **kw):
        compiled = set()

        def step(dparams, opt_state, touter, batch, vocab, key, step_index):
            width = batch["tokens"].shape[1]
            clock.advance(0.25 if width in compiled else 2.0)
            compiled.add(width)
            calls.append(width)
            return dparams, opt_state, jax.numpy.float32(1.0), {"acc": np.zeros(3), "tau": 1.0}

        return step, T.make_step(dcfg, tcfg, opt, tc, **kw)[1]

    steps = grouped.steps_per_epoch(BATCH, 0) + 3
    tc = T.DFlashTrainConfig(steps=steps, batch_size=BATCH, anchors=4, log_every=1000, ckpt_every=1000)
    train((TARGET, target_outer(TARGET_PARAMS)), DRAFTER, grouped, tc, tmp_path, step_factory=factory,
          progress=False, step_split=True)
    met = list(dict.fromkeys(grouped.batch_width(grouped.rows_at(s, BATCH, 0)) for s in range(steps)))
    assert len(met) >= 2
    lines = _split_lines(capsys.readouterr().out)
    assert lines == [f"step split at width {w}: the step 0.250 s (its features read from the cache)" for w in met]
    assert len(calls) == steps + len(met) * (SPLIT_REPS + 1)


def test_an_online_run_splits_off_the_targets_forward_and_trains_exactly_as_without(tmp_path, monkeypatch, capsys):
    """Features computed in the step: each width's line gives the step and the target's forward for its features
    (a part of the step: both > 0, the rest their difference), and the run's weights and log are bit-identical to
    the same run's without step_split (the extra calls' outputs are dropped)."""
    online = _grouped(monkeypatch, online=True)
    tc = T.DFlashTrainConfig(steps=6, batch_size=BATCH, anchors=4, log_every=3, ckpt_every=1000)
    runs = {}
    for split in (False, True):
        runs[split] = train((TARGET, target_outer(TARGET_PARAMS)), DRAFTER, online, tc, tmp_path / str(split),
                            step_factory=T.make_step, progress=False, target_params=TARGET_PARAMS, step_split=split)
    lines = _split_lines(capsys.readouterr().out)
    widths = list(dict.fromkeys(online.batch_width(online.rows_at(s, BATCH, 0)) for s in range(tc.steps)))
    assert [int(re.match(r"step split at width (\d+):", line)[1]) for line in lines] == widths
    for line in lines:
        step_s, forward_s, rest_s = map(float, re.search(
            r"the step (\S+) s, of which the target's forward for the features (\S+) s \(\d+%\) and the rest (\S+) s",
            line).groups())
        assert step_s > 0 and forward_s > 0 and rest_s == pytest.approx(step_s - forward_s, abs=2e-3 * step_s + 1e-3)
    jax.tree.map(lambda x, y: np.testing.assert_array_equal(np.asarray(x), np.asarray(y)), runs[False][0], runs[True][0])
    strip = lambda log: [{k: v for k, v in r.items() if k not in ("seconds", "eval_seconds")} for r in log]  # noqa: E731
    assert strip(runs[False][1]) == strip(runs[True][1])


def test_a_split_is_refused_with_a_fitted_schedule_before_anything_runs(tmp_path):
    with pytest.raises(ValueError, match="step_split times extra calls of the step, which fit_steps would count"):
        TrainPlan(data=".", out="o", minutes=1.0, fit_steps=True, step_split=True).check()
    tc = T.DFlashTrainConfig(steps=2, batch_size=BATCH, anchors=4)
    with pytest.raises(ValueError, match="give one of them"):
        train((TARGET, target_outer(TARGET_PARAMS)), DRAFTER, trainset(DRAFTER.target_layer_ids), tc, tmp_path,
              step_factory=T.make_step, progress=False, deadline=1e12, fit_steps=True, step_split=True)
