"""Continuous batching for data generation: a pool of B rows that never idles.

`generate_ar` runs a batch until its longest row ends, so rows that stop early at EOS idle
(on SmolLM2's training prompts 59% of rows run to the 256-token cap and the batch fills only
75% of its steps). Here a finished row is refilled with the next prompt at once:

  * the pool: one KV cache of L per-layer arrays [1, B, K, S, D] (`per_layer_cache`; S = max
    prompt + max new tokens), and per row the token to feed next, the response tokens produced, a
    done flag, its prompt index and its temperature;
  * `decode_chunk` (jitted): `steps` plain decode steps of every row (the `generate_ar` step:
    forward one token, commit it, pick the next), a done row's commit and output masked;
  * `refill` (jitted per (R, P) bucket): prefill R new prompts [R, P] in a cache of their own,
    scatter their K/V and lengths into the given pool rows (padding rows point past the pool
    and are dropped), pick each first token.

Greedy rows are the same argmax chain as `generate_ar`'s. A sampled row draws its n-th token
with the key fold_in(fold_in(key(seed), prompt index), n), so what a prompt gets never depends
on which rows it shared the pool with, or on where a run was interrupted and resumed.

`stream` drives the pool on the host and yields each finished sequence as
(prompt index, response token ids) in completion order.
"""

from __future__ import annotations

import functools
from typing import Callable, Iterable, Iterator

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from specjax.decode import eos_table, is_eos
from specjax.models.cache import KVCache, advance, init_cache, per_layer_cache
from specjax.models.model import forward, prefill_tapped, with_layout
from specjax.numerics import DEFAULT_PRECISION, matmul_scope
from specjax.ops import argmax


__all__ = ["Pool", "init_pool", "decode_chunk", "refill", "refill_sizes", "stream", "pick_rows"]


@struct.dataclass
class Pool:
    """B generation rows sharing one KV cache.

    Fields:
      cache: per-layer `KVCache` (L arrays [1, B, K, S, D]); lengths[b] = row b's committed prompt + response
        tokens.
      token: int32[B] the last picked token of each row (fed by the next step).
      produced: int32[B] response tokens picked so far (the first comes from the prefill).
      done: bool[B] the row ended (EOS picked, max_new_tokens reached) or holds no prompt.
      index: int32[B] the prompt index of the row (-1: empty).
      sampled: bool[B] the row samples at temperature 1 (else greedy).
    """

    cache: KVCache
    token: jax.Array
    produced: jax.Array
    done: jax.Array
    index: jax.Array
    sampled: jax.Array


def init_pool(cfg, batch_size: int, num_slots: int, dtype=jnp.float32) -> Pool:
    """An empty pool (every row done, holding no prompt)."""
    b = batch_size
    return Pool(cache=per_layer_cache(init_cache(cfg, b, num_slots, dtype)), token=jnp.zeros((b,), jnp.int32),
                produced=jnp.zeros((b,), jnp.int32), done=jnp.ones((b,), bool), index=jnp.full((b,), -1, jnp.int32),
                sampled=jnp.zeros((b,), bool))


def pick_rows(logits, index, produced, sampled, seed):
    """Each row's next token int32[B]: greedy argmax, or a T = 1 draw keyed by (seed, prompt index, n).

    logits f32[B, V]; index, produced int32[B] (prompt index, tokens picked so far); sampled bool[B];
    seed an int32 scalar.

    The draw inverts the softmax's CDF at one uniform per row (searchsorted over the cumulative
    probabilities): the same distribution as `jax.random.categorical`'s Gumbel trick, but one
    random number per row instead of one per vocabulary entry, which at batch 128 and SmolLM2's
    49,152 tokens was 150 ms of a 1,080 ms step."""
    base = jax.random.key(seed)
    keys = jax.vmap(lambda i, n: jax.random.fold_in(jax.random.fold_in(base, i), n))(index, produced)
    u = jax.vmap(lambda k: jax.random.uniform(k, (), jnp.float32))(keys)  # [B] in [0, 1)
    cdf = jnp.cumsum(jax.nn.softmax(logits.astype(jnp.float32), axis=-1), axis=-1)  # [B, V]
    drawn = jax.vmap(lambda c, x: jnp.searchsorted(c, x * c[-1], side="right"))(cdf, u)
    drawn = jnp.minimum(drawn, logits.shape[-1] - 1).astype(jnp.int32)
    return jnp.where(sampled, drawn, argmax(logits))


@functools.partial(jax.jit, static_argnames=("cfg", "steps", "matmul_precision"), donate_argnames=("pool",))
def decode_chunk(params, cfg, pool: Pool, eos, max_new_tokens, seed, steps: int,
                 matmul_precision: str | None = DEFAULT_PRECISION):
    """`steps` decode steps of every row: (pool, tokens int32[B, steps], -1 where a row was done).

    params: unstacked or dual (`with_layout`): the pool's per-layer cache is read layer by layer.
    eos: `eos_table` int32[K]; max_new_tokens, seed: int32 scalars (traced: one program)."""
    b = pool.token.shape[0]
    ones_mask = jnp.ones((b, 1, 1), bool)

    def body(pool, _):
        cache = pool.cache
        logits, cache = forward(params, cfg, pool.token[:, None], cache.lengths[:, None], ones_mask, cache)
        cache = advance(cache, jnp.where(pool.done, 0, 1))
        nxt = pick_rows(logits[:, 0], pool.index, pool.produced, pool.sampled, seed)
        produced = pool.produced + jnp.where(pool.done, 0, 1)
        emitted = jnp.where(pool.done, -1, nxt)
        done = pool.done | is_eos(nxt, eos) | (produced >= max_new_tokens)
        return pool.replace(cache=cache, token=jnp.where(pool.done, pool.token, nxt), produced=produced,
                            done=done), emitted

    with matmul_scope(matmul_precision):
        pool, out = jax.lax.scan(body, pool, None, length=steps)
    return pool, out.T


@functools.partial(jax.jit, static_argnames=("cfg", "matmul_precision"), donate_argnames=("pool",))
def refill(params, cfg, pool: Pool, rows, tokens, prompt_lengths, index, sampled, eos, max_new_tokens, seed,
           matmul_precision: str | None = DEFAULT_PRECISION):
    """Start R new prompts in pool rows `rows` int32[R] (a row >= B is padding, dropped).

    tokens int32[R, P] right-padded prompts, prompt_lengths int32[R], index int32[R] their prompt
    indices, sampled bool[R]. Returns (pool, first tokens int32[R])."""
    r, p = tokens.shape
    small = init_cache(cfg, r, p, pool.cache.k[0].dtype)
    with matmul_scope(matmul_precision):
        _, last, small, _ = prefill_tapped(params, cfg, tokens, prompt_lengths, small, matmul_precision=None)
    first = pick_rows(last, index, jnp.zeros_like(index), sampled, seed)

    def put(pool_layers, new):  # scatter layer i of new [L, R, K, P, D] into the pool's layer i
        return tuple(big.at[:, rows, :, :p].set(new[i:i + 1], mode="drop") for i, big in enumerate(pool_layers))

    cache = KVCache(k=put(pool.cache.k, small.k), v=put(pool.cache.v, small.v),
                    lengths=pool.cache.lengths.at[rows].set(prompt_lengths, mode="drop"))
    set_rows = lambda x, v: x.at[rows].set(v, mode="drop")  # noqa: E731
    done = is_eos(first, eos) | (max_new_tokens <= 1)
    return pool.replace(cache=cache, token=set_rows(pool.token, first), produced=set_rows(pool.produced, 1),
                        done=set_rows(pool.done, done), index=set_rows(pool.index, index),
                        sampled=set_rows(pool.sampled, sampled)), first


def _bucket(n: int, sizes: tuple[int, ...]) -> int:
    return next((s for s in sizes if s >= n), sizes[-1])


REFILL_FRACTION = 16  # the smallest refill is a sixteenth of the pool


def refill_sizes(batch_size: int) -> tuple[int, ...]:
    """The row counts a refill is padded to: powers of two from about batch_size / 16 up to batch_size.

    Each (rows, width) pair compiles its own prefill program. On an H100 (pool 512, 2026-11-26) the
    first three shards ran at 1.0-2.6k response tokens/s against 16k afterwards: compiling refills
    for ten row counts x six widths took most of the first five minutes. Starting at a sixteenth of
    the pool halves the row counts (and on CPU keeps the smallest refill at 8 of 128 rows); padded
    rows cost a prefill each but are dropped."""
    low = 1 << max(0, (batch_size // REFILL_FRACTION).bit_length() - 1)  # the power of two <= b / 16 (>= 1)
    sizes = tuple(1 << i for i in range(low.bit_length() - 1, batch_size.bit_length()) if 1 << i <= batch_size)
    return sizes + ((batch_size,) if batch_size & (batch_size - 1) else ())


def stream(params, cfg, prompts: Iterable[tuple[int, list[int], bool]], *, batch_size: int, max_new_tokens: int,
           max_prompt_tokens: int, eos_ids: tuple[int, ...], seed: int = 0, chunk: int = 16,
           width_step: int = 32, matmul_precision: str = DEFAULT_PRECISION,
           on_tokens: Callable[[int], None] | None = None) -> Iterator[tuple[int, list[int]]]:
    """Generate an answer to every prompt (index, ids, sampled) through a pool of `batch_size` rows;
    yields (index, response ids: through the first EOS, at most max_new_tokens) as rows finish.

    Prompts are taken in order whenever rows are free; a refill pads its prompts to a multiple of
    `width_step` and its row count to a power of two of `refill_sizes` (a few compiled shapes). `on_tokens(n)` is
    told the response tokens picked by every refill and chunk (a progress bar)."""
    if not eos_ids:
        raise ValueError("continuous batching needs EOS ids (a row that never ends never frees its slot)")
    dtype = jax.tree.leaves(params)[0].dtype
    params = with_layout(params, "dual")  # per-layer decode steps over the per-layer pool cache, scanned refills
    b = batch_size
    pool = init_pool(cfg, b, max_prompt_tokens + max_new_tokens + 1, dtype)
    eos = eos_table(tuple(eos_ids))
    limits = dict(eos=eos, max_new_tokens=jnp.int32(max_new_tokens), seed=jnp.int32(seed))
    sizes = refill_sizes(b)
    source = iter(prompts)
    responses: dict[int, list[int]] = {}  # pool row -> tokens so far
    free = list(range(b))
    exhausted = False
    while True:
        if free and not exhausted:
            batch = []
            for _ in range(len(free)):
                nxt = next(source, None)
                if nxt is None:
                    exhausted = True
                    break
                if len(nxt[1]) > max_prompt_tokens:
                    raise ValueError(f"prompt {nxt[0]} has {len(nxt[1])} tokens > max_prompt_tokens "
                                     f"{max_prompt_tokens}")
                batch.append(nxt)
            if batch:
                r = _bucket(len(batch), sizes)
                width = min(-(-max(len(ids) for _, ids, _ in batch) // width_step) * width_step, max_prompt_tokens)
                toks = np.zeros((r, width), np.int32)
                lens = np.ones((r,), np.int32)
                rows = np.full((r,), b, np.int32)  # padding rows: out of range, dropped
                idx = np.zeros((r,), np.int32)
                smp = np.zeros((r,), bool)
                for j, (i, ids, s) in enumerate(batch):
                    toks[j, :len(ids)] = ids
                    lens[j], rows[j], idx[j], smp[j] = len(ids), free[j], i, s
                pool, first = refill(params, cfg, pool, jnp.asarray(rows), jnp.asarray(toks), jnp.asarray(lens),
                                     jnp.asarray(idx), jnp.asarray(smp), matmul_precision=matmul_precision,
                                     **limits)
                first = np.asarray(first)
                for j in range(len(batch)):
                    responses[int(rows[j])] = [int(first[j])]
                if on_tokens:
                    on_tokens(len(batch))
                free = free[len(batch):]
        if not responses:
            return
        done = np.asarray(pool.done)
        finished = [row for row in responses if done[row]]
        if not finished:
            pool, out = decode_chunk(params, cfg, pool, steps=chunk, matmul_precision=matmul_precision, **limits)
            out = np.asarray(out)
            done = np.asarray(pool.done)
            for row, toks in responses.items():
                toks.extend(int(t) for t in out[row] if t >= 0)
            if on_tokens:
                on_tokens(int((out >= 0).sum()))
            finished = [row for row in responses if done[row]]
        index = np.asarray(pool.index)
        for row in finished:
            yield int(index[row]), responses.pop(row)
            free.append(row)
