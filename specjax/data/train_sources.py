"""Training prompts: every train-split prompt the offline assets give, and the evaluation set they must avoid.

A drafter learns the target's answers to *training* prompts (`specjax.train.data`); these are
the sources, each a list of :class:`TrainPrompt` (user messages, fed through the target's chat
template when it has one):

=================  =======  =====================================================================
source             size     the user message
=================  =======  =====================================================================
``sharegpt``       ~15.9k   first user turn of a ShareGPT conversation of the ``train`` split
``wiki``           ~9.0k    "Tell me about <title>." for a Wikipedia opening of the ``train`` split
``math``           4,500    a MATH competition problem: MATH's test set (5,000, seven subjects)
                            *minus* every problem of MATH-500 (its evaluation subset)
``code``           ~2.0k    "Complete this Python function" + an OLMES basic-skills stub
``sharegpt-turns`` ~28.1k   a later user turn (the second on) of a ``train`` ShareGPT conversation, as a
                            message of its own: at least 40 characters, each text once, no first turn
``wiki-tasks``     ~18.1k   two tasks per ``train`` Wikipedia opening: summarise the opening's text, and
                            explain its title to a student
=================  =======  =====================================================================

The last two are *follow-on* sources (`FOLLOW_ON`): a weighted order (:func:`training_prompts`) runs
through its own sources first, exactly as it did before they existed, and only when all of those are
exhausted goes on, in the same seeded draw, through their follow-ons at the same weights. So a data
directory made before them keeps its prompt order and cursor, and continues with new prompts: ~28.7k
distinct prompts in the first phase, ~75k in all.

Nothing here is an evaluation prompt: :func:`evaluation_texts` lists every prompt specjax
evaluates on (GSM8K, MATH-500, HumanEval, MBPP, MT-Bench both turns, and the ``valid`` /
``test`` splits of ShareGPT and Wikipedia), normalised, and :func:`training_prompts` drops any
training prompt whose normalised text equals one of them or contains a benchmark prompt
(tested over the committed data shards in ``tests/test_train_data.py``).
"""

from __future__ import annotations

import bisect
import functools
import gzip
import hashlib
import json
import os
import pathlib
from dataclasses import dataclass
from typing import Iterable

import numpy as np

from specjax.data.assets import fetch
from specjax.data.prompts import (gsm8k_prompts, humaneval_prompts, math500_prompts, mbpp_prompts, mtbench_prompts,
                                  normalise, read_jsonl, sharegpt_conversations, sharegpt_prompts, wiki_articles,
                                  wiki_prompts)

__all__ = ["TrainPrompt", "SOURCES", "FOLLOW_ON", "DEFAULT_WEIGHTS", "source_prompts", "training_prompts",
           "write_prompt_order",
           "read_prompt_order", "evaluation_texts",
           "is_evaluation_text"]

MATH_SUBJECTS = ("algebra", "counting_and_probability", "geometry", "intermediate_algebra", "number_theory",
                 "prealgebra", "precalculus")


@dataclass(frozen=True)
class TrainPrompt:
    """One training prompt.

    Fields:
      source: the source it comes from (a key of SOURCES).
      key: its document id in that source (title, conversation id, subject/index, stub id).
      text: the user message.
    """

    source: str
    key: str
    text: str


def _sharegpt() -> list[TrainPrompt]:
    return [TrainPrompt("sharegpt", p.id, p.prompt) for p in sharegpt_prompts("train")]


def _wiki() -> list[TrainPrompt]:
    return [TrainPrompt("wiki", a["title"], f"Tell me about {a['title']}.") for a in wiki_articles()
            if a["split"] == "train"]


def _math() -> list[TrainPrompt]:
    held_out = {normalise(p.prompt) for p in math500_prompts()}
    out = []
    for subject in MATH_SUBJECTS:
        for r in read_jsonl(fetch(f"math_{subject}")):
            problem = r["doc"]["problem"]
            if normalise(problem) not in held_out:
                out.append(TrainPrompt("math", f"{subject}/{r['doc']['index']}", problem))
    return out


def _code() -> list[TrainPrompt]:
    seen, out = set(), []
    for r in read_jsonl(fetch("basic_skills_coding")):
        doc = r["doc"]
        if doc["id"] in seen:  # one request per answer choice: keep the stub once
            continue
        seen.add(doc["id"])
        out.append(TrainPrompt("code", str(doc["id"]), "Complete this Python function:\n\n```python\n"
                               f"{doc['question'].rstrip()}\n```"))
    return out


def _sharegpt_turns() -> list[TrainPrompt]:
    firsts = {normalise(p.text) for p in _sharegpt()}
    seen, out = set(firsts), []
    for c in sharegpt_conversations("train"):
        users = [t for role, t in c["turns"] if role == "user"]
        for i, text in enumerate(users[1:], start=1):
            key = normalise(text)
            if len(text.strip()) >= MIN_TURN_CHARS and key not in seen:
                seen.add(key)
                out.append(TrainPrompt("sharegpt-turns", f"{c['id']}/{i}", text))
    return out


def _wiki_tasks() -> list[TrainPrompt]:
    out = []
    for a in wiki_articles():
        if a["split"] == "train":
            out.append(TrainPrompt("wiki-tasks", f"{a['title']}/summary",
                                   f"Summarize this passage in two sentences:\n\n{a['text']}"))
            out.append(TrainPrompt("wiki-tasks", f"{a['title']}/explain",
                                   f"Explain what {a['title']} is to a curious high-school student."))
    return out


MIN_TURN_CHARS = 40  # a later turn shorter than this is mostly "continue" / "thanks": no prompt of its own
SOURCES = {"sharegpt": _sharegpt, "wiki": _wiki, "math": _math, "code": _code,
           "sharegpt-turns": _sharegpt_turns, "wiki-tasks": _wiki_tasks}
# source -> the sources that follow it once every source of an order is exhausted (module docstring)
FOLLOW_ON = {"sharegpt": ("sharegpt-turns",), "wiki": ("wiki-tasks",)}
# Mixture weights [choice]: four of the six evaluation sets are math or code, so they get more
# than their share of the pool; a source that runs out drops out of the draw.
DEFAULT_WEIGHTS = {"sharegpt": 0.4, "math": 0.3, "wiki": 0.15, "code": 0.15}


@functools.lru_cache(maxsize=None)
def source_prompts(source: str) -> tuple[TrainPrompt, ...]:
    """All prompts of one source, evaluation texts removed (see module doc)."""
    if source not in SOURCES:
        raise ValueError(f"unknown training source {source!r}; choose from {sorted(SOURCES)}")
    return tuple(p for p in SOURCES[source]() if not is_evaluation_text(p.text))


def training_prompts(weights: dict[str, float] | None = None, seed: int = 0,
                     follow_on: bool = True) -> list[TrainPrompt]:
    """Every prompt of the weighted sources in one seeded order: each position draws a source with
    probability proportional to its weight (among those not yet exhausted) and takes that source's
    next prompt of a seeded shuffle. Then, with `follow_on`, the same for the follow-on sources of the
    weighted ones (`FOLLOW_ON`, each at the weight of the source it follows; those already weighted are
    not drawn twice), the generator continuing: the first phase is the order without them, unchanged.
    A pure function of (weights, seed, follow_on, the assets)."""
    weights = dict(DEFAULT_WEIGHTS if weights is None else weights)
    rng = np.random.default_rng(seed)
    order = _weighted_order(weights, rng)
    if follow_on:
        after = {f: w for name, w in sorted(weights.items()) for f in FOLLOW_ON.get(name, ()) if f not in weights}
        order += _weighted_order(after, rng)
    return order


def _weighted_order(weights: dict[str, float], rng) -> list[TrainPrompt]:
    """Each source's prompts in a seeded shuffle (`rng.permutation`, in name order), then one position per
    prompt, each drawing a live source (not exhausted, weight > 0) by one uniform against the live sources'
    weight CDF: what `rng.choice(len(live), p=p / p.sum())` drew at every position (one `rng.random()` each,
    `searchsorted(cdf, u, side="right")`), the uniforms drawn at once and the CDF rebuilt only when a source
    runs out (tests/test_train_data.py checks the order against that loop; the default order's 75k positions: 0.9 s -> 0.03 s)."""
    queues = {}
    for name in sorted(weights):
        items = list(source_prompts(name))
        queues[name] = [items[i] for i in rng.permutation(len(items))]
    heads = {name: 0 for name in queues}
    uniforms = rng.random(sum(len(q) for n, q in queues.items() if weights[n] > 0)).tolist()
    order, live, cdf = [], None, None
    for u in uniforms:
        if live is None:
            live = [n for n in sorted(queues) if heads[n] < len(queues[n]) and weights[n] > 0]
            p = np.array([weights[n] for n in live], float)
            cdf = (p / p.sum()).cumsum()
            cdf = (cdf / cdf[-1]).tolist()
        name = live[bisect.bisect_right(cdf, u)]
        order.append(queues[name][heads[name]])
        heads[name] += 1
        if heads[name] == len(queues[name]):
            live = None
    return order


_WINDOW = 8  # words: a training prompt that holds a benchmark prompt's first 8 words is dropped


@functools.lru_cache(maxsize=None)
def _evaluation() -> tuple[frozenset, frozenset]:
    benchmarks = [p.prompt for f in (gsm8k_prompts, math500_prompts, humaneval_prompts, mbpp_prompts)
                  for p in f()]
    benchmarks += [t for p in mtbench_prompts() for t in p.turns]
    held_out = [p.prompt for split in ("valid", "test") for f in (sharegpt_prompts, wiki_prompts) for p in f(split)]
    exact = frozenset(normalise(t) for t in benchmarks + held_out)
    # A benchmark prompt pasted inside a longer training prompt (a GSM8K question in a ShareGPT
    # turn) is caught by its first words; held-out ShareGPT / wiki openings are matched exactly.
    openings = frozenset(tuple(w[:_WINDOW]) for w in (normalise(t).split() for t in benchmarks)
                         if len(w) >= _WINDOW)
    return exact, openings


def evaluation_texts() -> frozenset:
    """Normalised (whitespace-collapsed, casefolded) text of every evaluation prompt."""
    return _evaluation()[0]


def is_evaluation_text(text: str) -> bool:
    """True iff `text` is an evaluation prompt, or holds the first 8 words of a benchmark prompt (normalised)."""
    exact, openings = _evaluation()
    norm = normalise(text)
    if norm in exact:
        return True
    words = norm.split()
    return any(tuple(words[i:i + _WINDOW]) in openings for i in range(len(words) - _WINDOW + 1))


ORDER_FORMAT = "specjax-prompt-order/1"


def write_prompt_order(path, weights: dict[str, float], seed: int, start: int = 0) -> int:
    """Write `training_prompts(weights, seed)[start:]` to `path` (gzip-compressed JSON lines when it ends
    in .gz) behind a header line naming (format, weights, seed, start, count, sha256 of the prompt lines):
    the prompt order of a machine without the package registry (a GPU node), read back by
    `read_prompt_order`. Returns the number of prompts written."""
    order = training_prompts(weights, seed)[start:]
    body = dump_prompts(order)
    header = {"format": ORDER_FORMAT, "weights": dict(sorted(weights.items())), "seed": seed, "start": start,
              "count": len(order), "sha256": hashlib.sha256(body.encode()).hexdigest()}
    text = json.dumps(header) + "\n" + body
    data = gzip.compress(text.encode(), mtime=0) if str(path).endswith(".gz") else text.encode()
    tmp = pathlib.Path(str(path) + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
    return len(order)


def read_prompt_order(path, weights: dict[str, float], seed: int) -> list[TrainPrompt | None]:
    """The prompt order written by `write_prompt_order`, as a list indexed like `training_prompts`
    (None before the file's start). Refuses a file of another (weights, seed) or whose prompts do not
    match its header's sha256, naming the file."""
    raw = pathlib.Path(path).read_bytes()
    text = (gzip.decompress(raw) if str(path).endswith(".gz") else raw).decode()
    first, _, body = text.partition("\n")
    try:
        header = json.loads(first)
    except json.JSONDecodeError:
        header = None
    if not isinstance(header, dict) or header.get("format") != ORDER_FORMAT:
        raise ValueError(f"{path}: not a prompt-order file (its first line must be a {ORDER_FORMAT} header)")
    want = {"weights": dict(sorted(weights.items())), "seed": seed}
    have = {"weights": header["weights"], "seed": header["seed"]}
    if have != want:
        raise ValueError(f"{path} holds the order of {have}, not of this recipe's {want}")
    if hashlib.sha256(body.encode()).hexdigest() != header["sha256"]:
        raise ValueError(f"{path}: its prompts do not match the sha256 in its header (truncated or edited)")
    prompts = [TrainPrompt(**json.loads(line)) for line in body.split("\n") if line]
    if len(prompts) != header["count"]:
        raise ValueError(f"{path}: {len(prompts)} prompts, its header says {header['count']}")
    return [None] * header["start"] + prompts


def dump_prompts(prompts: Iterable[TrainPrompt]) -> str:
    """JSON lines of prompts (what a data shard records next to its tokens). Split the text on "\n" only:
    a prompt may hold U+2028 and other characters that `str.splitlines` also treats as line breaks."""
    return "".join(json.dumps({"source": p.source, "key": p.key, "text": p.text}, ensure_ascii=False) + "\n"
                   for p in prompts)
