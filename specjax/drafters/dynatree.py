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

The batched, static-shape construction (`build_tree`: packed levels grown in one
`lax.while_loop`, at most one draft forward per level at an adaptive width) is the shared
level engine of specjax/drafters/level_tree.py; its names are re-exported here.

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
Shapes: B batch, N = N_max budget, V vocab, K = B_max.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import jax
import jax.numpy as jnp
from flax import struct

from specjax.drafters.draft_lm import (DraftLMDrafter, DraftLMState, catch_up, check_compatible, commit_path,
                                       draft_cache_slots, init_state)
from specjax.drafters.level_tree import (THRESHOLDS, Knobs, Level, LevelFn, TreeInfo, build_tree, draft_lm_level_fn,
                                         expand_level_topk, level_widths, log_thresholds)
from specjax.drafters.spec import Build, Field, MethodSpec, fields_from
from specjax.models.model import ModelConfig
from specjax.ops import verify_buckets
from specjax.tree import Tree, tree_depth
from specjax.verify import WalkResult

__all__ = [
    "DynaTreeDrafter", "DynaTreeParams", "DynaTreeState", "METHODS", "ZOO_PRESET", "Schedule", "acceptance_statistic",
    "update_history",
    # the level engine, re-exported from specjax.drafters.level_tree (they lived here first)
    "THRESHOLDS", "Knobs", "Level", "LevelFn", "TreeInfo", "build_tree", "draft_lm_level_fn", "expand_level_topk",
    "level_widths", "log_thresholds",
]


# ======================================================================== state


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
      lm: the draft LM's `DraftLMState` (its KV cache [L, B, K, S, D], pending tokens, forwarded nodes).
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
    `DynaTreeState`: the draft LM's KV cache [L, B, K, S, D] and the acceptance history.

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
        """The target verifies the packed tree at the smallest of these widths holding it:
        3, 7, 15, ... nodes past the root (forwards of 4, 8, 16, ... rows: `ops.verify_buckets`,
        the row counts a CPU's products run fastest at; 4 and 8 nodes were 5 and 9 rows, which
        cost as 8 and 16). Each width is one compiled target forward: steps of 1.5x waste
        less of a CPU verify but took 12 branches and most of DynaTree's first compile
        (issue 16 item 5); on a GPU `ops.device_widths` drops those below the flat size anyway."""
        return verify_buckets(self.n_max)

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
        # Level d is forwarded at region offset o_d <= N - 1 with at most W = max(widths)
        # slots (level_tree.build_tree), so its writes stay below N + W region slots.
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


def _build(b: Build):
    phase = b.values["P"]
    if phase not in (1, 2, 3):
        raise ValueError(f"unknown DynaTree phase in {b.spec!r}: use dynatree-p1, dynatree-p2 or dynatree-p3")
    return DynaTreeDrafter(b.need("draft")[0], phase=phase, **b.given), None


# `dynatree-zoo`: Phase 3 tuned for the embedded pair (specjax.zoo) on *validation* wiki prompts
# (notebooks/dynatree.py): its weak draft is rarely confident, so the paper's gates (rho_stop 0.1,
# tau 0.05) stop paths after one or two tokens, and on a CPU every verified node costs target time:
# narrow (B_max 2, B_mid 1, a second child only when c(u) < 0.1), small (N_max 16), loosely gated trees.
ZOO_PRESET = ("dynatree-p3:n_max=16,d_max=6,d0=5,b_mid=1,b_max=2,tau_l=0.1,rho_stop=0.00001,rho_deep=0.00005,"
              "tau=0.001")
_KNOBS = [f.name for f in dataclasses.fields(DynaTreeDrafter)
          if f.name != "phase" and isinstance(f.default, (bool, int, float))]
METHODS = (MethodSpec("dynatree", ("dynatree-p<P>",),
                      "DynaTree, Phase 1 / 2 / 3 of the paper's ablation, paper defaults (`DynaTreeDrafter`)", _build,
                      positional=(Field("P", int, 3, "phase: 1, 2 or 3"),),
                      fields=fields_from(DynaTreeDrafter, {k: k for k in _KNOBS}), needs=("draft",),
                      aliases=(("dynatree", "dynatree-p3"), ("dynatree-zoo", ZOO_PRESET)), label="DynaTree"),)
