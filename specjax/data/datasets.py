"""The prompt sets by name: one `{name: loader}` registry for the CLI, the benchmarks and the notebooks.

    from specjax.data.datasets import DATASETS, dataset_prompts
    prompts = dataset_prompts("gsm8k", encode, count=20, length=192, chat=True)

A loader maps (split, chat) to the held-out prompt texts of its set (`specjax.data.prompts`):
wiki and ShareGPT have train / valid / test splits; Austen is the first characters of each chapter of
a split (a PG-19-like long-fiction set); the evaluation-only sets (HumanEval, GSM8K, MATH-500, MBPP,
MT-Bench) ignore the split and give their base-model (completion) prompt, or with `chat` the user turn.
"""

from __future__ import annotations

from collections.abc import Callable

from specjax.data import prompts as P
from specjax.data.austen import austen_corpus

__all__ = ["DATASETS", "LOADERS", "dataset_prompts", "dataset_texts"]

AUSTEN_CHARS = 2000  # the characters of each chapter an Austen prompt keeps (cut at a word boundary)


def _evaluation_set(name: str) -> Callable[[str, bool], list[str]]:
    def load(split: str, chat: bool) -> list[str]:
        return [p.prompt if chat else (p.completion_prompt or p.prompt) for p in getattr(P, f"{name}_prompts")()]
    return load


LOADERS: dict[str, Callable[[str, bool], list[str]]] = {
    "wiki": lambda split, chat: [p.prompt for p in P.wiki_prompts(split)],
    "sharegpt": lambda split, chat: [p.prompt for p in P.sharegpt_prompts(split)],
    "austen": lambda split, chat: [text[:AUSTEN_CHARS].rsplit(" ", 1)[0] for text in austen_corpus(split)],
    **{name: _evaluation_set(name) for name in ("humaneval", "gsm8k", "math500", "mbpp", "mtbench")},
}
DATASETS = tuple(LOADERS)


def dataset_texts(name: str, split: str = "test", chat: bool = False) -> list[str]:
    """The held-out prompt texts of dataset `name` (module docstring); raises ValueError naming the sets."""
    if name not in LOADERS:
        raise ValueError(f"unknown dataset {name!r}; available: {', '.join(DATASETS)}")
    return LOADERS[name](split, chat)


def dataset_prompts(name: str, encode, count: int, length: int, chat: bool = False) -> list[list[int]]:
    """Token lists of the first `count` test prompts of a dataset (`dataset_texts`), each cut to its
    last `length` tokens (the notebooks' and benchmarks' prompt sets)."""
    return [encode(t)[-length:] for t in dataset_texts(name, chat=chat)[:count]]
