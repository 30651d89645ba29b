"""A reduced draft vocabulary: drafters that project with the target's LM head compute only K columns.

A drafter that reads its target's output projection (DFlash's block rows, Domino's base
logits and its correction, EAGLE-3's steps) pays a full-vocabulary matmul for every drafted
position: E x V per row (SmolLM2-135M: 576 x 49,152). FR-Spec ("FR-Spec: Accelerating
Large-Vocabulary Language Models via Frequency-Ranked Speculative Sampling", arXiv
2502.14856) and EAGLE-3 ("EAGLE-3: Scaling up Inference Acceleration of Large Language Models
via Training-Time Test", arXiv 2503.01840, its `d2t` / `t2d` maps) restrict the drafter to the
K most frequent tokens of its training data. Only the drafter is restricted: the target
verifies with its full distribution, so greedy output stays identical to AR and sampled
output keeps the target's law (the draft law just has zero mass outside the K tokens).

Representation. The ids live in the drafter's params pytree, params["draft_vocab"]["ids"]
int32[K] (ascending, no repeats); absent means the full vocabulary. `with_draft_vocab` adds
them (checked on the host), `draft_vocab_ids` reads them (None when absent), checkpoints
save and load them as the int32 tensor `draft_vocab.ids` (`specjax.models.loading`). A
trainer must not differentiate (or hand an optimizer) this int leaf: `split_draft_vocab`
takes it out of the params, `join_draft_vocab` puts it back.

Drafting. `draft_head` gathers the K columns of the target's output projection (GPT-NeoX's
`embed_out`, Llama's `lm_head`, or the rows of a tied embedding) as [E, K]; the drafters do it
once per generation, in `init`, and keep it in their state, because gathering [K, E] out of
[V, E] every round costs about as much memory traffic as the matmul it saves
(`specjax.bench.draft_vocab`). `vocab_logits` contracts hidden states with those columns as
`specjax.models.model.project_to_vocab` does (float32 accumulation, the caller's matmul
precision) and scatters them into f32[..., V] whose other columns hold `EXCLUDED_LOGIT`, a
large negative *finite* constant: softmax, top-k, DDTree's selection, sampling and chain
rejection downstream see a distribution with no mass outside the draft vocabulary, and no
-inf ever meets a 0 (no NaN from 0 * logit or a sum of log-probs). The shapes stay static (K
is the ids' static length), so a drafter compiles once per K.

A drafter proposes an excluded id only when its tree asks for more candidates than the
draft vocabulary has (DDTree with prune_mass = 0 and a budget above sum_d K^d, an EAGLE-2
tree with top_k > K); verification stays lossless even then. Graft's retrieved nodes come
from the target's own top-k table, not from the drafter, and are not restricted.

Shapes: V the target's vocabulary, K the draft vocabulary's size, E the hidden size.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from specjax.models.loading import check_draft_vocab_ids
from specjax.models.model import ModelConfig, project_to_vocab

__all__ = [
    "EXCLUDED_LOGIT", "add_to_columns", "draft_head", "draft_vocab_ids", "eagle3_maps", "frequent_ids",
    "ids_from_d2t", "join_draft_vocab", "split_draft_vocab", "vocab_logits", "weights_dtype", "with_draft_vocab",
]

EXCLUDED_LOGIT = -1e9  # the logit of every token outside the draft vocabulary (finite: no NaN downstream)
_KEY = "draft_vocab"  # params[_KEY]["ids"]; the checkpoint tensor is `draft_vocab.ids`


# ============================================================================ choosing the ids (host, numpy)


def frequent_ids(counts: np.ndarray, k: int, always=()) -> np.ndarray:
    """The K most frequent token ids, int32[K] sorted ascending by id.

    counts: [V] non-negative token counts (any real dtype); ties go to the lower id. `always`:
    ids included whatever their count (e.g. EOS); the other K - len(always) slots take the most
    frequent remaining ids. Raises ValueError for k outside [1, V], bad counts, or `always` ids
    outside [0, V) or more than k of them.
    """
    c = np.asarray(counts)
    if c.ndim != 1 or c.size == 0 or not (np.issubdtype(c.dtype, np.integer) or np.issubdtype(c.dtype, np.floating)):
        raise ValueError(f"counts must be a non-empty 1-D array of per-token counts [V], got {c.dtype}{list(c.shape)}")
    if not np.all(np.isfinite(c)) or np.any(c < 0):
        raise ValueError("counts must be finite and non-negative")
    v = c.size
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= v:
        raise ValueError(f"k (draft vocabulary size) must be an int in [1, {v}] (the vocabulary), got {k!r}")
    fixed = np.unique(np.asarray(always, np.int64).reshape(-1))
    if fixed.size and (fixed.min() < 0 or fixed.max() >= v):
        raise ValueError(f"`always` ids must lie in [0, {v}), got {fixed.tolist()}")
    if fixed.size > k:
        raise ValueError(f"`always` holds {fixed.size} ids, more than k = {k}")
    key = -(c.astype(np.float64) if np.issubdtype(c.dtype, np.floating) else c.astype(np.int64))
    order = np.lexsort((np.arange(v), key))  # count descending, then id ascending
    rest = order[~np.isin(order, fixed)][: k - fixed.size]
    return np.sort(np.concatenate([fixed, rest])).astype(np.int32)


def eagle3_maps(ids, vocab_size: int) -> tuple[np.ndarray, np.ndarray]:
    """EAGLE-3's maps of a draft vocabulary: (d2t int64[K], t2d bool[V]).

    d2t[k] = ids[k] - k, so the k-th draft token is target token k + d2t[k]; t2d[t] is True
    iff t is in the draft vocabulary. ids: sorted ascending, no repeats, in [0, vocab_size)."""
    ids = check_draft_vocab_ids(ids, vocab_size).astype(np.int64)
    t2d = np.zeros((vocab_size,), bool)
    t2d[ids] = True
    return ids - np.arange(ids.size, dtype=np.int64), t2d


def ids_from_d2t(d2t, vocab_size: int | None = None) -> np.ndarray:
    """The inverse of `eagle3_maps`: int32[K] ids = k + d2t[k], checked (ascending, no repeats,
    in [0, vocab_size) when given)."""
    d2t = np.asarray(d2t)
    if d2t.ndim != 1 or not np.issubdtype(d2t.dtype, np.integer):
        raise ValueError(f"d2t must be a 1-D integer array, got {d2t.dtype}{list(d2t.shape)}")
    ids = np.arange(d2t.size, dtype=np.int64) + d2t.astype(np.int64)
    return check_draft_vocab_ids(ids, np.iinfo(np.int32).max if vocab_size is None else vocab_size)


# ============================================================================ the ids in the params


def with_draft_vocab(params: dict, ids, vocab_size: int | None = None) -> dict:
    """The drafter's params with params["draft_vocab"]["ids"] = ids (int32[K], checked on the host:
    ascending, no repeats, in [0, vocab_size) when given). A shallow copy; `params` is unchanged."""
    ids = check_draft_vocab_ids(jax.device_get(ids), np.iinfo(np.int32).max if vocab_size is None else vocab_size)
    return {**params, _KEY: {"ids": jnp.asarray(ids)}}


def draft_vocab_ids(params: dict) -> jax.Array | None:
    """int32[K] the draft vocabulary's ids in a drafter's params, or None (the full vocabulary)."""
    return params[_KEY]["ids"] if _KEY in params else None


def split_draft_vocab(params: dict) -> tuple[dict, jax.Array | None]:
    """(the params without the draft vocabulary, its ids int32[K] or None): what a trainer differentiates."""
    return {k: v for k, v in params.items() if k != _KEY}, draft_vocab_ids(params)


def join_draft_vocab(trainable: dict, ids: jax.Array | None) -> dict:
    """The inverse of `split_draft_vocab` (ids None: `trainable` itself). No checks: traceable."""
    return trainable if ids is None else {**trainable, _KEY: {"ids": ids}}


def weights_dtype(params: dict):
    """The dtype of a drafter's weights (its first float leaf; never the draft vocabulary's int ids)."""
    return jax.tree.leaves(split_draft_vocab(params)[0])[0].dtype


# ============================================================================ drafting (pure, jittable)


def draft_head(target_params: dict, target_cfg: ModelConfig, ids: jax.Array | None) -> jax.Array | None:
    """The columns `ids` int32[K] of the target's output projection, [E, K] in the params' dtype:
    the LM head's kernel columns (`head`, [E, V]), or a tied embedding's rows ([V, E]) transposed.
    None when ids is None (the full vocabulary)."""
    if ids is None:
        return None
    if target_cfg.tie_word_embeddings:
        return jnp.take(target_params["embed"]["embedding"], ids, axis=0).T
    return jnp.take(target_params["head"]["kernel"], ids, axis=1)


def vocab_logits(target_params: dict, target_cfg: ModelConfig, hidden: jax.Array, ids: jax.Array | None,
                 head: jax.Array | None = None) -> jax.Array:
    """Logits f32[..., V] of hidden [..., E] through the target's LM head, only the columns `ids`.

    ids int32[K]: those columns are `project_to_vocab`'s (the same contraction, float32
    accumulation, over the gathered columns), every other column is EXCLUDED_LOGIT; `head`: those
    columns [E, K] gathered beforehand (`draft_head`), else gathered here. ids None:
    `project_to_vocab` itself."""
    if ids is None:
        return project_to_vocab(target_params, target_cfg, hidden)
    head = draft_head(target_params, target_cfg, ids) if head is None else head
    cols = jnp.einsum("...e,ek->...k", hidden, head, preferred_element_type=jnp.float32)
    out = jnp.full(cols.shape[:-1] + (target_cfg.vocab_size,), EXCLUDED_LOGIT, jnp.float32)
    return out.at[..., ids].set(cols, unique_indices=True, indices_are_sorted=True)


def add_to_columns(base: jax.Array, values: jax.Array, ids: jax.Array | None) -> jax.Array:
    """base f32[..., V] + values on the columns `ids`: values f32[..., K] (ids int32[K]) or
    f32[..., V] (ids None: base + values). Excluded columns keep base's value."""
    if ids is None:
        return base + values
    return base.at[..., ids].add(values, unique_indices=True, indices_are_sorted=True)
