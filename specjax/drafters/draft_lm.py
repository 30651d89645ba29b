"""A small autoregressive draft LM with its own KV cache, expanding a tree level by level.

This is the engine behind the chain, fixed-tree and DynaTree drafters. The draft
cache follows the target's committed sequence:

  * `catch_up` — at the start of a round the draft has not processed the root (the
    bonus token) nor the accepted nodes it never forwarded: a leaf at the deepest level
    (one token), or, when retrieval grafts token paths the draft never saw (Graft, Token
    Recycling), up to the whole accepted path. They go through one (P + 1)-wide forward
    [pending..., root] (P static, `max_pending`) and are committed at once: they are final.
  * `expand_level` — level d of the tree is one batched draft forward of that level's
    nodes, written into the draft cache's *pending region* at the level's static
    offset (node i sits at region slot i), each node masking in its ancestors
    (DynaTree: per-row offsets, the levels grown by specjax/drafters/level_tree.py).
  * `commit_path` — after verification the accepted nodes that were forwarded are
    gathered into place (`cache.commit`); rollback is that gather, never a re-forward.

A draft LM may carry a reduced draft vocabulary (params["draft_vocab"]["ids"], K ids: a draft LM
trained with `python -m specjax.train draft-lm --draft-vocab K`): `draft_forward` then projects onto
those K rows of its own head only (E x K instead of E x V per drafted node) and every other token gets
`EXCLUDED_LOGIT`, as the target-bound drafters do (`specjax.models.draft_vocab`); verification still
uses the target's full distribution.

Shapes: B batch, N tree budget, V vocab, K draft vocabulary.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from specjax.inputs import require_config
from specjax.models.cache import KVCache, advance, commit, init_cache
from specjax.models.draft_vocab import draft_head, split_draft_vocab, vocab_logits, weights_dtype
from specjax.models.gpt_neox import GPTNeoXConfig
from specjax.models.llama import LlamaConfig
from specjax.models.model import ModelConfig, check_params, final_norm, forward, forward_tapped, prefill_unchecked
from specjax.tree import Tree
from specjax.verify import WalkResult

__all__ = ["DraftLMDrafter", "DraftLMState", "StaticTreeShape", "catch_up", "check_compatible", "commit_path",
           "draft_cache_slots", "draft_forward", "expand_level", "init_state", "region_mask", "settle_path"]


@struct.dataclass
class DraftLMState:
    """The draft LM's state between rounds (B rows, N = the tree budget, P = `max_pending`).

    Fields:
      params: the draft LM's params (carried in the state so `propose` / `observe` see them).
      cache: the draft LM's `KVCache` [L, B, K, S, D]; `lengths` = tokens the draft has committed
        (the target's committed sequence minus the pending tokens); the tree's nodes go in the
        pending region after it.
      pending_tokens: int32[B, P] accepted tokens the draft has not forwarded yet (a suffix of the
        last accepted path, forwarded with the root by the next `catch_up`); 0 past `num_pending`.
      num_pending: int32[B] how many of them are real (0..P).
      forwarded: bool[B, N] tree nodes whose K/V sit in the pending region this round (region slot
        = node index); cleared by `commit_path`.
    """

    params: dict
    cache: KVCache
    pending_tokens: jax.Array
    num_pending: jax.Array
    forwarded: jax.Array


def check_compatible(draft_cfg: ModelConfig, target_cfg: ModelConfig) -> None:
    """The draft must be a causal LM (a GPT-NeoX or Llama config) sharing the target's vocabulary
    (same token ids): raise early otherwise."""
    require_config("a draft-LM drafter", draft_cfg, GPTNeoXConfig, LlamaConfig)
    if draft_cfg.vocab_size != target_cfg.vocab_size:
        raise ValueError(
            f"draft and target vocabularies differ: draft vocab_size={draft_cfg.vocab_size}, "
            f"target vocab_size={target_cfg.vocab_size}; a drafter must propose target token ids"
        )


GATHERED_HEAD = "head"  # params["draft_vocab"][GATHERED_HEAD]: the K head columns [E, K], gathered once per generation


def draft_forward(params: dict, cfg: ModelConfig, tokens, positions, block_mask, cache: KVCache,
                  region_offset: int | jax.Array = 0, write_cache: bool = True) -> tuple[jax.Array, KVCache]:
    """`specjax.models.model.forward` of a draft LM: (logits f32[B, T, V], cache). With a draft vocabulary
    (params["draft_vocab"]["ids"] int32[K]) only its K rows of the draft LM's own head are computed
    (`vocab_logits` on the final-normed last layer), every other column EXCLUDED_LOGIT.
    `write_cache=False`: the new K/V come back as `PendingRows` in place of the cache (`forward_tapped`)."""
    model, ids = split_draft_vocab(params)
    if ids is None:
        if write_cache:
            return forward(model, cfg, tokens, positions, block_mask, cache, region_offset)
        logits, rows, _ = forward_tapped(model, cfg, tokens, positions, block_mask, cache, (), region_offset,
                                         write_cache=False)
        return logits, rows
    _, cache, last = forward_tapped(model, cfg, tokens, positions, block_mask, cache, (cfg.num_layers - 1,),
                                    region_offset, with_logits=False, write_cache=write_cache)
    head = params["draft_vocab"].get(GATHERED_HEAD)  # gathered once by `init_state`, else here
    return vocab_logits(model, cfg, final_norm(model, cfg, last[:, :, 0]), ids, head), cache


def draft_cache_slots(prompt_width: int, max_new_tokens: int, budget: int) -> int:
    """Slots the draft cache needs (T + M + N).

    The draft never commits past the target's committed length + 1 (the root), which is
    <= T + M - 1 for an active row, so after catch-up its pending region [len, len + N)
    ends below T + M + N - 1; a finished row has committed <= T + M - 1 and its
    uncommitted catch-up (2 slots) and region writes stay below T + M + N as well.
    """
    return prompt_width + max_new_tokens + budget


def init_state(draft_cfg, params, tokens, prompt_lengths, num_slots: int, budget: int,
               max_pending: int = 1) -> DraftLMState:
    """Prefill the draft cache with the prompts (traceable; called inside `generate`).
    `max_pending` (static): accepted tokens a round may leave unforwarded (1 for a pure draft
    tree, the walk's max depth when retrieved paths are grafted)."""
    check_params(draft_cfg, params, "the draft LM")  # while tracing: before anything compiles
    b = tokens.shape[0]
    cache = init_cache(draft_cfg, b, num_slots, weights_dtype(params))  # not the draft vocabulary's int32 ids
    model, ids = split_draft_vocab(params)
    _, _, cache = prefill_unchecked(model, draft_cfg, tokens, prompt_lengths, cache,
                                    matmul_precision=None)  # inherits the loop's policy
    if ids is not None:  # gather the K head columns once, not in every draft forward (`draft_forward`)
        params = {**params, "draft_vocab": {"ids": ids, GATHERED_HEAD: draft_head(model, draft_cfg, ids)}}
    return DraftLMState(params=params, cache=cache, pending_tokens=jnp.zeros((b, max_pending), jnp.int32),
                        num_pending=jnp.zeros((b,), jnp.int32), forwarded=jnp.zeros((b, budget), bool))


def catch_up(draft_cfg, state: DraftLMState, root: jax.Array, active: jax.Array) -> tuple[jax.Array, DraftLMState]:
    """Forward [pending..., root] and commit them; returns (root logits f32[B, V], state).

    Rows that are not `active` (finished) commit nothing, so their cache never grows.
    """
    b, p = state.pending_tokens.shape
    j = jnp.arange(p + 1, dtype=jnp.int32)[None]
    npend = state.num_pending[:, None]
    padded = jnp.concatenate([state.pending_tokens, root[:, None]], axis=1)
    tokens = jnp.where(j < npend, padded, root[:, None])  # [B, P+1]: pending, the root, then dummies
    positions = state.cache.lengths[:, None] + j
    mask = jnp.broadcast_to(jnp.tril(jnp.ones((p + 1, p + 1), bool)), (b, p + 1, p + 1))
    logits, cache = draft_forward(state.params, draft_cfg, tokens, positions, mask, state.cache)
    cache = advance(cache, jnp.where(active, 1 + state.num_pending, 0))  # written at region offset 0: in place
    root_logits = jnp.take_along_axis(logits, state.num_pending[:, None, None], axis=1)[:, 0]
    return root_logits, state.replace(cache=cache, num_pending=jnp.where(active, 0, state.num_pending))


def settle_path(state: DraftLMState, result: WalkResult, path_region: jax.Array, active: jax.Array) -> DraftLMState:
    """After verification: commit the accepted nodes the draft forwarded, queue the rest.

    path_region int32[B, D]: the region slot each accepted step's node was forwarded at (-1:
    never forwarded). The forwarded nodes of a path form a prefix of it (a node is forwarded
    only when its parent was); they are gathered into place, the accepted tokens after them
    become the pending tokens. Raises nothing on device: callers size `max_pending` for
    their longest unforwarded suffix (1 for a draft tree, D with retrieval).
    """
    d = path_region.shape[1]
    steps = jnp.arange(d)[None]
    on_path = steps < result.num_accepted[:, None]
    fwd = (path_region >= 0) & on_path
    n_fwd = jnp.sum(jnp.cumprod(fwd.astype(jnp.int32), axis=1), axis=1).astype(jnp.int32)  # the forwarded prefix
    cache = commit(state.cache, jnp.maximum(path_region, 0), jnp.where(active, n_fwd, 0))
    p = state.pending_tokens.shape[1]
    src = jnp.minimum(n_fwd[:, None] + jnp.arange(p)[None], d - 1)
    pend = jnp.take_along_axis(result.accepted_tokens, src, axis=1)
    num = jnp.where(active, result.num_accepted - n_fwd, 0)
    return state.replace(cache=cache, pending_tokens=jnp.where(jnp.arange(p)[None] < num[:, None], pend, 0),
                         num_pending=num)


def region_mask(parents: np.ndarray, budget: int) -> np.ndarray:
    """Static ancestor-or-self mask of a static tree over the pending region: bool[N, N]."""
    mask = np.eye(budget, dtype=bool)
    for i, p in enumerate(parents):
        if p >= 0:
            mask[i] |= mask[p]
    return mask


def expand_level(draft_cfg, state: DraftLMState, tokens: jax.Array, depth: int | jax.Array, offset: int | jax.Array,
                 mask_rows: jax.Array, write_cache: bool = True) -> tuple[jax.Array, DraftLMState]:
    """Forward the nodes of one tree level into the pending region: (logits f32[B, W, V], state).

    tokens int32[B, W] the level's nodes, at depth `depth` (1 = children of the root; a
    static int, or a traced int32 scalar inside DynaTree's level loop);
    offset: region slot of the level's first node, static int (a static tree shape) or
    int32[B] per row (DynaTree's packed levels): node j lands at region slot offset + j;
    mask_rows bool[B, W, N]: which region slots each node sees (its ancestors and itself).
    Only the cache changes; callers mark the forwarded nodes (`DraftLMState.forwarded`).
    `write_cache=False`: (logits, the level's `PendingRows`) and no state (`cache.write_rows` writes them).
    """
    b, w = tokens.shape
    # The root was committed by catch_up, so it sits at position lengths - 1.
    positions = jnp.broadcast_to(state.cache.lengths[:, None] - 1 + depth, (b, w)).astype(jnp.int32)
    logits, cache = draft_forward(state.params, draft_cfg, tokens, positions, mask_rows, state.cache,
                                  region_offset=offset, write_cache=write_cache)
    return logits, (state.replace(cache=cache) if write_cache else cache)


def commit_path(state: DraftLMState, result: WalkResult, active: jax.Array) -> DraftLMState:
    """Commit the accepted nodes the draft forwarded (`state.forwarded`, region slot = node
    index); the last accepted node, at the deepest level, may be pending (`settle_path`)."""
    nodes = jnp.maximum(result.path_slots[:, 1:] - 1, 0)  # [B, D] region slot = node index
    fwd = jnp.take_along_axis(state.forwarded, nodes, axis=1)
    state = settle_path(state, result, jnp.where(fwd, nodes, -1), active)
    return state.replace(forwarded=jnp.zeros_like(state.forwarded))


class StaticTreeShape:
    """The topology of a tree fixed at trace time, in BFS order.

    parents int[N] (-1 = child of the root), depth int[N], and `levels`: (start, stop)
    node ranges per depth. Level d's nodes are the children of level d-1's nodes in
    parent-major order, `branching[d-1]` per parent; only the last level may be cut short
    by the node budget (the first parents keep their children).
    """

    def __init__(self, branching: tuple[int, ...], max_nodes: int):
        if not branching or min(branching) < 1:
            raise ValueError(f"a draft tree needs depth >= 1 and branching >= 1 per level, got {branching}")
        if max_nodes < 1:
            raise ValueError(f"the node budget must be >= 1, got {max_nodes}")
        parents, depth, levels = [], [], []
        prev = [-1]
        for d, k in enumerate(branching, start=1):
            start = len(parents)
            width = min(len(prev) * k, max_nodes - start)
            if width <= 0:
                break
            for j in range(width):
                parents.append(prev[j // k])
                depth.append(d)
            levels.append((start, start + width))
            full = width == len(prev) * k
            prev = list(range(start, start + width))
            if not full:
                break
        self.parents = np.asarray(parents, np.int32)
        self.depth = np.asarray(depth, np.int32)
        self.levels = tuple(levels)
        self.branching = tuple(branching[: len(levels)])

    @property
    def budget(self) -> int:
        return len(self.parents)

    @property
    def max_depth(self) -> int:
        return len(self.levels)


class DraftLMDrafter:
    """Base of the drafters whose proposals come from a draft LM over a static tree shape.

    Subclasses are frozen dataclasses (hashable: static under jit) holding the draft
    config and settings, and define `tree_shape` and `choose(parent_logits, k, level, key,
    sampling) -> (tokens int32[B, P, k], probs f32[B, P, V] or None)`.
    """

    draft_cfg: ModelConfig

    target_layers = ()  # a draft LM reads tokens, not the target's features
    target_topk = 0

    @property
    def tree_shape(self) -> StaticTreeShape:  # pragma: no cover - abstract
        raise NotImplementedError

    @property
    def budget(self) -> int:
        return self.tree_shape.budget

    @property
    def max_depth(self) -> int:
        return self.tree_shape.max_depth

    def validate(self, target_cfg: ModelConfig) -> None:
        check_compatible(self.draft_cfg, target_cfg)

    def uses_rejection(self, sampling) -> bool:
        """Whether sampling verification is chain rejection (needs draft probs) or the tree walk."""
        return False

    def init(self, params, tokens, prompt_lengths, max_new_tokens: int, context=None) -> DraftLMState:
        slots = draft_cache_slots(tokens.shape[1], max_new_tokens, self.budget)
        return init_state(self.draft_cfg, params, tokens, prompt_lengths, slots, self.budget)

    def propose(self, state: DraftLMState, root, active, key, sampling):
        """Returns (Tree [B, N], draft probs f32[B, D, V] of each level's parent or None, state)."""
        shape = self.tree_shape
        b = root.shape[0]
        parent_logits, state = catch_up(self.draft_cfg, state, root, active)
        parent_logits = parent_logits[:, None]  # [B, 1, V]
        mask = jnp.asarray(region_mask(shape.parents, shape.budget))
        tokens = jnp.zeros((b, shape.budget), jnp.int32)
        level_probs = []
        keys = jax.random.split(key, shape.max_depth)
        for d, ((start, stop), k) in enumerate(zip(shape.levels, shape.branching), start=1):
            kids, probs = self.choose(parent_logits, k, d, keys[d - 1], sampling)  # [B, P, k]
            level_tokens = kids.reshape(b, -1)[:, : stop - start]
            tokens = tokens.at[:, start:stop].set(level_tokens)
            level_probs.append(probs)
            if d < shape.max_depth:  # the deepest level is verified by the target, never forwarded
                rows = jnp.broadcast_to(mask[start:stop], (b, stop - start, shape.budget))
                parent_logits, state = expand_level(self.draft_cfg, state, level_tokens, d, start, rows)
                state = state.replace(forwarded=state.forwarded.at[:, start:stop].set(True))
        tree = Tree(tokens=tokens, parents=jnp.broadcast_to(jnp.asarray(shape.parents), (b, shape.budget)),
                    depth=jnp.broadcast_to(jnp.asarray(shape.depth), (b, shape.budget)),
                    valid=jnp.ones((b, shape.budget), bool))
        probs = None if level_probs[0] is None else jnp.concatenate(level_probs, axis=1)
        return tree, probs, state

    def observe(self, state: DraftLMState, verified) -> DraftLMState:
        return commit_path(state, verified.result, verified.active)
