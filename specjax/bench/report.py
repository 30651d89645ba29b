"""Benchmark results as tables and files: `MethodResult`, the text table, the per-dataset summary, JSON and CSV.

`specjax.bench.harness` measures (`run_benchmark` -> list[MethodResult]); this module only presents and stores
what it measured (the metric definitions: the harness's docstring). `write_json` / `read_json` and `write_csv` /
`read_csv` round-trip (CSV without the per-prompt records); every name here is also importable from the harness.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import types
import typing

import numpy as np
import pandas as pd

from specjax.bench.timing import format_figure

__all__ = ["MethodResult", "agrees_with_ar", "dataset_summary", "format_table", "read_csv", "read_json", "table_rows",
           "write_csv", "write_json"]


@dataclasses.dataclass
class MethodResult:
    """One method's measurements over the counted prompts (definitions: `specjax.bench.harness`'s docstring).

    Mean / std are over counted prompts (np.std, ddof 0), TTFT / TPOT / aggregate ones over counted
    calls; ratios pool all rounds of the counted prompts and are None when their denominator is 0.

    Fields:
      method: the method's canonical spec (`Method.name`), e.g. "ar", "chain4", "ddtree-64".
      num_prompts: counted prompts (warm-up excluded).
      total_tokens: tokens generated over the counted prompts.
      total_seconds: wall seconds of their full calls, summed over calls (each call once).
      throughput: row tokens/s: a row's tokens / its call's wall time, mean over prompts.
      throughput_std: std of that over prompts.
      speedup: aggregate_throughput / AR's aggregate_throughput in the same run; None without AR.
      acceptance_rate: sum a_r / sum d_r, accepted draft tokens over drafted tree depth (None for AR).
      node_acceptance_rate: sum a_r / sum n_r, accepted draft tokens over proposed nodes (None for AR).
      tokens_per_iteration: sum (a_r + 1) / rounds, committed tokens per round, bonus included (AR: 1).
      avg_path_length: sum a_r / rounds, accepted draft tokens per round (AR: 0).
      ttft_ms: time to first token in ms (a max_new_tokens = 1 call), mean over calls; None if not timed.
      ttft_std_ms: its std over calls, ms.
      tpot_ms: time per output token in ms, (t_c - TTFT_c) / (longest row's tokens - 1), mean over calls.
      tpot_std_ms: its std over calls, ms.
      accept_hist: rounds with 0, 1, ..., max_depth accepted draft tokens (AR: [rounds]).
      mean_tree_nodes: sum n_r / rounds, proposed tree nodes per round (None for AR).
      mean_tree_depth: sum d_r / rounds, proposed tree depth per round (None for AR).
      rounds: verification rounds (AR: decoding steps), summed over rows.
      identical_to_ar: greedy only: every counted prompt's tokens identical to AR's; None when not checked.
      per_prompt: one dict per counted prompt (prompt index, tokens, seconds, throughput, rounds, accepted,
        agreement, ...; at batch > 1 also its call, row and the call's totals).
      near_ties: counted prompts that part from AR at a near-tie (`specjax.equality`); None: not checked.
      mismatches: counted prompts that part from AR above the near-tie threshold (a bug); None: not checked.
      batch: prompts (rows) per generate call.
      aggregate_throughput: a call's tokens (all rows) / its wall time, mean over calls.
      aggregate_throughput_std: its std over calls.
    """

    method: str
    num_prompts: int
    total_tokens: int
    total_seconds: float
    throughput: float
    throughput_std: float
    speedup: float | None
    acceptance_rate: float | None
    node_acceptance_rate: float | None
    tokens_per_iteration: float | None
    avg_path_length: float | None
    ttft_ms: float | None
    ttft_std_ms: float | None
    tpot_ms: float | None
    tpot_std_ms: float | None
    accept_hist: list[int]
    mean_tree_nodes: float | None
    mean_tree_depth: float | None
    rounds: int
    identical_to_ar: bool | None
    per_prompt: list[dict]
    near_ties: int | None = None
    mismatches: int | None = None
    batch: int = 1
    aggregate_throughput: float | None = None
    aggregate_throughput_std: float | None = None

    @property
    def efficiency(self) -> float | None:
        """η = speedup / τ: the share of its ideal speedup (τ, rounds free) a method keeps; 1 / η is what a
        round costs in AR steps of the same run. None without a speedup or a τ."""
        if self.speedup is None or not self.tokens_per_iteration:
            return None
        return self.speedup / self.tokens_per_iteration

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> MethodResult:
        return cls(**{f.name: d[f.name] for f in dataclasses.fields(cls) if f.name in d})



def agrees_with_ar(r: MethodResult) -> str:
    """The "=AR" cell: "yes" (identical on every counted prompt), "~N" (N prompts part from AR at a
    near-tie), "NO<N>" (N prompts differ beyond it), "NO", or "-" (not compared)."""
    return ("-" if r.identical_to_ar is None else "yes" if r.identical_to_ar else
            f"NO{r.mismatches}" if r.mismatches else f"~{r.near_ties}" if r.near_ties else "NO")


def table_rows(results: list[MethodResult]) -> list[dict]:
    """`format_table`'s columns as one dict per method, named with their units and rounded as the
    table prints them (None: not measured): what a notebook turns into a DataFrame."""
    def num(x, digits, scale=1.0):
        return None if x is None else round(x * scale, digits)

    batched = any(r.batch > 1 for r in results)
    rows = []
    for r in results:
        row = {"method": r.method, "tokens/s": num(r.throughput, 1), "± std (tokens/s)": num(r.throughput_std, 1)}
        if batched:
            row.update({"aggregate tokens/s": num(r.aggregate_throughput, 1),
                        "± std (aggregate)": num(r.aggregate_throughput_std, 1)})
        row.update({"speedup (×)": num(r.speedup, 2), "η (speedup / τ)": num(r.efficiency, 2),
                    "accept (%)": num(r.acceptance_rate, 1, 100),
                    "node accept (%)": num(r.node_acceptance_rate, 1, 100),
                    "τ (tokens/round)": num(r.tokens_per_iteration, 2),
                    "path (accepted tokens/round)": num(r.avg_path_length, 2), "TTFT (ms)": num(r.ttft_ms, 2),
                    "TPOT (ms)": num(r.tpot_ms, 3), "nodes/round": num(r.mean_tree_nodes, 1),
                    "depth (tokens)": num(r.mean_tree_depth, 2), "= AR": agrees_with_ar(r)})
        rows.append(row)
    return rows


def dataset_summary(per_dataset: dict[str, list[MethodResult]]) -> pd.DataFrame:
    """One row per method, for each prompt set its speedup vs AR and τ, then their means over the sets
    (a plain mean: each set counts once, whatever its number of prompts); "=AR" is "yes" only where
    every set's greedy output was identical to AR's (`agrees_with_ar` joined otherwise).

    per_dataset: prompt set name -> `run_benchmark` results of the same methods in the same order."""
    methods = [r.method for r in next(iter(per_dataset.values()))]
    for name, results in per_dataset.items():
        if [r.method for r in results] != methods:
            raise ValueError(f"{name} ran methods {[r.method for r in results]}, not {methods}")
    rows = []
    for i, method in enumerate(methods):
        row = {"method": method}
        for name, results in per_dataset.items():
            r = results[i]
            row[f"{name} speedup"] = None if r.speedup is None else round(r.speedup, 2)
            row[f"{name} τ"] = None if r.tokens_per_iteration is None else round(r.tokens_per_iteration, 2)
        speedups = [results[i].speedup for results in per_dataset.values()]
        taus = [results[i].tokens_per_iteration for results in per_dataset.values()]
        row["mean speedup"] = None if None in speedups else round(float(np.mean(speedups)), 2)
        row["mean τ"] = None if None in taus else round(float(np.mean(taus)), 2)
        cells = [agrees_with_ar(results[i]) for results in per_dataset.values()]
        row["= AR"] = cells[0] if len(set(cells)) == 1 else "/".join(cells)
        rows.append(row)
    return pd.DataFrame(rows).set_index("method")


def format_table(results: list[MethodResult]) -> str:
    """The results as a fixed-width text table (one row per method). With batch > 1, tok/s is the
    row throughput ("row tok/s") and "agg tok/s" (± std) the aggregate one that speedup compares."""
    w = max([6] + [len(r.method) for r in results])
    batched = any(r.batch > 1 for r in results)
    cols = [("method", w), ("row tok/s" if batched else "tok/s", 9), ("± std", 7)]
    cols += [("agg tok/s", 9), ("± std", 7)] if batched else []
    cols += [("speedup", 7), ("η", 5), ("accept%", 7), ("node%", 6), ("tok/iter", 8), ("path", 5),
             ("TTFT ms", 8), ("TPOT ms", 8), ("nodes", 6), ("depth", 5), ("=AR", 4)]
    head = " ".join(name.ljust(width) if i == 0 else name.rjust(width) for i, (name, width) in enumerate(cols))
    lines = [head, "-" * len(head)]
    for r in results:
        f = format_figure
        cells = [r.method, f(r.throughput, ".1f"), f(r.throughput_std, ".1f")]
        cells += [f(r.aggregate_throughput, ".1f"), f(r.aggregate_throughput_std, ".1f")] if batched else []
        cells += [f(r.speedup, ".2f"), f(r.efficiency, ".2f"), f(r.acceptance_rate, ".1f", 100),
                  f(r.node_acceptance_rate, ".1f", 100), f(r.tokens_per_iteration, ".2f"), f(r.avg_path_length, ".2f"),
                  f(r.ttft_ms, ".2f"), f(r.tpot_ms, ".3f"), f(r.mean_tree_nodes, ".1f"), f(r.mean_tree_depth, ".2f"),
                  agrees_with_ar(r)]
        lines.append(" ".join(c.ljust(width) if i == 0 else c.rjust(width)
                              for i, (c, (_, width)) in enumerate(zip(cells, cols))))
    if any(r.near_ties or r.mismatches for r in results):
        lines.append("=AR: yes = identical on every counted prompt; ~N = N prompts part from AR at a near-tie (AR's "
                     "top-2 logit margin below the float rounding threshold, specjax.equality); NO<N> = N prompts "
                     "differ beyond it (a bug)")
    return "\n".join(lines)


def _clean(x):
    """JSON-safe: NaN / inf -> None, numpy scalars -> Python."""
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def write_json(path, results: list[MethodResult], env: dict, config: dict) -> None:
    """{"environment", "config", "results": [MethodResult.to_dict()]} as indented JSON."""
    data = {"environment": env, "config": config, "results": [r.to_dict() for r in results]}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(_clean(data), f, indent=2, allow_nan=False)


def read_json(path) -> tuple[list[MethodResult], dict, dict]:
    """(results, environment, config) from `write_json`'s file."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    return [MethodResult.from_dict(d) for d in data["results"]], data["environment"], data["config"]


_CSV_FIELDS = [f.name for f in dataclasses.fields(MethodResult) if f.name != "per_prompt"]


def write_csv(path, results: list[MethodResult], env: dict) -> None:
    """One row per method: the scalar fields, accept_hist as a JSON list, env values as env_<key>."""
    env_cols = {f"env_{k}": "" if v is None else v for k, v in env.items()}
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=_CSV_FIELDS + list(env_cols))
        writer.writeheader()
        for r in results:
            row = {k: _clean(getattr(r, k)) for k in _CSV_FIELDS}
            row["accept_hist"] = json.dumps(row["accept_hist"])
            writer.writerow({**{k: "" if v is None else v for k, v in row.items()}, **env_cols})


def _parse_cell(kind, text: str):
    if text == "":
        return None
    if isinstance(kind, types.UnionType):  # X | None
        kind = next(a for a in typing.get_args(kind) if a is not type(None))
    if kind is bool:
        return text == "True"
    if typing.get_origin(kind) is list:
        return json.loads(text)
    return kind(text)


def read_csv(path) -> tuple[list[MethodResult], dict]:
    """(results without per_prompt, environment as strings) from `write_csv`'s file (columns added
    since, e.g. batch, take their defaults when an older file lacks them)."""
    hints = typing.get_type_hints(MethodResult)
    with open(path, encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    results = [MethodResult(**{k: _parse_cell(hints[k], row[k]) for k in _CSV_FIELDS if k in row}, per_prompt=[])
               for row in rows]
    env = {k[4:]: v for k, v in rows[0].items() if k.startswith("env_")} if rows else {}
    return results, env
