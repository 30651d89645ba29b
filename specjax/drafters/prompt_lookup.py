"""Prompt lookup decoding (PLD): propose the continuation of an earlier occurrence of the last n-gram.

Training-free chain drafting (Saxena 2023, github.com/apoorvumang/prompt-lookup-decoding; a
baseline of Graft, arXiv 2605.20104, §4.1): for n = max_ngram down to 1, find an
earlier occurrence in prompt + generated text of the last n tokens (the root included);
the first n that matches proposes the (up to `num_tokens`) tokens that followed its
earliest occurrence (the original implementation's choice); no match -> an empty tree (a
plain decoding step). Verified as a chain (greedy walk / sampling walk: lossless).

State: the text so far, int32[B, H] with H = T + M + num_tokens + 2, and its length.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import struct

from specjax.drafters.protocol import Verified
from specjax.drafters.spec import Build, MethodSpec, fields_from
from specjax.tree import chain_tree

__all__ = ["LookupState", "METHODS", "PromptLookupDrafter"]


@struct.dataclass
class LookupState:
    """Prompt lookup's state (B rows, H = T + M + num_tokens + 2 text slots).

    Fields:
      text: int32[B, H] the prompt and the generated tokens (the root written at `length` once
        proposed); entries at and past `length` + 1 are stale or 0.
      length: int32[B] committed tokens in `text` (the prompt length at first; the root not counted).
    """

    text: jax.Array
    length: jax.Array


@dataclasses.dataclass(frozen=True)
class PromptLookupDrafter:
    """Prompt lookup decoding (module docstring); no draft model, no params.

    Proposes a chain Tree [B, num_tokens] copied from the earliest earlier occurrence of the
    last n..1 tokens (an empty tree when nothing matches); state `LookupState`: the text so far
    int32[B, H] and its length int32[B].

    Fields:
      max_ngram: longest n-gram matched, >= 1 (3); shorter ones down to 1 are tried in turn.
      num_tokens: longest proposal, >= 1 (10): the chain's budget and max depth.
    """

    max_ngram: int = 3
    num_tokens: int = 10

    target_layers = ()
    target_topk = 0

    def __post_init__(self):
        if self.max_ngram < 1 or self.num_tokens < 1:
            raise ValueError(f"prompt lookup needs max_ngram >= 1 and num_tokens >= 1, got {self.max_ngram}, "
                             f"{self.num_tokens}")

    @property
    def budget(self) -> int:
        return self.num_tokens

    @property
    def max_depth(self) -> int:
        return self.num_tokens

    def validate(self, target_cfg) -> None:
        pass

    def uses_rejection(self, sampling) -> bool:
        return False  # deterministic proposals: the walk

    def init(self, params, tokens, prompt_lengths, max_new_tokens: int, context=None) -> LookupState:
        b, t = tokens.shape
        width = t + max_new_tokens + self.num_tokens + 2
        text = jnp.zeros((b, width), jnp.int32).at[:, :t].set(tokens.astype(jnp.int32))
        return LookupState(text=text, length=prompt_lengths.astype(jnp.int32))

    def propose(self, state: LookupState, root, active, key, sampling):
        b, h = state.text.shape
        rows = jnp.arange(b)
        text = state.text.at[rows, state.length].set(root)
        end = state.length + 1  # text[:end] = everything committed + the root
        pos = jnp.arange(h)[None]
        start = jnp.full((b,), -1, jnp.int32)
        for n in range(self.max_ngram, 0, -1):  # longest n-gram first
            suffix = jnp.take_along_axis(text, jnp.clip(end[:, None] - n + jnp.arange(n)[None], 0, h - 1), axis=1)
            hit = jnp.ones((b, h), bool)
            for j in range(n):  # window [i, i + n) equals the suffix
                hit = hit & (jnp.roll(text, -j, axis=1) == suffix[:, j:j + 1])
            hit = hit & (pos + n < end[:, None]) & (end[:, None] >= n + 1)  # earlier, with a following token
            first = jnp.argmax(hit, axis=1).astype(jnp.int32)
            start = jnp.where((start < 0) & hit.any(axis=1), first + n, start)
        idx = jnp.clip(start[:, None] + jnp.arange(self.num_tokens)[None], 0, h - 1)
        proposal = jnp.take_along_axis(text, idx, axis=1)
        num = jnp.where((start >= 0) & active, jnp.minimum(self.num_tokens, end - start), 0)
        return chain_tree(proposal, num), None, state.replace(text=text)

    def observe(self, state: LookupState, verified: Verified) -> LookupState:
        b, h = state.text.shape
        acc = verified.result.accepted_tokens  # [B, D]
        n = jnp.where(verified.active, verified.num_kept - 1, 0)  # accepted tokens kept (after the root)
        steps = jnp.arange(acc.shape[1])[None]
        at = jnp.where(steps < n[:, None], state.length[:, None] + 1 + steps, h)  # h: dropped
        text = state.text.at[jnp.arange(b)[:, None], at].set(acc, mode="drop")
        return state.replace(text=text, length=state.length + jnp.where(verified.active, 1 + n, 0))


def _build(b: Build):
    return PromptLookupDrafter(max_ngram=b.values["ngram"], num_tokens=b.values["num"]), {}


METHODS = (MethodSpec("pld", ("pld",), "prompt lookup: the K tokens after the earliest earlier occurrence of the last "
                      "n..1 tokens (`PromptLookupDrafter`)", _build,
                      fields=fields_from(PromptLookupDrafter, {"ngram": "max_ngram", "num": "num_tokens"}),
                      label="prompt lookup"),)
