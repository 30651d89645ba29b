"""The jittable cores of `generate` and `generate_ar`: pure functions to use inside your own
`jax.jit`, `jax.vmap`, `lax.scan`, ...

`generate_ar` and `generate` (`specjax.decode`) check their arguments on the host, read the
prompts once to check their values (lengths, token ids, positions), accept convenient forms
(lists of prompts, one prompt), place sharded inputs and size programs to share compiles
(`reserve_new_tokens`). The cores here do none of the host work and read no array values: they
take the canonical arrays and run the same loop (`decode.generate_ar_entry` /
`decode.generate_entry`), so with the same inputs they return the same tokens as the front
functions. Both fronts are traceable as well: under a transformation they check shapes and
dtypes only (`specjax.inputs.validate_prompts`).

Arguments (B rows, T padded prompt width, M = max_new_tokens):

    traced    params, draft_params, tokens int32[B, T] (right-padded), prompt_lengths int32[B]
              (each in [1, T]: not checked here), key (a PRNG key, or None when greedy)
    static    cfg, drafter, max_new_tokens, eos_ids, sampling, pad_id, matmul_precision,
              cache_slots, cache_dtype (keyword-only; hashable; `AR_STATIC` / `SPEC_STATIC` list
              them for `jax.jit(..., static_argnames=...)`)

Both cores are already `jax.jit`-wrapped with those static names, so an eager call compiles
once per static set; inside your jitted function the call is inlined into your program:

    @jax.jit
    def sample(params, tokens, lengths, key):   # cfg, drafter, ... closed over: static
        return generate_core(params, cfg, drafter, draft_params, tokens, lengths, key,
                             max_new_tokens=64, sampling=Sampling(0.8)).tokens

    outs = jax.vmap(lambda k: sample(params, tokens, lengths, k))(jax.random.split(key, 8))

What stays the caller's job: prompt lengths in [1, T], token ids in [0, V), and
prompt + max_new_tokens within the model's positions (`specjax.inputs.validate_prompts` checks
them on concrete arrays); the static checks (types, max_new_tokens >= 1, a key when sampling,
shapes and dtypes, the drafter fitting the target config) run at trace time.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from specjax.decode import GenerateOutput, SpeculativeOutput, cache_sizes, generate_ar_entry, generate_entry
from specjax.inputs import as_eos_ids, check_prompt_shapes, check_static_args
from specjax.models.cache import check_capacity, init_cache
from specjax.models.model import ModelConfig
from specjax.numerics import DEFAULT_PRECISION
from specjax.sampling import Sampling

__all__ = ["AR_STATIC", "SPEC_STATIC", "generate_ar_core", "generate_core"]

AR_STATIC = ("cfg", "max_new_tokens", "eos_ids", "sampling", "pad_id", "cache_slots", "cache_dtype",
             "matmul_precision")
SPEC_STATIC = ("cfg", "drafter", "max_new_tokens", "eos_ids", "sampling", "pad_id", "matmul_precision")


def _eos_set(cfg, eos_ids) -> tuple[int, ...]:
    """The static EOS tuple (None: the config's), checked like `decode.eos_table`."""
    ids = as_eos_ids(cfg.eos_token_ids if eos_ids is None else eos_ids)
    if any(isinstance(i, bool) or not isinstance(i, (int, np.integer)) or i < 0 for i in ids):
        raise ValueError(f"eos_ids must be non-negative token ids, got {ids}")
    return tuple(int(i) for i in ids)


def _canonical(name, tokens, prompt_lengths, max_new_tokens, sampling, key, pad_id, matmul_precision):
    check_static_args(name, max_new_tokens, sampling, key, pad_id, matmul_precision)
    check_prompt_shapes(tokens, prompt_lengths)
    return jnp.asarray(tokens, jnp.int32), jnp.asarray(prompt_lengths, jnp.int32)


@functools.partial(jax.jit, static_argnames=AR_STATIC)
def generate_ar_core(params, cfg: ModelConfig, tokens: jax.Array, prompt_lengths: jax.Array,
                     key: jax.Array | None = None, *, max_new_tokens: int, eos_ids: tuple[int, ...] | int | None = None,
                     sampling: Sampling = Sampling(), pad_id: int = 0, cache_slots: int | None = None,
                     cache_dtype=None, matmul_precision: str = DEFAULT_PRECISION) -> GenerateOutput:
    """`generate_ar` without host work: traceable and vmappable (module docstring).

    tokens int32[B, T] right-padded, prompt_lengths int32[B]; `eos_ids` a static tuple or int
    (None: the config's; () never stops); `key` required when `sampling` samples. The cache holds
    `cache_slots` (default T + max_new_tokens) slots per row, in `cache_dtype` (default the
    params' dtype). Returns `GenerateOutput` (tokens int32[B, max_new_tokens], num_tokens int32[B],
    the final cache): the tokens `generate_ar` returns for the same arguments."""
    tokens, prompt_lengths = _canonical("generate_ar_core", tokens, prompt_lengths, max_new_tokens, sampling, key,
                                        pad_id, matmul_precision)
    b, t = tokens.shape
    slots = t + max_new_tokens if cache_slots is None else cache_slots
    check_capacity(np.zeros(b), t + max_new_tokens, slots, what="prompt + max_new_tokens")
    cache = init_cache(cfg, b, slots, cache_dtype or jax.tree.leaves(params)[0].dtype)
    return generate_ar_entry(params, cfg, tokens, prompt_lengths, cache, key, max_new_tokens,
                              _eos_set(cfg, eos_ids), sampling, pad_id, matmul_precision)


@functools.partial(jax.jit, static_argnames=SPEC_STATIC)
def generate_core(params, cfg: ModelConfig, drafter, draft_params, tokens: jax.Array, prompt_lengths: jax.Array,
                  key: jax.Array | None = None, *, max_new_tokens: int, eos_ids: tuple[int, ...] | int | None = None,
                  sampling: Sampling = Sampling(), pad_id: int = 0,
                  matmul_precision: str = DEFAULT_PRECISION) -> SpeculativeOutput:
    """`generate` without host work: traceable and vmappable (module docstring).

    `drafter` (static) with its `draft_params` (traced pytree, or None); other arguments as
    `generate_ar_core`. Caches are sized by `decode.cache_sizes`. Returns `SpeculativeOutput`
    (tokens, num_tokens, cache, RoundStats, the drafter's final state): the tokens and
    statistics `generate` returns for the same arguments; greedy output equals `generate_ar_core`'s."""
    tokens, prompt_lengths = _canonical("generate_core", tokens, prompt_lengths, max_new_tokens, sampling, key,
                                        pad_id, matmul_precision)
    drafter.validate(cfg)
    num_slots, reserve = cache_sizes(drafter, tokens.shape[1], max_new_tokens)
    return generate_entry(params, cfg, drafter, draft_params, tokens, prompt_lengths, key, max_new_tokens,
                           _eos_set(cfg, eos_ids), sampling, pad_id, num_slots, reserve, matmul_precision)
