"""DDTree + retrieval: graft the successor table into a DDTree budget (in no paper; issue 15).

DDTree's tree is optimal for the drafter's own law: the N most probable prefixes under
Q = prod_d q_d maximise sum_{u in T} q(u) = E_{Y~Q}[alpha_T(Y)] (DDTree Prop. 1-2). If q
were the target's law nothing could beat it at equal N. It is not: a block drafter's
marginals miss what the text has already said, which is exactly what Graft's successor
table remembers. This drafter asks whether retrieval still pays inside a surrogate-optimal
budget: of the N verified nodes, the first N - U of DDTree's selection order are kept and a
U-node retrieval template is grafted under the root (`specjax.drafters.grafting.graft`:
paths compared by token content, a retrieved path DDTree already holds merges into its
node, and every slot a merge or an empty table entry frees goes to DDTree's next prefix in
the selection order, so the tree still has N nodes while candidates last). With U = 0 this
is DDTree itself; DDTree's pruning (q(u) < m / N dropped) applies to its own candidates.

Per round the drafter also records `surrogate`: sum_{u in T} q(u) of the tree actually
verified (retrieved nodes scored by q too), and `optimal_surrogate`, the same sum over
DDTree's own N-node tree from the same marginals (never smaller, Prop. 2), so a notebook
can set the realised acceptance against what the surrogate predicts; and
`retrieved_accepted`: accepted nodes that came from the table.

The table is Graft's (int32[V, k], filled from the prefill and from every verified slot
before the next retrieval, last writer wins, hot start via `carry_over`); the params are a
`GraftParams` whose `base` is the block drafter's params (thresholds unused: ()).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import struct
from jax import lax

from specjax.drafters.ddtree import DDTreeDrafter, DDTreeState
from specjax.drafters.dflash import BLOCK, block_drafter
from specjax.drafters.graft import GraftParams, graft_params, record_round
from specjax.drafters.grafting import graft
from specjax.drafters.protocol import Verified, Wrapper
from specjax.drafters.retrieval import (PAPER_TEMPLATES, Template, accepted_from_table, retrieve,
                                        update_from_prompt, update_from_round)
from specjax.drafters.spec import Build, Field, MethodSpec, fields_from
from specjax.tree import Tree

__all__ = ["DDTreeGraftDrafter", "DDTreeGraftState", "METHODS", "tree_log_q"]


@struct.dataclass
class DDTreeGraftState:
    """DDTree + retrieval's state (B rows, N = the DDTree budget, R = max_new_tokens rounds at most).

    Fields:
      ddtree: DDTree's state (the block drafter's state; `surrogate` f32[B, R] here is that of the
        tree actually verified, retrieved nodes scored by q too; num_rounds int32[B]).
      table: int32[V, k] Graft's successor table (-1 = empty), updated from the prefill and every round.
      root: int32[B] the root of the last proposed tree (the key its table lookup used).
      retrieved: bool[B, N] nodes of the last proposed tree that came from the table.
      retrieved_accepted: int32[B, R] accepted nodes that came from the table, per round; -1 past the
        row's last round.
      optimal_surrogate: f32[B, R] the surrogate of DDTree's own N-node tree from the same marginals
        in the same round (what grafting gave up under q); -1 past the row's last round.
    """

    ddtree: DDTreeState
    table: jax.Array
    root: jax.Array
    retrieved: jax.Array
    retrieved_accepted: jax.Array
    optimal_surrogate: jax.Array


def tree_log_q(tree: Tree, log_q: jax.Array) -> jax.Array:
    """log q(u) = sum_i log q_i(u_i) of every node: tree [B, N] (parents before children,
    depth <= L), log_q f32[B, L, V] -> f32[B, N] (-inf on invalid nodes)."""
    b, n = tree.tokens.shape
    depth = jnp.clip(tree.depth - 1, 0, log_q.shape[1] - 1)
    own = log_q[jnp.arange(b)[:, None], depth, tree.tokens]  # [B, N]
    score = jnp.where(tree.valid & (tree.depth == 1), own, -jnp.inf)
    parents = jnp.maximum(tree.parents, 0)

    def level(d, score):  # depth d's nodes from their parents one level up
        return jnp.where(tree.valid & (tree.depth == d), jnp.take_along_axis(score, parents, axis=1) + own, score)

    # A loop, not L unrolled passes: each pass reads the previous twice, and XLA fused the unrolled chain into
    # one expression with 2^L copies of the first (69 s to compile at L = 15 on XLA:CPU).
    return lax.fori_loop(2, int(log_q.shape[1]) + 1, level, score)


@dataclasses.dataclass(frozen=True)
class DDTreeGraftDrafter(Wrapper):
    """DDTree with U retrieval-template nodes grafted into its budget (module docstring).

    The template: Graft's Table 7 template when U is one of its sizes (20 / 36 / 52) and it
    fits the block's depth, else the best-first template of U rank paths under the rank
    prior 2^-(r+1) (`Template.best_first`), at most min(9, L) deep: never deeper than the block,
    so the block drafter's pending-feature buffer (L + 1 rows) holds any accepted path.

    Proposes Tree [B, N] (N = the DDTree budget, depth <= L = the block drafter's positions);
    params: `GraftParams(base, table int32[V, k], thresholds ())`; state: `DDTreeGraftState`.

    Fields:
      ddtree: a `DDTreeDrafter` (its block drafter, budget N, pruning, verify widths): the first
        N - U nodes of its selection order are kept.
      retrieval: U, the template nodes grafted into the budget (1 <= U < N; U = 0 would be DDTree).
      width: k >= 1, the table width (successors kept per token; <= the vocabulary).
      merge: True merges retrieved paths DDTree already holds into its nodes (the freed slots go to
        DDTree's next prefixes); False keeps duplicates as siblings (for tests).
    """

    ddtree: DDTreeDrafter
    retrieval: int
    width: int = 8
    merge: bool = True

    def __post_init__(self):
        if not isinstance(self.ddtree, DDTreeDrafter):
            raise TypeError(f"DDTreeGraftDrafter wraps a DDTreeDrafter, got {type(self.ddtree).__name__}")
        if self.width < 1:
            raise ValueError(f"table width k must be >= 1, got {self.width}")
        if not 1 <= self.retrieval < self.ddtree.budget:
            raise ValueError(f"retrieval nodes U must be in [1, N) for a DDTree budget N = {self.ddtree.budget} "
                             f"(U = 0 is DDTree itself), got {self.retrieval}")

    @property
    def template(self) -> Template:
        depth = min(9, self.ddtree.max_depth)
        for counts in PAPER_TEMPLATES.values():
            if sum(counts) == self.retrieval and len(counts) <= depth:
                return Template.from_counts(counts, self.width)
        return Template.best_first(self.retrieval, self.width, depth)

    @property
    def inner(self):
        return self.ddtree  # its depth L bounds the template's (at most min(9, L) deep)

    @property
    def budget(self) -> int:
        return self.ddtree.budget

    @property
    def target_topk(self) -> int:
        return max(self.width, self.ddtree.target_topk)

    @property
    def verify_widths(self) -> tuple[int, ...]:
        return self.ddtree.verify_widths  # `graft` puts every valid node before the padding

    def validate(self, target_cfg) -> None:
        super().validate(target_cfg)
        if self.width > target_cfg.vocab_size:
            raise ValueError(f"table width {self.width} exceeds the vocabulary ({target_cfg.vocab_size})")

    def uses_rejection(self, sampling) -> bool:
        return False  # the sampling walk, as DDTree: lossless for any fixed tree

    def init(self, params: GraftParams, tokens, prompt_lengths, max_new_tokens: int, context=None) -> DDTreeGraftState:
        if not isinstance(params, GraftParams) or params.table.shape[1] != self.width:
            raise ValueError(f"DDTree + retrieval takes GraftParams(base=block drafter params, table int32[V, "
                             f"{self.width}]) (graft_params(dflash_params, vocab, {self.width}, ()))")
        table = params.table
        if context is not None and context.top_ids is not None:
            table = update_from_prompt(table, tokens, prompt_lengths, context.top_ids)
        b, n = tokens.shape[0], self.budget
        return DDTreeGraftState(ddtree=self.ddtree.init(params.base, tokens, prompt_lengths, max_new_tokens, context),
                                table=table, root=jnp.zeros((b,), jnp.int32), retrieved=jnp.zeros((b, n), bool),
                                retrieved_accepted=jnp.full((b, max_new_tokens), -1, jnp.int32),
                                optimal_surrogate=jnp.full((b, max_new_tokens), -1.0, jnp.float32))

    def tree(self, logits: jax.Array, table: jax.Array, root: jax.Array, active: jax.Array):
        """logits f32[B, L, V], table int32[V, k], root int32[B], active bool[B] ->
        (Tree [B, N]: DDTree's first N - U prefixes + the grafted template, retrieved bool[B, N],
        surrogate f32[B] = sum_{u in T} q(u) of that tree, optimal f32[B] = the same sum over
        DDTree's own tree of N nodes). Inactive rows get an empty tree."""
        b, n = root.shape[0], self.budget
        cand, scores, ok, log_q = self.ddtree.candidates(logits, active)  # DDTree's own selection + pruning
        template = self.template
        tree, _, retrieved = graft(cand.tokens, cand.parents, cand.depth, ok, jnp.full((b, n), -1, jnp.int32),
                                   jnp.full((b,), n - self.retrieval, jnp.int32), retrieve(table, root, template),
                                   template, jnp.broadcast_to(active[:, None], (b, template.size)),
                                   jnp.full((b,), -1, jnp.int32), n, merge=self.merge, fill=True)
        optimal = jnp.sum(jnp.where(ok, jnp.exp(scores), 0.0), axis=1)
        return tree, retrieved, jnp.sum(jnp.exp(tree_log_q(tree, log_q)), axis=1), optimal

    def propose(self, state: DDTreeGraftState, root, active, key, sampling):
        """-> (Tree [B, N], None, state)."""
        inner = state.ddtree
        logits, block = self.ddtree.block_drafter.block_logits(inner.block, root, active)
        tree, retrieved, mass, optimal = self.tree(logits, state.table, root, active)
        best = record_round(state.optimal_surrogate, inner.num_rounds, active, optimal)
        inner = DDTreeState(block=block, surrogate=record_round(inner.surrogate, inner.num_rounds, active, mass),
                            num_rounds=inner.num_rounds + active.astype(jnp.int32))
        return tree, None, state.replace(ddtree=inner, root=root, retrieved=retrieved, optimal_surrogate=best)

    def carry_over(self, params: GraftParams, state: DDTreeGraftState) -> GraftParams:
        """The next request's params: the table as this generation left it (hot start)."""
        return params.replace(table=state.table)

    def observe(self, state: DDTreeGraftState, verified: Verified) -> DDTreeGraftState:
        # num_rounds was advanced in propose: this round's record is at num_rounds - 1
        rounds = state.ddtree.num_rounds - verified.active.astype(jnp.int32)
        ret_acc = record_round(state.retrieved_accepted, rounds, verified.active,
                               accepted_from_table(state.retrieved, verified.result))
        return state.replace(ddtree=self.ddtree.observe(state.ddtree, verified), retrieved_accepted=ret_acc,
                             table=update_from_round(state.table, state.root, verified))


def _build(b: Build):
    """ddtree-<N>: DDTree on the DFlash drafter; with ret=U, DDTree + retrieval (here, where both are defined)."""
    v, given = b.values, b.given
    block, params = block_drafter(b)
    ddtree = DDTreeDrafter(block, v["N"], prune_mass=v["prune"], tree_temperature=v["temp"])
    if not v["ret"]:
        if "width" in given or "merge" in given:
            raise ValueError(f"DDTree fields 'width' and 'merge' belong to retrieval (ret=U >= 1), got {b.spec!r}")
        return ddtree, params
    drafter = DDTreeGraftDrafter(ddtree, v["ret"], width=v["width"], merge=bool(v["merge"]))
    return drafter, graft_params(params, b.target_cfg.vocab_size, drafter.width, ())


METHODS = (MethodSpec("ddtree", ("ddtree-<N>",), "DDTree: the N most probable prefixes under the DFlash drafter's "
                      "marginals, verified as one tree (`DDTreeDrafter`); ret=U grafts a U-node retrieval template "
                      "into the N (`DDTreeGraftDrafter`)", _build,
                      positional=(Field("N", int, None, "tree nodes per round"),),
                      fields=(BLOCK, *fields_from(DDTreeDrafter, {"prune": "prune_mass", "temp": "tree_temperature"}),
                              Field("ret", int, 0, "retrieval nodes U grafted from the successor table (0: none)"),
                              *fields_from(DDTreeGraftDrafter, {"width": "width", "merge": "merge"}, merge=int)),
                      needs=("dflash",), label="DDTree"),)
