"""Early stopping on the held-out τ estimate (`DrafterTrainConfig.patience`) and runs on a prefix of the data
(`TrainSet.with_train_tokens`): what the τ-against-data table (`specjax.train.scaling`) is made of."""

from __future__ import annotations

import dataclasses
import json
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax.models.dflash_net import target_outer
from specjax.train import dflash as T
from specjax.train import loop as train_loop
from specjax.train import trainset as trainset_module
from specjax.train.loop import FIT_TIMED_STEPS, best_record, evaluations_since_best, load_best, train
from tests.train_fixtures import DRAFTER, TARGET, TARGET_PARAMS, VALID_ROWS, ScriptedClock, trainset

# the held-out τ estimate each evaluation reports (one per step: log_every 1), scripted so the best and the stop
# are known: the best is step 2's 1.5 (step 4's 1.5 only ties it), and with patience 3 the run stops at step 5
SCRIPTED_TAU = {1: 1.0, 2: 1.5, 3: 1.2, 4: 1.5, 5: 1.1, 6: 2.0, 7: 2.5, 8: 3.0}


def _run(tc, out, **kw):
    return train((TARGET, target_outer(TARGET_PARAMS)), DRAFTER, trainset(DRAFTER.target_layer_ids), tc, out,
                 step_factory=T.make_step, progress=False, **kw)


@pytest.fixture
def scripted_tau(monkeypatch):
    """`train`'s held-out evaluations report SCRIPTED_TAU[step] as their τ estimate (the rest of the record real)."""
    real = train_loop._log_record

    def scripted(*args, **kw):
        rec, _ = real(*args, **kw)
        tau = SCRIPTED_TAU[rec["step"]]
        return {**rec, "valid_tau_estimate": tau}, tau

    monkeypatch.setattr(train_loop, "_log_record", scripted)


def _equal(a, b) -> None:
    jax.tree.map(lambda x, y: np.testing.assert_array_equal(np.asarray(x), np.asarray(y)), a, b)


def test_the_best_record_is_the_first_highest_finite_estimate():
    log = [{"valid_tau_estimate": t} for t in (1.0, float("nan"), 1.5, 1.2, 1.5, 1.1)]
    assert best_record(log) == 2 and evaluations_since_best(log) == 3
    assert best_record([{"valid_tau_estimate": float("nan")}]) is None
    assert evaluations_since_best([{"valid_tau_estimate": float("nan")}] * 2) == 2 and best_record([]) is None


def test_early_stopping_returns_the_best_evaluations_weights_and_stops_after_patience(tmp_path, scripted_tau):
    """patience 3 over the scripted estimates: the run stops at step 5 (three evaluations, steps 3-5, without
    beating step 2's; step 4 only ties it) instead of running its 8 steps, and returns step 2's weights, bit for
    bit those of the same run stopped after 2 steps; a run without patience runs all 8 and returns the last."""
    tc = T.DFlashTrainConfig(steps=8, batch_size=4, anchors=4, lr=3e-3, log_every=1, ckpt_every=100, patience=3)
    best, log = _run(tc, tmp_path / "stopping")
    assert [r["step"] for r in log] == [1, 2, 3, 4, 5]
    state = json.loads((tmp_path / "stopping" / "ckpt" / "state.json").read_text())
    assert state["step"] == 5 and state["stopped_early"] == 5
    two_steps, _ = _run(dataclasses.replace(tc, patience=0), tmp_path / "two", stop_after=2)
    _equal(best, two_steps)
    _equal(best, load_best(tmp_path / "stopping" / "ckpt"))
    ends_there, _ = _run(dataclasses.replace(tc, steps=5), tmp_path / "five")  # patience runs out at the last step
    assert json.loads((tmp_path / "five" / "ckpt" / "state.json").read_text())["stopped_early"] is None
    _equal(ends_there, two_steps)  # not an early stop, but the best weights all the same
    last, full_log = _run(dataclasses.replace(tc, patience=0), tmp_path / "all")
    assert len(full_log) == 8 and not (tmp_path / "all" / "ckpt" / "best").exists()
    with pytest.raises(AssertionError):
        _equal(best, last)


def test_an_early_stopped_run_resumes_to_the_same_stop_and_weights(tmp_path, scripted_tau):
    """Interrupted after step 3 (a checkpoint holding step 2's best), resumed: it stops at step 5 with the
    uninterrupted run's weights and log; resumed once more, it runs no step and returns the same weights."""
    tc = T.DFlashTrainConfig(steps=8, batch_size=4, anchors=4, lr=3e-3, log_every=1, ckpt_every=100, patience=3)
    whole, whole_log = _run(tc, tmp_path / "a")
    _run(tc, tmp_path / "b", stop_after=3)
    resumed, log = _run(tc, tmp_path / "b", resume=True)
    _equal(whole, resumed)
    assert [r["step"] for r in log] == [r["step"] for r in whole_log] == [1, 2, 3, 4, 5]
    again, log_again = _run(tc, tmp_path / "b", resume=True)
    _equal(whole, again)
    assert len(log_again) == 5


def test_a_data_prefix_trains_on_its_first_sequences_and_keeps_the_held_out_ones():
    """`with_train_tokens(n)`: the longest run of first sequences whose responses hold <= n tokens (counted
    by brute force here), its batches drawn from those rows only, the held-out rows those of the whole set."""
    full = trainset(DRAFTER.target_layer_ids)
    lengths = [int(full.shards.offsets[i + 1] - full.shards.offsets[i] - full.shards.prompt_lengths[i])
               for i in range(len(full.shards))]
    for tokens in (lengths[0], lengths[0] + lengths[1] - 1, sum(lengths[:7]), sum(lengths[:-VALID_ROWS])):
        part = full.with_train_tokens(tokens)
        expect = max(k for k in range(1, len(lengths) - VALID_ROWS + 1) if sum(lengths[:k]) <= tokens)
        assert part.num_train == expect, (tokens, part.num_train, expect)
        np.testing.assert_array_equal(part.valid_ids, full.valid_ids)
        epoch = np.concatenate([part.rows_at(s, 4, 0) for s in range(max(1, expect // 4))])
        assert epoch.max() < expect and len(set(epoch.tolist())) == len(epoch) == min(expect, 4 * (expect // 4) or expect)
        np.testing.assert_array_equal(part.valid_batch()["tokens"], full.valid_batch()["tokens"])
    total = sum(lengths[:-VALID_ROWS])
    with pytest.raises(ValueError, match=f"more than the {total} response tokens of the answers from sequence 0"):
        full.with_train_tokens(sum(lengths[:-VALID_ROWS]) + 1)
    with pytest.raises(ValueError, match="holds no whole sequence"):
        full.with_train_tokens(lengths[0] - 1)


def test_a_run_on_one_kind_of_answer_trains_on_those_rows_only():
    """answers="greedy" / "sampled": the rows the data drew at T = 0 / T > 0 before the held-out ones (the
    fixture's answers are half of each), a token budget counted over those; "all" with no budget is every row."""
    full = trainset(DRAFTER.target_layer_ids)
    before = np.arange(len(full.shards) - VALID_ROWS)
    temps = full.shards.temperature[before]
    assert (temps > 0).any() and (temps == 0).any()
    greedy, sampled = full.with_train_tokens(answers="greedy"), full.with_train_tokens(answers="sampled")
    np.testing.assert_array_equal(greedy.training_ids, before[temps == 0])
    np.testing.assert_array_equal(sampled.training_ids, before[temps > 0])
    np.testing.assert_array_equal(full.with_train_tokens(answers="all").training_ids, before)
    lengths = full.response_lengths()[before[temps > 0]]
    part = full.with_train_tokens(int(lengths[:2].sum()), "sampled")
    np.testing.assert_array_equal(part.training_ids, before[temps > 0][:2])
    rows = np.concatenate([part.rows_at(s, 2, 0) for s in range(3)])
    assert set(rows.tolist()) == set(before[temps > 0][:2].tolist())
    counts = part.response_token_counts(TARGET.vocab_size)
    assert counts.sum() == lengths[:2].sum()
    with pytest.raises(ValueError, match="answers must be one of all, greedy, sampled"):
        full.with_train_tokens(answers="best")


def test_skipping_the_first_sequences_trains_on_the_rest_only_and_keeps_the_held_out_ones():
    """skip=k (a warm start's continuation on answers it has not seen): the rows from k to the held-out ones, with a
    kind of answer and a token budget counted from k (brute force); the held-out rows unchanged; a k that leaves
    nothing to train on is refused, naming the range."""
    full = trainset(DRAFTER.target_layer_ids)
    before = np.arange(len(full.shards) - VALID_ROWS)
    lengths = full.response_lengths()
    for skip in (1, 5, len(before) - 1):
        rest = full.with_train_tokens(skip=skip)
        np.testing.assert_array_equal(rest.training_ids, before[skip:])
        np.testing.assert_array_equal(rest.valid_batch()["tokens"], full.valid_batch()["tokens"])
        rows = np.concatenate([rest.rows_at(s, 1, 0) for s in range(rest.num_train)])
        assert sorted(rows.tolist()) == before[skip:].tolist()
    budget = int(lengths[3:6].sum())
    np.testing.assert_array_equal(full.with_train_tokens(budget, skip=3).training_ids, [3, 4, 5])
    temps = full.shards.temperature[before]
    np.testing.assert_array_equal(full.with_train_tokens(answers="sampled", skip=4).training_ids,
                                  before[4:][temps[4:] > 0])
    for bad in (-1, len(before), True, 2.0):
        with pytest.raises(ValueError, match=f"skip must be an integer from 0 to {len(before) - 1}"):
            full.with_train_tokens(skip=bad)


def test_excluded_sequences_are_left_out_wherever_they_are_and_sequences_read_is_every_row_of_the_steps():
    """exclude= (a warm start's recorded `sequences_read`, any ids): the training rows are the ones from skip to the
    held-out ones less those (brute force, with a kind of answer and a token budget after the exclusion); excluding
    every one is refused. `sequences_read(steps)` is the distinct ids of the steps' rows, over epoch boundaries."""
    full = trainset(DRAFTER.target_layer_ids)
    before = np.arange(len(full.shards) - VALID_ROWS)
    lengths = full.response_lengths()
    gone = np.array([0, 2, 3, 7])
    rest = full.with_train_tokens(exclude=gone)
    np.testing.assert_array_equal(rest.training_ids, [i for i in before if i not in gone])
    np.testing.assert_array_equal(rest.valid_batch()["tokens"], full.valid_batch()["tokens"])
    np.testing.assert_array_equal(full.with_train_tokens(skip=2, exclude=gone).training_ids,
                                  [i for i in before[2:] if i not in gone])
    kept = [i for i in before if i not in gone]
    np.testing.assert_array_equal(full.with_train_tokens(int(lengths[kept[:3]].sum()), exclude=gone).training_ids,
                                  kept[:3])
    temps = full.shards.temperature
    np.testing.assert_array_equal(full.with_train_tokens(answers="greedy", exclude=gone).training_ids,
                                  [i for i in kept if temps[i] == 0])
    with pytest.raises(ValueError, match="is excluded"):
        full.with_train_tokens(exclude=before)
    for steps, batch in ((0, 2), (1, 3), (3, 2), (len(before), 3)):  # the last runs past one epoch
        rows = [r for s in range(steps) for r in full.rows_at(s, batch, 5).tolist()]
        np.testing.assert_array_equal(full.sequences_read(steps, batch, 5), sorted(set(rows)))


def test_grouped_batches_hold_each_epochs_sequences_once_sorted_by_length_and_only_as_wide_as_they_need(monkeypatch):
    """group_batches G: each window of G batches holds the sequences the plain order's window holds, split by
    length (every batch's lengths below or equal to the next's in sorted order), in some order; each epoch reads
    every sequence of its whole batches once; a batch's width is its longest sequence rounded up to WIDTH_QUANTUM
    (brute force; 4 here, the fixture's sequences being 10-17 tokens); the same function of (seed, step) every
    call; refused with pack."""
    monkeypatch.setattr(trainset_module, "WIDTH_QUANTUM", 4)
    full = trainset(DRAFTER.target_layer_ids)
    grouped = dataclasses.replace(full, group_batches=3)
    plain = dataclasses.replace(full, seq_len=full.seq_len)
    lengths = np.minimum(np.diff(full.shards.offsets), full.seq_len)
    b, n = 2, full.steps_per_epoch(2, 7)
    for epoch in range(2):
        steps = range(epoch * n, (epoch + 1) * n)
        got = [grouped.rows_at(s, b, 7) for s in steps]
        want = [plain.rows_at(s, b, 7) for s in steps]
        for w in range(0, n, 3):  # each window: the same sequences, cut into batches by length
            window_got, window_want = got[w:w + 3], want[w:w + 3]
            assert sorted(np.concatenate(window_got).tolist()) == sorted(np.concatenate(window_want).tolist())
            spans = sorted((lengths[r].min(), lengths[r].max()) for r in window_got)
            assert all(hi <= lo for (_, hi), (lo, _) in zip(spans, spans[1:]))
        assert sorted(np.concatenate(got).tolist()) == sorted(np.concatenate(want).tolist())
        np.testing.assert_array_equal(np.concatenate(got), np.concatenate([grouped.rows_at(s, b, 7) for s in steps]))
    widths = set()
    for s in range(n):
        rows = grouped.rows_at(s, b, 7)
        width = min(full.seq_len, -(-int(lengths[rows].max()) // 4) * 4)
        got = grouped.batch(rows)
        assert got["tokens"].shape[1] == width and grouped.batch_width(rows) == width
        widths.add(width)
        wide = full.batch(rows)
        np.testing.assert_array_equal(got["tokens"], wide["tokens"][:, :width])
        np.testing.assert_array_equal(got["features"], wide["features"][:, :width])
        assert not wide["loss_mask"][:, width:].any() and not wide["tokens"][:, width:].any()
    assert len(widths) > 1 and min(widths) < full.seq_len  # narrower batches did occur
    with pytest.raises(ValueError, match="give one of pack and group_batches"):
        dataclasses.replace(full, layers=(), features=None, pack=True, group_batches=2)


def test_the_fit_times_steps_at_compiled_widths_only_and_pays_a_compile_per_width():
    """`_FitTimer`: a step at a width not run before (it compiled) is not a timed step; the fitted length is what
    the time left less one compile (the largest compiling step's excess) per width buys at the timed steps' mean,
    with 3 % spare, the widths counted over the steps the whole time left buys (scripted clock)."""
    asked = []

    def widths_between(first, last):
        asked.append((first, last))
        return (64, 128, 192)

    fit = train_loop._FitTimer(widths_between, start=0.0)
    now, ends = 0.0, []
    for width, seconds in [(64, 5.0)] + [(64, 1.0)] * 4 + [(128, 4.0)] + [(64, 1.0), (128, 1.0)] * 3:
        now += seconds
        ends.append(fit.add(width, now))
    assert ends[-1] and not any(ends[:-1]) and len(fit.steps) == 10 and fit.compiles == [5.0, 4.0]
    deadline = time.time() + 1000.0
    fitted, step_s, compile_s = fit.length(20, deadline)
    assert step_s == 1.0 and compile_s == 4.0 and fit.widths == 3
    assert abs(fitted - (20 + int(0.97 * (1000.0 - 3 * 4.0)))) <= 1  # (the clock moved between the two reads)
    assert len(asked) == 1 and asked[0][0] == 20 and abs(asked[0][1] - (20 + 1 + 1000)) <= 1


def test_the_widths_between_two_steps_are_those_their_batches_use_or_over_many_epochs_every_one_possible(
        monkeypatch):
    """`TrainSet.widths_between`: over a short range, exactly the distinct widths of its steps' batches (each
    built and measured here); over more than two epochs, every rounded sequence length (a superset of the
    widths any of its steps uses); an epoch's `batch_widths` are its steps' widths."""
    monkeypatch.setattr(trainset_module, "WIDTH_QUANTUM", 4)
    grouped = dataclasses.replace(trainset(DRAFTER.target_layer_ids), group_batches=2)
    per_epoch = grouped.steps_per_epoch(2, 0)

    def measured(first, last):
        return tuple(sorted({grouped.batch(grouped.rows_at(s, 2, 0))["tokens"].shape[1] for s in range(first, last)}))
    for first, last in [(0, 1), (0, per_epoch), (3, per_epoch + 5), (per_epoch, 3 * per_epoch)]:
        assert grouped.widths_between(2, 0, first, last) == measured(first, last), (first, last)
    assert grouped.batch_widths(2, 0, epoch=1) == measured(per_epoch, 2 * per_epoch)
    every = grouped.widths_between(2, 0, 0, 10 * per_epoch)
    assert set(measured(0, 10 * per_epoch)) <= set(every) and len(every) > len(grouped.batch_widths(2, 0))
    ungrouped = trainset(DRAFTER.target_layer_ids)
    assert ungrouped.widths_between(2, 0, 0, 100) == (ungrouped.seq_len,)


@pytest.mark.parametrize("slowdown, runs_to_the_end", [(1.02, True), (1.06, False)])
def test_a_time_boxed_run_of_grouped_batches_ends_its_schedule_at_the_deadline(tmp_path, monkeypatch, slowdown,
                                                                               runs_to_the_end):
    """fit_steps with group_batches on a scripted clock: each width's first step (and the refit's) 'compiles'
    0.4 s against 0.01 s a step. The fit times compiled steps only (a window of compiles would have inflated the
    step time and ended the run early; the old fit counted them): 2 % slower steps after the fit stay inside its
    3 % spare, so the schedule ends by the deadline; 6 % slower ones are cut by the deadline a few steps short of
    the schedule's end, at the first step after it."""
    monkeypatch.setattr(trainset_module, "WIDTH_QUANTUM", 4)
    clock = ScriptedClock()
    monkeypatch.setattr(train_loop, "time", clock)
    grouped = dataclasses.replace(trainset(DRAFTER.target_layer_ids), group_batches=2)
    assert len(grouped.batch_widths(2, 0)) >= 2
    step_s, compile_s, factories = 0.01, 0.4, []

    def factory(dcfg, tcfg, opt, tc, **kw):
        compiled, refitted = set(), bool(factories)  # the second factory call is the refit's
        factories.append(tc.steps)

        def step(dparams, opt_state, touter, batch, vocab, key, step_index):
            width = batch["tokens"].shape[1]
            clock.advance(step_s * (slowdown if refitted else 1.0) if width in compiled else compile_s)
            compiled.add(width)
            return dparams, opt_state, jnp.float32(1.0), {"tau": jnp.float32(1.0), "acc": jnp.zeros(3)}
        return step, lambda *a: (jnp.float32(1.0), {"tau": jnp.float32(1.0), "acc": jnp.zeros(3)})

    tc = T.DFlashTrainConfig(steps=100000, batch_size=2, anchors=4, log_every=100000, ckpt_every=100000)
    t0 = clock.time()
    train((TARGET, target_outer(TARGET_PARAMS)), DRAFTER, grouped, tc, tmp_path, step_factory=factory, progress=False,
          deadline=t0 + 8.0, fit_steps=True)
    took, state = clock.time() - t0, json.loads((tmp_path / "ckpt" / "state.json").read_text())
    steps = state["train_config"]["steps"]
    assert state["fitted"] and len(factories) == 2 and factories[1] == steps
    # the fit: the time left after the 10 timed steps, less a compile (0.39 s over a step) for each width the
    # steps the whole time left buys use, at 0.01 s a step with 3 % spare; the steps before it: a compile for each
    # width the first ones met, and the 10 timed ones
    met = len(grouped.widths_between(2, 0, 0, FIT_TIMED_STEPS + 2))
    before = FIT_TIMED_STEPS + met
    spent = met * compile_s + FIT_TIMED_STEPS * step_s
    widths = len(grouped.widths_between(2, 0, before, before + 1 + int((8.0 - spent) / step_s)))
    left = 8.0 - spent - widths * (compile_s - step_s)
    assert abs(steps - (before + int(0.97 * left / step_s))) <= 1, steps
    if runs_to_the_end:
        assert state["step"] == steps and took <= 8.0, (state["step"], took)
    else:  # cut at the first step that would start after the deadline, a few steps short
        assert 0.95 * steps <= state["step"] < steps, state["step"]
        assert 8.0 <= took <= 8.0 + step_s * slowdown + 1e-9, took
