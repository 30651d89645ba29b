"""Linear speculative decoding: a draft LM proposes a chain of K tokens.

Greedy: the draft's argmax at each step. Sampling (T > 0): each token is sampled from
the draft's processed distribution (same temperature / top-k / top-p as the target) and
the chain is verified by rejection sampling (Leviathan et al.), which needs those
draft probabilities. This is DynaTree's "Linear K" baseline.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp

from specjax.drafters.draft_lm import DraftLMDrafter, StaticTreeShape
from specjax.drafters.spec import Build, Field, MethodSpec
from specjax.models.model import ModelConfig
from specjax.ops import argmax
from specjax.sampling import categorical

__all__ = ["ChainDrafter", "METHODS"]


@dataclasses.dataclass(frozen=True)
class ChainDrafter(DraftLMDrafter):
    """A draft LM proposes a greedy (or, at T > 0, sampled) chain of K = num_tokens tokens:
    Tree [B, K] with parents i - 1, verified by chain rejection at T > 0 (draft probs
    f32[B, K, V]). State: `DraftLMState`, the draft LM's KV cache [L, B, K, S, D] and its lengths int32[B].

    Fields:
      draft_cfg: the draft LM's model config (GPT-NeoX or Llama family); its vocabulary must be the target's.
      num_tokens: K >= 1, draft tokens per round (one draft forward each; the tree's depth and budget).
    """

    draft_cfg: ModelConfig
    num_tokens: int

    def __post_init__(self):
        if self.num_tokens < 1:
            raise ValueError(f"a chain drafter needs num_tokens (K) >= 1, got {self.num_tokens}")

    @property
    def tree_shape(self) -> StaticTreeShape:
        return StaticTreeShape((1,) * self.num_tokens, self.num_tokens)

    def uses_rejection(self, sampling) -> bool:
        return not sampling.greedy

    def choose(self, parent_logits, k, level, key, sampling):
        """parent_logits f32[B, 1, V] -> (token int32[B, 1, 1], draft probs f32[B, 1, V] or None)."""
        if sampling.greedy:
            return argmax(parent_logits)[..., None], None
        log_q = sampling.log_probs(parent_logits)
        token = categorical(key, log_q)
        return token[..., None], jnp.exp(log_q)


def _build(b: Build):
    return ChainDrafter(b.need("draft")[0], b.values["K"]), None


METHODS = (MethodSpec("chain", ("chain<K>", "linear<K>"), "a draft-LM chain of K tokens (`ChainDrafter`)", _build,
                      positional=(Field("K", int, None, "draft tokens per round"),), needs=("draft",),
                      aliases=(("chain", "chain4"), ("linear", "chain4"))),)
