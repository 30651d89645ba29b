"""Token Recycling (TR): a static template filled from the successor table, no draft model.

Training-free ("Turning Trash into Treasure: Accelerating Inference of Large Language Models
with Token Recycling", arXiv 2408.08696; a baseline of Graft, arXiv 2605.20104, §4.1): each
round, from the root token, the template's tokens are
x_u = M[x_parent(u), r_u] (`specjax.drafters.retrieval.retrieve`, one gather per depth);
nodes under an empty table entry are invalid. The target verifies the tree; `observe`
writes its top-k at every verified slot into M (and `init` from the prefill), exactly as
Graft does. The table is the draft params and comes back as `state.table` (hot start).

The template: Token Recycling's own is 80 nodes, depth 6 (explicit rank paths); at a
budget of N nodes we use the best-first template under the rank prior
(`Template.best_first(N, k, depth)`), so TR runs at the same budget as Graft.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import struct

from specjax.drafters.protocol import PromptContext, Verified
from specjax.drafters.retrieval import (Template, empty_table, retrieve, template_tree, update_from_prompt,
                                       update_from_round)
from specjax.drafters.spec import Build, MethodSpec, fields_from

__all__ = ["METHODS", "RecyclingState", "TokenRecyclingDrafter"]


@struct.dataclass
class RecyclingState:
    """Token Recycling's state (B rows).

    Fields:
      table: int32[V, k] the successor table (-1 = empty), updated from the prefill and every round;
        `carry_over` hands it to the next request.
      root: int32[B] root of the last proposed tree (the table row its template was read from).
    """

    table: jax.Array
    root: jax.Array


@dataclasses.dataclass(frozen=True)
class TokenRecyclingDrafter:
    """Token Recycling at a fixed budget (module docstring); the template is `Template.best_first`.

    Proposes Tree [B, budget] filled from the table (nodes under an empty entry invalid); params:
    the table int32[V, k] itself; state `RecyclingState` (table, root int32[B]).

    Fields:
      budget: N >= 1, template nodes per round (60, Graft's K_max).
      width: k >= 1, the table width (8; <= the vocabulary): the target's top-k recorded per token.
      depth: the template's largest depth, >= 1 (9).
      rank_prior: the template construction's prior w(r) that rank r is right, one value in (0, 1] per
        rank; None: 2^-(r+1).
    """

    budget: int = 60
    width: int = 8
    depth: int = 9
    rank_prior: tuple[float, ...] | None = None

    target_layers = ()

    def __post_init__(self):
        if self.width < 1:
            raise ValueError(f"Token Recycling table width k must be >= 1, got {self.width}")
        if self.budget < 1 or self.depth < 1:
            raise ValueError(f"Token Recycling needs budget >= 1 and depth >= 1, got {self.budget}, {self.depth}")

    @property
    def template(self) -> Template:
        return Template.best_first(self.budget, self.width, self.depth, self.rank_prior)

    @property
    def max_depth(self) -> int:
        return self.template.max_depth

    @property
    def target_topk(self) -> int:
        return self.width

    def validate(self, target_cfg) -> None:
        if self.width > target_cfg.vocab_size:
            raise ValueError(f"table width {self.width} exceeds the vocabulary ({target_cfg.vocab_size})")

    def uses_rejection(self, sampling) -> bool:
        return False

    def init(self, table, tokens, prompt_lengths, max_new_tokens: int, context: PromptContext | None = None):
        if table.ndim != 2 or table.shape[1] != self.width:
            raise ValueError(f"Token Recycling's draft params are the table int32[V, {self.width}], got shape "
                             f"{tuple(table.shape)}")
        if context is not None and context.top_ids is not None:
            table = update_from_prompt(table, tokens, prompt_lengths, context.top_ids)
        return RecyclingState(table=table, root=jnp.zeros((tokens.shape[0],), jnp.int32))

    def propose(self, state: RecyclingState, root, active, key, sampling):
        template = self.template
        tree = template_tree(retrieve(state.table, root, template), template,
                             jnp.broadcast_to(active[:, None], (root.shape[0], template.size)))
        return tree, None, state.replace(root=root)

    def carry_over(self, table, state: RecyclingState):
        """The next request's params: the table as this generation left it (hot start)."""
        return state.table

    def observe(self, state: RecyclingState, verified: Verified) -> RecyclingState:
        return state.replace(table=update_from_round(state.table, state.root, verified))


def _build(b: Build):
    drafter = TokenRecyclingDrafter(budget=b.values["budget"], width=b.values["width"], depth=b.values["depth"])
    return drafter, empty_table(b.need("target").vocab_size, drafter.width)


METHODS = (MethodSpec("tr", ("tr",), "Token Recycling: the best-first template of N nodes filled from the successor "
                      "table alone (`TokenRecyclingDrafter`)", _build,
                      fields=fields_from(TokenRecyclingDrafter, {k: k for k in ("budget", "width", "depth")}),
                      needs=("target",), label="Token Recycling"),)
