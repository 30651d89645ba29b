"""The benchmark suite behind `specjax bench`, callable from Python (notebooks) as from the command line.

    from specjax.bench.suite import BenchPlan, bench_models, run_suite
    plan = BenchPlan(methods=("ar", "ddtree-8"), datasets=("wiki", "gsm8k"), num_prompts=6, warmup=1)
    suite = run_suite(plan, bench_models("zoo"))
    suite.summary            # speedup / τ per dataset and their means (several datasets)
    suite.per_dataset["wiki (test)"][1].speedup

`run_suite` measures each dataset in turn on the same loaded models (the paper's protocol,
`specjax.bench.harness.run_benchmark`: compile excluded, warm-up prompts discarded, methods
interleaved per prompt), writes per-dataset JSON / CSV when asked, and can time a round's parts
(`round_split.method_split`) on the first set's first counted prompt. Bad plans raise ValueError
before any model work, naming the field.
"""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Callable

import numpy as np
import pandas as pd

from specjax.bench import harness
from specjax.bench.round_split import DOMINO_PARTS, GRAFT_PARTS, PARTS, method_split
from specjax.data.datasets import DATASETS, dataset_texts
from specjax.drafters.registry import READERS, describe_readers
from specjax.models import pad_prompts
from specjax.models.model import with_layout
from specjax.pipeline import load_pair, model_entry
from specjax.sampling import Sampling

__all__ = ["BenchModels", "BenchPlan", "Suite", "ROUND_SPLIT_REPS", "bench_models", "run_suite"]

ROUND_SPLIT_REPS = 5
ROUND_PARTS = set(PARTS) | set(DOMINO_PARTS) | set(GRAFT_PARTS)  # the splits' millisecond entries


@dataclasses.dataclass(frozen=True)
class BenchPlan:
    """What to measure.

    Fields:
      methods: method specs (`specjax.drafters.registry`), "ar" among them for the speedups.
      datasets: prompt sets of `specjax.data.datasets.DATASETS`, each measured in turn.
      split: the split of wiki / sharegpt / austen.
      prompts: prompt texts instead of the datasets (None: the datasets).
      num_prompts: prompts run, warm-up included.
      warmup: the first prompts run and discarded.
      batch: prompts per generate call.
      max_new_tokens: tokens per prompt.
      prompt_len: each prompt keeps its last prompt_len tokens.
      temperature: 0 greedy, > 0 sampled.
      stop_at_eos: stop rows at the target's EOS.
      ttft: time the first token separately.
      progress: show a progress bar.
      round_split: time each speculative method's round and its parts on the first counted prompt.
      json: per-dataset JSON path (with several datasets, the stem gets ".<dataset>").
      csv: per-dataset CSV path, likewise.
      check_trees: validate every tree the speculative methods propose inside the loop (`specjax.decode.generate`'s
        `check_trees`; the timings include the checks).
    """

    methods: tuple[str, ...]
    datasets: tuple[str, ...] = ("wiki",)
    split: str = "test"
    prompts: tuple[str, ...] | None = None
    num_prompts: int = 10
    warmup: int = 2
    batch: int = 1
    max_new_tokens: int = 128
    prompt_len: int = 64
    temperature: float = 0.0
    stop_at_eos: bool = False
    ttft: bool = True
    progress: bool = True
    round_split: bool = False
    json: str | None = None
    csv: str | None = None
    check_trees: bool = False

    def check(self) -> None:
        """Raise ValueError naming the first bad field (nothing loaded, nothing compiled)."""
        if not self.methods:
            raise ValueError("methods: give at least one method spec")
        unknown = [d for d in self.datasets if d not in DATASETS]
        if unknown or not self.datasets:
            raise ValueError(f"datasets {','.join(self.datasets)!r}: unknown {', '.join(unknown) or 'empty'}; choose "
                             f"from {', '.join(DATASETS)} (several comma-separated)")
        twice = sorted({d for d in self.datasets if self.datasets.count(d) > 1})
        if twice:
            raise ValueError(f"datasets {','.join(self.datasets)!r}: {', '.join(twice)} twice")
        if self.prompts is not None and (len(self.datasets) > 1):
            raise ValueError("prompts replace datasets: give one or the other")
        if self.prompts is not None and any(not isinstance(p, str) or not p.strip() for p in self.prompts):
            raise ValueError("prompts: every prompt must be a non-empty string")
        if self.num_prompts < 1 or not 0 <= self.warmup < self.num_prompts:
            raise ValueError(f"need num_prompts >= 1 and 0 <= warmup < num_prompts, got {self.num_prompts}, "
                             f"{self.warmup}")
        if self.prompt_len < 1:
            raise ValueError(f"prompt_len must be >= 1, got {self.prompt_len}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if not self.temperature >= 0 or self.temperature == float("inf"):
            raise ValueError(f"temperature must be a finite number >= 0, got {self.temperature}")
        harness.check_batches(self.num_prompts, self.warmup, self.batch)


@dataclasses.dataclass(frozen=True)
class BenchModels:
    """The loaded models a suite runs on.

    Fields:
      target: (cfg, params) of the target.
      draft: (cfg, params) of the draft LM, or None.
      readers: {reader kind: (cfg, params) or None} of the trained drafters.
      encode: text -> prompt ids (None: random models, random token prompts).
      target_name: how the tables and the environment name the target.
      draft_name: how they name the draft LM (None: none).
      chat: whether dataset prompts go through the target's chat template.
    """

    target: tuple
    draft: tuple | None
    readers: dict
    encode: Callable[[str], list[int]] | None
    target_name: str
    draft_name: str | None
    chat: bool = False


def bench_models(model: str = "zoo", *, draft: str | None = None, layout: str = "stacked", random: bool = False,
                 self_draft: bool = False, **readers) -> BenchModels:
    """Load a named model or a checkpoint directory with every drafter it has (`specjax.pipeline.load_pair`), or
    random tiny models (`random`); `self_draft` makes the target its own draft LM."""
    if random:
        target, drafted = harness.random_pair()  # both laid out, as `load_pair` lays out a target and its draft LM
        models = BenchModels((target[0], with_layout(target[1], layout)), (drafted[0], with_layout(drafted[1], layout)),
                             dict.fromkeys(READERS), None,
                             "random-neox-6x256", "random-neox-2x64")
    else:
        pair = load_pair(model, ("draft", *READERS), draft=draft, layout=layout, **readers)
        entry = model_entry(model)
        chat = pair.has_chat_template

        def encode(text):
            return pair.encode(text, chat)

        models = BenchModels((pair.cfg, pair.params), pair.draft, {k: pair.readers.get(k) for k in READERS}, encode,
                             entry.display, (entry.draft_display or draft) if pair.draft is not None else None,
                             entry.dataset_chat)
    if self_draft:
        models = dataclasses.replace(models, draft=models.target, draft_name=f"{models.target_name} (self-draft)")
    return models


@dataclasses.dataclass(frozen=True)
class Suite:
    """What `run_suite` measured.

    Fields:
      per_dataset: source label -> `harness.MethodResult`s, one per method.
      configs: source label -> the run's config (as written to JSON).
      environment: the environment dict (`harness.environment`).
      summary: speedup / τ per dataset and their means (None with one dataset).
      round_split: the round split DataFrame (None unless asked).
    """

    per_dataset: dict
    configs: dict
    environment: dict
    summary: pd.DataFrame | None
    round_split: pd.DataFrame | None

    @property
    def ok(self) -> bool:
        """No greedy output differed from AR's beyond a near-tie (`specjax.equality`)."""
        return all(not r.mismatches for results in self.per_dataset.values() for r in results)


def _prompts(plan: BenchPlan, models: BenchModels, dataset: str) -> tuple[list[list[int]], str]:
    """(token lists, where they came from): random tokens for random models, else the plan's texts or `dataset`."""
    if models.encode is None:
        rng = np.random.default_rng(0)
        vocab = models.target[0].vocab_size
        return [rng.integers(0, vocab, plan.prompt_len).tolist() for _ in range(plan.num_prompts)], "random tokens"
    texts = list(plan.prompts) if plan.prompts else dataset_texts(dataset, plan.split, chat=models.chat)
    if len(texts) < plan.num_prompts:
        raise ValueError(f"num_prompts {plan.num_prompts} but only {len(texts)} prompts available in {dataset}")
    split = f" ({plan.split})" if dataset in ("wiki", "sharegpt", "austen") else ""
    return [models.encode(t) for t in texts[: plan.num_prompts]], "--prompt" if plan.prompts else dataset + split


def _per_dataset_path(path: str, dataset: str, several: bool) -> pathlib.Path:
    p = pathlib.Path(path)
    return p if not several else p.with_name(f"{p.stem}.{dataset}{p.suffix}")


def _one(plan: BenchPlan, models: BenchModels, methods, prompts, source, sampling, layout: str, log):
    """`run_benchmark` of `methods` on one prompt set, its header logged; (results, config)."""
    if min(len(p) for p in prompts) < 1:
        raise ValueError("every prompt needs >= 1 token")
    width = min(plan.prompt_len, max(len(p) for p in prompts))
    eos = tuple(models.target[0].eos_token_ids) if plan.stop_at_eos else ()
    results = harness.run_benchmark(models.target, models.draft, prompts, methods, max_new_tokens=plan.max_new_tokens,
                                    prompt_width=width, warmup=plan.warmup, progress=plan.progress, ttft=plan.ttft,
                                    sampling=sampling, batch=plan.batch, eos_ids=eos, check_trees=plan.check_trees)
    config = {"methods": [m.name for m in methods], "prompts": source, "num_prompts": plan.num_prompts,
              "warmup": plan.warmup, "counted_prompts": plan.num_prompts - plan.warmup,
              "max_new_tokens": plan.max_new_tokens, "prompt_width": width,
              "sampling": "greedy" if sampling.greedy else f"temperature {plan.temperature}",
              "eos_ids": list(eos), "batch": plan.batch, "layout": layout}
    counted = len(prompts) - plan.warmup
    log(f"\n{counted} counted prompt{'s' * (counted != 1)} ({source}, {plan.warmup} warm-up discarded), "
        f"{plan.max_new_tokens} new tokens each, prompt width {width}, {config['sampling']}, batch {plan.batch}"
        + (f" ({counted // plan.batch} timed calls per method; row tok/s = a row's tokens / its call's time, "
           f"agg tok/s = all rows' tokens / call time, speedup = agg vs AR's)" if plan.batch > 1 else "")
        + f"; the target's layers {layout}\n")
    return results, config


def round_splits(plan: BenchPlan, models: BenchModels, methods, prompt, results, sampling) -> pd.DataFrame:
    """The round split that explains η = speedup / τ, per speculative method: in the loop a round costs
    τ / speedup = 1 / η AR steps (from the benchmark itself); beside it the round and one AR step timed
    alone from a mid-generation state (`method_split`) and the parts where a split exists, in ms."""
    toks, lens = pad_prompts([prompt[-plan.prompt_len:]])
    rows = []
    for m, r in zip(methods, results):
        if m.is_ar:
            continue
        params = m.params if m.params is not None else models.draft[1]  # None: the draft LM's (`Method.params`)
        split = method_split(models.target, m.drafter, params, toks, lens, reps=ROUND_SPLIT_REPS, sampling=sampling,
                             max_new=plan.max_new_tokens)
        parts = ", ".join(f"{k} {v:.2f}" for k, v in split.items() if k in ROUND_PARTS - {"round", "ar_step"})
        in_loop = None if not r.speedup else round(r.tokens_per_iteration / r.speedup, 2)
        rows.append({"method": m.name, "τ": round(r.tokens_per_iteration, 2),
                     "speedup": r.speedup and round(r.speedup, 2), "η": r.efficiency and round(r.efficiency, 2),
                     "round / AR step (in loop)": in_loop,
                     "round ms": round(split["round"], 2), "AR step ms": round(split["ar_step"], 2),
                     "round / AR step (alone)": round(split["round"] / split["ar_step"], 2),
                     "parts (ms)": parts or "-"})
    return pd.DataFrame(rows).set_index("method")


def run_suite(plan: BenchPlan, models: BenchModels, *, layout: str = "stacked", log=print) -> Suite:
    """Measure `plan` on `models` (module docstring); logs each table as it is measured (log=None: quiet)."""
    log = log or (lambda *_: None)
    plan.check()
    sampling = Sampling(plan.temperature)
    methods = harness.resolve_methods(list(plan.methods), models.draft, target_cfg=models.target[0],
                                      target_params=models.target[1], **models.readers)  # to `parse_method`
    extra = describe_readers(models.readers, {k for m in methods for k in m.needs}) or None
    env = harness.environment(models.target_name, models.draft_name, models.target[1], extra)
    datasets = ("--prompt",) if plan.prompts else plan.datasets
    several = len(datasets) > 1
    per_dataset, configs, split = {}, {}, None
    for dataset in datasets:  # the models load once; each dataset compiles at its own prompt width
        prompts, source = _prompts(plan, models, dataset)
        results, config = _one(plan, models, methods, prompts, source, sampling, layout, log)
        log(harness.format_table(results))
        if plan.json:
            harness.write_json(_per_dataset_path(plan.json, dataset, several), results, env, config)
        if plan.csv:
            harness.write_csv(_per_dataset_path(plan.csv, dataset, several), results, env)
        per_dataset[source], configs[source] = results, config
        if plan.round_split and split is None:  # on the first set's first counted prompt
            log(f"\nwhat a round costs ({source}, its first counted prompt; medians of {ROUND_SPLIT_REPS} "
                f"rounds from a state after 2 rounds; ms):\n")
            split = round_splits(plan, models, methods, prompts[plan.warmup], results, sampling)
            log(split.to_string())
    summary = harness.dataset_summary(per_dataset) if several else None
    if summary is not None:
        log("\nspeedup vs AR / τ (tokens per round) per dataset, and their means over the datasets:\n")
        log(summary.to_string())
    log("\nenvironment: " + ", ".join(f"{k}={v}" for k, v in env.items()))
    return Suite(per_dataset, configs, env, summary, split)
