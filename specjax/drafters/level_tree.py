"""Static-shape level-by-level tree growth: the engine that grows a draft token tree one
level per draft forward, with every shape static (DynaTree's `build_tree`; written so that
other level-synchronous drafters, e.g. Domino-tree and Graft, can share it).

A draft grows a token tree below the root (the last committed token). Level 1 is the
draft's top-1 token u_0; each later level is made of the children of the previous one.
Which nodes expand and how many children they get follows DynaTree's rules (a depth /
probability gate and a confidence-based branching B(u), per-row `Knobs`, compared in log
space; see specjax/drafters/dynatree.py for the algorithm and its conventions).

Static-shape expansion (`build_tree`, at most one batched draft forward per level). Valid
nodes are packed: level d of a row occupies tree slots [o_d, o_d + n_d) with
o_d = n_1 + ... + n_{d-1}, so a row's valid nodes are a prefix of its N slots and node i
sits at draft-cache region slot i. Level d holds at most W_d nodes (`level_widths`), the
largest count level d can reach in any tree under the budget (a small dynamic program over
level counts; proofs/dynatree.md, Lemma 1). Every level is carried at the one static width
W = max_d W_d, so the levels are the iterations of ONE `lax.while_loop` whose body is traced
once, the depth d being a traced int32; the loop stops after the deepest static level L' or
as soon as no row has a node at the next level (deeper levels cost nothing). A level's
nodes are forwarded at the per-row region offset o_d, on its first w slots only, w the
smallest of (1, 4, 16, 64, ..., W) holding the live nodes of every row (`expand_level_topk`:
one `lax.switch`, so log4(W) + 1 compiled draft forwards for the whole tree, shared by all
levels). Slots past n_d hold don't-care tokens whose K/V land at region slots >= o_{d+1},
i.e. where the next level is written later or never read: a valid node sees only the
committed prefix, its ancestors and itself. A forward writes region slots below
o_d + w <= (N - 1) + W, so a drafter allocates N + W region slots.

Candidates are the top-K children of every level slot; a candidate is live iff its parent
is valid and expandable, its rank < B(parent) and its p >= tau; the first N - (nodes so
far) live candidates in BFS order (parent position, rank) are kept (`cumsum`) and
scattered to their packed positions. The deepest level is never forwarded, nor is a level
in which no node passes the gate (`TreeInfo.forwarded` marks the forwarded nodes, for
`draft_lm.commit_path`).

Shapes: B batch, N = N_max node budget, V vocab, K = B_max (top-k width), L' static
levels, W = max level width, w <= W the width a level is forwarded at.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
from flax import struct

from specjax.drafters.draft_lm import DraftLMState, expand_level
from specjax.models.cache import write_rows
from specjax.models.model import ModelConfig
from specjax.ops import switch_on_width, top_k, width_buckets
from specjax.tree import Tree

__all__ = ["THRESHOLDS", "DeferredLevelFn", "Knobs", "Level", "LevelFn", "TreeInfo", "build_tree",
           "draft_lm_level_fn", "expand_level_topk", "level_widths", "log_thresholds"]

_NEG_INF = float("-inf")


# ======================================================================== knobs


@struct.dataclass
class Knobs:
    """Per-row drafting parameters, probability domain; every field f32[B] or int32[B] (B rows).

    Phase 3 moves tau_h, tau_l and d0. Passing `DynaTreeParams(lm, knobs)` as the draft
    params overrides the drafter's defaults without recompiling (parameter sweeps); the
    static fields stay the bounds (b's are clipped to [1, B_max], depth to the static
    levels). Phase 1 reads only tau_h, tau_l, the b's and d0 (its fixed depth). `build_tree`
    compares in log space (`log_thresholds`; a probability of 0 disables its test).
    p(u) is the cumulative draft probability of the root-to-u path, c(u) the draft's top-1
    probability after u, d(u) its depth (1 below the root).

    Fields:
      tau_h: f32, high confidence threshold: c(u) >= tau_h gives u b_min children.
      tau_l: f32, low confidence threshold: tau_l <= c(u) < tau_h gives b_mid, c(u) < tau_l gives b_max.
      d0: int32, base depth D_0: nodes with d(u) < d0 skip the rho_deep test (Phase 1: the fixed depth).
      d_max: int32, depth limit D_max: u expands only if d(u) < d_max (Phase 1 sets it to d0).
      b_min: int32, children of a confident node (c >= tau_h).
      b_mid: int32, children of a middling node (tau_l <= c < tau_h).
      b_max: int32, children of an unconfident node (c < tau_l).
      rho_stop: f32, u expands only if p(u) >= rho_stop (Phase 1: 0, off).
      rho_deep: f32, u at d(u) >= d0 expands only if p(u) >= rho_deep (Phase 1: 0, off).
      tau: f32, pruning: u expands only if p(u) >= tau, and a child v with p(v) < tau is never created
        (Phase 1: 0, off).
    """

    tau_h: jax.Array
    tau_l: jax.Array
    d0: jax.Array
    d_max: jax.Array
    b_min: jax.Array
    b_mid: jax.Array
    b_max: jax.Array
    rho_stop: jax.Array
    rho_deep: jax.Array
    tau: jax.Array

    def broadcast(self, batch: int) -> "Knobs":
        ints = ("d0", "d_max", "b_min", "b_mid", "b_max")
        return Knobs(**{f.name: jnp.broadcast_to(jnp.asarray(getattr(self, f.name),
                                                             jnp.int32 if f.name in ints else jnp.float32), (batch,))
                        for f in dataclasses.fields(self)})


THRESHOLDS = ("tau_h", "tau_l", "rho_stop", "rho_deep", "tau")  # the probability thresholds of `Knobs`


def log_thresholds(knobs: Knobs) -> dict[str, jax.Array]:
    """{name: log f32[B]} for each of `THRESHOLDS` (log 0 = -inf disables a test): the
    float32 values `build_tree` compares with, e.g. to feed a reference the same ones."""
    return {name: jnp.log(jnp.asarray(getattr(knobs, name), jnp.float32)) for name in THRESHOLDS}


# ======================================================================== static widths


@functools.lru_cache(maxsize=None)
def level_widths(max_nodes: int, num_levels: int, max_branch: int) -> tuple[int, ...]:
    """Static widths W_1..W_L' (L' <= num_levels): W_d = the largest node count level d
    can have in any tree the construction can build (proofs/dynatree.md, Lemma 1).

    Level counts obey n_1 = 1 and 1 <= n_{d+1} <= min(K n_d, N - S_d), S_d = n_1 + .. + n_d
    (a level is empty once one is). With m_d(c) = the least S_d over such sequences with
    n_d = c (inf if none), m_1(1) = 1 and
        m_{d+1}(c) = c + min{ m_d(c') : K c' >= c, m_d(c') + c <= N },
    W_d = max{c : m_d(c) < inf}. Levels that cannot be reached are dropped. O(L N^2) on
    the host, cached. `build_tree` carries every level at W = max(W_d) and stops after L'.
    """
    if max_nodes < 1 or num_levels < 1 or max_branch < 1:
        raise ValueError(f"need max_nodes, num_levels, max_branch >= 1, got {max_nodes}, {num_levels}, {max_branch}")
    least = {1: 1}  # c -> m_d(c) for the reachable counts c of the current level
    widths = [1]
    for _ in range(1, num_levels):
        nxt = {}
        for c in range(1, max_nodes + 1):
            prev = [m for cp, m in least.items() if max_branch * cp >= c and m + c <= max_nodes]
            if prev:
                nxt[c] = c + min(prev)
        if not nxt:
            break
        least = nxt
        widths.append(max(nxt))
    return tuple(widths)


# ======================================================================== one level


@struct.dataclass
class Level:
    """One level handed to the distribution function (W = its static width, N = the tree budget).

    The level's valid nodes are a prefix of its W positions; position j sits at tree slot
    offset + j, so positions past the level's nodes point at slots >= the next level's offset.

    Fields:
      tokens: int32[B, W] the level's tokens (0 for invalid positions).
      slots: int32[B, W] tree slot (= draft-cache region slot) of each position: offset + j.
      parent_slots: int32[B, W] tree slot of each node's parent (-1 = child of the root, or invalid).
      valid: bool[B, W] positions holding a node of the tree.
      mask_rows: bool[B, W, N] ancestor-or-self slots of each node (all False for invalid nodes
        below level 1).
      offset: int32[B] the level's first tree slot o_d = slots[:, 0] (the region offset its forward uses).
    """

    tokens: jax.Array
    slots: jax.Array
    parent_slots: jax.Array
    valid: jax.Array
    mask_rows: jax.Array
    offset: jax.Array


@struct.dataclass
class TreeInfo:
    """Per-node by-products of `build_tree` ([B, N]; 0 / False on padding).

    Fields:
      cum_logp: f32 log p(u), the cumulative draft log-probability of the root-to-u path.
      forwarded: bool, the node's level was forwarded through the draft (its K/V are in the region).
      expandable: bool, the node passed the depth / probability gate.
      branching: int32 B(u) from the confidence rule (meaningful for forwarded nodes; 0 on the deepest level).
      log_conf: f32 log c(u), the log of the draft's top-1 probability after u (forwarded nodes;
        -inf on a level that was not forwarded).
    """

    cum_logp: jax.Array
    forwarded: jax.Array
    expandable: jax.Array
    branching: jax.Array
    log_conf: jax.Array


LevelFn = Callable  # (carry, Level, depth: traced int32 scalar) -> (log-probs f32[B, w, V], carry)


class DeferredLevelFn(NamedTuple):
    """A `LevelFn` in two halves, so that `expand_level_topk`'s width switch writes no cache inside its branches
    (XLA copies a buffer a branch updates in place: the whole draft cache, each level of each round; the same
    reason as `verify.verify_tree`'s, `LayerKV.deferred`):

      forward(carry, level, depth) -> (log-probs f32[B, w, V], rows): the level's new K/V held apart
        (`PendingRows` [L, B, w, K, D]);
      write(carry, rows, level, count) -> carry: the first `count` (the branch's width w) of the rows
        [L, B, W, K, D] written at the level's slots, as the branch's forward would have written them.

    Called as a plain `LevelFn`, it runs both halves."""

    forward: Callable
    write: Callable

    def __call__(self, carry, level: "Level", depth):
        logp, rows = self.forward(carry, level, depth)
        return logp, self.write(carry, rows, level, rows.k.shape[2])


def expand_level_topk(level_fn: LevelFn, carry, level: Level, depth: int | jax.Array, k: int):
    """The top-k children of every node of a level: (log-probs f32[B, W, k], tokens int32[B, W, k], carry).

    The level's live nodes are a prefix of its W slots, so only the first w of them need
    the draft: `level_fn` runs on the smallest static width w in (1, 4, 16, 64, ..., W)
    holding the live nodes of every row (a factor 4 between widths keeps the compiled
    branches few); padding slots get log-prob -inf. depth: int or traced int32 scalar.
    A `DeferredLevelFn`'s branches return the level's K/V rows padded to W, written after the switch.
    """
    width = level.tokens.shape[1]
    deferred = isinstance(level_fn, DeferredLevelFn)

    def expand(w, carry, level):
        sub = jax.tree.map(lambda x: x[:, :w] if x.ndim > 1 else x, level)  # offset [B] stays
        if deferred:  # the rows [L, B, w, K, D] -> W; the carry leaves the branch untouched
            logp, rows = level_fn.forward(carry, sub, depth)  # [B, w, V]
            out = jax.tree.map(lambda x: jnp.pad(x, ((0, 0), (0, 0), (0, width - w), (0, 0), (0, 0))), rows)
        else:
            logp, out = level_fn(carry, sub, depth)  # [B, w, V]
        lp, tok = top_k(logp.astype(jnp.float32), k, equal_zeros=True)  # the reference: -0.0 == +0.0
        pad = ((0, 0), (0, width - w), (0, 0))
        return jnp.pad(lp, pad, constant_values=_NEG_INF), jnp.pad(tok, pad), out, jnp.int32(w)

    live = jnp.max(jnp.sum(level.valid, axis=1, dtype=jnp.int32))
    lp, tok, out, w = switch_on_width(live, width_buckets(width, smallest=1, factor=4), expand, (carry, level))
    return lp, tok, (level_fn.write(carry, out, level, w) if deferred else out)


# ======================================================================== the tree


def build_tree(root_logp, level_fn: LevelFn, carry, knobs: Knobs, *, max_nodes: int, num_levels: int,
               max_branch: int, active: jax.Array | None = None):
    """Algorithm 1 (DRAFTTREE) for a batch, static shapes: returns (Tree, TreeInfo, carry).

    root_logp f32[B, V]: draft log-probs after the root. `level_fn(carry, level, d)`
    returns the draft log-probs f32[B, w, V] after each node of `level` (level d < L', d a
    traced int32 scalar; cut to a static width w <= W holding its live nodes, see
    `expand_level_topk`); the draft LM plugs in a cached forward, tests a synthetic table.
    The carry must keep its types (it goes through `lax.while_loop` and `lax.cond`). The
    Tree [B, N] is packed (valid nodes first), BFS ordered, with <= max_nodes nodes and depth
    <= L' <= num_levels. knobs: `Knobs` [B] per field, thresholds compared in log space
    (`log_thresholds`). Rows with `active` (bool[B], default all) False get an empty tree
    and cost nothing.
    """
    b, _ = root_logp.shape
    n, k = max_nodes, max_branch
    widths = level_widths(n, num_levels, k)
    depth_count, w = len(widths), max(widths)  # L' levels; W: every level's arrays are this wide
    clip_b = lambda x: jnp.clip(x, 1, k).astype(jnp.int32)  # noqa: E731
    b_min, b_mid, b_max = clip_b(knobs.b_min), clip_b(knobs.b_mid), clip_b(knobs.b_max)
    log_t = {name: x[:, None] for name, x in log_thresholds(knobs).items()}  # f32[B, 1]

    out = dict(tokens=jnp.zeros((b, n), jnp.int32), parents=jnp.full((b, n), -1, jnp.int32),
               depth=jnp.zeros((b, n), jnp.int32), valid=jnp.zeros((b, n), bool),
               cum_logp=jnp.zeros((b, n), jnp.float32), forwarded=jnp.zeros((b, n), bool),
               expandable=jnp.zeros((b, n), bool), branching=jnp.zeros((b, n), jnp.int32),
               log_conf=jnp.zeros((b, n), jnp.float32))

    def more(state):
        """Level d is expanded iff it is above the deepest static one and some row has a node
        there: deeper levels cost nothing once every row's tree has stopped growing."""
        d, lvl, _, _ = state
        return (d < depth_count) & jnp.any(lvl["valid"])

    def grow(state):
        """Write level d (< L'), expand it, and build level d + 1 (all [B, W])."""
        d, lvl, out, carry = state
        out = _put_nodes(out, lvl, d)
        tokens, cum, valid, slots = lvl["tokens"], lvl["cum"], lvl["valid"], lvl["slots"]
        level = Level(tokens=tokens, slots=slots, parent_slots=lvl["parent_slots"], valid=valid,
                      mask_rows=lvl["anc"], offset=slots[:, 0])
        # The depth/probability gate does not need the draft: a level in which no node of
        # any row may expand is a set of leaves, and is not forwarded at all (its accepted
        # leaf, if any, is caught up next round like a deepest-level node).
        gate = (valid & (d < knobs.d_max[:, None]) & (cum >= log_t["rho_stop"])
                & (cum >= log_t["tau"]) & ((d < knobs.d0[:, None]) | (cum >= log_t["rho_deep"])))
        expands = jnp.any(gate)
        top_lp, top_tok, carry = jax.lax.cond(
            expands, lambda carry: expand_level_topk(level_fn, carry, level, d, k),
            lambda carry: (jnp.full(tokens.shape + (k,), _NEG_INF), jnp.zeros(tokens.shape + (k,), jnp.int32), carry),
            carry)  # [B, W, K]
        log_conf = top_lp[..., 0]
        nb = jnp.where(log_conf >= log_t["tau_h"], b_min[:, None],
                       jnp.where(log_conf >= log_t["tau_l"], b_mid[:, None], b_max[:, None]))
        out = _put(out, lvl, forwarded=valid & expands, expandable=gate, branching=nb, log_conf=log_conf)
        return d + 1, _next_level(lvl, gate, nb, top_lp, top_tok, log_t["tau"], n), out, carry

    d, last, out, carry = jax.lax.while_loop(more, grow, (jnp.int32(1), _first_level(root_logp, active, w, n), out,
                                                          carry))
    # The loop stopped at level d: the deepest static level (d = L'), verified by the target
    # and never forwarded, of which only the nodes are written (its TreeInfo stays 0 but for
    # cum_logp); or an empty level, for which the writes below are all dropped.
    out = _put_nodes(out, last, d)

    tree = Tree(tokens=out["tokens"], parents=out["parents"], depth=out["depth"], valid=out["valid"])
    info = TreeInfo(cum_logp=out["cum_logp"], forwarded=out["forwarded"], expandable=out["expandable"],
                    branching=out["branching"], log_conf=out["log_conf"])
    return tree, info, carry


def _put(out: dict, lvl: dict, **values) -> dict:
    """`out` ([B, N] per field) with a level's values ([B, W]) scattered to its tree slots (invalid nodes dropped)."""
    b, n = out["tokens"].shape
    idx = jnp.where(lvl["valid"], lvl["slots"], n)  # out of range -> dropped
    return {**out, **{name: out[name].at[jnp.arange(b)[:, None], idx].set(v.astype(out[name].dtype), mode="drop")
                      for name, v in values.items()}}


def _put_nodes(out: dict, lvl: dict, d) -> dict:
    """What every level writes, the deepest one included: its tokens, parents, depth d, validity and cum_logp."""
    return _put(out, lvl, tokens=lvl["tokens"], parents=lvl["parent_slots"],
                depth=jnp.broadcast_to(d, lvl["slots"].shape), valid=lvl["valid"], cum_logp=lvl["cum"])


def _first_level(root_logp, active, w: int, n: int) -> dict:
    """Level 1: u_0 = the draft's top-1 token (Algorithm 1, line 10), at position 0 of a W-wide level; the
    level's fields (tokens, cum, parent_slots, valid, slots [B, W], used [B], anc bool[B, W, N])."""
    b = root_logp.shape[0]
    positions = jnp.arange(w, dtype=jnp.int32)[None]  # [1, W]
    top_lp, top_tok = top_k(root_logp.astype(jnp.float32), 1, equal_zeros=True)  # [B, 1]
    pad = lambda x, value: jnp.pad(x, ((0, 0), (0, w - 1)), constant_values=value)  # noqa: E731  [B, 1] -> [B, W]
    first_valid = jnp.ones((b, 1), bool) if active is None else active[:, None]
    # anc[:, 0] sees slot 0 in every row, inactive ones included (as the level-1 mask row always has).
    anc = (jnp.arange(n, dtype=jnp.int32)[None, None, :] == 0) & (positions == 0)[..., None] & jnp.ones((b, 1, 1), bool)
    return dict(tokens=pad(top_tok.astype(jnp.int32), 0), cum=pad(top_lp, 0.0),
                parent_slots=jnp.full((b, w), -1, jnp.int32), valid=pad(first_valid, False),
                used=jnp.ones((b,), jnp.int32), slots=jnp.broadcast_to(positions, (b, w)), anc=anc)


def _next_level(lvl: dict, gate, nb, top_lp, top_tok, log_tau, n: int) -> dict:
    """Level d + 1 from level d's expansion: gate bool[B, W] (the nodes that expand), nb int32[B, W] (their
    branching), top_lp / top_tok [B, W, K] (their children's draft log-probs and tokens), log_tau f32[B, 1];
    at most N - used nodes in all.

    Candidates in BFS order (parent position, rank); keep the first `N - used` live ones. Only the first W_d
    positions of the level can be valid, so the live candidates sit in the first W_d * K of the W * K: the
    cumsum ranks are those of a W_d-wide level, and at most W_{d+1} <= W are kept (Lemma 1), so none is lost
    to the W-wide level."""
    b, w, k = top_lp.shape
    rows, positions = jnp.arange(b)[:, None], jnp.arange(w, dtype=jnp.int32)[None]
    cum, slots, used = lvl["cum"], lvl["slots"], lvl["used"]
    child_cum = cum[..., None] + top_lp  # [B, W, K]
    live = (gate[..., None] & (jnp.arange(k)[None, None] < nb[..., None])
            & (child_cum >= log_tau[..., None])).reshape(b, w * k)
    rank = jnp.cumsum(live, axis=1, dtype=jnp.int32)  # 1-based position among live candidates
    keep = live & (rank <= (n - used)[:, None])
    count = jnp.sum(keep, axis=1, dtype=jnp.int32)
    src = jnp.zeros((b, w), jnp.int32).at[rows, jnp.where(keep, rank - 1, w)].set(
        jnp.broadcast_to(jnp.arange(w * k, dtype=jnp.int32), (b, w * k)), mode="drop")  # candidate of each position
    parent_pos = src // k
    valid = positions < count[:, None]
    next_slots = used[:, None] + positions  # o_{d+1} + j
    parent_anc = jnp.take_along_axis(lvl["anc"], parent_pos[..., None], axis=1)  # [B, W, N]
    return dict(
        tokens=jnp.where(valid, jnp.take_along_axis(top_tok.reshape(b, w * k), src, axis=1), 0).astype(jnp.int32),
        cum=jnp.where(valid, jnp.take_along_axis(child_cum.reshape(b, w * k), src, axis=1), 0.0),
        parent_slots=jnp.where(valid, jnp.take_along_axis(slots, parent_pos, axis=1), -1),
        valid=valid, used=used + count, slots=next_slots,
        anc=(parent_anc | (jnp.arange(n, dtype=jnp.int32)[None, None, :] == next_slots[..., None])) & valid[..., None])


def draft_lm_level_fn(draft_cfg: ModelConfig, log_probs: Callable) -> LevelFn:
    """The draft LM as a `build_tree` distribution function (carry: DraftLMState): the
    level's forward is `draft_lm.expand_level` at the per-row region offset `level.offset`
    (positions = committed length - 1 + depth, depth traced), its logits turned into
    log-probs f32[B, w, V] by `log_probs`."""

    def forward(state: DraftLMState, level: Level, depth):  # its rows held apart
        logits, rows = expand_level(draft_cfg, state, level.tokens, depth, level.offset, level.mask_rows,
                                    write_cache=False)
        return log_probs(logits), rows

    def write(state: DraftLMState, rows, level: Level, count):
        return state.replace(cache=write_rows(state.cache, rows, level.offset, count))

    return DeferredLevelFn(forward, write)
