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
from specjax.bench.round_split import method_split, split_of
from specjax.data.datasets import DATASETS, dataset_texts
from specjax.drafters.registry import READERS, describe_readers, parse, split_methods
from specjax.drafters.spec import Parsed
from specjax.models import pad_prompts
from specjax.models.model import with_layout
from specjax.pipeline import load_pair, model_entry
from specjax.sampling import Sampling

__all__ = ["BenchModels", "BenchPlan", "Suite", "ROUND_SPLIT_REPS", "bench_models", "prompt_sets", "run_suite"]

ROUND_SPLIT_REPS = 5


@dataclasses.dataclass(frozen=True)
class BenchPlan:
    """What to measure (`specjax bench`'s flags are made from these fields: `specjax.cli.plans`).

    Fields:
      methods: method specs (`specjax.drafters.registry`), "ar" among them for the speedups; on the command line
        comma-separated, a method's own overrides continuing after it (ar,ddtree-8:ret=4,prune=0); by default the
        paper's Table 1 rows.
      datasets: prompt sets of `specjax.data.datasets.DATASETS`, each measured in turn on the same loaded models (a
        table each, then speedup / τ per dataset and their means); several comma-separated.
      split: the split of wiki / sharegpt / austen (test: held out from training).
      prompts: prompt texts instead of the datasets (None: the datasets); the flag is repeatable.
      num_prompts: prompts run, warm-up included (the command line's default: 10, or the number of --prompt texts).
      warmup: the first prompts run and discarded.
      batch: prompts per generate call; num_prompts and warmup must be multiples of it.
      max_new_tokens: tokens per prompt.
      prompt_len: each prompt keeps its last prompt_len tokens; all are padded to one width.
      temperature: 0 greedy, > 0 sampled.
      stop_at_eos: stop rows at the target's EOS (default: never).
      ttft: time the first token separately (its calls compile too).
      progress: show a progress bar.
      round_split: after the (first) prompt set, time each speculative method's round and its parts against an AR
        step (`specjax.bench.round_split.method_split`): what explains η.
      json: write environment, config and results (per prompt too) here (with several datasets, the stem gets
        ".<dataset>").
      csv: write one row per method here, likewise.
      check_trees: validate every tree the speculative methods propose inside the loop (specjax.tree's rules): a
        broken one stops the run naming its row, round, node and rule; the timings include the checks. None: for
        the methods from outside specjax only (`specjax.decode.from_outside`).
    """

    methods: tuple[str, ...] = dataclasses.field(
        default=("ar", "fixed5x2", "dynatree-p1", "dynatree-p2", "dynatree-p3"), metadata={"parse": split_methods})
    datasets: tuple[str, ...] = dataclasses.field(default=("wiki",), metadata={"flag": "dataset"})
    split: str = dataclasses.field(default="test", metadata={"choices": ("train", "valid", "test")})
    prompts: tuple[str, ...] | None = dataclasses.field(default=None, metadata={"flag": "prompt", "repeat": True})
    num_prompts: int = dataclasses.field(default=10, metadata={"flag": "prompts"})
    warmup: int = 2
    batch: int = 1
    max_new_tokens: int = dataclasses.field(default=128, metadata={"at_least": 1})
    prompt_len: int = dataclasses.field(default=64, metadata={"at_least": 1})
    temperature: float = 0.0
    stop_at_eos: bool = False
    ttft: bool = True
    progress: bool = True
    round_split: bool = False
    json: str | None = None
    csv: str | None = None
    check_trees: bool | None = None

    def check(self) -> tuple[Parsed, ...]:
        """Raise ValueError naming the first bad field (nothing loaded, nothing compiled); returns the methods as
        read (`specjax.drafters.registry.parse`: each string is read here, once, and the parsed methods travel
        on: `run_suite(..., parsed=)`)."""
        if not self.methods:
            raise ValueError("methods: give at least one method spec")
        parsed = tuple(parse(m) for m in self.methods)
        unknown = [d for d in self.datasets if d not in DATASETS]
        if unknown or not self.datasets:
            raise ValueError(f"datasets {','.join(self.datasets)!r}: unknown {', '.join(unknown) or 'empty'}; choose "
                             f"from {', '.join(DATASETS)} (several comma-separated)")
        twice = sorted({d for d in self.datasets if self.datasets.count(d) > 1})
        if twice:
            raise ValueError(f"datasets {','.join(self.datasets)!r}: {', '.join(twice)} twice")
        if self.prompts is not None and (len(self.datasets) > 1):
            raise ValueError("prompts replaces `datasets`: give one or the other")
        if self.prompts is not None and any(not isinstance(p, str) or not p.strip() for p in self.prompts):
            raise ValueError("prompts is empty: give the text to continue (every prompt a non-empty string)")
        if self.num_prompts < 1 or not 0 <= self.warmup < self.num_prompts:
            raise ValueError(f"need `num_prompts` >= 1 and 0 <= `warmup` < `num_prompts`, got {self.num_prompts}, "
                             f"{self.warmup}")
        for f in dataclasses.fields(self):  # the lower bounds the fields declare
            if "at_least" in f.metadata and getattr(self, f.name) < f.metadata["at_least"]:
                raise ValueError(f"{f.name} must be >= {f.metadata['at_least']}, got {getattr(self, f.name)}")
        if not self.temperature >= 0 or self.temperature == float("inf"):
            raise ValueError(f"temperature must be a finite number >= 0 (0 = greedy), got {self.temperature}")
        try:
            harness.check_batches(self.num_prompts, self.warmup, self.batch)
        except ValueError as e:
            raise ValueError(f"batch {self.batch} with `num_prompts` {self.num_prompts} `warmup` {self.warmup}: "
                             f"{e}") from None
        if self.check_trees and all(p.spec.name == "ar" for p in parsed):
            raise ValueError(f"check_trees checks the trees speculative methods propose; `methods` "
                             f"{','.join(self.methods)!r} proposes none: drop it or add a speculative method")
        return parsed


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
                 self_draft: bool = False, needs: tuple[str, ...] | None = None, **readers) -> BenchModels:
    """Load a named model or a checkpoint directory with every drafter it has (`specjax.pipeline.load_pair`), or
    only those of `needs` ("draft" and reader kinds: what the methods draft with), or random tiny models
    (`random`); `self_draft` makes the target its own draft LM."""
    if random:
        target, drafted = harness.random_pair()  # both laid out, as `load_pair` lays out a target and its draft LM
        models = BenchModels((target[0], with_layout(target[1], layout)), (drafted[0], with_layout(drafted[1], layout)),
                             dict.fromkeys(READERS), None,
                             "random-neox-6x256", "random-neox-2x64")
    else:
        pair = load_pair(model, ("draft", *READERS) if needs is None else needs, draft=draft, layout=layout, **readers)
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


def prompt_sets(plan: BenchPlan, models: BenchModels) -> list[tuple[list[list[int]], str]]:
    """(token lists, where they came from) of each prompt set `plan` measures, in order: random tokens for random
    models, else the plan's texts or each dataset's. Raises ValueError naming the field, before anything compiles,
    when a set holds fewer than num_prompts prompts, or when the padded prompt width (min(prompt_len, the
    longest prompt), as `run_suite` pads) + max_new_tokens exceeds the target's positions."""
    sets = []
    for dataset in ("--prompt",) if plan.prompts else plan.datasets:
        if models.encode is None:
            rng = np.random.default_rng(0)
            vocab = models.target[0].vocab_size
            prompts = [rng.integers(0, vocab, plan.prompt_len).tolist() for _ in range(plan.num_prompts)]
            sets.append((prompts, "random tokens"))
            continue
        texts = list(plan.prompts) if plan.prompts else dataset_texts(dataset, plan.split, chat=models.chat)
        if len(texts) < plan.num_prompts:
            raise ValueError(f"num_prompts {plan.num_prompts}: {dataset} has {len(texts)} "
                             f"prompt{'s' * (len(texts) != 1)}; ask for at most {len(texts)}")
        split = f" ({plan.split})" if dataset in ("wiki", "sharegpt", "austen") else ""
        sets.append(([models.encode(t) for t in texts[: plan.num_prompts]], "--prompt" if plan.prompts else
                     dataset + split))
    limit = getattr(models.target[0], "max_position_embeddings", None)
    for prompts, source in sets:
        width = min(plan.prompt_len, max(len(p) for p in prompts))
        if limit is None or width + plan.max_new_tokens <= limit:
            continue
        where = source.split(" (")[0]
        if width >= limit:  # width <= prompt_len: a smaller one cuts every prompt
            raise ValueError(f"prompt_len {plan.prompt_len}: prompts {width} tokens wide ({where}) leave no room for a "
                             f"new token in {models.target_name}'s {limit} positions (max_position_embeddings): give "
                             f"`prompt_len` < {limit}")
        raise ValueError(f"max_new_tokens {plan.max_new_tokens}: prompts {width} tokens wide ({where}) + "
                         f"{plan.max_new_tokens} new = {width + plan.max_new_tokens} positions exceed "
                         f"{models.target_name}'s {limit} (max_position_embeddings): give `max_new_tokens` <= "
                         f"{limit - width}" + (" or a smaller `prompt_len`" if width == plan.prompt_len else ""))
    return sets


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
        parts = ", ".join(f"{k} {split[k]:.2f}" for k in split_of(m.drafter).parts if k not in ("round", "ar_step"))
        in_loop = None if not r.speedup else round(r.tokens_per_iteration / r.speedup, 2)
        rows.append({"method": m.name, "τ": round(r.tokens_per_iteration, 2),
                     "speedup": r.speedup and round(r.speedup, 2), "η": r.efficiency and round(r.efficiency, 2),
                     "round / AR step (in loop)": in_loop,
                     "round ms": round(split["round"], 2), "AR step ms": round(split["ar_step"], 2),
                     "round / AR step (alone)": round(split["round"] / split["ar_step"], 2),
                     "parts (ms)": parts or "-"})
    return pd.DataFrame(rows).set_index("method")


def run_suite(plan: BenchPlan, models: BenchModels, *, layout: str = "stacked", log=print,
              parsed: tuple[Parsed, ...] | None = None) -> Suite:
    """Measure `plan` on `models` (module docstring); logs each table as it is measured (log=None: quiet).
    parsed: the methods as `plan.check()` returned them (None: the plan is checked here)."""
    log = log or (lambda *_: None)
    parsed = plan.check() if parsed is None else parsed
    sets = prompt_sets(plan, models)  # every set read and its fit checked before anything compiles
    sampling = Sampling(plan.temperature)
    methods = harness.resolve_methods(list(parsed), models.draft, target_cfg=models.target[0],
                                      target_params=models.target[1], **models.readers)  # to `parse_method`
    extra = describe_readers(models.readers, {k for m in methods for k in m.needs}) or None
    env = harness.environment(models.target_name, models.draft_name, models.target[1], extra)
    datasets = ("--prompt",) if plan.prompts else plan.datasets
    several = len(datasets) > 1
    per_dataset, configs, split = {}, {}, None
    for dataset, (prompts, source) in zip(datasets, sets):  # the models load once; each set compiles at its width
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
