"""DynaTree (Algorithm 1 of the paper): an adaptive draft tree grown level by level.

A draft LM grows a token tree below the root (the last committed token). Three
mechanisms, selected by `DynaTreeDrafter.phase` as in the paper's ablation (Table 1):

  Phase 1  confidence-aware branching: a node u with draft confidence
           c(u) = max_v q_D(v | u) gets B(u) = B_min if c >= tau_h, B_mid if
           tau_l <= c < tau_h, B_max if c < tau_l children: its top-B(u) draft tokens.
           Fixed depth D_0, node budget N_max, no probability pruning.
  Phase 2  + dynamic depth and pruning: u is expanded iff
               d(u) < D_max  and  p(u) >= rho_stop  and  (d(u) < D_0  or  p(u) >= rho_deep)
           (and p(u) >= tau, Algorithm 1 line 14), where p(u) is the cumulative draft
           probability of the root-to-u path; a child v with p(v) < tau is pruned (never
           created, so it costs no budget).
  Phase 3  + historical adjustment of (tau_h, tau_l, D_0) per batch row, from a sliding
           window of the last W rounds' acceptance statistic (schedule below).

Conventions (ours, where the paper is silent). d(u) = `Tree.depth` = number of draft
tokens on the root-to-u path (the paper's first node u_0 has d = 1); with this count the
paper's gate `d(u) < D_max` bounds the tree depth by D_max and matches the authors' code
(it gates on the child's depth). As in Algorithm 1 (line 10) the first level is the single
node u_0 = the draft's top-1 token, always kept. Expansion is breadth first with a FIFO
frontier; under the budget the surviving candidates are the first ones in BFS order:
level by level, within a level by (parent position, child rank), child rank = position
in the draft's "log-prob descending, token id ascending" order (`lax.top_k`). This is
exactly the order in which Algorithm 1 with a FIFO queue inserts nodes, so the greedy
(rank-0) chain always survives while budget remains. All comparisons are in log space
in float32: p >= rho  <=>  lbar >= log(rho) (rho = 0 disables a test).

Static-shape expansion (`build_tree`, at most one batched draft forward per level). Valid nodes
are packed: level d of a row occupies tree slots [o_d, o_d + n_d) with
o_d = n_1 + ... + n_{d-1}, so a row's valid nodes are a prefix of its N_max slots and
node i sits at draft-cache region slot i. Level d has a static width W_d (`level_widths`),
the largest count level d can reach in any tree under the budget (a small dynamic
program over level counts; proofs/dynatree.md, Lemma 1). The level's nodes are forwarded
at the per-row region offset o_d; slots past n_d hold don't-care tokens whose K/V land at region slots
>= o_{d+1}, i.e. where the next level is written later or never read: a valid node sees
only the committed prefix, its ancestors and itself. Candidates are the top-B_max
children of every level slot; a candidate is live iff its parent is valid and
expandable, its rank < B(parent) and its p >= tau; the first N_max - (nodes so far) live
candidates in BFS order are kept (`cumsum`), and scattered to their packed positions.
The deepest level is never forwarded, nor is a level in which no node passes the gate
(`forwarded` marks the forwarded nodes for `commit_path`).

Phase 3 schedule (the paper defers it to an appendix that does not give it; ours,
following the direction of Sec. 3.3 and the constants of the authors' code). After each
round, row b records a_r = accepted nodes / depth of its proposed tree (in [0, 1]; the
fraction of the tree's depth that was committed, = accepted / drafted for a chain). Let
a_bar be the mean of the last min(k, W) records, k = rounds since the row's last move.
Once k >= min_rounds:
  a_bar > accept_high  ->  aggressive:   D_0 += 1, tau_h -= step, tau_l -= step
  a_bar < accept_low   ->  conservative: D_0 -= 1, tau_h += step, tau_l += step
each clipped to its range (`d0_range`, `tau_h_range`, `tau_l_range`, with
max tau_l_range < min tau_h_range so tau_l < tau_h always), and a move clears the
window (k = 0), so every decision is based on rounds drafted with the current values.
Lower thresholds give more nodes B_min (narrower, deeper trees under the budget) and a
larger D_0 lets more paths grow past the base depth. All of it is per-row state arrays.

Verification: greedy walk at T = 0, the lossless sampling walk at T > 0 (the tree is then
built from the draft's processed distribution, same temperature / top-k / top-p).
Shapes: B batch, N = N_max budget, V vocab, W_d level width, K = B_max.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Callable

import jax
import jax.numpy as jnp
from flax import struct

from specjax.drafters.draft_lm import (DraftLMDrafter, DraftLMState, catch_up, check_compatible, commit_path,
                                       draft_cache_slots, expand_level, init_state)
from specjax.models.model import ModelConfig
from specjax.ops import switch_on_width, top_k, width_buckets
from specjax.tree import Tree, tree_depth
from specjax.verify import WalkResult

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


@struct.dataclass
class DynaTreeParams:
    """Draft params with knob overrides, given to `generate` as DynaTree's draft params.

    Fields:
      lm: the draft LM's params.
      knobs: a `Knobs` whose fields are scalars or [B] arrays (broadcast to [B] at `init`); they replace
        the drafter's default knobs (the static fields stay the bounds).
    """

    lm: dict
    knobs: Knobs


@struct.dataclass
class DynaTreeState:
    """DynaTree's state between rounds (B rows, W = the schedule's window).

    Fields:
      lm: the draft LM's `DraftLMState` (its KV cache [L, B, S, K, D], pending tokens, forwarded nodes).
      knobs: the current per-row `Knobs` ([B] each); Phase 3 moves tau_h, tau_l and d0.
      window: f32[B, W] the last rounds' acceptance statistics a_r (accepted / tree depth), newest
        first; only Phase 3 records them.
      count: int32[B] entries recorded since the row's last move (<= W; a move resets it to 0).
    """

    lm: DraftLMState
    knobs: Knobs
    window: jax.Array
    count: jax.Array

    @property
    def cache(self):
        """The draft KV cache (as on `DraftLMState`, for code that inspects draft caches)."""
        return self.lm.cache


# ======================================================================== tree construction


@functools.lru_cache(maxsize=None)
def level_widths(max_nodes: int, num_levels: int, max_branch: int) -> tuple[int, ...]:
    """Static widths W_1..W_L' (L' <= num_levels): W_d = the largest node count level d
    can have in any tree the construction can build (proofs/dynatree.md, Lemma 1).

    Level counts obey n_1 = 1 and 1 <= n_{d+1} <= min(K n_d, N - S_d), S_d = n_1 + .. + n_d
    (a level is empty once one is). With m_d(c) = the least S_d over such sequences with
    n_d = c (inf if none), m_1(1) = 1 and
        m_{d+1}(c) = c + min{ m_d(c') : K c' >= c, m_d(c') + c <= N },
    W_d = max{c : m_d(c) < inf}. Levels that cannot be reached are dropped. O(L N^2) on
    the host, cached.
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


LevelFn = Callable  # (carry, Level, depth: int) -> (log-probs f32[B, W, V], carry)


def expand_level_topk(level_fn: LevelFn, carry, level: Level, depth: int, k: int):
    """The top-k children of every node of a level: (log-probs f32[B, W, k], tokens int32[B, W, k], carry).

    The level's live nodes are a prefix of its W slots, so only the first w of them need
    the draft: `level_fn` runs on the smallest static width w in (1, 4, 16, 64, ..., W)
    holding the live nodes of every row (a factor 4 between widths keeps the compiled
    branches few); padding slots get log-prob -inf.
    """
    width = level.tokens.shape[1]

    def expand(w, carry, level):
        sub = jax.tree.map(lambda x: x[:, :w] if x.ndim > 1 else x, level)  # offset [B] stays
        logp, carry = level_fn(carry, sub, depth)  # [B, w, V]
        lp, tok = top_k(logp.astype(jnp.float32), k, equal_zeros=True)  # the reference: -0.0 == +0.0
        pad = ((0, 0), (0, width - w), (0, 0))
        return jnp.pad(lp, pad, constant_values=_NEG_INF), jnp.pad(tok, pad), carry

    live = jnp.max(jnp.sum(level.valid, axis=1, dtype=jnp.int32))
    return switch_on_width(live, width_buckets(width, smallest=1, factor=4), expand, (carry, level))


def build_tree(root_logp, level_fn: LevelFn, carry, knobs: Knobs, *, max_nodes: int, num_levels: int,
               max_branch: int, active: jax.Array | None = None):
    """Algorithm 1 (DRAFTTREE) for a batch, static shapes: returns (Tree, TreeInfo, carry).

    root_logp f32[B, V]: draft log-probs after the root. `level_fn(carry, level, d)`
    returns the draft log-probs f32[B, w, V] after each node of `level` (level d < L',
    cut to a static width w <= W_d holding its live nodes, see `expand_level_topk`); the
    draft LM plugs in a cached forward, tests a synthetic table. The Tree is packed
    (valid nodes first), BFS ordered, with <= max_nodes nodes and depth <= L' <= num_levels.
    knobs: `Knobs` [B] per field, thresholds compared in log space (`log_thresholds`).
    Rows with `active` (bool[B], default all) False get an empty tree and cost nothing.
    """
    b, _ = root_logp.shape
    n, k = max_nodes, max_branch
    widths = level_widths(n, num_levels, k)
    depth_count = len(widths)
    rows = jnp.arange(b)[:, None]
    node_ids = jnp.arange(n, dtype=jnp.int32)
    clip_b = lambda x: jnp.clip(x, 1, k).astype(jnp.int32)  # noqa: E731
    b_min, b_mid, b_max = clip_b(knobs.b_min), clip_b(knobs.b_mid), clip_b(knobs.b_max)
    log_t = {name: x[:, None] for name, x in log_thresholds(knobs).items()}  # f32[B, 1]

    out = dict(tokens=jnp.zeros((b, n), jnp.int32), parents=jnp.full((b, n), -1, jnp.int32),
               depth=jnp.zeros((b, n), jnp.int32), valid=jnp.zeros((b, n), bool),
               cum_logp=jnp.zeros((b, n), jnp.float32), forwarded=jnp.zeros((b, n), bool),
               expandable=jnp.zeros((b, n), bool), branching=jnp.zeros((b, n), jnp.int32),
               log_conf=jnp.zeros((b, n), jnp.float32))

    def put(out, lvl, **values):  # scatter a level's values to its tree slots
        idx = jnp.where(lvl["valid"], lvl["slots"], n)  # out of range -> dropped
        return {**out, **{name: out[name].at[rows, idx].set(v.astype(out[name].dtype), mode="drop")
                          for name, v in values.items()}}

    def grow(d, out, carry, lvl):
        """Write level d, expand it, and grow the next level only if some row has one."""
        out = put(out, lvl, tokens=lvl["tokens"], parents=lvl["parent_slots"], depth=jnp.full_like(lvl["slots"], d),
                  valid=lvl["valid"], cum_logp=lvl["cum"])
        if d == depth_count:  # the deepest level is verified by the target, never forwarded
            return out, carry
        tokens, cum, valid, slots, used = lvl["tokens"], lvl["cum"], lvl["valid"], lvl["slots"], lvl["used"]
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
        out = put(out, lvl, forwarded=valid & expands, expandable=gate, branching=nb, log_conf=log_conf)

        # Candidates in BFS order (parent position, rank); keep the first `N - used` live ones.
        w, w_next = tokens.shape[1], widths[d]
        child_cum = cum[..., None] + top_lp  # [B, W, K]
        live = (gate[..., None] & (jnp.arange(k)[None, None] < nb[..., None])
                & (child_cum >= log_t["tau"][..., None])).reshape(b, w * k)
        rank = jnp.cumsum(live, axis=1, dtype=jnp.int32)  # 1-based position among live candidates
        keep = live & (rank <= (n - used)[:, None])
        count = jnp.sum(keep, axis=1, dtype=jnp.int32)
        src = jnp.zeros((b, w_next), jnp.int32).at[rows, jnp.where(keep, rank - 1, w_next)].set(
            jnp.broadcast_to(jnp.arange(w * k, dtype=jnp.int32), (b, w * k)), mode="drop")  # candidate of each position
        parent_pos = src // k
        valid = jnp.arange(w_next)[None] < count[:, None]
        next_slots = used[:, None] + jnp.arange(w_next, dtype=jnp.int32)[None]
        parent_anc = jnp.take_along_axis(lvl["anc"], parent_pos[..., None], axis=1)  # [B, W', N]
        nxt = dict(
            tokens=jnp.where(valid, jnp.take_along_axis(top_tok.reshape(b, w * k), src, axis=1), 0).astype(jnp.int32),
            cum=jnp.where(valid, jnp.take_along_axis(child_cum.reshape(b, w * k), src, axis=1), 0.0),
            parent_slots=jnp.where(valid, jnp.take_along_axis(slots, parent_pos, axis=1), -1),
            valid=valid, used=used + count, slots=next_slots,
            anc=(parent_anc | (node_ids[None, None, :] == next_slots[..., None])) & valid[..., None])
        # Deeper levels cost nothing once every row's tree has stopped growing.
        return jax.lax.cond(jnp.any(valid), functools.partial(grow, d + 1), lambda out, carry, _: (out, carry),
                            out, carry, nxt)

    # Level 1: u_0 = the draft's top-1 token (Algorithm 1, line 10).
    top_lp, top_tok = top_k(root_logp.astype(jnp.float32), 1, equal_zeros=True)  # [B, 1]
    zero = jnp.zeros((b,), jnp.int32)
    first = dict(tokens=top_tok.astype(jnp.int32), cum=top_lp, parent_slots=jnp.full((b, 1), -1, jnp.int32),
                 valid=jnp.ones((b, 1), bool) if active is None else active[:, None], used=zero + 1,
                 slots=zero[:, None], anc=(node_ids == 0)[None, None, :] & jnp.ones((b, 1, 1), bool))
    out, carry = grow(1, out, carry, first)

    tree = Tree(tokens=out["tokens"], parents=out["parents"], depth=out["depth"], valid=out["valid"])
    info = TreeInfo(cum_logp=out["cum_logp"], forwarded=out["forwarded"], expandable=out["expandable"],
                    branching=out["branching"], log_conf=out["log_conf"])
    return tree, info, carry


def draft_lm_level_fn(draft_cfg: ModelConfig, log_probs: Callable) -> LevelFn:
    """The draft LM as a `build_tree` distribution function (carry: DraftLMState): the
    level's forward is `draft_lm.expand_level` at the per-row region offset `level.offset`,
    its logits turned into log-probs f32[B, w, V] by `log_probs`."""

    def level_fn(state: DraftLMState, level: Level, depth: int):
        logits, state = expand_level(draft_cfg, state, level.tokens, depth, level.offset, level.mask_rows)
        return log_probs(logits), state

    return level_fn


# ======================================================================== Phase 3 schedule


@dataclasses.dataclass(frozen=True)
class Schedule:
    """Phase-3 constants (the schedule in the module docstring); hashable.

    Fields:
      window: W, acceptance statistics a_r kept per row (the sliding window; a_bar is their mean).
      min_rounds: rounds since the row's last move before it may move again (1 <= min_rounds <= W).
      accept_high: a_bar > accept_high moves aggressive: D_0 + 1, tau_h - step, tau_l - step.
      accept_low: a_bar < accept_low moves conservative: D_0 - 1, tau_h + step, tau_l + step.
      step: how far one move shifts tau_h and tau_l (probability units, > 0).
      d0_range: (lo, hi) D_0 is clipped to, inside [1, d_max).
      tau_h_range: (lo, hi) tau_h is clipped to.
      tau_l_range: (lo, hi) tau_l is clipped to; its hi must be below tau_h_range's lo, so tau_l < tau_h.
    """

    window: int = 10
    min_rounds: int = 5
    accept_high: float = 0.8
    accept_low: float = 0.6
    step: float = 0.05
    d0_range: tuple[int, int] = (2, 7)
    tau_h_range: tuple[float, float] = (0.5, 0.95)
    tau_l_range: tuple[float, float] = (0.1, 0.45)


def acceptance_statistic(tree: Tree, result: WalkResult) -> jax.Array:
    """a_r f32[B]: accepted nodes / depth of the proposed tree (0 for an empty tree)."""
    depth = tree_depth(tree)
    return jnp.where(depth > 0, result.num_accepted / jnp.maximum(depth, 1), 0.0).astype(jnp.float32)


def update_history(knobs: Knobs, window, count, a, active, sched: Schedule):
    """One round of the Phase-3 schedule: (knobs, window f32[B, W], count int32[B]) -> same.

    Rows that are not `active` are left unchanged.
    """
    w = window.shape[1]
    window = jnp.where(active[:, None], jnp.concatenate([a[:, None], window[:, :-1]], axis=1), window)
    count = jnp.where(active, jnp.minimum(count + 1, w), count)
    filled = jnp.arange(w)[None] < count[:, None]
    mean = jnp.sum(jnp.where(filled, window, 0.0), axis=1) / jnp.maximum(count, 1)
    ready = active & (count >= sched.min_rounds)
    up, down = ready & (mean > sched.accept_high), ready & (mean < sched.accept_low)

    def move(x, delta, lo, hi):  # aggressive (up): x + delta, conservative (down): x - delta, clipped
        return jnp.where(up, jnp.clip(x + delta, lo, hi), jnp.where(down, jnp.clip(x - delta, lo, hi), x))

    knobs = knobs.replace(
        d0=move(knobs.d0, 1, *sched.d0_range).astype(jnp.int32),
        tau_h=move(knobs.tau_h, -sched.step, *sched.tau_h_range).astype(jnp.float32),
        tau_l=move(knobs.tau_l, -sched.step, *sched.tau_l_range).astype(jnp.float32),
    )
    return knobs, window, jnp.where(up | down, 0, count)


# ======================================================================== the drafter


@dataclasses.dataclass(frozen=True)
class DynaTreeDrafter(DraftLMDrafter):
    """DynaTree with a draft LM. Defaults: Appendix A (D_0=5, D_max=8, (B_min, B_max) =
    (1, 3), (tau_h, tau_l) = (0.9, 0.4)); B_mid = 2, rho_stop = 0.1, rho_deep = 0.5,
    tau = 0.05, N_max = 256 and the Phase-3 constants are the authors' benchmark settings
    (the paper does not list them). See the module docstring and `Knobs` for the rules.

    Proposes Tree [B, N_max] grown level by level from the draft LM (depth <= D_max); state
    `DynaTreeState`: the draft LM's KV cache [L, B, S, K, D] and the acceptance history.

    Fields:
      draft_cfg: the draft LM's model config; its vocabulary must be the target's.
      phase: 1 (confidence-aware branching, fixed depth d0), 2 (+ dynamic depth and pruning) or
        3 (+ the per-row Phase-3 schedule).
      d0: D_0 >= 1, base depth (Phase 1: the tree's fixed depth); the default of `Knobs.d0`.
      d_max: D_max > d0 (Phases 2, 3), the static depth bound; the default of `Knobs.d_max`.
      b_min: B_min >= 1, children of a confident node (c(u) >= tau_h).
      b_mid: B_mid in [b_min, b_max], children of a middling node (tau_l <= c(u) < tau_h).
      b_max: B_max, children of an unconfident node; also the static top-k width (<= the vocabulary).
      tau_h: high confidence threshold, 0 < tau_l < tau_h < 1.
      tau_l: low confidence threshold.
      rho_stop: expand u only if p(u) >= rho_stop (Phases 2, 3; 0 < rho_stop < rho_deep < 1).
      rho_deep: expand u at depth >= d0 only if p(u) >= rho_deep (Phases 2, 3).
      tau: pruning threshold in [0, 1): nodes with p < tau are neither expanded nor created (Phases 2, 3).
      n_max: N_max >= 1, the node budget (the tree's static width N).
      schedule: the Phase-3 `Schedule`; None: Schedule(d0_range=(min(2, d0), d_max - 1)).
    """

    draft_cfg: ModelConfig
    phase: int = 3
    d0: int = 5
    d_max: int = 8
    b_min: int = 1
    b_mid: int = 2
    b_max: int = 3
    tau_h: float = 0.9
    tau_l: float = 0.4
    rho_stop: float = 0.1
    rho_deep: float = 0.5
    tau: float = 0.05
    n_max: int = 256
    schedule: Schedule | None = None

    def __post_init__(self):
        if self.phase not in (1, 2, 3):
            raise ValueError(f"DynaTree phase must be 1, 2 or 3, got {self.phase}")
        if not 1 <= self.b_min <= self.b_mid <= self.b_max:
            raise ValueError(f"need 1 <= b_min <= b_mid <= b_max, got {self.b_min}, {self.b_mid}, {self.b_max}")
        if self.b_max > self.draft_cfg.vocab_size:
            raise ValueError(f"b_max {self.b_max} exceeds the draft vocabulary ({self.draft_cfg.vocab_size})")
        if not 0 < self.tau_l < self.tau_h < 1:
            raise ValueError(f"need 0 < tau_l < tau_h < 1, got tau_l={self.tau_l}, tau_h={self.tau_h}")
        if self.n_max < 1:
            raise ValueError(f"the node budget n_max must be >= 1, got {self.n_max}")
        if self.d0 < 1:
            raise ValueError(f"base depth d0 must be >= 1, got {self.d0}")
        if self.phase >= 2:
            if not self.d0 < self.d_max:
                raise ValueError(f"need 1 <= d0 < d_max, got d0={self.d0}, d_max={self.d_max}")
            if not 0 < self.rho_stop < self.rho_deep < 1:
                raise ValueError(f"need 0 < rho_stop < rho_deep < 1, got {self.rho_stop}, {self.rho_deep}")
            if not 0 <= self.tau < 1:
                raise ValueError(f"pruning threshold tau must lie in [0, 1), got {self.tau}")
        if self.phase == 3:
            s = self.sched
            (dlo, dhi), (hlo, hhi), (llo, lhi) = s.d0_range, s.tau_h_range, s.tau_l_range
            if not (1 <= dlo <= self.d0 <= dhi < self.d_max and 0 < llo <= self.tau_l <= lhi < hlo <= self.tau_h
                    <= hhi < 1):
                raise ValueError(f"Phase-3 ranges must contain the knobs, with the tau_l range below the tau_h "
                                 f"range and the d0 range inside [1, d_max): {s}, d0={self.d0}, "
                                 f"tau_h={self.tau_h}, tau_l={self.tau_l}")
            if not (1 <= s.min_rounds <= s.window and 0 <= s.accept_low <= s.accept_high <= 1 and s.step > 0):
                raise ValueError(f"need 1 <= min_rounds <= window, 0 <= accept_low <= accept_high <= 1, step > 0: {s}")

    @property
    def sched(self) -> Schedule:
        return self.schedule or Schedule(d0_range=(min(2, self.d0), self.d_max - 1))

    @property
    def num_levels(self) -> int:
        """Static depth bound: D_0 in Phase 1, D_max otherwise."""
        return self.d0 if self.phase == 1 else self.d_max

    @property
    def widths(self) -> tuple[int, ...]:
        return level_widths(self.n_max, self.num_levels, self.b_max)

    @property
    def budget(self) -> int:
        return self.n_max

    @property
    def verify_widths(self) -> tuple[int, ...]:
        """The target verifies the packed tree at the smallest of these widths holding it
        (4, 6, 9, 14, ...: steps of 1.5x, since off an accelerator the target's cost grows
        with every token it verifies)."""
        return width_buckets(self.n_max, smallest=4, factor=1.5)

    @property
    def max_depth(self) -> int:
        return len(self.widths)

    def validate(self, target_cfg: ModelConfig) -> None:
        check_compatible(self.draft_cfg, target_cfg)

    def default_knobs(self, batch: int) -> Knobs:
        return Knobs(tau_h=self.tau_h, tau_l=self.tau_l, d0=self.d0, d_max=self.d_max, b_min=self.b_min,
                     b_mid=self.b_mid, b_max=self.b_max, rho_stop=self.rho_stop, rho_deep=self.rho_deep,
                     tau=self.tau).broadcast(batch)

    def phase_knobs(self, knobs: Knobs) -> Knobs:
        """The knobs `build_tree` gets: Phase 1 turns off the depth gate (d_max = d0) and
        pruning (rho_stop = rho_deep = tau = 0, log -inf); Phases 2 and 3 use them as they are."""
        if self.phase == 1:
            off = jnp.zeros_like(knobs.tau_h)
            return knobs.replace(rho_stop=off, rho_deep=off, tau=off, d_max=knobs.d0)
        return knobs

    def init(self, params, tokens, prompt_lengths, max_new_tokens: int, context=None) -> DynaTreeState:
        b = tokens.shape[0]
        if isinstance(params, DynaTreeParams):
            params, knobs = params.lm, params.knobs.broadcast(b)
        else:
            knobs = self.default_knobs(b)
        # Level d is written at region offset o_d <= N with at most its static width W_d.
        slots = draft_cache_slots(tokens.shape[1], max_new_tokens, self.n_max + max(self.widths))
        lm = init_state(self.draft_cfg, params, tokens, prompt_lengths, slots, self.n_max)
        w = self.sched.window
        return DynaTreeState(lm=lm, knobs=knobs, window=jnp.zeros((b, w), jnp.float32),
                             count=jnp.zeros((b,), jnp.int32))

    def log_probs(self, sampling) -> Callable:
        """Draft log-probs: plain softmax when greedy (the paper), else the processed law."""
        return (lambda x: jax.nn.log_softmax(x.astype(jnp.float32), axis=-1)) if sampling.greedy else sampling.log_probs

    def propose(self, state: DynaTreeState, root, active, key, sampling):
        """Returns (Tree [B, N_max], None, state)."""
        log_probs = self.log_probs(sampling)
        root_logits, lm = catch_up(self.draft_cfg, state.lm, root, active)
        tree, info, lm = build_tree(log_probs(root_logits), draft_lm_level_fn(self.draft_cfg, log_probs), lm,
                                    self.phase_knobs(state.knobs), max_nodes=self.n_max, num_levels=self.num_levels,
                                    max_branch=self.b_max, active=active)
        return tree, None, state.replace(lm=lm.replace(forwarded=info.forwarded))

    def observe(self, state: DynaTreeState, verified) -> DynaTreeState:
        """verified: `specjax.drafters.protocol.Verified` (tree, kept walk result, active rows)."""
        result, active = verified.result, verified.active
        if self.phase == 3:
            knobs, window, count = update_history(state.knobs, state.window, state.count,
                                                  acceptance_statistic(verified.tree, result), active, self.sched)
            state = state.replace(knobs=knobs, window=window, count=count)
        return state.replace(lm=commit_path(state.lm, result, active))
