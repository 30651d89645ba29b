"""A fixed-shape draft tree: every node gets the draft LM's top-B tokens as children,
down to depth D, truncated in BFS order at N_max nodes (DynaTree's "Fixed Tree" baseline,
e.g. D=5, B=2, N_max=256).

One batched draft forward per depth level; the tree's topology is static, only its
tokens depend on the draft. Verified by the greedy walk (T = 0) or the lossless
sampling walk (T > 0).
"""

from __future__ import annotations

import dataclasses


from specjax.drafters.draft_lm import DraftLMDrafter, StaticTreeShape
from specjax.drafters.spec import Build, Field, MethodSpec
from specjax.ops import top_k
from specjax.models.model import ModelConfig

__all__ = ["FixedTreeDrafter", "METHODS"]


@dataclasses.dataclass(frozen=True)
class FixedTreeDrafter(DraftLMDrafter):
    """A draft LM expands the top-`branching` children of every node down to `depth`, at most
    `max_nodes`: Tree [B, N = min(max_nodes, sum_d branching^d)], one draft forward per level.
    Greedy top-k at every temperature (T > 0 verifies with the sampling walk). State:
    `DraftLMState`, the draft LM's KV cache [L, B, K, S, D] and its lengths int32[B].

    Fields:
      draft_cfg: the draft LM's model config; its vocabulary must be the target's.
      depth: D >= 1, levels below the root (fewer when `max_nodes` runs out first).
      branching: B >= 1 (<= the vocabulary), children kept per node (its top-B draft tokens).
      max_nodes: N_max >= 1, node budget; levels are filled in order and only the last one kept
        is cut short (its first parents keep their children).
    """

    draft_cfg: ModelConfig
    depth: int
    branching: int
    max_nodes: int = 256

    def __post_init__(self):
        if self.depth < 1:
            raise ValueError(f"fixed tree depth must be >= 1, got {self.depth}")
        if self.branching < 1:
            raise ValueError(f"fixed tree branching must be >= 1, got {self.branching}")
        if self.max_nodes < 1:
            raise ValueError(f"fixed tree node budget max_nodes must be >= 1, got {self.max_nodes}")
        if self.branching > self.draft_cfg.vocab_size:
            raise ValueError(f"branching {self.branching} exceeds the draft vocabulary ({self.draft_cfg.vocab_size})")

    @property
    def tree_shape(self) -> StaticTreeShape:
        return StaticTreeShape((self.branching,) * self.depth, self.max_nodes)

    def choose(self, parent_logits, k, level, key, sampling):
        """parent_logits f32[B, P, V] -> (top-k tokens int32[B, P, k], None)."""
        return top_k(parent_logits, k)[1].astype("int32"), None


def _build(b: Build):
    v = b.values
    return FixedTreeDrafter(b.need("draft")[0], v["D"], v["B"], v["N"]), None


METHODS = (MethodSpec("fixed", ("fixed<D>x<B>[n<N>]", "tree<D>x<B>[n<N>]"),
                      "a fixed tree: the top-B children of every node down to depth D, at most N nodes "
                      "(`FixedTreeDrafter`)", _build,
                      positional=(Field("D", int, None, "depth"), Field("B", int, None, "children per node"),
                                  Field("N", int, FixedTreeDrafter.max_nodes, "node budget")),
                      needs=("draft",), aliases=(("fixed", "fixed5x2"), ("tree", "fixed5x2"))),)
