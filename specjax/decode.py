"""Decoding loops: the autoregressive baseline (and, built on the same pieces, the
speculative loop). Each generation is ONE jitted function: prefill, then a
`lax.while_loop` over steps with no host round-trip.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from specjax.models.cache import KVCache, check_capacity, commit, init_cache
from specjax.models.model import ModelConfig, _prefill, forward


@struct.dataclass
class GenerateOutput:
    tokens: jax.Array  # int32[B, max_new_tokens], pad_id after each row's end
    num_tokens: jax.Array  # int32[B] generated tokens per row (an EOS token counts and ends the row)
    cache: KVCache  # target cache with prompt + generated tokens committed (except the last token)


def pick_token(logits: jax.Array, key: jax.Array, temperature: float) -> jax.Array:
    """Greedy (temperature 0) or temperature sampling of int32[B] from logits f32[B, V]."""
    if temperature == 0.0:
        return jnp.argmax(logits, axis=-1).astype(jnp.int32)
    return jax.random.categorical(key, logits / temperature, axis=-1).astype(jnp.int32)


def is_eos(tokens: jax.Array, eos_ids: tuple[int, ...]) -> jax.Array:
    """bool of the same shape as `tokens`: token is one of `eos_ids`."""
    if not eos_ids:
        return jnp.zeros(tokens.shape, bool)
    return jnp.isin(tokens, jnp.asarray(eos_ids, jnp.int32))


@functools.partial(
    jax.jit, static_argnames=("cfg", "max_new_tokens", "eos_ids", "temperature", "pad_id"), donate_argnames=("cache",)
)
def _generate_ar(params, cfg, tokens, prompt_lengths, cache, key, max_new_tokens, eos_ids, temperature, pad_id):
    b = tokens.shape[0]
    _, last, cache = _prefill(params, cfg, tokens, prompt_lengths, cache)
    key, sub = jax.random.split(key)
    first = pick_token(last, sub, temperature)
    out = jnp.full((b, max_new_tokens), pad_id, jnp.int32).at[:, 0].set(first)
    done = is_eos(first, eos_ids)
    ones_mask = jnp.ones((b, 1, 1), bool)

    def cond(state):
        step, _, _, _, done, _ = state
        return (step < max_new_tokens) & ~jnp.all(done)

    def body(state):
        step, cur, out, cache, done, key = state
        logits, cache = forward(params, cfg, cur[:, None], cache.lengths[:, None], ones_mask, cache)
        cache = commit(cache, jnp.zeros((b, 1), jnp.int32), jnp.where(done, 0, 1))
        key, sub = jax.random.split(key)
        nxt = jnp.where(done, pad_id, pick_token(logits[:, 0], sub, temperature))
        out = out.at[:, step].set(nxt)
        return step + 1, nxt, out, cache, done | is_eos(nxt, eos_ids), key

    _, _, out, cache, _, _ = jax.lax.while_loop(cond, body, (jnp.int32(1), first, out, cache, done, key))
    eos = is_eos(out, eos_ids)
    num = jnp.where(eos.any(axis=1), jnp.argmax(eos, axis=1) + 1, max_new_tokens).astype(jnp.int32)
    return GenerateOutput(tokens=out, num_tokens=num, cache=cache)


def generate_ar(
    params,
    cfg: ModelConfig,
    tokens: jax.Array,
    prompt_lengths: jax.Array,
    max_new_tokens: int,
    *,
    cache_slots: int | None = None,
    eos_ids: tuple[int, ...] | None = None,
    temperature: float = 0.0,
    key: jax.Array | None = None,
    pad_id: int = 0,
    cache_dtype=None,
) -> GenerateOutput:
    """Plain autoregressive generation: the baseline every speculative method must match.

    tokens: int32[B, T] right-padded prompts; prompt_lengths: int32[B]. Generates up to
    `max_new_tokens` per row, stopping a row at its first token in `eos_ids` (default:
    the config's EOS ids; pass () to never stop). The cache holds `cache_slots`
    (default T + max_new_tokens) slots per row. Errors are raised before compiling.
    """
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    b, t = tokens.shape
    slots = cache_slots if cache_slots is not None else t + max_new_tokens
    check_capacity(np.zeros(b), t, slots, what="the prompt")
    check_capacity(np.asarray(prompt_lengths), max_new_tokens, slots, what="prompt + max_new_tokens")
    dtype = cache_dtype or jax.tree.leaves(params)[0].dtype
    cache = init_cache(cfg, b, slots, dtype)
    eos = tuple(cfg.eos_token_ids) if eos_ids is None else tuple(eos_ids)
    key = jax.random.key(0) if key is None else key
    return _generate_ar(params, cfg, jnp.asarray(tokens, jnp.int32), jnp.asarray(prompt_lengths, jnp.int32), cache,
                        key, max_new_tokens, eos, float(temperature), pad_id)
