"""The benchmark harness of the DynaTree reproduction (`specjax bench`, notebooks).

Protocol (the paper's Sec. 4.1 at batch 1, one prompt per call; `batch` = B > 1 runs B
consecutive prompts per call, `specjax.bench.batching`):

1. Every prompt is cut to its last `prompt_width` tokens (left truncation: the model
   continues the end of the text) and right-padded to that one common width (default: the
   longest prompt), so each method compiles exactly once. With B > 1, prompts p = cB..cB+B-1
   form call c (int32[B, W], each row with its own length); the number of prompts and
   `warmup` must be multiples of B (whole batches: nothing is rounded, a clear ValueError
   otherwise).
2. Each method is compiled and run once on the first call's prompts, untimed: compile time
   is excluded.
3. The first `warmup` prompts (warmup / B calls) are run for every method and discarded (the
   paper discards W = 2 runs); the remaining prompts are the counted ones.
4. For each call, every method runs in turn (interleaved, so machine-speed drift hits all
   methods alike): the TTFT call, then the full call, each timed with `time.perf_counter`
   around `jax.block_until_ready` (`specjax.bench.timing.timed_call`, no GC pause inside).
   Every row of a call keeps its own record (tokens and
   per-round stats), so the per-row metrics and the AR-equality check are those of batch 1.
   The rows of a call finish at different times: a call lasts as long as its slowest row
   (the row with the most rounds; with EOS off every row generates `max_new_tokens`), and
   every row is charged that call's wall time - exactly what a user of batching pays.

`eos_ids=()` by default, so every method generates exactly `max_new_tokens` tokens. Under
greedy decoding every method's tokens are compared with AR's on every prompt (warm-up
prompts included) and classified (`specjax.equality`): identical; a near-tie (the first
difference is where AR's top-2 logit margin is below the float rounding threshold of the
dtype: lossless up to rounding, counted in `near_ties`); or a MISMATCH (`mismatches`: a
losslessness bug, warned about loudly, not raised).

Metric definitions (T_p = tokens generated for prompt p; r = one verification round =
one target forward after the prefill, counted per row (a row's rounds are those it was
active in); a_r = draft tokens accepted in round r, the bonus / correction token excluded;
d_r, n_r = depth and node count of round r's tree; c(p) = the call holding prompt p, t_c
its wall time). Ratios are pooled over all rounds of the counted prompts; mean / std are
over counted prompts (np.std, ddof = 0, as the authors), TTFT / TPOT / aggregate ones over
counted calls (at batch 1 calls and prompts are the same).

  throughput            row throughput: mean_p T_p / t_c(p), t_c = wall time of the whole
                        generate call (prefill included); `throughput_std` its std. What one
                        request sees; at batch B > 1 each row pays its call's full time.
  aggregate_throughput  mean_c (sum_{p in c} T_p) / t_c: all tokens of a call over its wall
                        time (`aggregate_throughput_std` its std over calls); what the device
                        delivers. = throughput at batch 1.
  speedup               aggregate_throughput / AR's aggregate_throughput at the same batch
                        (= throughput / AR's throughput at batch 1).
  acceptance_rate       sum a_r / sum d_r: the fraction of the drafted path depth that was
                        committed (RoundStats.depth holds d_r; = accepted / drafted for a
                        chain). The last round's a_r only counts what the output kept.
  node_acceptance_rate  sum a_r / sum n_r (accepted over all proposed tree nodes).
  tokens_per_iteration  sum (a_r + 1) / rounds: tokens committed per round, bonus included.
                        The first token comes from the prefill, so T_p = 1 + sum_r (a_r + 1).
  avg_path_length       sum a_r / rounds (= tokens_per_iteration - 1).
  accept_hist           [number of rounds with a_r = k for k = 0..max_depth].
  mean_tree_nodes/depth sum n_r / rounds, sum d_r / rounds.
  ttft_ms               wall time of the same call with max_new_tokens = 1 and the same cache
                        shapes (`reserve_new_tokens`): target prefill, draft prefill
                        (drafter.init) and the first token, no round (its own compiled
                        function, warmed like the other). Mean / std over calls.
  tpot_ms               (t_c - TTFT_c) / (max_{p in c} T_p - 1), mean / std over calls (batch 1:
                        (t_p - TTFT_p) / (T_p - 1)). TTFT comes from a separate call, so with
                        tiny models (decode time ~ call jitter) TPOT is noisy and can even be
                        negative.
AR counts each decoding step as a round with a_r = 0 (tokens_per_iteration 1, path 0);
its drafting metrics are None.

What the authors' code measures (github.com/cny123222/DynaTree; the paper's Table 1 rows
are in results/adaptive/main/paper_benchmark_main_with_linear.json, written by
papers/benchmark_adaptive_paper.py):
  * Their "Avg. Path Len" is not "before the bonus token": it is mean_p of
    stats["avg_accepted_path_length"] = total_tokens / total_rounds, where every round's
    count includes the bonus / correction token (`_select_best_path` in
    spec_decode/core/tree_speculative_generator.py returns len(path) + 1). Their
    "Tokens/Iter" is T / int(mean_p total_rounds_p) (`tokens_per_round`). Both are tokens
    per round incl. the bonus; Path Len averages per-prompt ratios, Tokens/Iter divides by
    the mean round count, and mean(T / r_p) >= T / mean(r_p) (1/x is convex) - hence
    Path Len > Tokens/Iter (Phase 3: 6.63 vs 1000/154 = 6.49).
  * Their tree "Accept." is `depth_acceptance_rate` (tree_speculative_generator.py,
    get_stats) = sum_r tokens committed in r (bonus incl.) / sum_r (tree_depth + 2) with the
    configured depth (D = 5; D_0 = 5 for every phase: the adaptive generators in
    tree_speculative_generator_adaptive.py inherit generate(), Phase 3 moves base_depth,
    not tree_depth), i.e. Path Len / 7 in Table 1 (6.63 / 7 = 94.7 %, 6.27 / 7 = 89.6 %,
    5.45 / 7 = 77.9 %, 5.65 / 7 = 80.8 %); it exceeds 100 % at T = 1500
    (paper_benchmark_main_1500tokens.json: 102.2 %). Their trees put a draft token at
    depth 0, so "D = 5" allows 6 draft tokens + 1 bonus per round (our depth-5 tree: 5 + 1).
    Their numbers follow from `per_prompt`: Path Len = mean_p (tokens_p - 1) / rounds_p (our
    first token comes from the prefill, theirs from round 1), Accept = Path Len / (their D + 2)
    = Path Len / (our depth + 1).
    Linear (spec_decode/core/speculative_generator.py): committed tokens incl. the
    correction / bonus / (K x rounds), up to (K + 1) / K.
  * TTFT: a separate target-only forward over the prompt (no draft prefill), outside the
    timed generate call; TPOT = (generate time - TTFT) / T. Throughput = T / generate time
    (tokenisation + prefill included), mean over prompts; speedup = mean / AR mean.
  * Warm-up: W + N runs with prompt index run % N, the first W discarded (so N prompts
    are counted and prompts 0..W-1 run twice); each method runs all prompts before the next.

The results' tables and files (`MethodResult`, `format_table`, `table_rows`, `dataset_summary`, JSON and CSV)
live in `specjax.bench.report` and are importable from here too.
"""

from __future__ import annotations

import dataclasses
import os
import platform
import subprocess
import sys
import warnings

import flax
import jax
import jaxlib
import numpy as np
from tqdm import tqdm

from specjax.bench.batching import call_times, calls_of, check_batches, group_batches, row_outputs
from specjax.bench.methods import Method, parse_method
from specjax.bench.report import (MethodResult, agrees_with_ar, dataset_summary, format_table, read_csv, read_json,
                                  table_rows, write_csv, write_json)
from specjax.bench.timing import timed_call
from specjax.decode import checks_trees_by_default, generate, generate_ar
from specjax.drafters.protocol import CarriesOver
from specjax.equality import Agreement, compare_with_ar
from specjax.equality import count as equality_count
from specjax.models import GPTNeoXConfig, init_params, pad_prompts
from specjax.models.model import layout_of, num_params
from specjax.sampling import Sampling

__all__ = ["Method", "MethodResult", "agrees_with_ar", "check_batches", "dataset_summary", "environment", "format_table",
           "parse_method", "prepare_prompts", "random_pair", "read_csv", "read_json", "run_benchmark", "summarise",
           "table_rows", "warm_up", "write_csv", "write_json"]

GREEDY = Sampling()


@dataclasses.dataclass
class _Run:
    """One timed generation (host arrays): generated tokens, seconds, TTFT seconds, per-round stats."""

    prompt: int
    prompt_len: int
    tokens: np.ndarray
    seconds: float
    ttft: float | None
    accepted: np.ndarray | None = None
    proposed: np.ndarray | None = None
    depth: np.ndarray | None = None
    call: int | None = None  # index of the generate call (warm-up ones included) that produced this row
    row: int = 0  # row of that call


# ======================================================================== running


def prepare_prompts(prompts: list[list[int]], prompt_width: int | None = None, pad_id: int = 0):
    """[(tokens int32[1, W], lengths int32[1])] per prompt: the last `prompt_width` tokens of
    each (default: the longest prompt's length), right-padded to W = prompt_width."""
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("need at least one prompt, each with at least one token")
    width = max(len(p) for p in prompts) if prompt_width is None else prompt_width
    if width < 1:
        raise ValueError(f"prompt_width must be >= 1, got {width}")

    return [pad_prompts([list(p)[-width:]], width, pad_id) for p in prompts]


def resolve_methods(methods, draft, *, target_cfg=None, **readers) -> list[Method]:
    """Parse spec strings (`specjax.drafters.registry`) against the draft LM (cfg, params) and the
    trained drafters that read the target, by kind ((cfg, params): dflash=, eagle3=, domino=, with
    the target config); reject duplicates and drafters without draft params."""
    draft_cfg = draft[0] if draft is not None else None
    out = [m if isinstance(m, Method) else parse_method(m, draft_cfg, target_cfg=target_cfg,
                                                        draft_params=draft[1] if draft is not None else None,
                                                        **readers)
           for m in methods]
    names = [m.name for m in out]
    if not out or len(set(names)) != len(names):
        raise ValueError(f"need at least one method and distinct names, got {names}")
    for m in out:
        if not m.is_ar and draft is None and m.params is None:
            raise ValueError(f"method {m.name!r} needs draft params: pass draft=(cfg, params)")
    return out


class _Runner:
    """(tokens, lengths, max_new_tokens, reserve) -> generate output, for one method. A drafter
    with `carry_over` (retrieval tables persist across requests: hot start) continues from the
    state the previous call left; `draft_params` is what the next call starts from."""

    def __init__(self, method: Method, target, draft, sampling: Sampling, eos_ids: tuple[int, ...], seed: int = 0,
                 check_trees: bool | None = None):
        self.method, self.target, self.sampling, self.eos_ids = method, target, sampling, eos_ids
        self.check_trees = not method.is_ar and checks_trees_by_default(check_trees, method.drafter, method.name)
        self.draft_params = None if method.is_ar else (
            method.params if method.params is not None else draft[1])
        self.key = None if sampling.greedy else jax.random.key(seed)

    def _next_key(self):  # None when greedy, else a fresh key per call
        self.key, sub = (None, None) if self.key is None else jax.random.split(self.key)
        return sub

    def __call__(self, tokens, lengths, n, reserve):

        cfg, params = self.target
        # `reserve`: the program is compiled for the full generation and stopped after n tokens,
        # so the TTFT call (n = 1) runs the full call's compiled program and cache shapes.
        if self.method.is_ar:
            return generate_ar(params, cfg, tokens, lengths, n, eos_ids=self.eos_ids, sampling=self.sampling,
                               key=self._next_key(), reserve_new_tokens=reserve)
        drafter = self.method.drafter
        out = generate(params, cfg, drafter, self.draft_params, tokens, lengths, n, sampling=self.sampling,
                       key=self._next_key(), eos_ids=self.eos_ids, reserve_new_tokens=reserve,
                       check_trees=self.check_trees)
        if isinstance(drafter, CarriesOver):
            self.draft_params = drafter.carry_over(self.draft_params, out.draft_state)
        return out


def warm_up(method: Method, target, prompts: list[list[int]], *, max_new_tokens: int, prompt_width: int | None = None,
            sampling: Sampling = GREEDY, eos_ids: tuple[int, ...] = ()) -> Method:
    """Graft's warm-up (hot start): run `method` on `prompts` one after another, each call
    starting from the table the previous one left (the drafter's `carry_over`), and return
    the method with those warm params. Use prompts disjoint from the evaluation set (the
    paper warms up on ShareGPT). Generations use the benchmark's shapes (`prompt_width`,
    `max_new_tokens`), so the benchmark reuses their compiled program."""
    if not isinstance(method.drafter, CarriesOver):
        raise ValueError(f"method {method.name!r} keeps no state across requests: nothing to warm up")
    if method.params is None:
        raise ValueError(f"method {method.name!r} has no draft params to warm up (its table)")
    run = _Runner(method, target, None, sampling, tuple(eos_ids))
    for tokens, lengths in (prepare_prompts(prompts, prompt_width) if prompts else ()):
        run(tokens, lengths, max_new_tokens, max_new_tokens)
    return dataclasses.replace(method, params=run.draft_params)


def _record(index: int, lengths, out, seconds: float, ttft: float | None) -> _Run:
    """Host copy of one generation (after the timed region): row 0 of `out`, a batch-1 output or one
    row of a batched call (`batching.row_outputs`); `seconds` / `ttft` are the whole call's."""
    num = int(out.num_tokens[0])
    run = _Run(prompt=index, prompt_len=int(lengths[0]), tokens=np.asarray(out.tokens[0, :num]), seconds=seconds,
               ttft=ttft)
    stats = getattr(out, "stats", None)
    if stats is not None:
        acc, prop, depth = (np.asarray(x[0]) for x in jax.device_get((stats.accepted, stats.proposed, stats.depth)))
        r = int(stats.num_rounds[0])
        run.accepted, run.proposed, run.depth = acc[:r], prop[:r], depth[:r]
    return run


def _measure(runners, calls, max_new_tokens: int, warmup: int, ttft: bool, progress: bool) -> dict[str, list[_Run]]:
    """Steps 2-4 of the protocol: every method's runs on every call's prompts (warm-up ones
    included; `warmup` counts calls), one `_Run` per row, prompt index = call * B + row."""
    runs: dict[str, list[_Run]] = {m.name: [] for m, _ in runners}
    size = calls[0][0].shape[0]
    what = "prompt" if size == 1 else f"batch of {size}"
    with tqdm(total=len(runners) * (1 + len(calls)), disable=not progress, file=sys.stderr, unit="run",
              dynamic_ncols=True) as bar:
        for m, run in runners:  # compile + first run of both calls, untimed
            bar.set_description(f"compile {m.name}")
            jax.block_until_ready(run(*calls[0], max_new_tokens, max_new_tokens))
            if ttft:
                jax.block_until_ready(run(*calls[0], 1, max_new_tokens))
            bar.update()
        for c, (tokens, lengths) in enumerate(calls):
            bar.set_description("warm-up" if c < warmup else f"{what} {c - warmup + 1}/{len(calls) - warmup}")
            for m, run in runners:  # interleaved: every method on this call
                first = timed_call(run, tokens, lengths, 1, max_new_tokens)[1] if ttft else None
                out, seconds = timed_call(run, tokens, lengths, max_new_tokens, max_new_tokens)
                for b, row in enumerate(row_outputs(out)):  # host copies, after the timed region
                    rec = _record(c * size + b, lengths[b:b + 1], row, seconds, first)
                    rec.call, rec.row = c, b
                    runs[m.name].append(rec)
                bar.update()
    return runs


def run_benchmark(target, draft, prompts: list[list[int]], methods: list[Method | str], *, max_new_tokens: int,
                  prompt_width: int | None = None, warmup: int = 1, sampling: Sampling = GREEDY,
                  eos_ids: tuple[int, ...] = (), progress: bool = True, ttft: bool = True,
                  batch: int = 1, seed: int = 0, check_trees: bool | None = None) -> list[MethodResult]:
    """Benchmark `methods` (Method objects or specs, see `specjax.bench.methods`) on `prompts`.

    target / draft: (cfg, params) pairs (draft may be None for AR only); prompts: token id
    lists, the first `warmup` of them run and discarded. `batch`: prompts per generate call
    (consecutive prompts; len(prompts) and `warmup` must be multiples of it). The protocol
    and the metrics are in the module docstring; `ttft=False` skips the TTFT calls (and
    their compiles): TTFT / TPOT are then None. `seed`: the PRNG seed of a sampling run (each
    method draws every call with its own key split from it). `check_trees`: validate every proposed tree in the
    loop (`specjax.decode.generate`'s; the timings include the checks); None (default): for the methods from
    outside specjax only (`specjax.decode.from_outside`), False: for none. Returns one MethodResult per method, in
    order.
    """
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    methods = resolve_methods(methods, draft)
    rows = prepare_prompts(prompts, prompt_width)
    check_batches(len(rows), warmup, batch)
    runners = [(m, _Runner(m, target, draft, sampling, tuple(eos_ids), seed, check_trees)) for m in methods]
    runs = _measure(runners, group_batches(rows, batch), max_new_tokens, warmup // batch, ttft, progress)

    ar = next((m.name for m in methods if m.is_ar), None)
    results = []
    for m in methods:
        agree = (_agreements(runs[m.name], runs[ar], target, rows) if ar is not None and sampling.greedy else None)
        results.append(summarise(m.name, runs[m.name][warmup:], 1 if m.is_ar else m.drafter.max_depth + 1, agree))
        bad = [(run.prompt, str(a)) for run, a in zip(runs[m.name], agree or ()) if a.kind == "MISMATCH"]
        if bad:
            warnings.warn(f"LOSSLESSNESS VIOLATION: {m.name}'s greedy output differs from AR's beyond a near-tie on "
                          f"prompts {bad} (indices into `prompts`); a lossless method must match AR token for token "
                          f"up to float rounding", RuntimeWarning, stacklevel=2)
    if ar is not None:
        base = results[[m.name for m in methods].index(ar)].aggregate_throughput
        for r in results:
            r.speedup = r.aggregate_throughput / base
    return results


def _agreements(runs: list[_Run], ar_runs: list[_Run], target, rows) -> list[Agreement]:
    """Per run: how its tokens compare with AR's on the same prompt (`specjax.equality`)."""
    cfg, params = target
    out = []
    for run, ar_run in zip(runs, ar_runs):
        tokens, lengths = rows[run.prompt]
        prompt = np.asarray(tokens[0, : int(lengths[0])]).tolist()
        out.append(compare_with_ar(params, cfg, prompt, ar_run.tokens, run.tokens))
    return out


# ======================================================================== metrics


def _mean_std(x) -> tuple[float | None, float | None]:
    x = np.asarray([v for v in x if v is not None], float)
    return (float(x.mean()), float(x.std())) if x.size else (None, None)


def _ratio(num, den) -> float | None:
    return float(num) / float(den) if den else None


def summarise(method: str, runs: list[_Run], hist_size: int, agreement: list[Agreement] | None = None) -> MethodResult:
    """Pure: the MethodResult of one method's counted runs (`agreement`: per run of all prompts,
    warm-up included, its comparison with AR (`specjax.equality`), or None if not checked).
    Runs of one call (same `call`, consecutive) share its wall time and TTFT (`batching`)."""
    spec = runs[0].accepted is not None
    n = np.array([len(r.tokens) for r in runs])
    secs = np.array([r.seconds for r in runs])
    calls = calls_of(runs)
    size = len(calls[0])
    of_call = {j: c for c, g in enumerate(calls) for j in g}
    if spec:
        acc = np.concatenate([r.accepted for r in runs]).astype(np.int64)
        prop = np.concatenate([r.proposed for r in runs]).astype(np.int64)
        depth = np.concatenate([r.depth for r in runs]).astype(np.int64)
    else:  # AR: every decoding step is a round that accepts no draft token
        acc, prop, depth = np.zeros(int((n - 1).sum()), np.int64), None, None
    rounds = int(acc.size)
    row_rounds = [r.accepted.size if spec else max(len(r.tokens) - 1, 0) for r in runs]
    times = call_times(runs, calls, row_rounds)  # per call; batch 1: per prompt
    ttft_ms, ttft_std = _mean_std([None if t is None else 1e3 * t for t in times.ttft])
    tpot_ms, tpot_std = _mean_std([None if t is None else 1e3 * t for t in times.tpot])
    per_prompt = []
    for j, r in enumerate(runs):
        a = r.accepted if spec else np.zeros(max(len(r.tokens) - 1, 0), np.int64)
        tpot = times.tpot[of_call[j]]
        per_prompt.append({
            "prompt": r.prompt, "prompt_tokens": r.prompt_len, "tokens": int(n[j]), "seconds": float(secs[j]),
            "throughput": float(n[j] / secs[j]), "ttft_ms": None if r.ttft is None else 1e3 * r.ttft,
            "tpot_ms": None if tpot is None else 1e3 * tpot, "rounds": int(a.size),
            "accepted": int(a.sum()), "proposed": int(r.proposed.sum()) if spec else None,
            "depth": int(r.depth.sum()) if spec else None,
            "identical_to_ar": None if agreement is None else agreement[r.prompt].kind == "identical",
            "agreement": None if agreement is None else str(agreement[r.prompt]),
        })
        if size > 1:  # the call this row ran in: its index, row, tokens (all rows), rounds (its slowest row)
            c = of_call[j]
            per_prompt[-1].update({"call": r.call, "row": r.row, "call_tokens": int(times.tokens[c]),
                                   "call_rounds": int(times.rounds[c]),
                                   "aggregate_throughput": float(times.aggregate[c])})
    counts = None if agreement is None else equality_count(agreement[r.prompt] for r in runs)
    thr = n / secs
    return MethodResult(
        method=method, num_prompts=len(runs), total_tokens=int(n.sum()), total_seconds=float(times.seconds.sum()),
        throughput=float(thr.mean()), throughput_std=float(thr.std()), speedup=None,
        acceptance_rate=_ratio(acc.sum(), depth.sum()) if spec else None,
        node_acceptance_rate=_ratio(acc.sum(), prop.sum()) if spec else None,
        tokens_per_iteration=_ratio((acc + 1).sum(), rounds), avg_path_length=_ratio(acc.sum(), rounds),
        ttft_ms=ttft_ms, ttft_std_ms=ttft_std, tpot_ms=tpot_ms, tpot_std_ms=tpot_std,
        accept_hist=np.bincount(acc, minlength=hist_size).tolist(),
        mean_tree_nodes=_ratio(prop.sum(), rounds) if spec else None,
        mean_tree_depth=_ratio(depth.sum(), rounds) if spec else None,
        rounds=rounds, identical_to_ar=None if counts is None else counts["identical"] == len(runs),
        per_prompt=per_prompt, near_ties=None if counts is None else counts["near-tie"],
        mismatches=None if counts is None else counts["MISMATCH"], batch=size,
        aggregate_throughput=float(times.aggregate.mean()), aggregate_throughput_std=float(times.aggregate.std()))


# ======================================================================== models, environment


def random_pair(vocab: int = 512, seed: int = 0):
    """Random GPT-NeoX target (6 x 256) and draft (2 x 64) as ((cfg, params), (cfg, params)):
    acceptance is meaningless, only the machinery's overhead shows."""
    target = GPTNeoXConfig(vocab_size=vocab, hidden_size=256, num_layers=6, num_heads=8, intermediate_size=1024,
                           rotary_dim=8)
    draft = GPTNeoXConfig(vocab_size=vocab, hidden_size=64, num_layers=2, num_heads=4, intermediate_size=256,
                          rotary_dim=4)
    return ((target, init_params(target, jax.random.key(seed))),
            (draft, init_params(draft, jax.random.key(seed + 1))))


def _git_commit() -> str | None:
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=here, capture_output=True, text=True,
                             timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return rev + ("-dirty" if dirty else "") if rev else None


def environment(target_name: str, draft_name: str | None, target_params, extra: dict | None = None) -> dict:
    """What the numbers were measured on (no hostname): device, library versions, dtype, CPUs."""
    dev = jax.devices()[0]
    leaves = jax.tree.leaves(target_params)
    env = {
        "target": target_name, "draft": draft_name, "target_params": num_params(target_params),
        "target_layout": layout_of(target_params),
        "dtype": str(leaves[0].dtype) if leaves else None, "platform": dev.platform,
        "device_kind": dev.device_kind, "device_count": jax.device_count(), "cpu_count": os.cpu_count(),
        "machine": platform.machine(), "os": platform.system(), "python": platform.python_version(),
        "jax": jax.__version__, "jaxlib": jaxlib.__version__, "flax": flax.__version__, "numpy": np.__version__,
        "specjax_commit": _git_commit(),
    }
    return {**env, **(extra or {})}
