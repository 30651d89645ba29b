"""`make gpu-check` (`specjax.bench.gpu_check`): the goals it reads from its steps' files, its table, its test
step end to end (a real child pytest), and its refusals.

References: goals computed by hand from figures in the files' own layouts (bench-device's JSON, the bench
suite's JSON, pytest's junit XML as pytest writes it); the quick run of the tests step in a child process.
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from specjax.bench import gpu_check
from specjax.bench.gpu_check import CheckPlan, goals, markdown, run_check


def _device_figures(ar_ms: float, floor_ms: float, round_ms: float, ar_step_ms: float, v1: float, v64: float,
                    layout: str = "stacked") -> dict:
    """bench-device's JSON for one shape and one layout, with the figures the goals read."""
    return {"environment": {"platform": "gpu", "device_kind": "NVIDIA H200", "jax": "0.11.2"},
            "shapes": {"qwen3-8b": {"products_floor": {"ms": floor_ms},
                                    "layouts": {layout: {
                                        "ar": {"ms_per_token": ar_ms},
                                        "verify": [{"T": 1, "ms": v1}, {"T": 64, "ms": v64}],
                                        "round": {"draft_ms": 1.7, "select_ms": 1.15, "mask_ms": 0.35,
                                                  "verify_ms": 14.66, "walk_commit_ms": 0.27, "round_ms": round_ms,
                                                  "ar_step_ms": ar_step_ms}}}}}}


def _report(device=None, smollm2=None, tests=None) -> dict:
    steps = {}
    for name, figures in (("tests", tests), ("device", device), ("smollm2", smollm2)):
        if figures is not None:
            steps[name] = {"status": 0, "seconds": 120.0, "figures": figures}
    return {"plan": {"quick": False}, "steps": steps, "environment": (device or {}).get("environment", {})}


def test_goals_from_the_h200_figures_of_the_issue():
    """The issue's H200 figures (AR 9.90 ms against products 4.52; round 19.84 against an AR step 10.58; verify
    15.43 / 10.82; select 1.15; draft 1.70; SmolLM2 AR 725 tok/s, best 1.27x): every goal computed and missed."""
    device = _device_figures(9.903, 4.520, 19.84, 10.58, 10.82, 15.43)
    smollm2 = {"results": [{"method": "ar", "throughput": 725.1, "speedup": 1.0, "identical_to_ar": True},
                           {"method": "ddtree-7", "throughput": 920.5, "speedup": 1.27, "identical_to_ar": True}]}
    tests = {"passed": 30, "failed": 3, "skipped": 0, "seconds": 200.0, "failures": []}
    rows = {r["goal"]: r for r in goals(_report(device, smollm2, tests))}
    expect = {"Qwen3-8B AR step / its weight products alone": 9.903 / 4.520,
              "Qwen3-8B DDTree-64 round, AR steps": 19.84 / 10.58, "Qwen3-8B verify T=64 / T=1": 15.43 / 10.82,
              "Qwen3-8B DDTree select, ms": 1.15, "Qwen3-8B DFlash draft, ms": 1.7,
              "SmolLM2 AR, ms/token": 1000 / 725.1, "SmolLM2 best method vs AR (GSM8K)": 1.27,
              "gpu subset: failures": 3}
    for name, value in expect.items():
        assert rows[name]["measured"] == pytest.approx(value) and rows[name]["met"] is False, name
    assert rows["SmolLM2 every output identical to AR"]["met"] is True
    table = markdown(_report(device, smollm2, tests) | {"goals": list(rows.values())})
    assert "NVIDIA H200" in table and "| Qwen3-8B DDTree-64 round, AR steps | <= 1.3 | 1.88 | **no** |" in table


def test_goals_met_and_the_faster_layout_chosen():
    """Two layouts: the goals read the one with the faster AR step; figures at the goals are met."""
    device = _device_figures(5.0, 4.5, 6.0, 5.0, 10.0, 12.0, layout="unstacked")
    device["shapes"]["qwen3-8b"]["layouts"]["stacked"] = {"ar": {"ms_per_token": 9.9}}
    smollm2 = {"results": [{"method": "ar", "throughput": 2600.0, "speedup": 1.0, "identical_to_ar": True},
                           {"method": "ddtree-16", "throughput": 5500.0, "speedup": 2.1, "identical_to_ar": True}]}
    rows = {r["goal"]: r for r in goals(_report(device, smollm2))}
    assert rows["Qwen3-8B AR step / its weight products alone"]["measured"] == pytest.approx(5.0 / 4.5)
    for name in ("Qwen3-8B AR step / its weight products alone", "Qwen3-8B DDTree-64 round, AR steps",
                 "Qwen3-8B verify T=64 / T=1", "SmolLM2 AR, ms/token", "SmolLM2 best method vs AR (GSM8K)"):
        assert rows[name]["met"] is True, name


def test_a_step_that_did_not_run_is_not_measured_not_failed():
    rows = goals(_report())
    assert all(r["measured"] is None and r["met"] is None for r in rows)
    assert "not measured" in markdown(_report() | {"goals": rows})


def test_junit_failures_are_kept_with_their_messages(tmp_path):
    """pytest's own junit XML of a file with a pass, a failure and a skip: counts and the failure's message."""
    test = tmp_path / "test_three.py"
    test.write_text(textwrap.dedent("""
        import pytest
        def test_ok(): pass
        def test_bad(): assert 1 == 2, "the planted failure"
        def test_skip(): pytest.skip("not here")
    """))
    xml = tmp_path / "out.xml"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", str(test),
                    "--junitxml", str(xml), "--rootdir", str(tmp_path), "-c", "/dev/null"], capture_output=True,
                   cwd=tmp_path, timeout=120)
    figures = gpu_check._junit(xml)
    assert (figures["passed"], figures["failed"], figures["skipped"]) == (1, 1, 1)
    assert figures["failures"][0]["test"].endswith("test_bad") and "the planted failure" in figures["failures"][0]["message"]


def test_the_tests_step_end_to_end_writes_the_json_and_the_table(tmp_path):
    """--quick's tests step for real: a child pytest of the gpu-marked flag tests, its junit read back."""
    report = run_check(CheckPlan(out=str(tmp_path), steps=("tests",), quick=True), log=lambda *a: None)
    step = report["steps"]["tests"]
    assert step["status"] == 0, step["tail"]
    assert step["figures"]["passed"] >= 4 and step["figures"]["failed"] == 0
    saved = json.loads((tmp_path / "gpu-check.json").read_text())
    assert saved["goals"][0] == {"goal": "gpu subset: failures", "target": "0", "measured": 0, "met": True}
    assert "| tests | 0 |" in (tmp_path / "gpu-check.md").read_text()


def test_unknown_steps_are_refused_before_anything_runs(tmp_path):
    with pytest.raises(ValueError, match="steps must be some of device, tests, smollm2, versus, xla-options, got gpus"):
        CheckPlan(out=str(tmp_path), steps=("gpus",)).check()
    run = subprocess.run([sys.executable, "-m", "specjax", "gpu-check", "--steps", "tests,gpus", "--out",
                          str(tmp_path / "x")], capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and "--steps" in run.stderr and not (tmp_path / "x").exists()


def test_the_xla_options_step_times_the_baseline_in_a_child_and_keeps_an_earlier_runs_steps(tmp_path):
    """--quick's xla-options step for real: bench-device's AR part (tiny shape) in a child, its ms/token read
    back into the variants table; on a GPU the same step adds one child per XLA_VARIANTS entry. A tests step
    an earlier run wrote to the same directory (a GPU session's first command) stays in the report and its
    goals; one from a run of the other profile (not --quick) does not."""
    earlier = {"status": 0, "seconds": 250.0, "figures": {"passed": 40, "failed": 0, "skipped": 2,
                                                          "not_run_deadline": 2, "seconds": 240.0, "failures": []}}
    (tmp_path / "gpu-check.json").write_text(json.dumps({"plan": {"quick": True}, "steps": {"tests": earlier}}))
    report = run_check(CheckPlan(out=str(tmp_path), steps=("xla-options",), quick=True), log=lambda *a: None)
    step = report["steps"]["xla-options"]
    assert step["status"] == 0, step["tail"]
    baseline = step["figures"]["variants"]["default"]
    # the child's own figure, read back (a difference of two timings: on loaded cores it can even be negative)
    child = json.loads((tmp_path / "xla-0.json").read_text())["shapes"]
    assert baseline["status"] == 0
    assert baseline["ar_ms_per_token"] == next(iter(child.values()))["layouts"]["unstacked"]["ar"]["ms_per_token"]
    assert "| default |" in (tmp_path / "gpu-check.md").read_text()
    assert set(gpu_check.XLA_VARIANTS) >= {"default", "command buffers off"}
    assert report["steps"]["tests"] == earlier
    rows = {r["goal"]: r for r in report["goals"]}
    assert rows["gpu subset: failures"]["met"] is True
    assert rows["gpu subset: tests not run by the deadline"] == {
        "goal": "gpu subset: tests not run by the deadline", "target": "0", "measured": 2, "met": False}
    (tmp_path / "gpu-check.json").write_text(json.dumps({"plan": {"quick": False}, "steps": {"tests": earlier}}))
    assert gpu_check._earlier_steps(tmp_path, CheckPlan(out=str(tmp_path), quick=True)) == {}


def test_a_deadline_skips_the_tests_not_started_and_the_xml_counts_them(tmp_path):
    """tests/conftest.py's SPECJAX_TEST_DEADLINE in a real child pytest: a deadline in the past skips every
    test with the reason the tests step counts as not run; none in the future skips none."""
    test = "tests/test_gpu_check.py::test_a_step_that_did_not_run_is_not_measured_not_failed"
    for deadline, not_run in (("1", 1), ("4102444800", 0)):  # 1970 and 2100
        xml = tmp_path / f"{deadline}.xml"
        run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", test,
                              "--junitxml", str(xml)], capture_output=True, text=True, timeout=300,
                             env={**os.environ, "SPECJAX_TEST_DEADLINE": deadline})
        assert run.returncode == 0, run.stdout[-2000:]
        figures = gpu_check._junit(xml)
        assert (figures["not_run_deadline"], figures["skipped"], figures["passed"]) == (not_run, not_run, 1 - not_run)


def test_the_tests_step_spreads_over_half_the_cores_at_most_eight(monkeypatch):
    """A GPU compiles on its host's cores: the tests step runs pytest-xdist workers, half the cores (at most 8),
    a test at a time each; one process with --quick, on a host of fewer than 4 cores, or without xdist."""
    for cores, expect in ((16, ["-n", "8", "--dist", "load"]), (6, ["-n", "3", "--dist", "load"]),
                          (2, ["-p", "no:xdist"])):
        monkeypatch.setattr(gpu_check.os, "cpu_count", lambda c=cores: c)
        assert gpu_check.pytest_workers(quick=False) == expect, cores
        assert gpu_check.pytest_workers(quick=True) == ["-p", "no:xdist"]
    monkeypatch.setattr(gpu_check.importlib.util, "find_spec", lambda name: None)
    monkeypatch.setattr(gpu_check.os, "cpu_count", lambda: 16)
    assert gpu_check.pytest_workers(quick=False) == ["-p", "no:xdist"]


def test_make_test_gpu_reads_the_same_workers_from_the_command_line(monkeypatch, capsys):
    """`make test-gpu` runs pytest with what `specjax gpu-check --pytest-workers` prints: the tests step's."""
    from specjax.cli import main

    monkeypatch.setattr(gpu_check.os, "cpu_count", lambda: 16)
    assert main(["gpu-check", "--pytest-workers"]) == 0
    assert capsys.readouterr().out.split() == gpu_check.pytest_workers(quick=False)
    makefile = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "Makefile")
    assert "-m specjax gpu-check --pytest-workers" in open(makefile).read()


def test_the_compile_report_totals_its_rows_and_names_the_flags_the_workers_had(tmp_path):
    """The tests step's compile figures (tests/conftest.py's rows, summed by hand): totals, seconds per compiled
    program (the figure the GPU's test flags are meant to lower), every distinct XLA_FLAGS, the slowest tests."""
    rows = [{"test": "a", "seconds": 4.0, "compile_s": 3.0, "trace_s": 0.5, "compiles": 2, "xla_flags": "--f=1"},
            {"test": "b", "seconds": 9.0, "compile_s": 1.5, "trace_s": 0.25, "compiles": 1, "xla_flags": "--f=1"},
            {"test": "c", "seconds": 1.0, "compile_s": 0.0, "trace_s": 0.0, "compiles": 0}]  # a row before the field
    path = tmp_path / "compile.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    report = gpu_check._compile_report(path)
    assert (report["tests"], report["seconds"], report["compile_s"], report["trace_s"]) == (3, 14.0, 4.5, 0.8)
    assert report["compiles"] == 3 and report["compile_s_per_program"] == 1.5
    assert report["xla_flags"] == ["", "--f=1"] and [r["test"] for r in report["slowest"]] == ["b", "a", "c"]
    assert gpu_check._compile_report(tmp_path / "missing.jsonl") is None
