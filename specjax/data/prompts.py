"""Prompt sets for the benchmarks and text corpora for training, read from the offline assets.

One function per benchmark returns a list of :class:`Prompt` records:

=====================  ============  ======================================================
function               size          prompt / reference / answer
=====================  ============  ======================================================
``wiki_prompts``       ~5% of 10,033 first sentence of an article opening / the rest / -
``sharegpt_prompts``   ~5% of 17.6k  first user turn / the assistant's reply / -
``humaneval_prompts``  164           function signature+docstring / canonical body / -
``gsm8k_prompts``      1,319         question / worked solution / final number
``math500_prompts``    500           problem / solution / last ``\\boxed{}`` of the solution
``mbpp_prompts``       500           task text + one assert / reference code / -
``mtbench_prompts``    80            first turn (``turns`` has both) / reference, if any / -
=====================  ============  ======================================================

``completion_prompt`` is the form for a base (non-chat) model where the benchmark has one:
OLMES's 8-shot (GSM8K) and 4-shot Minerva (MATH-500) contexts, its evalplus-style MBPP
prompt, and the code prompt itself for HumanEval.

Training text comes from ``wiki_corpus(split)`` and ``sharegpt_corpus(split)`` only.

Split rule (deterministic, documented, tested): a record's split is decided by the key
``k`` of its source document (the article title for Wikipedia; for ShareGPT the
conversation id without its ``_<n>`` part suffix, so all parts of one conversation share
a split) as ``u = int(sha256(f"{dataset}\\0{k}")[:8]) / 2**64``: ``train`` if u < 0.90,
``valid`` if u < 0.95, else ``test``. In addition, ``sharegpt_prompts("valid"|"test")``
drops prompts whose whitespace/case-normalised text is also the first user turn of a
train conversation (ShareGPT repeats popular prompts), and de-duplicates within the split.
The benchmark sets (HumanEval, GSM8K, MATH-500, MBPP, MT-Bench) are evaluation-only:
nothing in specjax trains on them, so they have no split argument.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import json
import pathlib
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from specjax.data.assets import MANIFEST, AssetError, fetch

__all__ = [
    "Prompt",
    "SPLITS",
    "SPLIT_FRACTIONS",
    "split_of",
    "wiki_articles",
    "wiki_prompts",
    "wiki_corpus",
    "sharegpt_conversations",
    "sharegpt_prompts",
    "sharegpt_corpus",
    "humaneval_prompts",
    "gsm8k_prompts",
    "math500_prompts",
    "mbpp_prompts",
    "mtbench_prompts",
    "last_boxed",
    "parse_truncated_json_array",
    "sharegpt_num_entries",
    "prompt_texts",
]

SPLITS = ("train", "valid", "test")
SPLIT_FRACTIONS = {"train": 0.90, "valid": 0.05, "test": 0.05}


@dataclass(frozen=True)
class Prompt:
    """One benchmark item (what each benchmark puts in each field: module docstring table).

    Fields:
      id: the source's identifier, as a string (article title, conversation id, task id, ...).
      prompt: the prompt text (article's first sentence, first user turn, question, signature + docstring, ...).
      reference: reference continuation / solution / reply; None where the benchmark has none.
      answer: short final answer, where the benchmark grades one (GSM8K, MATH-500); else None.
      completion_prompt: base-model form (few-shot context or completion prompt), if any; else None
        (callers then fall back to `prompt`).
      turns: all user turns for multi-turn sets (ShareGPT, MT-Bench; prompt == turns[0]); () otherwise.
      meta: benchmark-specific extras (tests, category, level, ...); not compared by ==.
    """

    id: str
    prompt: str
    reference: str | None = None
    answer: str | None = None
    completion_prompt: str | None = None
    turns: tuple[str, ...] = ()
    meta: Mapping[str, Any] = field(default_factory=dict, compare=False)


# --------------------------------------------------------------------------- splits


def split_of(key: str, dataset: str) -> str:
    """Deterministic ``train``/``valid``/``test`` assignment of a document key (see module doc)."""
    u = int.from_bytes(hashlib.sha256(f"{dataset}\0{key}".encode("utf-8")).digest()[:8], "big") / 2.0**64
    if u < SPLIT_FRACTIONS["train"]:
        return "train"
    if u < SPLIT_FRACTIONS["train"] + SPLIT_FRACTIONS["valid"]:
        return "valid"
    return "test"


def check_split(split: str) -> None:
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")


def normalise(text: str) -> str:
    return " ".join(text.split()).casefold()


# --------------------------------------------------------------------------- Wikipedia

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])")
_MIN_PROMPT_CHARS = 40  # skip early breaks after abbreviations ("St. Louis", "U.S. Army")


@functools.lru_cache(maxsize=4)
def _wiki(path: pathlib.Path) -> tuple[dict[str, Any], ...]:
    data = json.loads(path.read_text(encoding="utf-8"))
    out = []
    for key, rec in data.items():
        text = (rec.get("extract") or "").strip()
        if text:
            out.append({"title": rec.get("title") or key, "text": text,
                        "description": rec.get("description"), "topic": rec.get("topic")})
    return tuple(out)


def wiki_articles() -> list[dict[str, Any]]:
    """All article openings: dicts with ``title``, ``text``, ``description``, ``topic``, ``split``."""
    return [dict(a, split=split_of(a["title"], "wiki")) for a in _wiki(fetch("wiki_en"))]


_ABBREV = re.compile(r"(?:\b(?:[A-Z]\.)+|\b(?:St|Mt|Mr|Mrs|Ms|Dr|Jr|Sr|Inc|Co|Ltd|Bros|vs|ca|c|No|Gen|Col|Lt|Sgt|Rev|Prof)\.)$")


def _first_sentence(text: str) -> tuple[str, str]:
    for m in _SENTENCE_END.finditer(text):
        if m.start() >= _MIN_PROMPT_CHARS and not _ABBREV.search(text, 0, m.start()):
            return text[: m.start()], text[m.end():]
    return text, ""


def wiki_prompts(split: str = "test") -> list[Prompt]:
    """Article openings of ``split``: prompt = first sentence, reference = the rest of the opening."""
    check_split(split)
    out = []
    for a in wiki_articles():
        if a["split"] == split:
            head, rest = _first_sentence(a["text"])
            out.append(Prompt(id=a["title"], prompt=head, reference=rest,
                              meta={"title": a["title"], "topic": a["topic"], "description": a["description"]}))
    return out


def wiki_corpus(split: str = "train") -> list[str]:
    """Full article openings of ``split`` as plain text (one string per article)."""
    check_split(split)
    return [a["text"] for a in wiki_articles() if a["split"] == split]


# --------------------------------------------------------------------------- ShareGPT

_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "chatgpt": "assistant",
          "bing": "assistant", "bard": "assistant", "system": "system"}


def parse_truncated_json_array(text: str) -> tuple[list[Any], bool]:
    """Parse the complete elements of a JSON array whose end may be cut off.

    Returns ``(elements, complete)``; ``complete`` is False when the text stopped inside
    an element (that element is dropped) or before the closing bracket.
    """
    decoder = json.JSONDecoder()
    skip = re.compile(r"[\s,]*")
    i = skip.match(text).end()
    if text[i:i + 1] != "[":
        raise ValueError("not a JSON array")
    i += 1
    out = []
    n = len(text)
    while True:
        i = skip.match(text, i).end()
        if i >= n:
            return out, False
        if text[i] == "]":
            return out, True
        try:
            obj, i = decoder.raw_decode(text, i)
        except json.JSONDecodeError:
            return out, False
        out.append(obj)


@functools.lru_cache(maxsize=2)
def _sharegpt(path: pathlib.Path) -> tuple[dict[str, Any], ...]:
    # The carrier's file is cut mid-way through an element (and possibly mid-UTF-8
    # character): decode leniently, keep only complete elements.
    items, _ = parse_truncated_json_array(path.read_bytes().decode("utf-8", errors="replace"))
    out = []
    for it in items:
        turns = tuple((_ROLES.get(t.get("from"), t.get("from")), t.get("value") or "")
                      for t in it.get("conversations") or ())
        turns = tuple(t for t in turns if t[1].strip())
        out.append({"id": it["id"], "turns": turns})
    return tuple(out)


def sharegpt_num_entries() -> int:
    """Number of complete entries recovered from the truncated ShareGPT file (empty ones included)."""
    return len(_sharegpt(fetch("sharegpt")))


def _sharegpt_key(conv_id: str) -> str:
    base, sep, part = conv_id.rpartition("_")
    return base if sep and part.isdigit() else conv_id


def sharegpt_conversations(split: str = "train") -> list[dict[str, Any]]:
    """Non-empty conversations of ``split``: dicts ``{"id", "turns": ((role, text), ...)}``.

    Roles are normalised to ``user``/``assistant``/``system``.
    """
    check_split(split)
    return [c for c in _sharegpt(fetch("sharegpt"))
            if c["turns"] and split_of(_sharegpt_key(c["id"]), "sharegpt") == split]


def _first_user_turn(turns) -> tuple[str | None, str | None]:
    for j, (role, text) in enumerate(turns):
        if role == "user":
            reply = next((t for r, t in turns[j + 1:] if r == "assistant"), None)
            return text, reply
    return None, None


def sharegpt_prompts(split: str = "test") -> list[Prompt]:
    """First user turn of each conversation of ``split`` (reference = the assistant's reply).

    ``valid``/``test`` exclude prompts that also open a train conversation (see module doc).
    """
    check_split(split)
    banned: set[str] = set()
    if split != "train":
        banned = {normalise(p) for c in sharegpt_conversations("train")
                  if (p := _first_user_turn(c["turns"])[0]) is not None}
    out, seen = [], set()
    for c in sharegpt_conversations(split):
        prompt, reply = _first_user_turn(c["turns"])
        if prompt is None:
            continue
        key = normalise(prompt)
        if key in banned or key in seen:
            continue
        seen.add(key)
        user_turns = tuple(t for r, t in c["turns"] if r == "user")
        out.append(Prompt(id=c["id"], prompt=prompt, reference=reply, turns=user_turns))
    return out


def sharegpt_corpus(split: str = "train") -> list[str]:
    """Conversations of ``split`` rendered as text: turns ``"User: ..."``/``"Assistant: ..."``
    joined by blank lines (use :func:`sharegpt_conversations` to apply a chat template instead)."""
    label = {"user": "User", "assistant": "Assistant", "system": "System"}
    return ["\n\n".join(f"{label.get(r, r)}: {t}" for r, t in c["turns"]) for c in sharegpt_conversations(split)]


# --------------------------------------------------------------------------- code & math benchmarks


def read_jsonl(path: pathlib.Path) -> list[dict[str, Any]]:
    raw = path.read_bytes()
    if path.suffix == ".gz":
        raw = gzip.decompress(raw)
    return [json.loads(line) for line in raw.decode("utf-8").splitlines() if line.strip()]


def _expect(name: str, records: list, n: int) -> list:
    if len(records) != n:
        a = MANIFEST[name]
        raise AssetError(f"{a.describe()}: expected {n} records, found {len(records)}")
    return records


@functools.lru_cache(maxsize=None)
def _humaneval(path: pathlib.Path) -> tuple[Prompt, ...]:
    return tuple(
        Prompt(id=d["task_id"], prompt=d["prompt"], reference=d["canonical_solution"], completion_prompt=d["prompt"],
               meta={"entry_point": d["entry_point"], "test": d["test"]})
        for d in read_jsonl(path)
    )


def humaneval_prompts() -> list[Prompt]:
    """HumanEval (164): prompt = signature + docstring, reference = canonical body, meta: entry_point, test."""
    return _expect("humaneval", list(_humaneval(fetch("humaneval"))), 164)


@functools.lru_cache(maxsize=None)
def _gsm8k(path: pathlib.Path) -> tuple[Prompt, ...]:
    return tuple(
        Prompt(id=str(r["doc"]["id"]), prompt=r["doc"]["question"], reference=r["doc"]["answer"],
               answer=r["doc"]["short_answer"], completion_prompt=r["request"]["context"])
        for r in read_jsonl(path)
    )


def gsm8k_prompts() -> list[Prompt]:
    """GSM8K test (1,319): question, worked solution (with ``<<calc>>`` notes), final numeric answer."""
    return _expect("gsm8k", list(_gsm8k(fetch("gsm8k"))), 1319)


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (or ``\\fbox{...}``) in ``text``, braces balanced."""
    i = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if i < 0:
        return None
    j = text.find("{", i)
    if j < 0:
        return None
    depth = 0
    for k in range(j, len(text)):
        if text[k] == "{":
            depth += 1
        elif text[k] == "}":
            depth -= 1
            if depth == 0:
                return text[j + 1:k]
    return None


@functools.lru_cache(maxsize=None)
def _math500(path: pathlib.Path) -> tuple[Prompt, ...]:
    out = []
    for r in read_jsonl(path):
        d = r["doc"]
        out.append(Prompt(id=str(d["index"]), prompt=d["problem"], reference=d["solution"],
                          answer=last_boxed(d["solution"]) or d["answer"], completion_prompt=r["request"]["context"],
                          meta={"level": d["level"], "olmes_answer": d["answer"]}))
    return tuple(out)


def math500_prompts() -> list[Prompt]:
    """MATH-500 (500): problem, solution, answer = last ``\\boxed{}`` of the solution, meta: level."""
    return _expect("math500", list(_math500(fetch("math500"))), 500)


_FENCED = re.compile(r"```\n(.*?)\n```", re.S)


@functools.lru_cache(maxsize=None)
def _mbpp(path: pathlib.Path) -> tuple[Prompt, ...]:
    out = []
    for r in read_jsonl(path):
        d, ctx = r["doc"], r["request"]["context"]
        m = _FENCED.search(ctx)
        if m is None:
            raise AssetError(f"{MANIFEST['mbpp'].describe()}: task {d['task_id']} has no fenced problem statement")
        out.append(Prompt(id=str(d["task_id"]), prompt=m.group(1), reference=d["code"], completion_prompt=ctx,
                          meta={"text": d["text"], "test_list": tuple(d["test_list"]),
                                "test_setup_code": d["test_setup_code"]}))
    return tuple(out)


def mbpp_prompts() -> list[Prompt]:
    """MBPP test (500): task text + one example assert (as in the evalplus prompt), reference code, meta: tests."""
    return _expect("mbpp", list(_mbpp(fetch("mbpp"))), 500)


@functools.lru_cache(maxsize=None)
def _mtbench(path: pathlib.Path) -> tuple[Prompt, ...]:
    out = []
    for d in read_jsonl(path):
        refs = tuple(d.get("reference") or ())
        out.append(Prompt(id=str(d["question_id"]), prompt=d["turns"][0], reference=refs[0] if refs else None,
                          turns=tuple(d["turns"]), meta={"category": d["category"], "references": refs}))
    return tuple(out)


def mtbench_prompts() -> list[Prompt]:
    """MT-Bench (80): two user turns each, meta: category and per-turn references (39 have them)."""
    return _expect("mtbench", list(_mtbench(fetch("mtbench"))), 80)


def prompt_texts(records: Iterable[Prompt]) -> list[str]:
    """Just the prompt strings of a prompt set."""
    return [r.prompt for r in records]
