"""Byte-level BPE tokenizer for the zoo models, trained with the `tokenizers` library.

The tokenizer is trained on the *train* splits only (never valid/test) of our two
corpora (`specjax.data.prompts`):

  * every Wikipedia article opening of `wiki_corpus("train")`;
  * a deterministic prefix of `sharegpt_corpus("train")`: conversations in corpus order,
    each cut to `MAX_DOC_CHARS`, until `sharegpt_chars` characters are taken (the full
    ShareGPT train split is ~100 MB, far more than a CPU run can use).

Model: BPE with a ByteLevel pre-tokenizer (no prefix space) and ByteLevel decoder, so
every string round-trips; the single special token `<|endoftext|>` has id 0 and is the
EOS / document separator (`EOS_ID`).

CLI:  python -m specjax.train tokenizer --out PATH/tokenizer.json [--vocab 8192]  (`build`)
"""

from __future__ import annotations

import pathlib
import time

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from specjax.data.prompts import sharegpt_corpus, wiki_corpus

EOS = "<|endoftext|>"
EOS_ID = 0
DEFAULT_VOCAB = 8192
DEFAULT_SHAREGPT_CHARS = 4_000_000
MAX_DOC_CHARS = 4_000


def corpus_texts(split: str, sharegpt_chars: int = DEFAULT_SHAREGPT_CHARS,
                 sources: tuple[str, ...] = ("wiki", "sharegpt")) -> dict[str, list[str]]:
    """Documents of `split` per source: {"wiki": [...], "sharegpt": [...]} (see module doc).

    For non-train splits the ShareGPT budget is scaled by 1/18 (valid/test are 5% each
    vs 90% train), so the mix ratio is the same in every split.
    """
    out: dict[str, list[str]] = {}
    if "wiki" in sources:
        out["wiki"] = wiki_corpus(split)
    if "sharegpt" in sources:
        budget = sharegpt_chars if split == "train" else sharegpt_chars // 18
        docs, used = [], 0
        for text in sharegpt_corpus(split):
            if used >= budget:
                break
            text = text[:MAX_DOC_CHARS]
            docs.append(text)
            used += len(text)
        out["sharegpt"] = docs
    return out


def train_tokenizer(texts, vocab_size: int = DEFAULT_VOCAB) -> Tokenizer:
    """A byte-level BPE tokenizer trained on the iterable of strings `texts` (deterministic)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=[EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    if tok.token_to_id(EOS) != EOS_ID:
        raise AssertionError(f"{EOS} must have id {EOS_ID}, got {tok.token_to_id(EOS)}")
    return tok


def load_tokenizer(path: str | pathlib.Path) -> Tokenizer:
    """Load a tokenizer.json (a directory holding one is accepted too)."""
    path = pathlib.Path(path)
    if path.is_dir():
        path = path / "tokenizer.json"
    return Tokenizer.from_file(str(path))


def build(out: str | pathlib.Path, vocab: int = DEFAULT_VOCAB, sharegpt_chars: int = DEFAULT_SHAREGPT_CHARS) -> str:
    """Train the zoo's BPE tokenizer on the train split and save it to `out`; returns a one-line summary."""
    t0 = time.time()
    docs = corpus_texts("train", sharegpt_chars)
    texts = [t for src in docs.values() for t in src]
    tok = train_tokenizer(texts, vocab)
    out = pathlib.Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tok.save(str(out))
    return (f"trained {tok.get_vocab_size()}-token BPE on {len(texts)} train documents "
            f"({sum(map(len, texts)):,} chars) in {time.time() - t0:.1f}s -> {out}")
