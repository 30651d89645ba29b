"""A drafter of one's own, outside the package, run by name (docs/reusing.md, "Your own method, by name").

    specjax.load_methods("docs/examples/my_drafter.py")   # or the CLI's --methods-from docs/examples/my_drafter.py
    specjax.Pipeline.load("zoo", method="repeat4")

`RepeatRootDrafter` bets that the text repeats its last token: it proposes a chain of K copies of the
root (Tree [B, K]) and counts in its state the rounds each row drafted. ``METHODS`` declares it as the
method ``repeat[<K>]`` ("repeat" = K of 3), exactly as a module of `specjax.drafters` declares its own.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import struct

from specjax import Build, Field, MethodSpec, chain_tree


@struct.dataclass
class RepeatState:
    """rounds: int32[B] rounds drafted so far, per row."""

    rounds: jax.Array


@dataclasses.dataclass(frozen=True)
class RepeatRootDrafter:
    """Proposes Tree [B, k]: k copies of the root (an inactive row: an empty tree); no params, no target features."""

    k: int = 3
    target_layers = ()
    target_topk = 0
    budget = property(lambda self: self.k)                           # tree slots N
    max_depth = property(lambda self: self.k)                        # deepest node D

    def validate(self, target_cfg):
        if self.k < 1:
            raise ValueError(f"RepeatRootDrafter needs k >= 1, got {self.k}")

    def uses_rejection(self, sampling):
        return False                                                 # T > 0: the lossless sampling walk

    def init(self, params, tokens, prompt_lengths, max_new_tokens, context=None):
        return RepeatState(rounds=jnp.zeros(tokens.shape[:1], jnp.int32))

    def propose(self, state, root, active, key, sampling):          # root, active: [B]
        tree = chain_tree(jnp.repeat(root[:, None], self.k, 1), jnp.where(active, self.k, 0))
        return tree, None, state.replace(rounds=state.rounds + active)

    def observe(self, state, verified):
        return state


def _build(b: Build):
    """(drafter, params): {} for a drafter without params (None would mean the draft LM's)."""
    return RepeatRootDrafter(b.values["K"]), {}


METHODS = (MethodSpec("repeat", ("repeat[<K>]",), "a chain of K copies of the last token (docs/examples/my_drafter.py)",
                      _build, positional=(Field("K", int, 3, "copies of the root per round"),)),)
