"""Graft: prune the EAGLE-2 draft tree at confidence checkpoints, graft retrieval into the freed budget.

Graft: "Draft Less, Retrieve More: Hybrid Tree Construction for Speculative Decoding"
(arXiv 2605.20104). One round (its §3.1-3.3 and App. A, Alg. 1-2), for a budget of K_max
tree nodes:

  1. root step of the AR drafter -> the depth-1 candidates; checkpoint d0: the confidence
     c = exp(max cumulative draft log-prob S of the newest depth) against tau_0;
  2. expand depth by depth (EAGLE-2: frontier = the step's top_k candidates by S); after 1
     and after 5 expansions test c against tau_1 / tau_2; the first failure fixes the row's
     stage s and stops its drafting (a `lax.while_loop` runs while any row still expands);
  3. keep the K^draft_s best candidates by S (8 / 24 / 40, or all K_max if never pruned);
  4. graft the stage's static retrieval template (52 / 36 / 20 nodes, Table 7 counts) under
     the root, tokens x_u = M[x_parent(u), r_u] from the successor table M
     (`specjax.drafters.retrieval`); paths the draft already holds merge into the draft
     node, slots a merge or an empty table entry frees go to the next draft candidates, so
     the tree has exactly K_max valid nodes unless the candidates run out;
  5. the target verifies the tree (greedy walk, or the sampling walk at T > 0: lossless for
     any tree); `observe` writes the target's top-k at EVERY verified slot into M (last
     writer wins) before the next round's retrieval, and updates the drafter.

Variants at the same budget (the paper's ablations): `prune=False, retrieval=False` is the
dense EAGLE-2/3 tree; `retrieval=False` is pruning alone ("w/o retrieval": freed slots stay
empty and the target verifies only the kept prefix); `fixed_stage=s` drafts the whole tree
and grafts stage s's split every round (Graft(ROOT) / "w/o prune", default the d5 split 40 +
20); `tail=True` grafts a template under the end of the draft's most probable deepest branch
instead of the root (Graft(TAIL)).

Thresholds live in the params (`GraftParams.thresholds`, calibrated at warm-up, not static:
changing them does not recompile); the table lives in the params too and comes back in the
final state, so a warm table passes from one `generate` to the next (hot start).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from specjax.drafters.eagle2_tree import TREE_FIELDS, DraftLMStepper, pool_expand, pool_start, ranked
from specjax.drafters.eagle3 import Eagle3Stepper
from specjax.drafters.grafting import graft
from specjax.drafters.protocol import PromptContext, Verified
from specjax.drafters.retrieval import (PAPER_TEMPLATES, Template, accepted_from_table, empty_table,
                                        retrieve, union, update_from_prompt, update_from_round)
from specjax.drafters.spec import Build, Field, MethodSpec, fields_from

__all__ = [
    "calibrate_thresholds", "draft_steps", "graft_params", "GraftDrafter", "GraftParams", "GraftState", "METHODS",
    "PAPER_THRESHOLDS", "record_round", "speed_proxy",
]

PAPER_THRESHOLDS = (0.14, 0.14, 0.49)  # Table 11 (Qwen3-8B), medians over the five datasets


@struct.dataclass
class GraftParams:
    """Graft's draft params (`graft_params` builds them with host checks); S = number of checkpoints.

    Fields:
      base: the AR drafter's params (the draft LM's or EAGLE-3's; DFlash's for the DFlash variants).
      table: int32[V, k] the successor table M: row x holds the target's top-k next tokens seen after
        x, best first (-1 = empty); a warm table carries over between requests (`carry_over`).
      thresholds: f32[S] confidence thresholds tau_s in [0, 1], one per checkpoint: a row whose
        confidence c <= tau_s at checkpoint s is pruned there (params, not static: no recompile).
    """

    base: object
    table: jax.Array
    thresholds: jax.Array


def graft_params(base, vocab_size: int, width: int = 8, thresholds=PAPER_THRESHOLDS, table=None) -> GraftParams:
    """GraftParams with checks on the host: an empty table of width k unless `table` (a warm one)."""
    thr = np.asarray(thresholds, np.float32).reshape(-1)
    if not np.all((thr >= 0) & (thr <= 1)):
        raise ValueError(f"Graft thresholds are confidences in [0, 1], got {thr.tolist()}")
    if table is None:
        table = empty_table(vocab_size, width)
    elif tuple(table.shape) != (vocab_size, width):
        raise ValueError(f"successor table has shape {tuple(table.shape)}, this target needs ({vocab_size}, {width})")
    return GraftParams(base=base, table=jnp.asarray(table, jnp.int32), thresholds=jnp.asarray(thr))


@struct.dataclass
class GraftState:
    """Graft's state (B rows, N = K_max, S checkpoints, R = max_new_tokens rounds at most; per-round
    records hold -1 past the row's last round).

    Fields:
      inner: the AR stepper's state (e.g. a `DraftLMState` or an `Eagle3State`).
      table: int32[V, k] the successor table, updated from the prefill and from every verified slot.
      thresholds: f32[S] the confidence thresholds (from the params).
      root: int32[B] the root of the last proposed tree (the table row its retrieval read).
      node_slots: int32[B, N] region slot each node of the proposed tree was forwarded at, or -1.
      retrieved: bool[B, N] nodes of the proposed tree that came from the table.
      stage: int32[B, R] per round, the stage s the row was pruned at (checkpoint index), S = never
        pruned (or `fixed_stage` when set).
      retrieved_accepted: int32[B, R] per round, accepted nodes that came from the table.
      num_rounds: int32[B] rounds verified per row.
    """

    inner: object
    table: jax.Array
    thresholds: jax.Array
    root: jax.Array
    node_slots: jax.Array
    retrieved: jax.Array
    stage: jax.Array
    retrieved_accepted: jax.Array
    num_rounds: jax.Array


@dataclasses.dataclass(frozen=True)
class GraftDrafter:
    """Graft over an AR `stepper` (EAGLE-3's `Eagle3Stepper` or the draft LM's `DraftLMStepper`).

    Proposes Tree [B, K_max] (exactly K_max valid nodes while candidates last); params
    `GraftParams(base, table int32[V, k], thresholds f32[S])`; state `GraftState` (the table,
    per-round stage int32[B, R] and retrieved_accepted int32[B, R]). Variants: module docstring.

    Fields:
      stepper: the AR stepper the EAGLE-2 tree is grown with (a `DraftLMStepper` gets max_pending
        raised to the walk's max depth: retrieved paths are never forwarded by the draft LM).
      top_k: k >= 1, the EAGLE-2 tree's children per node and frontier width (10).
      depth: D >= 1, expansion steps after the root step (8; the draft is at most D + 1 deep).
      total: K_max, the tree budget (60; <= k + D k^2).
      width: k >= 1, the table width (8; the target's top-k recorded per token).
      checkpoints: expansions after the root step at which confidence is tested, distinct and
        ascending in [0, depth] (0 = the root step); S = their count.
      stage_draft: K^draft_s per checkpoint: draft candidates kept when a row is pruned there.
      templates: per-depth node counts of each stage's retrieval template (Table 7), one per
        checkpoint; K^draft_s + template size = K_max.
      prune: True prunes by confidence at the checkpoints; False drafts the whole tree (with
        fixed_stage -1: the dense EAGLE-2 tree, no retrieval).
      retrieval: True grafts the stage's template into the freed budget; False leaves the freed
        slots empty (pruning alone; the target verifies only the kept prefix).
      fixed_stage: -1 prunes by confidence; s in [0, S) drafts the whole tree and uses stage s's split
        every round (Graft(ROOT) / "w/o prune"); with tail=True it picks the tail template (-1: the last).
      tail: True grafts the template under the end of the draft's most probable deepest branch
        instead of the root (Graft(TAIL)); the draft keeps K_max - template size nodes every round
        (a fixed split: needs fixed_stage >= 0 or prune=False).
      merge: True merges retrieved paths the draft already holds into its nodes; False keeps the
        duplicates as siblings (for tests).
      rank_prior: the template construction's prior w(r) that rank r of a table row is right, one value in
        (0, 1] per rank (>= width of them; e.g. `measured_rank_prior`); None: 2^-(r+1).
    """

    stepper: object
    top_k: int = 10
    depth: int = 8
    total: int = 60
    width: int = 8
    checkpoints: tuple[int, ...] = (0, 1, 5)
    stage_draft: tuple[int, ...] = (8, 24, 40)
    templates: tuple[tuple[int, ...], ...] = (PAPER_TEMPLATES["d0"], PAPER_TEMPLATES["d1"], PAPER_TEMPLATES["d5"])
    prune: bool = True
    retrieval: bool = True
    fixed_stage: int = -1
    tail: bool = False
    merge: bool = True
    rank_prior: tuple[float, ...] | None = None

    def __post_init__(self):
        s = len(self.checkpoints)
        if self.width < 1:
            raise ValueError(f"Graft table width k must be >= 1, got {self.width}")
        if self.top_k < 1 or self.depth < 1:
            raise ValueError(f"Graft needs top_k >= 1 and depth >= 1, got {self.top_k}, {self.depth}")
        if len(self.stage_draft) != s or len(self.templates) != s:
            raise ValueError(f"one draft budget and one template per checkpoint: {s} checkpoints, "
                             f"{len(self.stage_draft)} budgets, {len(self.templates)} templates")
        if list(self.checkpoints) != sorted(set(self.checkpoints)) or not all(0 <= c <= self.depth
                                                                              for c in self.checkpoints):
            raise ValueError(f"checkpoints must be distinct, ascending, in [0, depth={self.depth}], got "
                             f"{self.checkpoints}")
        for i, (n, t) in enumerate(zip(self.stage_draft, self.stage_templates)):
            if n < 1 or n > self.total:
                raise ValueError(f"K_max {self.total} is smaller than stage {i}'s draft budget {n} (or it is < 1)")
            if n + t.size != self.total:
                raise ValueError(f"stage {i}: draft {n} + template {t.size} nodes must equal K_max {self.total}")
            if t.max_depth > self.depth + 1:
                raise ValueError(f"stage {i}'s template is {t.max_depth} deep, deeper than the tree "
                                 f"(depth {self.depth} expansions -> {self.depth + 1} levels)")
        if not -1 <= self.fixed_stage < s:
            raise ValueError(f"fixed_stage must be -1 (prune by confidence) or a stage in [0, {s}), got "
                             f"{self.fixed_stage}")
        if self.tail and self.prune and self.fixed_stage < 0:
            # TAIL's split is fixed (K_max - template draft nodes every round); a row pruned at a
            # checkpoint would leave its freed budget empty instead of filled by retrieval.
            raise ValueError("Graft(TAIL) drafts the whole tree with a fixed split: confidence pruning "
                             "(prune=True, fixed_stage=-1) does not combine with tail=True; set fixed_stage "
                             "to the stage whose template to graft, or prune=False")
        if self.top_k + self.depth * self.top_k ** 2 < self.total:
            raise ValueError(f"K_max {self.total} exceeds the candidate pool ({self.top_k} + {self.depth} * "
                             f"{self.top_k}^2)")
        if isinstance(self.stepper, DraftLMStepper) and self.stepper.max_pending < self.max_depth:
            # retrieved paths are never forwarded by the draft LM: up to a whole path waits
            object.__setattr__(self, "stepper", dataclasses.replace(self.stepper, max_pending=self.max_depth))

    # ---------------------------------------------------------------- static attributes
    @property
    def stage_templates(self) -> tuple[Template, ...]:
        return tuple(Template.from_counts(c, self.width, self.rank_prior) for c in self.templates)

    @property
    def tail_template(self) -> Template:
        """Graft(TAIL): the fixed stage's template (default the last, d5) under a draft leaf."""
        return self.stage_templates[self.fixed_stage]

    @property
    def budget(self) -> int:
        return self.total

    @property
    def max_depth(self) -> int:
        extra = self.tail_template.max_depth if (self.tail and self.retrieval) else 0
        return self.depth + 1 + extra

    @property
    def target_layers(self) -> tuple[int, ...]:
        return tuple(self.stepper.target_layers)

    @property
    def target_topk(self) -> int:
        return self.width

    @property
    def verify_widths(self) -> tuple[int, ...]:
        """Pruning alone leaves the kept K^draft_s nodes at the front: verify only those."""
        if self.retrieval or not self.prune:
            return (self.total,)
        return tuple(sorted(set(self.stage_draft) | {self.total}))

    @property
    def num_stages(self) -> int:
        return len(self.checkpoints)

    def validate(self, target_cfg) -> None:
        self.stepper.validate(target_cfg)
        if self.top_k > target_cfg.vocab_size or self.width > target_cfg.vocab_size:
            raise ValueError(f"top_k {self.top_k} / table width {self.width} exceed the vocabulary "
                             f"({target_cfg.vocab_size})")

    def uses_rejection(self, sampling) -> bool:
        return False  # the sampling walk: EAGLE's point-mass rejection (evaluate_posterior) draws the same law

    # ---------------------------------------------------------------- the round
    def init(self, params: GraftParams, tokens, prompt_lengths, max_new_tokens: int,
             context: PromptContext | None = None) -> GraftState:
        if not isinstance(params, GraftParams):
            raise TypeError(f"Graft's draft params are a GraftParams (graft_params(base, vocab)), got "
                            f"{type(params).__name__}")
        if params.table.shape[1] != self.width or params.thresholds.shape != (self.num_stages,):
            raise ValueError(f"GraftParams has a table of width {params.table.shape[1]} and "
                             f"{params.thresholds.shape} thresholds; this drafter needs width {self.width} and "
                             f"{self.num_stages} thresholds")
        b = tokens.shape[0]
        inner = self.stepper.init(params.base, tokens, prompt_lengths, max_new_tokens, context,
                                  region=self.depth * self.top_k, max_depth=self.max_depth)
        table = params.table
        if context is not None and context.top_ids is not None:
            table = update_from_prompt(table, tokens, prompt_lengths, context.top_ids)
        minus = jnp.full((b, max_new_tokens), -1, jnp.int32)
        return GraftState(inner=inner, table=table, thresholds=params.thresholds.astype(jnp.float32),
                          root=jnp.zeros((b,), jnp.int32), node_slots=jnp.full((b, self.total), -1, jnp.int32),
                          retrieved=jnp.zeros((b, self.total), bool), stage=minus, retrieved_accepted=minus,
                          num_rounds=jnp.zeros((b,), jnp.int32))

    def draft(self, state: GraftState, root, active):
        """Grow the pool with checkpoint gating: -> (DraftPool, stage int32[B], inner)."""
        k, s = self.top_k, self.num_stages
        pool, inner = pool_start(self.stepper, state.inner, root, active, k, self.depth)
        gating = self.prune and self.fixed_stage < 0
        thr = state.thresholds
        stage = jnp.full(root.shape, s if self.fixed_stage < 0 else self.fixed_stage, jnp.int32)
        expanding = active
        if gating and self.checkpoints[0] == 0:
            fail = expanding & (jnp.exp(jnp.max(pool.score[:, :k], axis=1)) <= thr[0])
            stage, expanding = jnp.where(fail, 0, stage), expanding & ~fail
        ck = jnp.asarray(self.checkpoints, jnp.int32)

        def cond(carry):
            i, _, _, _, expanding = carry
            return (i < self.depth) & jnp.any(expanding)

        def body(carry):
            i, pool, inner, stage, expanding = carry
            pool, inner, cum = pool_expand(self.stepper, inner, pool, i, k, self.depth, keep=expanding)
            if gating:
                hit = ck == i + 1
                conf = jnp.exp(jnp.max(cum, axis=1))
                fail = expanding & jnp.any(hit) & (conf <= jnp.sum(jnp.where(hit, thr, 0.0)))
                stage = jnp.where(fail, jnp.argmax(hit).astype(jnp.int32), stage)
                expanding = expanding & ~fail
            return i + 1, pool, inner, stage, expanding

        _, pool, inner, stage, _ = jax.lax.while_loop(cond, body, (jnp.int32(0), pool, inner, stage, expanding))
        return pool, stage, inner

    def propose(self, state: GraftState, root, active, key, sampling):
        """-> (Tree [B, K_max], None, state); inactive rows get an empty tree."""
        b, n = root.shape[0], self.total
        pool, stage, inner = self.draft(state, root, active)
        idx = ranked(pool, n)  # [B, N] the best candidates, best first
        rows = jnp.arange(b)[:, None]
        rank_of = jnp.full(pool.tok.shape, -1, jnp.int32).at[rows, idx].set(jnp.arange(n, dtype=jnp.int32))
        par = jnp.take_along_axis(pool.parent, idx, axis=1)
        cand_par = jnp.where(par >= 0, jnp.take_along_axis(rank_of, jnp.maximum(par, 0), axis=1), -1)
        cand_tok, cand_depth = (jnp.take_along_axis(x, idx, axis=1) for x in (pool.tok, pool.depth))
        cand_ok = jnp.isfinite(jnp.take_along_axis(pool.score, idx, axis=1)) & active[:, None]
        cand_slot = jnp.take_along_axis(pool.slot, idx, axis=1)
        budgets = jnp.asarray(self.stage_draft + (n,), jnp.int32)
        if self.tail:
            template, member = self.tail_template, np.ones((1, self.tail_template.size), bool)
            num_draft = jnp.full((b,), n - (template.size if self.retrieval else 0), jnp.int32)
            kept = cand_ok & (jnp.arange(n)[None] < num_draft[:, None])
            # the end of the most probable deepest branch: deepest kept candidate, best score first
            anchor = jnp.argmax(jnp.where(kept, cand_depth * 2 * n - jnp.arange(n)[None], -1), axis=1).astype(jnp.int32)
            anchor_tok = jnp.take_along_axis(cand_tok, anchor[:, None], axis=1)[:, 0]
            ret_member = jnp.broadcast_to(jnp.asarray(member[0]), (b, template.size)) & self.retrieval
        else:
            template, member = union(self.stage_templates)
            member = np.concatenate([member, np.zeros((1, template.size), bool)])  # the never-pruned stage
            num_draft = budgets[stage]
            anchor, anchor_tok = jnp.full((b,), -1, jnp.int32), root
            ret_member = jnp.asarray(member)[stage] & self.retrieval
        ret_tok = retrieve(state.table, anchor_tok, template)
        tree, node_slots, retrieved = graft(cand_tok, cand_par, cand_depth, cand_ok, cand_slot, num_draft, ret_tok,
                                            template, ret_member, anchor, n, merge=self.merge, fill=self.retrieval)
        return tree, None, state.replace(inner=inner, root=root, node_slots=node_slots, retrieved=retrieved,
                                         stage=record_round(state.stage, state.num_rounds, active, stage))

    def carry_over(self, params: GraftParams, state: GraftState) -> GraftParams:
        """The next request's params: the table as this generation left it (hot start)."""
        return params.replace(table=state.table)

    def observe(self, state: GraftState, verified: Verified) -> GraftState:
        ret_acc = record_round(state.retrieved_accepted, state.num_rounds, verified.active,
                               accepted_from_table(state.retrieved, verified.result))
        return state.replace(inner=self.stepper.observe(state.inner, verified, state.node_slots),
                             table=update_from_round(state.table, state.root, verified), retrieved_accepted=ret_acc,
                             num_rounds=state.num_rounds + verified.active.astype(jnp.int32))


def record_round(history: jax.Array, num_rounds: jax.Array, active: jax.Array, value: jax.Array) -> jax.Array:
    """history [B, R] with this round's `value` [B] written at column num_rounds[b] (clamped to
    R - 1) for the active rows bool[B]; other rows keep their entry."""
    rows = jnp.arange(history.shape[0])
    r = jnp.minimum(num_rounds, history.shape[1] - 1)
    return history.at[rows, r].set(jnp.where(active, value.astype(history.dtype), history[rows, r]))


# ============================================================================ calibration at warm-up


def draft_steps(drafter: GraftDrafter, stage) -> np.ndarray:
    """Drafter forwards a round costs at each recorded stage: 1 + the checkpoint's expansions
    (1 / 2 / 6 for d0 / d1 / d5), 1 + depth if never pruned (-1 entries -> 0)."""
    stage = np.asarray(stage)
    steps = np.asarray([1 + c for c in drafter.checkpoints] + [1 + drafter.depth])
    return np.where(stage >= 0, steps[np.clip(stage, 0, len(steps) - 1)], 0)


def speed_proxy(drafter: GraftDrafter, out, step_cost: float) -> float:
    """Tokens per unit of time, with one verify forward = 1 and one drafter forward = step_cost:
    sum(accepted + 1) / sum(1 + step_cost * draft steps) over every round of `out`."""
    acc = np.asarray(out.stats.accepted)
    rounds = acc >= 0
    steps = draft_steps(drafter, out.draft_state.stage)
    return float(np.sum(np.where(rounds, acc + 1, 0)) / np.sum(np.where(rounds, 1 + step_cost * steps, 0)))


def calibrate_thresholds(run, drafter: GraftDrafter, *, step_cost: float,
                         grid=(0.0, 0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 0.7), sweeps: int = 2, start=None):
    """Our calibration rule (Graft App. C.3-C.4 calibrate at warm-up but give no rule): coordinate ascent of
    the speed proxy (`speed_proxy`) over one threshold at a time, checkpoints in order, each
    over `grid`, `sweeps` passes; ties keep the smaller threshold (less pruning).

    run(thresholds tuple) -> a `generate` output on the warm-up prompts (same table snapshot
    for every call, so only the thresholds differ; thresholds are params: no recompile).
    step_cost: measured drafter-forward time / target-verify time on the deployment device.
    Returns (thresholds, [(thresholds, proxy, MAT), ...] for every evaluated setting)."""
    thr = list(start if start is not None else (0.0,) * drafter.num_stages)
    seen: dict[tuple, tuple[float, float]] = {}

    def score(t):
        t = tuple(float(x) for x in t)
        if t not in seen:
            out = run(t)
            acc = np.asarray(out.stats.accepted)
            mat = float(np.sum(np.where(acc >= 0, acc + 1, 0)) / max(np.sum(acc >= 0), 1))
            seen[t] = (speed_proxy(drafter, out, step_cost), mat)
        return seen[t][0]

    for _ in range(sweeps):
        for s in range(drafter.num_stages):
            best = max(grid, key=lambda v: (score(thr[:s] + [v] + thr[s + 1:]), -v))
            thr[s] = best
    return tuple(thr), [(t, p, m) for t, (p, m) in seen.items()]


_VARIANTS = {"graft": ({}, "Graft (prune-then-graft): the EAGLE-2 tree of EAGLE-3 (base=eagle3) or the draft LM "
                           "(base=lm), pruned at confidence checkpoints, retrieval grafted from the successor table "
                           "(`GraftDrafter`)"),
             "graft-root": (dict(fixed_stage=2), "Graft(ROOT): the fixed split without pruning (40 draft + 20 "
                                                 "retrieved at the root every round)"),
             "graft-tail": (dict(fixed_stage=2, tail=True), "Graft(TAIL): the 20-node template under the draft's "
                                                            "best deepest leaf"),
             "graft-prune": (dict(retrieval=False), "Graft's pruning without retrieval (\"w/o retrieval\")"),
             "graft-dense": (dict(prune=False, retrieval=False), "neither pruning nor retrieval: the dense tree "
                                                                 "through Graft's code")}


def _needs(values) -> tuple[str, ...]:
    return ("target", "draft") if values["base"] == "lm" else ("target", "eagle3")


def _build(b: Build, variant: dict):
    v = b.values
    if v["base"] not in ("eagle3", "lm"):
        raise ValueError(f"Graft field 'base' is eagle3 or lm, got {v['base']!r}")
    try:
        thr = tuple(float(x) for x in v["thr"].split("/")) if v["thr"] is not None else PAPER_THRESHOLDS
    except ValueError:
        raise ValueError(f"Graft field 'thr' is three confidences a/b/c, got {v['thr']!r}") from None
    if v["base"] == "eagle3":
        cfg, base_params = b.need("eagle3")
        stepper = Eagle3Stepper(cfg, b.target_cfg)
    else:
        cfg, base_params = b.need("draft")
        if base_params is None:
            raise ValueError(f"method {b.spec!r} needs the draft model's params (base=lm wraps them with its table)")
        stepper = DraftLMStepper(cfg)
    drafter = GraftDrafter(stepper, top_k=v["topk"], depth=v["depth"], total=v["total"], width=v["width"],
                           merge=bool(v["merge"]), **variant)
    return drafter, graft_params(base_params, b.target_cfg.vocab_size, drafter.width, thr)


_FIELDS = (*TREE_FIELDS, *fields_from(GraftDrafter, {"width": "width", "merge": "merge"}, merge=int),
           Field("thr", str, None, "the three checkpoint confidences a/b/c (default: the paper's)"),
           Field("base", str, "eagle3", "what grows the tree: eagle3 (the EAGLE-3 drafter) or lm (the draft LM)"))
METHODS = tuple(MethodSpec(name, (name,), text, (lambda b, kw=kw: _build(b, kw)), fields=_FIELDS, needs=_needs,
                           label="Graft") for name, (kw, text) in _VARIANTS.items())
