"""EAGLE-2's dynamic draft tree, on device, over any autoregressive drafter.

The tree ("EAGLE-2: Faster Inference of Language Models with Dynamic Draft Trees", arXiv
2406.16858, as its reference code builds it: SafeAILab/EAGLE, `eagle/model/cnets.py`,
`topK_genrate`; Graft's base tree, arXiv 2605.20104, §2.1) for top_k = k, depth = D,
total = K_max:

    root step:  one drafter step on the root -> log q(. | root); its top k tokens are the
                depth-1 nodes, score S = log q(x); they are the first frontier.
    step i = 1..D: one drafter step on the k frontier nodes (each masks in its ancestors);
                each frontier node f gets its top k children c, S = S_f + log q(c | path to f)
                (the cumulative draft log-probability of the path); all k*k candidates join
                the pool; the next frontier is the k best candidates of this step by S.
    select:     the K_max highest-S nodes of the whole pool (k + D k^2 candidates), in pool
                (creation) order. S never increases along a path and ties go to the earlier
                (lower pool index) node, so every selected node's parent is selected too.

So the tree has levels 1 .. D + 1, at most K_max nodes, unique siblings, and costs
1 + D drafter steps of width <= k. `top_k = 1, depth = K - 1, total = K` is greedy chain
drafting of K tokens (`eagle3-chain<K>`).

Any drafter that steps autoregressively plugs in through `ARStepper`: the draft LM
(`DraftLMStepper`, below: the frontier's K/V are committed for the accepted prefix, as in
`specjax.drafters.draft_lm`) and EAGLE-3 (`specjax.drafters.eagle3.Eagle3Stepper`: its
frontier K/V are scratch; committed rows are re-drafted from the target's features).
T > 0 is verified by the lossless sampling walk (EAGLE's point-mass rejection draws the
same distribution: SafeAILab/EAGLE, `eagle/model/utils.py`, `evaluate_posterior`; proofs/eagle3.md
E4); no draft probabilities are needed.

Shapes: B batch, k = top_k, P = k + D k^2 pool, N = total, R = D k region slots (the
frontier of step i is forwarded at region slots [(i - 1) k, i k)), H carried state width.
"""

from __future__ import annotations

import dataclasses
from typing import Protocol

import jax
import jax.numpy as jnp
from flax import struct

from specjax.drafters.draft_lm import DraftLMState, catch_up, check_compatible, draft_forward, init_state, settle_path
from specjax.drafters.protocol import PromptContext, Verified
from specjax.drafters.spec import Build, MethodSpec, fields_from
from specjax.models.model import ModelConfig
from specjax.tree import Tree, normalize

__all__ = [
    "ARStepper", "build_tree", "DraftLMStepper", "DraftPool", "Eagle2TreeDrafter", "Eagle2TreeState", "METHODS",
    "TREE_FIELDS", "tree_shape",
    "pool_expand", "pool_select", "pool_start", "ranked",
]


class ARStepper(Protocol):
    """An autoregressive drafter as the dynamic tree drives it (static, hashable).

    target_layers  tuple[int, ...]: target layers whose features `init` / `observe` read
    """

    target_layers: tuple[int, ...]

    def validate(self, target_cfg) -> None:
        """Raise ValueError (host, before compiling) if this drafter cannot serve `target_cfg`."""

    def init(self, params, tokens, prompt_lengths, max_new_tokens: int, context: PromptContext | None, *,
             region: int, max_depth: int):
        """-> state, the prompt ingested; `region` scratch slots are needed per round after
        the committed prefix; rounds accept at most `max_depth` nodes."""

    def start(self, state, root: jax.Array, active: jax.Array):
        """Catch up on last round's committed tokens and step on the root:
        -> (logits f32[B, V] of the token after the root, carried state [B, H], state)."""

    def step(self, state, tokens: jax.Array, carried: jax.Array, depth: jax.Array, region_offset: jax.Array,
             mask: jax.Array):
        """One step on W tree nodes at `depth` (traced int): tokens int32[B, W], carried
        [B, W, H] (their parents' carried state), mask bool[B, W, R] (ancestors and self over
        the region); K/V written at region slots region_offset + w.
        -> (logits f32[B, W, V], carried [B, W, H], state)."""

    def observe(self, state, verified: Verified, node_slots: jax.Array):
        """-> state after the round; node_slots int32[B, N]: the region slot each tree node
        was forwarded at, or -1 (never forwarded)."""


@struct.dataclass
class Eagle2TreeState:
    """The dynamic tree's state (B rows, N = total).

    Fields:
      inner: the stepper's state (e.g. a `DraftLMState` or an `Eagle3State`).
      node_slots: int32[B, N] region slot each node of the last proposed tree was forwarded at
        (-1: not forwarded); handed to the stepper's `observe`.
    """

    inner: object
    node_slots: jax.Array


@dataclasses.dataclass(frozen=True)
class Eagle2TreeDrafter:
    """EAGLE-2's dynamic tree over `stepper` (module docstring); the defaults are Graft's.

    Proposes Tree [B, total] (depth <= depth + 1) from a pool of k + depth k^2 candidates;
    state `Eagle2TreeState`: the stepper's (e.g. the draft KV cache [L, B, K, S, D]).

    Fields:
      stepper: an `ARStepper` (`DraftLMStepper` or `specjax.drafters.eagle3.Eagle3Stepper`).
      top_k: k >= 1 (<= the vocabulary): children per expanded node and frontier width (10).
      depth: D >= 0, expansion steps after the root step, so the tree is at most D + 1 deep (8);
        0 keeps only the root step's k children.
      total: K_max, nodes of the proposed tree, in [1, k + D k^2] (60).
    """

    stepper: object
    top_k: int = 10
    depth: int = 8
    total: int = 60

    target_topk = 0

    def __post_init__(self):
        if self.top_k < 1:
            raise ValueError(f"dynamic tree top_k must be >= 1, got {self.top_k}")
        if self.depth < 0:
            raise ValueError(f"dynamic tree depth must be >= 0 (expansions after the root step), got {self.depth}")
        if not 1 <= self.total <= self.pool_size:
            raise ValueError(f"dynamic tree total must lie in [1, {self.pool_size}] (the pool of top_k + depth * "
                             f"top_k^2 candidates for top_k={self.top_k}, depth={self.depth}), got {self.total}")

    @property
    def pool_size(self) -> int:
        return self.top_k + self.depth * self.top_k ** 2

    @property
    def budget(self) -> int:
        return self.total

    @property
    def max_depth(self) -> int:
        return min(self.depth + 1, self.total)

    @property
    def region(self) -> int:
        return max(1, self.depth * self.top_k)

    @property
    def target_layers(self) -> tuple[int, ...]:
        return self.stepper.target_layers

    def validate(self, target_cfg) -> None:
        self.stepper.validate(target_cfg)
        if self.top_k > target_cfg.vocab_size:
            raise ValueError(f"dynamic tree top_k {self.top_k} exceeds the vocabulary ({target_cfg.vocab_size})")

    def uses_rejection(self, sampling) -> bool:
        return False  # the sampling walk (EAGLE's point-mass rejection draws the same law)

    def init(self, params, tokens, prompt_lengths, max_new_tokens: int, context: PromptContext | None = None):
        inner = self.stepper.init(params, tokens, prompt_lengths, max_new_tokens, context, region=self.region,
                                  max_depth=self.max_depth)
        return Eagle2TreeState(inner=inner, node_slots=jnp.full((tokens.shape[0], self.total), -1, jnp.int32))

    def propose(self, state: Eagle2TreeState, root, active, key, sampling):
        """-> (Tree [B, N], None, state); inactive rows get an empty tree."""
        tree, node_slots, inner = build_tree(self.stepper, state.inner, root, active, self.top_k, self.depth,
                                             self.total)
        return tree, None, Eagle2TreeState(inner=inner, node_slots=node_slots)

    def observe(self, state: Eagle2TreeState, verified: Verified) -> Eagle2TreeState:
        return state.replace(inner=self.stepper.observe(state.inner, verified, state.node_slots))


@struct.dataclass
class DraftPool:
    """The EAGLE-2 candidate pool while it grows ([B, P], P = k + D k^2, creation order).

    Fields:
      tok: int32[B, P] each candidate's token (0 until created).
      score: f32[B, P] its cumulative draft log-probability S (-inf until created).
      parent: int32[B, P] its parent's pool index (-1 = child of the root, or not created).
      depth: int32[B, P] its depth below the root (1 = child of the root; 0 until created).
      slot: int32[B, P] the region slot it was forwarded at (-1: never forwarded).
      frontier: the k nodes the next step forwards, a tuple (pool index int32[B, k], token
        int32[B, k], score f32[B, k], carried state [B, k, H], ancestor mask bool[B, k, R] over the
        region).
    """

    tok: jax.Array
    score: jax.Array
    parent: jax.Array
    depth: jax.Array
    slot: jax.Array
    frontier: tuple


def pool_start(stepper, inner, root, active, top_k: int, depth: int):
    """The root step: -> (DraftPool with the k depth-1 candidates, stepper state)."""
    k = top_k
    b = root.shape[0]
    region = max(1, depth * k)
    pool = k + depth * k * k
    logits, carried, inner = stepper.start(inner, root, active)
    score, tok = jax.lax.top_k(jax.nn.log_softmax(logits, axis=-1), k)  # [B, k]
    pad = lambda x, fill: jnp.concatenate([x, jnp.full((b, pool - k), fill, x.dtype)], axis=1)  # noqa: E731
    frontier = (jnp.broadcast_to(jnp.arange(k, dtype=jnp.int32), (b, k)), tok.astype(jnp.int32), score,
                jnp.broadcast_to(carried[:, None], (b, k) + carried.shape[1:]), jnp.zeros((b, k, region), bool))
    return DraftPool(tok=pad(tok.astype(jnp.int32), 0), score=pad(score, -jnp.inf),
                     parent=jnp.full((b, pool), -1, jnp.int32), depth=pad(jnp.ones((b, k), jnp.int32), 0),
                     slot=jnp.full((b, pool), -1, jnp.int32), frontier=frontier), inner


def pool_expand(stepper, inner, pool: DraftPool, i, top_k: int, depth: int, keep: jax.Array | None = None):
    """Expansion step i (0-based, traced): one drafter step on the frontier, its k^2 children
    join the pool at [k + i k^2, k + (i + 1) k^2). `keep` bool[B]: rows whose new candidates
    count (others get score -inf: a pruned row's tree stops growing).
    -> (pool, stepper state, the new candidates' scores f32[B, k^2])."""
    k = top_k
    b = pool.tok.shape[0]
    rows = jnp.arange(b)[:, None]
    region = max(1, depth * k)
    f_idx, f_tok, f_score, f_car, f_anc = pool.frontier
    slots = i * k + jnp.arange(k, dtype=jnp.int32)  # this frontier's region slots
    anc = f_anc | (jnp.arange(region)[None, None, :] == slots[None, :, None])  # [B, k, R]
    pool_slot = pool.slot.at[rows, f_idx].set(jnp.broadcast_to(slots, (b, k)))
    logits, car, inner = stepper.step(inner, f_tok, f_car, i + 1, i * k, anc)
    c_score, c_tok = jax.lax.top_k(jax.nn.log_softmax(logits, axis=-1), k)  # [B, k(f), k(c)]
    cum = (f_score[:, :, None] + c_score).reshape(b, k * k)  # eq. 5 of EAGLE-2
    if keep is not None:
        cum = jnp.where(keep[:, None], cum, -jnp.inf)
        pool_slot = jnp.where(keep[:, None], pool_slot, pool.slot)
    c_tok = c_tok.astype(jnp.int32).reshape(b, k * k)
    base = k + i * k * k  # this step's candidates sit at pool [base, base + k^2), parent-major
    put = lambda buf, new: jax.lax.dynamic_update_slice_in_dim(buf, new, base, axis=1)  # noqa: E731
    best, j = jax.lax.top_k(cum, k)  # the next frontier: this step's k best candidates
    parent = j // k
    frontier = (base + j.astype(jnp.int32), jnp.take_along_axis(c_tok, j, axis=1), best,
                jnp.take_along_axis(car, parent.reshape(b, k, *([1] * (car.ndim - 2))), axis=1),
                jnp.take_along_axis(anc, parent[:, :, None], axis=1))
    pool = DraftPool(tok=put(pool.tok, c_tok), score=put(pool.score, cum),
                     parent=put(pool.parent, jnp.repeat(f_idx, k, axis=1)),
                     depth=put(pool.depth, jnp.full((b, k * k), 0, jnp.int32) + i + 2), slot=pool_slot,
                     frontier=frontier)
    return pool, inner, cum


def ranked(pool: DraftPool, count: int) -> jax.Array:
    """int32[B, count]: pool indices of the `count` best candidates, best first (a stable sort:
    a parent, never below its child in score, comes before it, so every prefix is a tree)."""
    return jnp.argsort(-pool.score, axis=1, stable=True)[:, :count]


def pool_select(pool: DraftPool, total: int, active) -> tuple[Tree, jax.Array]:
    """The K_max best candidates as a Tree in creation order: -> (Tree [B, N], node_slots [B, N])."""
    b, size = pool.tok.shape
    rows = jnp.arange(b)[:, None]
    sel = jnp.sort(ranked(pool, total), axis=1)  # creation order: parents before children
    index_of = jnp.full((b, size), -1, jnp.int32).at[rows, sel].set(jnp.arange(total, dtype=jnp.int32))
    par = jnp.take_along_axis(pool.parent, sel, axis=1)
    parents = jnp.where(par >= 0, jnp.take_along_axis(index_of, jnp.maximum(par, 0), axis=1), -1)
    valid = jnp.broadcast_to(active[:, None], (b, total))
    tree = normalize(Tree(tokens=jnp.take_along_axis(pool.tok, sel, axis=1), parents=parents,
                          depth=jnp.take_along_axis(pool.depth, sel, axis=1), valid=valid))
    return tree, jnp.take_along_axis(pool.slot, sel, axis=1)


def build_tree(stepper, inner, root, active, top_k: int, depth: int, total: int):
    """The EAGLE-2 tree (module docstring): -> (Tree [B, N], node_slots int32[B, N], stepper state)."""
    pool, inner = pool_start(stepper, inner, root, active, top_k, depth)

    def expand(carry, i):
        pool, inner = carry
        pool, inner, _ = pool_expand(stepper, inner, pool, i, top_k, depth)
        return (pool, inner), None

    if depth:
        (pool, inner), _ = jax.lax.scan(expand, (pool, inner), jnp.arange(depth, dtype=jnp.int32))
    tree, node_slots = pool_select(pool, total, active)
    return tree, node_slots, inner


# ============================================================================ the draft LM as a stepper


@dataclasses.dataclass(frozen=True)
class DraftLMStepper:
    """A small draft LM (same vocabulary as the target) stepping with its own KV cache.

    The root and the accepted nodes it never forwarded are caught up in one forward
    (`draft_lm.catch_up`); frontier nodes are forwarded into the region; after verification
    the accepted nodes that were forwarded (a prefix of the path: a frontier node's parent
    was a frontier node) are gathered into place, the rest wait as pending tokens. State:
    `DraftLMState` (the draft KV cache [L, B, K, S, D], lengths int32[B]); carried state width H = 0.

    Fields:
      draft_cfg: the draft LM's model config; its vocabulary must be the target's.
      max_pending: P, accepted tokens a round may leave unforwarded: 1 for a draft tree (the
        leaf), up to the walk's max depth when retrieval grafts paths the draft never saw (Graft sets it).
    """

    draft_cfg: ModelConfig
    max_pending: int = 1

    target_layers = ()

    def __post_init__(self):
        if not isinstance(self.max_pending, int) or self.max_pending < 1:
            raise ValueError(f"DraftLMStepper.max_pending must be an int >= 1 (the leaf of every accepted path "
                             f"waits as a pending token), got {self.max_pending!r}")

    def validate(self, target_cfg) -> None:
        check_compatible(self.draft_cfg, target_cfg)

    def init(self, params, tokens, prompt_lengths, max_new_tokens: int, context=None, *, region: int,
             max_depth: int) -> DraftLMState:
        slots = tokens.shape[1] + max_new_tokens + max(region, self.max_pending + 1)
        return init_state(self.draft_cfg, params, tokens, prompt_lengths, slots, 0, self.max_pending)

    def start(self, state: DraftLMState, root, active):
        logits, state = catch_up(self.draft_cfg, state, root, active)
        return logits, jnp.zeros((root.shape[0], 0), logits.dtype), state

    def step(self, state: DraftLMState, tokens, carried, depth, region_offset, mask):
        b, w = tokens.shape
        # The root was committed by catch_up, so it sits at position lengths - 1.
        positions = jnp.broadcast_to(state.cache.lengths[:, None] - 1 + depth, (b, w)).astype(jnp.int32)
        logits, cache = draft_forward(state.params, self.draft_cfg, tokens, positions, mask, state.cache,
                                      region_offset=region_offset)
        return logits, carried, state.replace(cache=cache)

    def observe(self, state: DraftLMState, verified: Verified, node_slots) -> DraftLMState:
        result = verified.result
        nodes = jnp.maximum(result.path_slots[:, 1:] - 1, 0)  # [B, D] tree node of each accepted step
        return settle_path(state, result, jnp.take_along_axis(node_slots, nodes, axis=1), verified.active)


TREE_FIELDS = fields_from(Eagle2TreeDrafter, {"topk": "top_k", "depth": "depth", "total": "total"})


def tree_shape(b: Build) -> dict:
    """The dynamic tree's shape from a method's topk / depth / total fields, as `Eagle2TreeDrafter` keywords."""
    return {"top_k": b.values["topk"], "depth": b.values["depth"], "total": b.values["total"]}


def _build(b: Build):
    return Eagle2TreeDrafter(DraftLMStepper(b.need("draft")[0]), **tree_shape(b)), None


METHODS = (MethodSpec("eagle2", ("eagle2",), "the EAGLE-2 dynamic tree over the draft LM (`Eagle2TreeDrafter`)",
                      _build, fields=TREE_FIELDS, needs=("draft",), label="dynamic tree"),)
