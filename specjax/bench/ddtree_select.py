"""Benchmark of DDTree tree selection: `python -m specjax bench-select [--json PATH]` (`run(SelectBench(...))`).

Times `specjax.drafters.ddtree.select_tree` on random log-probs f32[B, L, V] (default
L = 16, V = 50,000, the DFlash block and a Qwen-sized vocabulary cut to 50k; the top-K per
depth is taken inside select_tree, so the full V is the input) for budgets
16..1024 and batch 1 and 8, both formulations ("levels", "pops"):

  jit_s      trace + compile time (`jax.jit(...).lower(x).compile()`), seconds
  steady_ms  median wall time of a compiled call after one warm-up, `block_until_ready`
  ms_per_row steady_ms / B
  ref_ms     the heapq reference (tests/ddtree_reference.py, Algorithm 1 with a stable
             argsort per depth for the ranks), median per row over the first row of
             batch 1; only when the reference file is present (a source checkout).
  ref_sort_ms  the part of ref_ms spent ranking tokens (np.argsort over V per depth),
             printed once above the table (per row in the JSON); ref_ms - ref_sort_ms
             is the Python heap itself.

Prints a table; `--json PATH` also writes the rows as JSON together with the device and
the jax version.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import pathlib

import jax
import numpy as np

from specjax.bench.timing import median_seconds, timed_call
from specjax.drafters.ddtree import select_tree

BUDGETS = (16, 32, 64, 128, 256, 512, 1024)
BATCHES = (1, 8)
METHODS = ("levels", "pops")


def random_log_q(batch: int, depth: int, vocab: int, seed: int = 0) -> np.ndarray:
    """float32 log_softmax of N(0, 3^2) logits, [batch, depth, vocab]."""
    logits = np.random.default_rng(seed).normal(size=(batch, depth, vocab)).astype(np.float32) * 3.0
    z = logits - logits.max(-1, keepdims=True)
    return (z - np.log(np.exp(z).sum(-1, keepdims=True))).astype(np.float32)


def _load_reference():
    path = pathlib.Path(__file__).resolve().parents[2] / "tests" / "ddtree_reference.py"
    if not path.exists():
        return None
    spec = importlib.util.spec_from_file_location("ddtree_reference", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def bench_one(log_q: jax.Array, budget: int, method: str, repeats: int) -> dict:
    """Compile time and steady-state median time of select_tree on one input."""
    fn = jax.jit(lambda x: select_tree(x, budget, method=method))
    compiled, jit_s = timed_call(lambda: fn.lower(log_q).compile())
    jax.block_until_ready(compiled(log_q))  # warm-up
    steady = median_seconds(compiled, log_q, repeats=repeats)
    return dict(method=method, batch=int(log_q.shape[0]), budget=budget, jit_s=jit_s,
                steady_ms=1e3 * steady, ms_per_row=1e3 * steady / log_q.shape[0])


@dataclasses.dataclass(frozen=True)
class SelectBench:
    """What `run` times: `select_tree` over random [B, depth, vocab] log-probabilities.

    Fields:
      depth: L, the marginals' depth.
      vocab: V, the vocabulary (the top-K per depth is taken inside select_tree).
      budgets: tree budgets N, crossed with batches and methods.
      batches: batch sizes B.
      methods: select_tree formulations (of `METHODS`).
      repeats: timed calls per configuration (their median).
      ref_repeats: timed calls of the heapq reference.
      reference: time the reference (tests/ddtree_reference.py, a source checkout only).
      json: also write the rows to this path (None: do not).
    """

    depth: int = 16
    vocab: int = 50_000
    budgets: tuple[int, ...] = BUDGETS
    batches: tuple[int, ...] = BATCHES
    methods: tuple[str, ...] = METHODS
    repeats: int = 7
    ref_repeats: int = 3
    reference: bool = True
    json: str | None = None


def run(args: SelectBench = SelectBench()) -> list[dict]:
    """Time every configuration, print a row each, return the rows."""
    ref = None if not args.reference else _load_reference()
    device = jax.devices()[0]
    print(f"# DDTree select_tree: L={args.depth} V={args.vocab} on {device.platform} ({device.device_kind}), "
          f"jax {jax.__version__}")
    inputs = {b: random_log_q(b, args.depth, args.vocab, seed=b) for b in args.batches}
    ref_ms, ref_sort_ms = {}, None
    if ref is not None:
        row = inputs[min(args.batches)][0]
        ref_sort_ms = 1e3 * median_seconds(lambda: ref.token_order(row), repeats=args.ref_repeats)
        for budget in args.budgets:
            ref_ms[budget] = 1e3 * median_seconds(lambda: ref.heap_select(row, budget), repeats=args.ref_repeats)
        print(f"# reference: ranking tokens (argsort over V per depth) takes {ref_sort_ms:.1f} ms per row "
              f"of each ref_ms/row below")

    rows = []
    header = f"{'method':>7} {'B':>3} {'budget':>6} {'jit_s':>7} {'steady_ms':>10} {'ms/row':>8} {'ref_ms/row':>10}"
    print(header)
    print("-" * len(header))
    for method in args.methods:
        for b in args.batches:
            x = jax.device_put(inputs[b])
            for budget in args.budgets:
                r = bench_one(x, budget, method, args.repeats)
                r["ref_ms_per_row"] = ref_ms.get(budget)
                r["ref_sort_ms_per_row"] = ref_sort_ms
                rows.append(r)
                ref_txt = f"{r['ref_ms_per_row']:10.2f}" if r["ref_ms_per_row"] is not None else f"{'-':>10}"
                print(f"{method:>7} {b:>3} {budget:>6} {r['jit_s']:7.2f} {r['steady_ms']:10.2f} "
                      f"{r['ms_per_row']:8.2f} {ref_txt}", flush=True)
    if args.json is not None:
        meta = dict(depth=args.depth, vocab=args.vocab, platform=device.platform,
                    device_kind=device.device_kind, jax=jax.__version__)
        pathlib.Path(args.json).write_text(json.dumps(dict(meta=meta, rows=rows), indent=2))
    return rows
