"""The specjax model zoo: tiny checkpoints trained by `specjax.train`, committed in the repo.

=====================  ==========================================================
name                   what
=====================  ==========================================================
``tiny-neox-target``   GPT-NeoX (Pythia architecture), ~4.9M params, 4 layers x 192
``tiny-neox-draft``    GPT-NeoX, ~1.1M params, 2 layers x 64 (its drafter)
``tiny-neox-dflash``   DFlash drafter of ``tiny-neox-target`` (reads its layers 1 and 3)
``tiny-neox-eagle3``   EAGLE-3 drafter of ``tiny-neox-target`` (reads its layers 0, 2, 3)
``tiny-neox-domino``   Domino drafter of ``tiny-neox-target`` (DFlash backbone + GRU /
                       low-rank head; ``ablations/``: the Figure 4 training variants)
``smollm2-135m-*``     SmolLM2-135M-Instruct's DFlash, EAGLE-3 and Domino drafters, and its draft
                       LM ``smollm2-135m-draft`` (Llama, 4 layers x 192, distilled on the target's
                       answers; it uses the target's tokenizer)
=====================  ==========================================================

Both share one 8,192-token byte-level BPE tokenizer (``tokenizer.json`` in each dir;
``<|endoftext|>`` = id 0 = EOS and document separator; prompts are encoded as
``[0] + ids``, see ``encode``). Each directory is a plain Hugging Face checkpoint
(``config.json`` + float16 ``model.safetensors``) that loads with
``specjax.models.load_checkpoint`` and with transformers' ``GPTNeoXForCausalLM``.
How they were trained: ``TRAINING.md`` next to this file. DFlash, EAGLE-3 and Domino
drafters (``DRAFTERS``, ``load_drafter``) are checkpoints of ``specjax.models.dflash`` /
``eagle3`` / ``domino`` with their ``recipe.json`` (data, training recipe, measured log)
in the same directory.
"""

from __future__ import annotations

import pathlib

import jax.numpy as jnp
from tokenizers import Tokenizer

from specjax.drafters.registry import READERS
from specjax.models import load_checkpoint

ZOO_DIR = pathlib.Path(__file__).resolve().parent
NAMES = ("tiny-neox-target", "tiny-neox-draft")


def _committed(suffixes) -> tuple[str, ...]:
    """The committed checkpoint directories named "<model prefix>-<suffix>" for a suffix in `suffixes`."""
    return tuple(d.name for d in sorted(ZOO_DIR.iterdir())
                 if d.is_dir() and d.name.rsplit("-", 1)[-1] in suffixes and (d / "config.json").is_file())


# Drafters that read the target, "<model prefix>-<reader kind>" (the reader kinds of `specjax.drafters.registry`:
# DFlash, EAGLE-3, Domino), and draft LMs of a named target, "<model prefix>-draft" (what methods need a draft LM
# by; `python -m specjax.train draft-lm`; they share the target's tokenizer): a new kind's zoo checkpoint needs no
# entry here.
DRAFTERS = _committed(READERS)
DRAFT_LMS = _committed(("draft",))
EOS_ID = 0


__all__ = ["ZOO_DIR", "NAMES", "DRAFTERS", "DRAFT_LMS", "EOS_ID", "path", "load", "load_drafter", "has", "load_tokenizer",
           "encode"]


def path(name: str) -> pathlib.Path:
    """The committed checkpoint directory of zoo model `name`."""
    if name not in NAMES + DRAFTERS + DRAFT_LMS:
        raise KeyError(f"unknown zoo model {name!r}; available: {tuple(dict.fromkeys(NAMES + DRAFTERS + DRAFT_LMS))}")
    d = ZOO_DIR / name
    if not (d / "model.safetensors").exists():
        raise FileNotFoundError(f"{d} has no model.safetensors (see {ZOO_DIR / 'TRAINING.md'})")
    return d


def load_tokenizer(name: str = NAMES[0]):
    """The `tokenizers.Tokenizer` stored with zoo model `name`."""
    return Tokenizer.from_file(str(path(name) / "tokenizer.json"))


def load(name: str, dtype=jnp.float32):
    """(cfg, params, tokenizer) of zoo model `name`, params cast to `dtype`."""
    cfg, params = load_checkpoint(path(name), dtype)
    return cfg, params, load_tokenizer(name)


def has(name: str) -> bool:
    """Whether zoo checkpoint `name` is committed (drafters are added as they are trained)."""
    return (ZOO_DIR / name / "model.safetensors").exists()


def load_drafter(name: str, dtype=jnp.float32):
    """(config, params) of zoo drafter `name`: a DFlash, EAGLE-3 or Domino drafter, or a draft LM (`DRAFT_LMS`)."""
    if name not in DRAFTERS + DRAFT_LMS:
        raise KeyError(f"unknown zoo drafter {name!r}; available: {DRAFTERS + DRAFT_LMS}")
    return load_checkpoint(path(name), dtype)


def encode(tokenizer, text: str) -> list[int]:
    """Prompt ids in the form the zoo models were trained on: EOS separator, then the text."""
    return [EOS_ID] + tokenizer.encode(text).ids
