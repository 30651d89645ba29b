"""`specjax.bench.device` / `specjax bench-device` and `specjax.bench.roofline`: the tiny shape end to end
on CPU, the JSON's fields and units, the bandwidth-bound arithmetic, the CLI, and named errors."""

import json
import math

import jax
import jax.numpy as jnp
import pytest

from specjax.bench import device, roofline
from specjax.cli import main
from specjax.models.model import LAYOUTS, with_layout

SMALL = dict(reps=3, new_tokens=32, prompt_len=16, context=32, long_cache=2048, verify_widths=(1, 8), select_budget=32,
             select_batches=(2,), topk_chunks=(128,), compile_methods=("ar",), round_budget=8, bandwidth_mib=8)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """Every part on the tiny shape, written to JSON and read back (what a user of --json gets)."""
    rep = device.run(["tiny"], device.PARTS, device.Settings.for_platform("cpu", **SMALL), log=lambda *_: None)
    path = tmp_path_factory.mktemp("dev") / "tiny.json"
    device.write_json(str(path), rep)
    return json.loads(path.read_text())


def _positive(x):
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


def _positive_or_remeasured(value, remeasure, tries: int = 3) -> bool:
    """A figure that is a difference of two wall times (t(N tokens) - t(1 token), first call - warm call)
    is positive on a quiet machine, but on busy cores one pair of timings can invert (issue 51: a
    negative ms/token). Positive as reported, or on one of `tries` fresh measurements of the same
    part: a bug that makes it non-positive fails every try, load does not."""
    for _ in range(tries):
        if _positive(value):
            return True
        value = remeasure()
    return _positive(value)


def _tiny_in(layout: str):
    cfg = device.SHAPES["tiny"]
    return cfg, with_layout(device.random_params(cfg, jnp.float32), layout)


def test_every_part_reports_positive_figures_with_units_and_settings(report):
    s = report["settings"]
    assert s["dtype"] == "float32" and s["batch"] == 1 and s["shapes"] == ["tiny"] and s["parts"] == list(device.PARTS)
    assert s["new_tokens"] == 32 and s["context"] == 32 and s["verify_widths"] == [1, 8]
    assert report["environment"]["platform"] and report["units"]["ms"].startswith("milliseconds")
    bw = report["bandwidth"]
    assert _positive(bw["measured_GBps"]) and bw["bytes_moved"] == 3 * 8 * (1 << 20)  # 2 reads + 1 write of 8 MiB
    assert "read + written" in bw["method"] and report["environment"]["cpu_count"] >= 1
    tiny = report["shapes"]["tiny"]
    assert tiny["config"]["vocab_size"] == 512 and _positive(tiny["weight_bytes"]) and _positive(tiny["num_params"])
    assert tiny["weight_bytes"] == 4 * tiny["num_params"]  # float32
    assert [(r["batch"], r["method"]) for r in tiny["select"]] == [(2, "levels"), (2, "pops")]
    assert all(_positive(r["ms"]) and r["vocab_V"] == 512 and r["depth_L"] == 16 and r["budget"] == 32
               and _positive(r["topk_ms"]) and list(r["topk_chunked_ms"]) == ["128"]
               and _positive(r["topk_chunked_ms"]["128"]) for r in tiny["select"])
    assert s["layouts"] == list(LAYOUTS) and list(tiny["layouts"]) == list(LAYOUTS)
    for layout, parts in tiny["layouts"].items():  # CPU: every layer-dependent part in every layout
        ar = parts["ar"]
        for key in ("generate_N_ms", "generate_1_ms", "bound_ms_per_token"):  # measured: always positive
            assert _positive(ar[key]), (layout, key)
        # derived from a difference of two measurements: the definition always, positivity robustly
        assert math.isclose(ar["ms_per_token"], (ar["generate_N_ms"] - ar["generate_1_ms"]) / (s["new_tokens"] - 1))
        assert math.isclose(ar["ratio_to_bound"], ar["ms_per_token"] / ar["bound_ms_per_token"])
        settings = device.Settings.for_platform("cpu", **SMALL)
        ar_again = lambda: device.time_ar(*_tiny_in(layout), settings)  # noqa: E731
        assert _positive_or_remeasured(ar["ms_per_token"], lambda: ar_again()["ms_per_token"]), layout
        long = ar["long_cache"]  # 2048 slots: attention reads a 1024-slot prefix bucket
        assert long["slots"] == 2048
        assert _positive_or_remeasured(long["ms_per_token"], lambda: ar_again()["long_cache"]["ms_per_token"]), layout
        if ar["ms_per_token"] > 0:  # the report's own figures; a loaded machine can make the short one <= 0
            assert math.isclose(long["ratio_to_short_cache"], long["ms_per_token"] / ar["ms_per_token"])
        else:  # (seen in a cold suite run, 2026-11-28): then no ratio, rather than a negative or infinite one
            assert long["ratio_to_short_cache"] is None
        one, eight = parts["verify"]
        assert (one["T"], eight["T"]) == (1, 8) and all(r["context"] == 32 for r in (one, eight))
        assert all(_positive(r["ms"]) and _positive(r["ms_per_token"]) for r in (one, eight))
        assert one["extra_ms_per_token"] is None and math.isclose(one["ratio_to_T1"], 1.0)
        assert math.isclose(eight["extra_ms_per_token"], (eight["ms"] - one["ms"]) / 7)
        assert math.isclose(eight["ratio_to_T1"], eight["ms"] / one["ms"])
        for r in (one, eight):  # each width's own product chain (B x T rows): the rest of the forward beside it
            assert _positive(r["products_ms"]) and math.isclose(r["ratio_to_products"], r["ms"] / r["products_ms"])
        assert [r["method"] for r in parts["compile"]] == ["ar"]
        assert all(_positive(r["first_call_s"]) and _positive(r["warm_call_s"])
                   and math.isclose(r["compile_s"], r["first_call_s"] - r["warm_call_s"]) for r in parts["compile"])
        assert _positive_or_remeasured(parts["compile"][0]["compile_s"],
                                       lambda: device.time_compile(*_tiny_in(layout), settings)[0]["compile_s"])
        for r in parts["compile"]:  # the stages jax reports: traced and lowered, then compiled or loaded from a cache
            assert _positive(r["trace_s"]) and _positive(r["lower_s"]) and (r["xla_compile_s"] > 0 or r["cache_hits"] > 0)
            assert r["trace_s"] + r["lower_s"] + r["xla_compile_s"] <= r["first_call_s"]
        rnd = parts["round"]
        for part in ("draft", "select", "mask", "verify", "walk_commit", "round", "ar_step"):
            assert _positive(rnd[f"{part}_ms"]), part
        assert rnd["verify_width"] == 8 and rnd["tree_nodes"] == 8 and rnd["budget"] == 8  # prune_mass 0: full budget
        # the loop's round (a difference of two generations over their rounds) in the loop's AR steps
        assert rnd["loop_round_ms"] is not None
        assert math.isclose(rnd["round_in_ar_steps"], rnd["loop_round_ms"] / ar["ms_per_token"])
        # the draft's bytes: the drafter's leaves plus the target's [V, E] head, against the measured bandwidth
        dcfg, dparams = device._dflash(device.SHAPES["tiny"], settings, jnp.float32)
        head = tiny["config"]["vocab_size"] * tiny["config"]["hidden_size"] * 4
        assert rnd["draft_bytes"] == sum(x.nbytes for x in jax.tree.leaves(dparams)) + head
        gbps = bw["measured_GBps"]
        assert math.isclose(rnd["draft_bound_ms"], rnd["draft_bytes"] / gbps / 1e6)
        assert math.isclose(rnd["draft_ratio_to_bound"], rnd["draft_ms"] / rnd["draft_bound_ms"])
        assert math.isclose(rnd["verify_ratio_to_bound"], rnd["verify_ms"] / (tiny["weight_bytes"] / gbps / 1e6))


def test_a_difference_figure_inverted_by_load_is_measured_again_but_a_broken_one_still_fails():
    """Guards the robust positivity of `test_every_part_reports_positive_figures_with_units_and_settings`:
    one inverted pair of timings (busy cores) is re-measured; a figure never positive still fails."""
    again = iter([-0.2, 0.7])
    assert _positive_or_remeasured(-0.1, lambda: next(again))
    assert not _positive_or_remeasured(-0.1, lambda: -0.1)
    assert not _positive_or_remeasured(0.0, lambda: float("nan"))


def test_products_floor_chains_the_steps_weight_matrices_and_the_ar_figure_is_compared_to_it(report):
    tiny, bw = report["shapes"]["tiny"], report["bandwidth"]["measured_GBps"]
    floor = tiny["products_floor"]
    # tiny (Qwen3 flags, untied head): per layer q|k|v, o, gate|up, down; then the head kernel
    cfg = device.SHAPES["tiny"]
    norms = (2 * cfg.num_layers + 1) * cfg.hidden_size + 2 * cfg.num_layers * cfg.head_dim
    assert floor["products"] == 4 * cfg.num_layers + 1 and _positive(floor["ms"])
    assert floor["bytes"] == tiny["weight_bytes"] - 4 * (norms + cfg.vocab_size * cfg.hidden_size)  # no norm, no embedding
    assert math.isclose(floor["ratio_to_bound"], floor["ms"] / (floor["bytes"] / (bw * 1e9) * 1e3), rel_tol=1e-9)
    for parts in tiny["layouts"].values():
        assert math.isclose(parts["ar"]["ratio_to_products_floor"], parts["ar"]["ms_per_token"] / floor["ms"])


def test_step_products_are_smollm2s_matrices_as_a_decode_step_multiplies_them():
    """Shapes only (no weights allocated): per layer the fused, output-major [out, in] kernels (used
    transposed): [(H + 2K) * D, E] q|k|v, [E, H * D] o, [2F, E] gate|up, [E, F] down; then the tied
    embedding [V, E], transposed."""
    import jax
    import jax.numpy as jnp

    cfg = device.SHAPES["smollm2-135m"]
    params = jax.eval_shape(lambda: device.random_params(cfg, jnp.float32))
    flags = []

    def matrices(p):
        mats = roofline.step_products(cfg, p)
        flags.extend(t for _, t in mats)
        return [w for w, _ in mats]

    shapes = jax.eval_shape(matrices, params)
    layer = [((9 + 2 * 3) * 64, 576), (576, 9 * 64), (2 * 1536, 576), (576, 1536)]
    assert [x.shape for x in shapes[:4]] == layer and len(shapes) == 4 * 30 + 1
    assert [[x.shape for x in shapes[i:i + 4]] for i in range(0, 120, 4)] == [layer] * 30
    assert shapes[-1].shape == (49152, 576) and flags == [True] * 121


def test_bound_is_weight_bytes_over_measured_bandwidth(report):
    tiny, bw = report["shapes"]["tiny"], report["bandwidth"]["measured_GBps"]
    for parts in tiny["layouts"].values():  # the same weights in either layout: the same bound
        ar = parts["ar"]
        assert math.isclose(ar["bound_ms_per_token"], tiny["weight_bytes"] / (bw * 1e9) * 1e3, rel_tol=1e-9)
        assert math.isclose(ar["ratio_to_bound"], ar["ms_per_token"] / ar["bound_ms_per_token"], rel_tol=1e-9)


def test_bandwidth_bound_arithmetic_on_made_up_numbers():
    # 16 GB of weights at 3200 GB/s: 5 ms per token; measured 6.5 ms is 1.3x the bound
    out = roofline.bandwidth_bound(16_000_000_000, 3200.0, 6.5)
    assert math.isclose(out["bound_ms_per_token"], 5.0) and math.isclose(out["ratio_to_bound"], 1.3)
    with pytest.raises(ValueError, match="positive weight bytes and bandwidth"):
        roofline.bandwidth_bound(0, 3200.0, 1.0)


def test_a_figure_that_cannot_be_computed_is_logged_as_a_dash(monkeypatch):
    """On a busy machine the AR difference t(N) - t(1) can come out <= 0: its ratios are None, and the log
    says "-" for them instead of crashing (CI once failed there)."""
    ar = {"ms_per_token": 0.0, "generate_N_ms": 1.0, "generate_1_ms": 1.0, "tokens_per_s": None,
          "long_cache": {"slots": 2048, "ms_per_token": 0.5, "ratio_to_short_cache": None}}
    monkeypatch.setattr(device, "time_ar", lambda *a: ar)
    lines = []
    out = device._time_layout(None, None, "stacked", ["ar"], device.Settings.for_platform("cpu", **SMALL), 1000,
                              {"measured_GBps": 10.0}, lines.append)
    assert out["ar"]["ratio_to_bound"] == 0.0 and out["ar"]["long_cache"]["ratio_to_short_cache"] is None
    assert lines[1].endswith("0.500 ms/token, -x the short cache's")


def test_named_shapes_carry_the_hf_numbers():
    q, s, p = device.SHAPES["qwen3-8b"], device.SHAPES["smollm2-135m"], device.SHAPES["pythia-410m"]
    assert (q.vocab_size, q.hidden_size, q.num_layers, q.num_heads, q.num_kv_heads, q.head_dim, q.intermediate_size,
            q.qk_norm, q.flavor, q.tie_word_embeddings) == (151936, 4096, 36, 32, 8, 128, 12288, True, "qwen3", False)
    assert (s.vocab_size, s.hidden_size, s.num_layers, s.num_heads, s.num_kv_heads, s.head_dim, s.intermediate_size,
            s.tie_word_embeddings, s.flavor) == (49152, 576, 30, 9, 3, 64, 1536, True, "llama")
    assert (p.vocab_size, p.hidden_size, p.num_layers, p.num_heads, p.intermediate_size, p.rotary_dim / p.head_dim,
            p.use_parallel_residual, p.tie_word_embeddings) == (50304, 1024, 24, 16, 4096, 0.25, True, False)
    from specjax.models.model import param_shapes

    counts = {name: sum(x.size for x in __import__("jax").tree.leaves(param_shapes(cfg)))
              for name, cfg in device.SHAPES.items() if name != "tiny"}
    assert 134e6 < counts["smollm2-135m"] < 136e6 and 400e6 < counts["pythia-410m"] < 410e6
    assert 8.1e9 < counts["qwen3-8b"] < 8.3e9  # Qwen3-8B: 8.19B parameters


def test_unknown_shape_or_part_and_bad_settings_are_named():
    with pytest.raises(ValueError, match="unknown shape 'llama-70b'"):
        device.run(["llama-70b"], ("ar",))
    with pytest.raises(ValueError, match="unknown part 'decode'"):
        device.run(["tiny"], ("decode",))
    with pytest.raises(ValueError, match="unknown dtype 'int8'"):
        device.Settings(dtype="int8")
    with pytest.raises(ValueError, match="long_cache must be >= 0"):
        device.Settings(long_cache=-1)
    with pytest.raises(ValueError, match="new_tokens must be >= 2"):
        device.Settings(new_tokens=1)
    with pytest.raises(ValueError, match="layouts must be some of stacked, unstacked, dual"):
        device.Settings(layouts=("ragged",))


def test_cli_bench_device_writes_json(tmp_path, capsys):
    path = tmp_path / "dev.json"
    args = ["bench-device", "--shapes", "tiny", "--parts", "ar", "--new-tokens", "64", "--long-cache", "0",
            "--reps", "3", "--layouts", "unstacked", "--json", str(path)]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "bandwidth:" in out and "[unstacked] AR decode:" in out and "ms/token" in out and "[stacked]" not in out
    rep = json.loads(path.read_text())
    ar = rep["shapes"]["tiny"]["layouts"]["unstacked"]["ar"]

    def ratio_again():  # the ratio is a difference of two wall times over the bound: busy cores can invert a pair
        assert main(args) == 0
        return json.loads(path.read_text())["shapes"]["tiny"]["layouts"]["unstacked"]["ar"]["ratio_to_bound"]
    assert _positive_or_remeasured(ar["ratio_to_bound"], ratio_again) and rep["settings"]["parts"] == ["ar"]
    assert rep["settings"]["new_tokens"] == 64 and rep["settings"]["dtype"] == "float32"
    assert rep["settings"]["long_cache"] == 0 and "long_cache" not in ar and rep["settings"]["layouts"] == ["unstacked"]
    assert main(["bench-device", "--shapes", "tiny,nope"]) == 2
    assert "unknown shape 'nope'" in capsys.readouterr().err
    assert main(["bench-device", "--parts", "ar,walk"]) == 2
    assert "unknown part 'walk'" in capsys.readouterr().err
    assert main(["bench-device", "--layouts", "stacked,flat"]) == 2
    assert "layouts must be some of stacked, unstacked, dual" in capsys.readouterr().err
