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
    and are dropped), pick each first token; `refill_choice` picks which of a look-ahead of
    waiting prompts go (the oldest, then those that fit its width; no padded rows while more wait).

Greedy rows are the same argmax chain as `generate_ar`'s. A sampled row draws its n-th token
with the key fold_in(fold_in(key(seed), prompt index), n), so what a prompt gets never depends
on which rows it shared the pool with, on when the look-ahead let it in, or on where a run was
interrupted and resumed.

`stream` drives the pool on the host and yields each finished sequence as
(prompt index, response token ids) in completion order.

Compiling ahead (`stream(precompile=...)`, `compile_pool_programs`): each (R, P) bucket is its own
program, compiled the first time a refill needs it, so on an H100 the first shards of a run were
compile-bound (212.8 / 90.2 / 81.7 s against 13-15 s once all had compiled). With precompile on,
every program the pool can reach (R in `refill_sizes`, P in `prompt_widths`, and `decode_chunk`) is
lowered and compiled before the first refill, in a thread pool (XLA compiles without the GIL), and
the loop calls those executables: nothing compiles while it streams. "auto" compiles ahead on an
accelerator only: on a CPU of a few cores, compiling programs a small run never uses costs more
(zoo target, pool 16, 2 shared cores: first shard 8-9 s compiling the 4 programs it used, 26 s
compiling all 11 first).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import os
import sys
import time
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


__all__ = ["Pool", "init_pool", "decode_chunk", "refill", "refill_sizes", "prompt_widths", "refill_choice",
           "lookahead_for", "stream", "pick_rows", "PRECOMPILE_CHOICES", "precompile_wanted", "compile_pool_programs"]


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


def prompt_widths(max_prompt_tokens: int, width_step: int) -> tuple[int, ...]:
    """The widths P a refill pads its prompts [R, P] to: the multiples of `width_step` below
    `max_prompt_tokens`, then `max_prompt_tokens` itself (192 by 32: 32, 64, ..., 192)."""
    top = -(-max_prompt_tokens // width_step)
    return tuple(sorted({min(k * width_step, max_prompt_tokens) for k in range(1, top + 1)}))


def refill_choice(lengths: list[int], free: int, sizes: tuple[int, ...], widths: tuple[int, ...],
                  more: bool, busy: bool) -> list[int]:
    """Which waiting prompts a refill takes: positions into `lengths` (the waiting prompts' token counts, in
    prompt order), ascending; [] to refill later.

    A refill costs its padded [R, P] prefill (R a row count of `sizes`, P a width of `widths`), and on
    SmolLM2's training prompts the padding was 3.3x the prompts' tokens (a one-off host-side simulation of
    the pool over the prompt and answer lengths of 20 committed shards, session ab; not kept). So, while more prompts wait (`more`: beyond the free rows or still to come):

      * rows: fill the largest row count <= `free` (no padded rows), and, while other rows are still busy
        (`busy`), none until `free` reaches the smallest (the free rows wait a chunk or two);
      * width: the oldest waiting prompt always goes (nothing waits longer than the look-ahead); the others
        are taken in prompt order among those within the oldest's width, then by increasing length.

    That simulation predicted 15 % less pool time (decode row-steps + 0.52 x padded prefill tokens, the ratio of
    the two in a py-spy profile of the running engine: refills 36.5 % of its time) with a 256-prompt
    look-ahead. Measured (`python -m specjax bench-generation --target smollm2-135m --start 30000 --warmup 90
    --seconds 180`, 2-core AMD EPYC, data generation paused, runs alternated with the engine before this):
    409-414 response tokens/s against 325-334, +25 %. What a prompt gets does not depend on when it is
    answered or beside whom (module docstring)."""
    take = min(free, len(lengths))
    if more:
        fits = [s for s in sizes if s <= take]
        if busy and not fits:
            return []
        take = max(fits, default=take)
    if take == len(lengths):
        return list(range(take))
    width = _bucket(lengths[0], widths)
    within = [j for j, n in enumerate(lengths) if n <= width]
    if len(within) >= take:
        return within[:take]
    longer = sorted((j for j, n in enumerate(lengths) if n > width), key=lambda j: (lengths[j], j))
    return sorted(within + longer[:take - len(within)])


def lookahead_for(batch_size: int, lookahead: int | None = None) -> int:
    """The waiting prompts `stream` reads ahead for `refill_choice`: `lookahead`, by default twice the pool's rows."""
    return 2 * batch_size if lookahead is None else lookahead


PRECOMPILE_CHOICES = ("auto", "on", "off")


def precompile_wanted(precompile: str, backend: str | None = None) -> bool:
    """Whether `stream` compiles its programs ahead: "on", "off", or "auto": on unless `backend` (default:
    jax's default backend) is the CPU. Any other value raises ValueError naming the choices."""
    if precompile not in PRECOMPILE_CHOICES:
        raise ValueError(f"precompile must be one of {', '.join(PRECOMPILE_CHOICES)}, got {precompile!r}")
    if precompile == "auto":
        return (backend or jax.default_backend()) != "cpu"
    return precompile == "on"


@dataclasses.dataclass(frozen=True)
class PoolPrograms:
    """Every program one pool runs, compiled ahead (`compile_pool_programs`).

    Fields:
      refills: (R, P) -> `refill` compiled for tokens [R, P], called with its arguments less cfg and
        matmul_precision: (params, pool, rows, tokens, prompt_lengths, index, sampled, eos, max_new_tokens, seed).
      decode: `decode_chunk` compiled for the pool, called as (params, pool, eos, max_new_tokens, seed).
      seconds: wall time of compiling them all.
      program_seconds: each program's own lower + compile time, summed (more than `seconds` when the
        threads overlapped).
      threads: compiling threads.
    """

    refills: dict[tuple[int, int], Callable]
    decode: Callable
    seconds: float
    program_seconds: float
    threads: int

    def summary(self) -> str:
        """The one line `stream` prints: "continuous: compiled N programs in X s (Y threads; Z s summed ...)"."""
        threads = f"{self.threads} thread{'s' * (self.threads != 1)}"
        return (f"continuous: compiled {len(self.refills) + 1} programs in {self.seconds:.1f} s ({threads}; "
                f"{self.program_seconds:.1f} s summed over the programs)")


def compile_pool_programs(params, cfg, pool: Pool, eos, max_new_tokens, seed, *, sizes: tuple[int, ...],
                          widths: tuple[int, ...], chunk: int, matmul_precision: str | None = DEFAULT_PRECISION,
                          threads: int | None = None) -> PoolPrograms:
    """Lower and compile `refill` for every (R in `sizes`, P in `widths`) and `decode_chunk` (`chunk` steps)
    for this pool, concurrently in `threads` threads (default: min(programs, CPU cores)).

    params: as `stream` passes them (`with_layout(params, "dual")`); pool: the pool they will run on (its
    shapes, nothing donated); eos int32[K], max_new_tokens and seed int32 scalars: the arrays the calls
    will get. The executables are the programs the jitted functions compile for the same shapes."""
    spec = jax.ShapeDtypeStruct
    limits = (eos, max_new_tokens, seed)
    lowerings: dict[object, Callable] = {"decode": functools.partial(  # "decode", then (R, P) for each refill
        decode_chunk.lower, params, cfg, pool, *limits, steps=chunk, matmul_precision=matmul_precision)}
    for r in sizes:
        for p in widths:  # rows, tokens [R, P], prompt_lengths, index, sampled: the arrays `stream` builds
            prompts = (spec((r,), jnp.int32), spec((r, p), jnp.int32), spec((r,), jnp.int32), spec((r,), jnp.int32),
                       spec((r,), jnp.bool_))
            lowerings[(r, p)] = functools.partial(refill.lower, params, cfg, pool, *prompts, *limits,
                                                  matmul_precision=matmul_precision)
    threads = threads or min(len(lowerings), os.cpu_count() or 1)

    def build(lower: Callable) -> tuple[Callable, float]:
        t0 = time.perf_counter()
        executable = lower().compile()
        return executable, time.perf_counter() - t0

    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix="specjax-precompile") as workers:
        built = dict(zip(lowerings, workers.map(build, lowerings.values())))
    seconds = time.perf_counter() - t0
    program_seconds = sum(t for _, t in built.values())
    decode, _ = built.pop("decode")
    return PoolPrograms(refills={key: exe for key, (exe, _) in built.items()}, decode=decode, seconds=seconds,
                        program_seconds=program_seconds, threads=threads)


def stream(params, cfg, prompts: Iterable[tuple[int, list[int], bool]], *, batch_size: int, max_new_tokens: int,
           max_prompt_tokens: int, eos_ids: tuple[int, ...], seed: int = 0, chunk: int = 16,
           width_step: int = 32, matmul_precision: str = DEFAULT_PRECISION,
           on_tokens: Callable[[int], None] | None = None, precompile: str = "auto",
           lookahead: int | None = None) -> Iterator[tuple[int, list[int]]]:
    """Generate an answer to every prompt (index, ids, sampled) through a pool of `batch_size` rows;
    yields (index, response ids: through the first EOS, at most max_new_tokens) as rows finish.

    Prompts are read in order into a look-ahead of `lookahead` waiting prompts (default 2 x batch_size);
    a refill takes those `refill_choice` picks (the oldest, then those its width fits) and pads them to a
    width of `prompt_widths` (multiples of `width_step`) and a row count of `refill_sizes` (a few compiled
    shapes). `on_tokens(n)` is told the response tokens picked by every refill and chunk (a
    progress bar). precompile: "on" compiles every refill shape and the decode chunk before the first
    refill, concurrently (`compile_pool_programs`; one line on stderr says how long), "off" compiles
    each program when first needed, "auto" (`precompile_wanted`) is "on" unless jax runs on the CPU;
    the answers are the same either way. No EOS ids or an unknown precompile value raise ValueError
    here, before anything runs."""
    if not eos_ids:
        raise ValueError("continuous batching needs EOS ids (a row that never ends never frees its slot)")
    ahead = precompile_wanted(precompile)
    lookahead = lookahead_for(batch_size, lookahead)
    if min(batch_size, max_new_tokens, max_prompt_tokens, chunk, width_step, lookahead) < 1:
        raise ValueError(f"batch_size, max_new_tokens, max_prompt_tokens, chunk, width_step and lookahead must be "
                         f">= 1, got {batch_size}, {max_new_tokens}, {max_prompt_tokens}, {chunk}, {width_step}, "
                         f"{lookahead}")
    return _stream(params, cfg, iter(prompts), batch_size=batch_size, max_new_tokens=max_new_tokens,
                   max_prompt_tokens=max_prompt_tokens, eos_ids=tuple(eos_ids), seed=seed, chunk=chunk,
                   width_step=width_step, matmul_precision=matmul_precision, on_tokens=on_tokens, ahead=ahead,
                   lookahead=lookahead)


def _stream(params, cfg, source: Iterator[tuple[int, list[int], bool]], *, batch_size, max_new_tokens,
            max_prompt_tokens, eos_ids, seed, chunk, width_step, matmul_precision, on_tokens, ahead: bool,
            lookahead: int):
    """`stream`'s loop, its arguments checked; `ahead`: compile every program first (`compile_pool_programs`)."""
    dtype = jax.tree.leaves(params)[0].dtype
    params = with_layout(params, "dual")  # per-layer decode steps over the per-layer pool cache, scanned refills
    b = batch_size
    pool = init_pool(cfg, b, max_prompt_tokens + max_new_tokens + 1, dtype)
    limits = (eos_table(eos_ids), jnp.int32(max_new_tokens), jnp.int32(seed))  # eos, max_new_tokens, seed
    sizes, widths = refill_sizes(b), prompt_widths(max_prompt_tokens, width_step)
    programs = None
    if ahead:
        programs = compile_pool_programs(params, cfg, pool, *limits, sizes=sizes, widths=widths, chunk=chunk,
                                         matmul_precision=matmul_precision)
        print(programs.summary(), file=sys.stderr, flush=True)

    def run_refill(pool, *prompts_args):  # prompts_args: rows [R], tokens [R, P], lengths, index [R], sampled [R]
        executable = programs.refills.get(prompts_args[1].shape) if programs else None
        if executable is not None:
            return executable(params, pool, *prompts_args, *limits)
        return refill(params, cfg, pool, *prompts_args, *limits, matmul_precision=matmul_precision)

    def run_decode(pool):
        if programs:
            return programs.decode(params, pool, *limits)
        return decode_chunk(params, cfg, pool, *limits, steps=chunk, matmul_precision=matmul_precision)

    responses: dict[int, list[int]] = {}  # pool row -> tokens so far
    free = list(range(b))
    waiting: list[tuple[int, list[int], bool]] = []  # read from the source, not yet in the pool; in prompt order
    exhausted = False
    while True:
        if free:
            while not exhausted and len(waiting) < max(lookahead, len(free)):
                nxt = next(source, None)
                if nxt is None:
                    exhausted = True
                    break
                if len(nxt[1]) > max_prompt_tokens:
                    raise ValueError(f"prompt {nxt[0]} has {len(nxt[1])} tokens > max_prompt_tokens "
                                     f"{max_prompt_tokens}")
                waiting.append(nxt)
            chosen = refill_choice([len(ids) for _, ids, _ in waiting], len(free), sizes, widths,
                                   more=not exhausted or len(waiting) > len(free), busy=bool(responses))
            batch, taken = [waiting[j] for j in chosen], set(chosen)
            waiting = [w for j, w in enumerate(waiting) if j not in taken]
            if batch:
                r = _bucket(len(batch), sizes)
                width = _bucket(max(len(ids) for _, ids, _ in batch), widths)
                toks = np.zeros((r, width), np.int32)
                lens = np.ones((r,), np.int32)
                rows = np.full((r,), b, np.int32)  # padding rows: out of range, dropped
                idx = np.zeros((r,), np.int32)
                smp = np.zeros((r,), bool)
                for j, (i, ids, s) in enumerate(batch):
                    toks[j, :len(ids)] = ids
                    lens[j], rows[j], idx[j], smp[j] = len(ids), free[j], i, s
                # device_put, not jnp.asarray: that stages each array through a small program compiled per shape
                pool, first = run_refill(pool, *jax.device_put((rows, toks, lens, idx, smp)))
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
            pool, out = run_decode(pool)
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
