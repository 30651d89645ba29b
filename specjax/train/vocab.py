"""A reduced draft vocabulary in training: the K most frequent response tokens (FR-Spec's ranking).

FR-Spec ("FR-Spec: Accelerating Large-Vocabulary Language Models via Frequency-Ranked
Speculative Sampling", arXiv 2502.14856, §3) and EAGLE-3 (arXiv 2503.01840, its `d2t` / `t2d`
maps) let the drafter score only the K most frequent tokens of its training data. In training,
logits are computed for those K columns only (`subset_logits`: a [.., E] x [E, K] matmul instead
of [E, V]); a label outside the K is no class of the softmax, so it is left out of the cross
entropy and counts as a miss in accuracy and the τ estimate (the drafter can never propose it).
Drafting with the same ids (`specjax.models.draft_vocab`) keeps verification against the target's full
distribution: lossless whatever K is.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from specjax.models.draft_vocab import draft_head, frequent_ids
from specjax.models.model import project_to_vocab

__all__ = ["DraftVocabTables", "vocab_tables", "tables_of_ids", "subset_logits", "labels_in_vocab"]


@struct.dataclass
class DraftVocabTables:
    """A draft vocabulary's tables, a pytree (it travels into the jitted step).

    Fields:
      ids: int32[K] the draft vocabulary's token ids, ascending.
      index: int32[V]: index[t] = the position of t in ids, or -1 when t is not in it.
    """

    ids: jax.Array
    index: jax.Array


def vocab_tables(counts: np.ndarray, k: int, always: tuple[int, ...] = ()) -> DraftVocabTables:
    """The K most frequent ids of `counts` int[V] (plus `always`, e.g. EOS) and their inverse index."""
    return tables_of_ids(frequent_ids(np.asarray(counts), k, always), len(counts))


def tables_of_ids(ids, vocab_size: int) -> DraftVocabTables:
    """The tables of a given draft vocabulary (ascending ids int[K], e.g. a warm start's) over V = vocab_size."""
    ids = np.asarray(ids, np.int64)
    if ids.ndim != 1 or np.any(np.diff(ids) <= 0) or ids.min() < 0 or ids.max() >= vocab_size:
        raise ValueError(f"a draft vocabulary is ascending distinct ids in [0, {vocab_size}), got {ids[:8]}...")
    index = np.full(vocab_size, -1, np.int32)
    index[ids] = np.arange(len(ids), dtype=np.int32)
    return DraftVocabTables(ids=jnp.asarray(ids, jnp.int32), index=jnp.asarray(index))


def subset_logits(touter: dict, tcfg, hidden: jax.Array, vocab: DraftVocabTables | None) -> jax.Array:
    """f32[..., K] logits of the draft vocabulary's columns of the target's head (no final norm),
    or f32[..., V] with vocab None."""
    if vocab is None:
        return project_to_vocab(touter, tcfg, hidden)
    return jnp.einsum("...e,ek->...k", hidden, draft_head(touter, tcfg, vocab.ids), preferred_element_type=jnp.float32)


def labels_in_vocab(labels: jax.Array, vocab: DraftVocabTables | None) -> tuple[jax.Array, jax.Array]:
    """(class ids in the logits' columns, bool: the label is a class at all) for target-id labels."""
    if vocab is None:
        return labels, jnp.ones(labels.shape, bool)
    cls = vocab.index[labels]
    return jnp.maximum(cls, 0), cls >= 0
