"""The benchmark harness (`specjax.bench.harness`, batched calls: `specjax.bench.batching`; the method specs'
own tests: tests/test_bench_methods.py).

Tiny random models, 3 short prompts (1 warm-up), every method compiled once per module:
the records' fields and round accounting, AR as the reference (speedup 1, identical
outputs), JSON / CSV round trips, and a self-draft chain that accepts everything. Batch 2
over 4 prompts: per-row tokens and stats equal batch 1's, the per-call aggregate arithmetic,
the named errors for inconsistent batches, and `specjax bench --batch`.
"""

import dataclasses
import json
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax.bench import harness
from specjax.bench.methods import parse_method
from specjax.drafters.chain import ChainDrafter
from specjax.drafters.dynatree import DynaTreeDrafter
from specjax.equality import Agreement
from specjax.models import GPTNeoXConfig, init_params
from specjax.models.cache import init_cache
from specjax.testing import random_params
from tests.drafter_fixtures import TARGETS, drafter_cfg, random_dflash_params

TARGET = GPTNeoXConfig(vocab_size=32, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64, rotary_dim=4)
DRAFT = GPTNeoXConfig(vocab_size=32, hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32, rotary_dim=8)
METHODS = ["ar", "chain2", "fixed2x2n6", "dynatree-p3:d0=2,d_max=3,n_max=8"]
MAX_NEW = 10  # = 1 + 3 rounds of 3 tokens for a chain of 2 that accepts everything
PROMPTS = [[3, 1, 4, 1, 5], [9, 2, 6, 5, 3, 5, 8, 9], [7, 9, 3, 2, 3, 8]]
WARMUP = 1


@pytest.fixture(scope="module")
def pair():
    return (TARGET, random_params(TARGET, 0)), (DRAFT, random_params(DRAFT, 2))


@pytest.fixture(scope="module")
def results(pair):
    return harness.run_benchmark(*pair, PROMPTS, METHODS, max_new_tokens=MAX_NEW, warmup=WARMUP, progress=False)


def test_every_record_has_every_field(results):
    names = {f.name for f in dataclasses.fields(harness.MethodResult)}
    assert [r.method for r in results] == METHODS
    for r in results:
        d = r.to_dict()
        assert set(d) == names
        assert r.num_prompts == len(PROMPTS) - WARMUP and len(r.per_prompt) == r.num_prompts
        assert r.total_tokens == r.num_prompts * MAX_NEW  # eos_ids=() by default: every method generates them all
        assert r.throughput > 0 and r.throughput_std >= 0 and r.total_seconds > 0
        assert r.ttft_ms > 0 and r.ttft_std_ms >= 0 and r.tpot_std_ms >= 0
        assert isinstance(r.tpot_ms, float)  # tiny models: decode time ~ timing jitter, the sign is not guaranteed
        assert [p["prompt"] for p in r.per_prompt] == list(range(WARMUP, len(PROMPTS)))
        spec = r.method != "ar"
        for key in ("acceptance_rate", "node_acceptance_rate", "mean_tree_nodes", "mean_tree_depth"):
            assert (d[key] is not None) == spec, key
        if spec:
            assert 0 <= r.node_acceptance_rate <= r.acceptance_rate <= 1
            assert r.mean_tree_nodes >= r.mean_tree_depth >= 1


def test_round_accounting(results):
    for r in results:
        hist = np.asarray(r.accept_hist)
        assert hist.sum() == r.rounds
        # The first token of each prompt comes from the prefill, the rest from rounds (accepted + bonus).
        assert (np.arange(hist.size) + 1) @ hist + r.num_prompts == r.total_tokens
        assert r.tokens_per_iteration == pytest.approx(r.avg_path_length + 1)
        assert r.avg_path_length == pytest.approx(np.arange(hist.size) @ hist / r.rounds)
        assert sum(p["rounds"] for p in r.per_prompt) == r.rounds
    depth = {r.method: len(r.accept_hist) - 1 for r in results}
    assert depth == {"ar": 0, "chain2": 2, "fixed2x2n6": 2, "dynatree-p3:d0=2,d_max=3,n_max=8": 3}


def test_ar_is_the_reference(results):
    for r in results:
        assert r.identical_to_ar is True
        assert all(p["identical_to_ar"] for p in r.per_prompt)
    ar = results[0]
    assert ar.speedup == 1.0 and ar.tokens_per_iteration == 1.0 and ar.avg_path_length == 0.0
    assert ar.rounds == ar.total_tokens - ar.num_prompts
    assert all(r.speedup == pytest.approx(r.throughput / ar.throughput) for r in results)


def test_json_and_csv_round_trip(results, tmp_path):
    env = harness.environment("tiny-target", "tiny-draft", init_params(TARGET, jax.random.key(0)), {"note": "x"})
    assert env["platform"] == jax.devices()[0].platform and env["note"] == "x" and "hostname" not in env
    config = {"max_new_tokens": MAX_NEW, "methods": METHODS}
    harness.write_json(tmp_path / "r.json", results, env, config)
    loaded, env2, config2 = harness.read_json(tmp_path / "r.json")
    assert loaded == results and env2 == env and config2 == config
    json.loads((tmp_path / "r.json").read_text())  # standard JSON (no NaN)

    harness.write_csv(tmp_path / "r.csv", results, env)
    rows, env3 = harness.read_csv(tmp_path / "r.csv")
    assert rows == [dataclasses.replace(r, per_prompt=[]) for r in results]
    assert env3["target"] == "tiny-target" and env3["target_params"] == str(env["target_params"])


def test_format_table(results):
    table = harness.format_table(results).splitlines()
    assert len(table) == 2 + len(results) and len({len(line) for line in table}) == 1  # fixed width
    assert table[0].split()[:3] == ["method", "tok/s", "±"]
    assert table[2].startswith("ar ") and table[2].rstrip().endswith("yes")
    rows = harness.table_rows(results)  # the same cells as values, for DataFrames
    for line, row, r in zip(table[2:], rows, results):
        assert row["method"] == r.method and row["= AR"] == line.split()[-1] == harness.agrees_with_ar(r)
        assert row["tokens/s"] == round(r.throughput, 1) and float(line.split()[1]) == row["tokens/s"]
        assert row["τ (tokens/round)"] == round(r.tokens_per_iteration, 2)
        assert row["TTFT (ms)"] == (None if r.ttft_ms is None else round(r.ttft_ms, 2))
        # η = speedup / τ: AR's is exactly 1 (speedup 1, τ 1); a method's is its speedup over its τ
        eta = r.speedup / r.tokens_per_iteration
        assert row["η (speedup / τ)"] == round(eta, 2) and line.split()[4] == f"{eta:.2f}"
    assert rows[0]["η (speedup / τ)"] == 1.0


def test_dataset_summary_puts_each_sets_speedup_and_tau_side_by_side_with_their_means(results):
    """Pure arithmetic on two sets: the second's speedups halved and τ doubled; means are plain means over
    the sets; "=AR" joins differing cells; sets that ran other methods are refused."""
    differs = {"identical_to_ar": False, "mismatches": 1}  # the second method parts from AR on one prompt
    other = [dataclasses.replace(r, speedup=r.speedup / 2, tokens_per_iteration=2 * r.tokens_per_iteration,
                                 **(differs if i == 1 else {}))
             for i, r in enumerate(results)]
    table = harness.dataset_summary({"gsm8k": results, "mbpp": other})
    assert list(table.index) == [r.method for r in results]
    assert list(table.columns) == ["gsm8k speedup", "gsm8k τ", "mbpp speedup", "mbpp τ", "mean speedup", "mean τ",
                                   "= AR"]
    for r, o in zip(results, other):
        row = table.loc[r.method]
        assert row["gsm8k speedup"] == round(r.speedup, 2) and row["mbpp τ"] == round(o.tokens_per_iteration, 2)
        assert row["mean speedup"] == round((r.speedup + o.speedup) / 2, 2)
        assert row["mean τ"] == round(1.5 * r.tokens_per_iteration, 2)
    assert table.loc[results[0].method, "= AR"] == "yes" and table.loc[results[1].method, "= AR"] == "yes/NO1"
    with pytest.raises(ValueError, match="ran methods"):
        harness.dataset_summary({"gsm8k": results, "mbpp": other[:1]})


def test_self_draft_chain_accepts_everything(pair):
    target, _ = pair
    ar, chain = harness.run_benchmark(target, target, PROMPTS, ["ar", "chain2"], max_new_tokens=MAX_NEW,
                                      warmup=WARMUP, progress=False, ttft=False)
    assert chain.identical_to_ar and ar.ttft_ms is None and chain.tpot_ms is None
    assert chain.acceptance_rate == pytest.approx(1.0) and chain.node_acceptance_rate == pytest.approx(1.0)
    assert chain.accept_hist == [0, 0, chain.rounds] and chain.tokens_per_iteration == pytest.approx(3.0)


def test_summarise_records_a_mismatch():
    run = harness._Run(prompt=0, prompt_len=3, tokens=np.array([1, 2, 3]), seconds=0.5, ttft=0.1,
                       accepted=np.array([1, 0]), proposed=np.array([2, 2]), depth=np.array([2, 2]))
    r = harness.summarise("chain2", [run], 3, agreement=[Agreement("MISMATCH", 1, 2.0, 1e-4)])
    assert r.identical_to_ar is False and r.per_prompt[0]["identical_to_ar"] is False
    assert (r.near_ties, r.mismatches) == (0, 1) and "MISMATCH at generated token 1" in r.per_prompt[0]["agreement"]
    tie = harness.summarise("chain2", [run], 3, agreement=[Agreement("near-tie", 1, 1e-6, 1e-4)])
    assert tie.identical_to_ar is False and (tie.near_ties, tie.mismatches) == (1, 0)
    table = harness.format_table([r, tie])
    assert table.splitlines()[2].endswith("NO1") and table.splitlines()[3].endswith("~1") and "near-tie" in table
    assert [row["= AR"] for row in harness.table_rows([r, tie])] == ["NO1", "~1"]
    assert r.accept_hist == [1, 1, 0] and r.acceptance_rate == 0.25 and r.tpot_ms == pytest.approx(200.0)


def test_prepare_prompts_keeps_the_last_tokens():
    (t0, l0), (t1, l1) = harness.prepare_prompts([[1, 2, 3, 4, 5], [6, 7]], prompt_width=3)
    assert t0.tolist() == [[3, 4, 5]] and l0.tolist() == [3]
    assert t1.tolist() == [[6, 7, 0]] and l1.tolist() == [2]
    assert harness.prepare_prompts([[1], [2, 3]])[0][0].shape == (1, 2)


def test_run_benchmark_rejects_bad_arguments(pair):
    target, draft = pair
    with pytest.raises(ValueError, match="warmup"):
        harness.run_benchmark(target, draft, PROMPTS, ["ar"], max_new_tokens=4, warmup=3, progress=False)
    with pytest.raises(ValueError, match="distinct"):
        harness.run_benchmark(target, draft, PROMPTS, ["chain4", "linear4"], max_new_tokens=4, progress=False)
    with pytest.raises(ValueError, match="needs a draft"):
        harness.run_benchmark(target, None, PROMPTS, ["ar", "chain2"], max_new_tokens=4, progress=False)


def test_warm_up_fills_the_table_and_leaves_the_method_unchanged(pair):
    from specjax.drafters.retrieval import table_rows_used

    target, draft = pair
    tr = parse_method("tr:budget=6,depth=3", None, target_cfg=target[0])
    warm = harness.warm_up(tr, target, PROMPTS[:2], max_new_tokens=4, prompt_width=8)
    assert table_rows_used(tr.params) == 0  # the cold method is untouched
    assert table_rows_used(warm.params) > 0 and warm.drafter == tr.drafter
    with pytest.raises(ValueError, match="keeps no state across requests"):
        harness.warm_up(parse_method("chain4", DRAFT), target, PROMPTS[:1], max_new_tokens=4)


@pytest.mark.parametrize("spec", ["ar", "chain2"])
def test_sampling_runs_draw_with_a_fresh_key_per_call(pair, spec):
    """At T > 0 every call of a method samples with its own key split from `seed` (a key is required
    when sampling): the same prompt twice gives two samples, and the same seed the same ones."""
    from specjax.sampling import Sampling

    target, draft = pair
    tokens, lengths = harness.prepare_prompts(PROMPTS[:1])[0]

    def two_calls(seed):
        run = harness._Runner(parse_method(spec, DRAFT), target, draft, Sampling(1.0), (), seed)
        return [np.asarray(run(tokens, lengths, MAX_NEW, MAX_NEW).tokens) for _ in range(2)]

    first, second = two_calls(0)
    assert not np.array_equal(first, second)
    np.testing.assert_array_equal(two_calls(0)[0], first)


def test_a_mismatch_is_recorded_and_warned_about(pair, monkeypatch):
    """The harness classifies each prompt with specjax.equality: here chain2's tokens on prompt 2
    are altered after the run, at a position where AR's margin is large -> a MISMATCH, warned."""
    real_record = harness._record

    def record(index, lengths, out, seconds, ttft):
        run = real_record(index, lengths, out, seconds, ttft)
        if index == 2 and run.accepted is not None:
            run.tokens = run.tokens.copy()
            run.tokens[3] = (run.tokens[3] + 1) % pair[0][0].vocab_size
        return run

    monkeypatch.setattr(harness, "_record", record)
    with pytest.warns(RuntimeWarning, match=r"LOSSLESSNESS VIOLATION: chain2's greedy output differs from AR's beyond a near-tie "
                                            r"on prompts \[\(2, 'MISMATCH at generated token 3"):
        _, chain = harness.run_benchmark(*pair, PROMPTS, ["ar", "chain2"], max_new_tokens=MAX_NEW, warmup=WARMUP,
                                          progress=False, ttft=False)
    assert chain.identical_to_ar is False and [p["identical_to_ar"] for p in chain.per_prompt] == [True, False]
    assert (chain.near_ties, chain.mismatches) == (0, 1)


def test_round_split_times_every_part_and_projection_arithmetic():
    from specjax.bench.round_split import PARTS, project_speedup, round_split
    from specjax.drafters.ddtree import DDTreeDrafter
    from specjax.drafters.dflash import DFlashDrafter

    target = TARGETS["neox"]
    cfg = drafter_cfg(target, block_size=5)
    drafter = DDTreeDrafter(DFlashDrafter(cfg, target), 24, prune_mass=0.0)
    tokens, lengths = harness.prepare_prompts([[1, 2, 3, 4]])[0]
    costs = round_split((target, random_dflash_params(target, 1)), drafter, random_dflash_params(cfg, 2), tokens,
                        lengths, reps=2, max_new=16)
    assert set(PARTS) <= set(costs) and all(costs[p] > 0 for p in PARTS)
    assert costs["width"] == 24 and costs["nodes"] == 24  # unpruned: the full budget is verified
    proj = project_speedup({8: {"ar_step": 2.0, "round": 4.0}, 16: {"ar_step": 2.0, "round": 5.0}}, {8: 3.0, 32: 9.0})
    assert proj == {8: 1.5}


@pytest.mark.parametrize("make", ["chain", "dynatree"])
def test_the_protocol_split_times_the_parts_that_make_the_round(make):
    """Any drafter's split (`protocol_split`): its three parts, run in sequence from a mid-generation state, give
    the round's own result (the tokens it emits, the target cache's length, the draft state it leaves), so
    the parts timed are the round's; and every part and the whole round time positive."""
    from specjax.bench.round_split import PROTOCOL_PARTS, protocol_parts, protocol_split, state_after
    from specjax.sampling import Sampling

    target = TARGETS["neox"]
    params = random_params(target, 1)
    draft = GPTNeoXConfig(vocab_size=target.vocab_size, hidden_size=32, num_layers=1, num_heads=2,
                          intermediate_size=64, rotary_dim=4)
    drafter = ChainDrafter(draft, 4) if make == "chain" else DynaTreeDrafter(draft, phase=3)
    dparams = random_params(draft, 2)
    tokens, lengths = harness.prepare_prompts([[1, 2, 3, 4]])[0]
    state, run_round = state_after((target, params), drafter, dparams, tokens, lengths, 1, 32, Sampling())
    parts = protocol_parts((target, params), drafter, Sampling())
    active, key = ~state.done, jax.random.key(3)
    tree, probs, dstate = parts["propose"](state.draft_state, state.root, active, key)
    tp = parts["verify"](tree, state.root, state.cache, key, probs, active)
    cache, dstate = parts["commit_observe"](tree, tp, dstate, state.cache.lengths, active)
    after = run_round(state)
    keep = int(tp.result.num_accepted[0]) + 1
    count = int(state.count[0])
    assert int(after.count[0]) == count + keep  # 32 new tokens: no cut at this point
    np.testing.assert_array_equal(np.asarray(after.out[0, count:count + keep]), np.asarray(tp.result.emitted[0, :keep]))
    np.testing.assert_array_equal(np.asarray(cache.lengths), np.asarray(after.cache.lengths))
    for got, want in zip(jax.tree.leaves(dstate), jax.tree.leaves(after.draft_state), strict=True):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    split = protocol_split((target, params), drafter, dparams, tokens, lengths, reps=2, max_new=32)
    assert all(split[p] > 0 for p in PROTOCOL_PARTS) and split["nodes"] >= 1 and 1 <= split["depth"] <= drafter.max_depth


def test_split_programs_take_the_weights_as_arguments_as_the_loop_does():
    """The split's AR step and verify forward read the target's weights as program arguments, as the
    decode loop does: closed over, they would be compile-time constants that XLA folds layouts into
    (SmolLM2's tied head: a 113 MB transpose at compile time), timing a program the loop never runs."""
    from specjax.bench.round_split import _ar_step

    target = TARGETS["neox"]
    params = random_dflash_params(target, 1)
    step = _ar_step((target, params), 1)
    cache = init_cache(target, 1, 8)
    lowered = step.func.lower(*step.args, cache, jnp.zeros((1,), jnp.int32))
    assert len(jax.tree.leaves(lowered.args_info)) == len(jax.tree.leaves((params, cache))) + 1


def test_round_costs_from_cited_figures_interpolate_the_verify_forward():
    from specjax.bench.round_split import costs_from_figures

    # verify at T = 1 / 64 / 256: 8 / 10 / 22 ms; budget N verifies N + 1 tokens
    costs = costs_from_figures([0, 63, 127, 511], ar_ms=5.0, verify_ms={1: 8.0, 64: 10.0, 256: 22.0}, select_ms=1.0,
                               draft_ms=0.5)
    assert costs[0]["verify"] == 8.0 and costs[63]["verify"] == 10.0  # at the measured widths
    assert costs[127]["verify"] == pytest.approx(10.0 + 12.0 * 64 / 192)  # between 64 and 256
    assert costs[511]["verify"] == pytest.approx(22.0 + 12.0 * 256 / 192)  # past 256: the last segment's slope
    assert all(c["round"] == pytest.approx(c["verify"] + 1.5) and c["ar_step"] == 5.0 for c in costs.values())
    with pytest.raises(ValueError, match="two widths"):
        costs_from_figures([8], 1.0, {1: 2.0}, 0.0, 0.0)


# ======================================================================== batch > 1

BATCH_PROMPTS = PROMPTS + [[2, 7, 1, 8, 2, 8, 1]]  # 4 prompts, width 8: two calls of 2 rows
BATCH_METHODS = ["ar", "chain2", "fixed2x2n6"]
RECORD_KEYS = ("tokens", "rounds", "accepted", "proposed", "depth", "identical_to_ar", "agreement")


def _tokens_by_prompt(pair, batch: int, ttft: bool):
    """run_benchmark on BATCH_PROMPTS (no warm-up) and every row's generated tokens by (method, prompt)."""
    tokens, real = {}, harness._record

    def record(index, lengths, out, seconds, first):
        run = real(index, lengths, out, seconds, first)
        tokens.setdefault(run.accepted is None, []).append((index, run.tokens.tolist()))
        return run

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(harness, "_record", record)
        results = harness.run_benchmark(*pair, BATCH_PROMPTS, BATCH_METHODS, max_new_tokens=MAX_NEW, warmup=0,
                                        progress=False, ttft=ttft, batch=batch)
    return results, tokens


@pytest.fixture(scope="module")
def batched(pair):
    return _tokens_by_prompt(pair, 2, ttft=True)


def test_batched_records_have_every_field_and_the_call_arithmetic(batched):
    results, _ = batched
    names = {f.name for f in dataclasses.fields(harness.MethodResult)}
    ar = results[0]
    for r in results:
        assert set(r.to_dict()) == names and r.batch == 2 and r.num_prompts == 4 and r.identical_to_ar
        assert r.total_tokens == 4 * MAX_NEW and [p["prompt"] for p in r.per_prompt] == [0, 1, 2, 3]
        pp = r.per_prompt
        assert [(p["call"], p["row"]) for p in pp] == [(0, 0), (0, 1), (1, 0), (1, 1)]
        calls = [pp[0:2], pp[2:4]]
        agg = []
        for rows in calls:  # the rows of a call share its time; aggregate = all rows' tokens / that time
            assert len({(p["seconds"], p["ttft_ms"], p["tpot_ms"], p["call_tokens"]) for p in rows}) == 1
            tokens, seconds = sum(p["tokens"] for p in rows), rows[0]["seconds"]
            assert rows[0]["call_tokens"] == tokens and rows[0]["call_rounds"] == max(p["rounds"] for p in rows)
            assert rows[0]["aggregate_throughput"] == pytest.approx(tokens / seconds)
            assert rows[0]["tpot_ms"] == pytest.approx((1e3 * seconds - rows[0]["ttft_ms"]) / (MAX_NEW - 1))
            agg.append(tokens / seconds)
        assert r.aggregate_throughput == pytest.approx(np.mean(agg))
        assert r.aggregate_throughput_std == pytest.approx(np.std(agg))
        assert r.throughput == pytest.approx(np.mean([p["tokens"] / p["seconds"] for p in pp]))  # per row
        assert r.aggregate_throughput == pytest.approx(2 * r.throughput)  # EOS off: every row makes MAX_NEW tokens
        assert r.total_seconds == pytest.approx(calls[0][0]["seconds"] + calls[1][0]["seconds"])  # each call once
        assert r.ttft_ms == pytest.approx(np.mean([c[0]["ttft_ms"] for c in calls]))
        assert r.speedup == pytest.approx(r.aggregate_throughput / ar.aggregate_throughput)
        assert sum(p["rounds"] for p in pp) == r.rounds == sum(r.accept_hist)
    assert ar.speedup == 1.0 and ar.rounds == 4 * (MAX_NEW - 1)


def test_batching_does_not_change_outputs_or_per_row_stats(pair, batched):
    """Greedy: every row of a batch-2 call generates the tokens, rounds and trees of its batch-1 run."""
    results2, tokens2 = batched
    results1, tokens1 = _tokens_by_prompt(pair, 1, ttft=False)
    # (prompt, tokens) of every row, AR's and the speculative methods' (in call order, so sorted)
    assert {k: sorted(v) for k, v in tokens2.items()} == {k: sorted(v) for k, v in tokens1.items()}
    assert len(tokens2[False]) == 2 * len(BATCH_PROMPTS) and len(tokens2[True]) == len(BATCH_PROMPTS)
    for r1, r2 in zip(results1, results2):
        assert r1.batch == 1 and r1.aggregate_throughput == r1.throughput  # batch 1: aggregate = row throughput
        assert [{k: p[k] for k in RECORD_KEYS} for p in r1.per_prompt] == [
            {k: p[k] for k in RECORD_KEYS} for p in r2.per_prompt]
        assert "call" not in r1.per_prompt[0]  # batch-1 per-prompt records keep their historical keys
        for key in ("accept_hist", "rounds", "acceptance_rate", "node_acceptance_rate", "tokens_per_iteration",
                    "mean_tree_nodes", "mean_tree_depth", "identical_to_ar", "total_tokens"):
            assert getattr(r1, key) == getattr(r2, key), (r1.method, key)


def test_batched_json_csv_and_table(batched, tmp_path):
    results, _ = batched
    env = {"target": "tiny"}
    harness.write_json(tmp_path / "r.json", results, env, {"batch": 2})
    loaded, _, config = harness.read_json(tmp_path / "r.json")
    assert loaded == results and config == {"batch": 2}
    harness.write_csv(tmp_path / "r.csv", results, env)
    rows, _ = harness.read_csv(tmp_path / "r.csv")
    assert rows == [dataclasses.replace(r, per_prompt=[]) for r in results]
    # a file written before batching (no batch / aggregate fields) reads with the defaults
    old = json.loads((tmp_path / "r.json").read_text())
    for d in old["results"]:
        for key in ("batch", "aggregate_throughput", "aggregate_throughput_std"):
            del d[key]
    (tmp_path / "old.json").write_text(json.dumps(old))
    first = harness.read_json(tmp_path / "old.json")[0][0]
    assert (first.batch, first.aggregate_throughput, first.aggregate_throughput_std) == (1, None, None)
    table = harness.format_table(results).splitlines()
    assert len({len(line) for line in table}) == 1 and table[0].split()[:5] == ["method", "row", "tok/s", "±", "std"]
    assert "agg tok/s" in table[0] and f"{results[1].aggregate_throughput:.1f}" in table[3]


def test_summarise_groups_rows_into_calls():
    """Pure arithmetic: two calls of two rows (3 + 5 and 4 + 4 tokens in 2 s and 4 s)."""
    def run(prompt, call, row, n, seconds, ttft):
        return harness._Run(prompt=prompt, prompt_len=2, tokens=np.arange(n), seconds=seconds, ttft=ttft, call=call,
                            row=row)

    runs = [run(2, 1, 0, 3, 2.0, 0.5), run(3, 1, 1, 5, 2.0, 0.5), run(4, 2, 0, 4, 4.0, 1.0), run(5, 2, 1, 4, 4.0, 1.0)]
    r = harness.summarise("ar", runs, 1)
    assert r.batch == 2 and r.total_seconds == 6.0 and r.total_tokens == 16
    assert r.aggregate_throughput == pytest.approx((8 / 2 + 8 / 4) / 2) and r.aggregate_throughput_std == 1.0
    assert r.throughput == pytest.approx(np.mean([3 / 2, 5 / 2, 1, 1]))
    assert r.ttft_ms == 750.0 and r.tpot_ms == pytest.approx(1e3 * (1.5 / 4 + 3.0 / 3) / 2)  # longest row per call
    assert [p["call_rounds"] for p in r.per_prompt] == [4, 4, 3, 3] and r.rounds == 2 + 4 + 3 + 3
    with pytest.raises(ValueError, match="unequal batch sizes"):
        harness.summarise("ar", runs[:3], 1)
    with pytest.raises(ValueError, match="share its wall time"):
        harness.summarise("ar", [runs[0], dataclasses.replace(runs[1], seconds=3.0)], 1)


@pytest.mark.parametrize("n, warmup, batch, message", [
    (3, 0, 2, "the number of prompts must be a multiple of the batch (whole batches, one compiled shape), got 3; "
              "use 2 or 4"),
    (3, 0, 4, "batch 4 needs at least 4 prompts (one batch), got 3"),
    (4, 1, 2, "warmup counts prompts and must be a multiple of the batch (whole warm-up batches), got warmup 1"),
    (4, 4, 2, "so that at least one batch of 2 is counted, got 4"),
    (4, 0, 0, "batch must be an int >= 1, got 0"),
    (3, 3, 1, "warmup must lie in [0, 3) (number of prompts), got 3"),
])
def test_run_benchmark_rejects_inconsistent_batches(pair, n, warmup, batch, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        harness.run_benchmark(*pair, BATCH_PROMPTS[:n], ["ar"], max_new_tokens=4, warmup=warmup, batch=batch,
                              progress=False)


def test_bench_command_batch_flag(tmp_path, capsys):
    from specjax.cli import main

    args = ["bench", "--random", "--methods", "ar,chain2", "--prompt-len", "6", "--max-new-tokens", "6", "--no-ttft",
            "--no-progress", "--json", str(tmp_path / "b.json")]
    assert main(args + ["--prompts", "4", "--warmup", "2", "--batch", "2"]) == 0  # exit 1: differs from AR
    out = capsys.readouterr().out
    assert "2 counted prompts (random tokens, 2 warm-up discarded)" in out and "batch 2 (1 timed calls" in out
    assert "agg tok/s" in out
    results, _, config = harness.read_json(tmp_path / "b.json")
    assert config["batch"] == 2 and all(r.batch == 2 and r.num_prompts == 2 and r.identical_to_ar for r in results)
    assert main(args + ["--prompts", "6", "--warmup", "2", "--batch", "4"]) == 2
    err = capsys.readouterr().err
    assert "--batch 4 with --prompts 6 --warmup 2" in err and "multiple of the batch" in err
