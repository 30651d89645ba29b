"""Drafters broken on purpose, written outside the package as a researcher's would be (issue 60 item 5): the
six invalid-tree bugs the kit must catch, and a chain that breaks the sampling law at T = 1 only.

Each tree bug wraps a correct drafter (the registry's chain3 for the target: three valid nodes per active
row, node i at depth i + 1 under node i - 1) and changes one thing about its trees or its declared sizes.
"""

import dataclasses

import jax.numpy as jnp

from specjax import testing
from specjax.drafters.chain import ChainDrafter
from specjax.drafters.protocol import Wrapper


@dataclasses.dataclass(frozen=True)
class Planted(Wrapper):
    """A correct drafter whose trees [B, N] `plant` changes (the identity here; subclasses break it).

    Fields:
      wrapped: the drafter whose trees it changes.
    """

    wrapped: object

    @property
    def inner(self):
        return self.wrapped

    @property
    def budget(self) -> int:
        return self.wrapped.budget

    @property
    def target_topk(self) -> int:
        return self.wrapped.target_topk

    def uses_rejection(self, sampling) -> bool:
        return self.wrapped.uses_rejection(sampling)

    def init(self, params, tokens, prompt_lengths, max_new_tokens, context=None):
        return self.wrapped.init(params, tokens, prompt_lengths, max_new_tokens, context)

    def observe(self, state, verified):
        return self.wrapped.observe(state, verified)

    def plant(self, tree):
        return tree

    def propose(self, state, root, active, key, sampling):
        tree, probs, state = self.wrapped.propose(state, root, active, key, sampling)
        return self.plant(tree), probs, state


def _where_valid(tree, node: int, field: str, value):
    """`tree` with `field` of `node` set to `value` in the rows where that node is valid."""
    old = getattr(tree, field)
    return tree.replace(**{field: old.at[:, node].set(jnp.where(tree.valid[:, node], value, old[:, node]))})


class DepthOffByOne(Planted):
    """Every valid node one level deeper than its parent's depth + 1 (the issue's planted bug)."""

    def plant(self, tree):
        return tree.replace(depth=jnp.where(tree.valid, tree.depth + 1, 0))


class DepthShort(Planted):
    """Every valid node one level shallower than its parent's depth + 1 (the first at depth 0)."""

    def plant(self, tree):
        return tree.replace(depth=jnp.where(tree.valid, tree.depth - 1, 0))


class ParentForward(Planted):
    """Node 1's parent is node 2, which comes after it."""

    def plant(self, tree):
        return _where_valid(tree, 1, "parents", 2)


class WrongParent(Planted):
    """Node 2 (depth 3) hangs under node 0 (depth 1), its grandparent, its depth unchanged."""

    def plant(self, tree):
        return _where_valid(tree, 2, "parents", 0)


class BudgetShort(Planted):
    """Declares a budget one short of the trees it proposes."""

    @property
    def budget(self) -> int:
        return self.wrapped.budget - 1


class MaxDepthShort(Planted):
    """Declares a `max_depth` one short of the depth its trees reach."""

    @property
    def max_depth(self) -> int:
        return self.wrapped.max_depth - 1


TREE_BUGS = (ParentForward, WrongParent, BudgetShort, MaxDepthShort, DepthOffByOne, DepthShort)


def planted(bug):
    """make(target) for the kit: the registry's chain3 for `target` with `bug` planted."""
    def make(target):
        built = testing.build("chain3", target)
        return None if built is None else (bug(built[0]), built[1])
    return make


@dataclasses.dataclass(frozen=True)
class MyChain(ChainDrafter):
    """A researcher's correct chain (the package's chain, subclassed outside it): samples its tokens from the
    draft LM at T > 0 and reports their probabilities (`ChainDrafter`'s fields)."""


def my_chain(target):
    """make(target): a correct chain of 3 draft-LM tokens from outside the package, or None without a draft LM."""
    return None if target.draft is None else (MyChain(target.draft[0], 3), target.draft[1])


@dataclasses.dataclass(frozen=True)
class GreedyProposalChain(ChainDrafter):
    """Broken at T > 0 only: proposes the draft LM's argmax yet reports the draft's full distribution as the
    law it sampled from, so chain rejection accepts it too often. Greedy decoding is unaffected and the
    first token (drawn by the prefill) too: only the law of what the first round commits shows it
    (`ChainDrafter`'s fields)."""

    def choose(self, parent_logits, k, level, key, sampling):
        token, probs = super().choose(parent_logits, k, level, key, sampling)
        if probs is None:
            return token, probs
        return jnp.argmax(probs, axis=-1).astype(jnp.int32)[..., None], probs
