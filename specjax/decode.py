"""Decoding loops: the autoregressive baseline and the one speculative loop.

Each generation is ONE jitted function: prefill, then a `lax.while_loop` with no host
round-trip. A speculative round is the same for every method:

    propose (drafter) -> one target forward over [root, tree] with the ancestor mask
    -> walk (greedy / sampling walk / chain rejection) -> commit target and draft caches
    -> observe (drafter) -> append accepted tokens + bonus

Drafters follow `specjax.drafters.protocol.Drafter` (frozen dataclasses, static under
jit): `init` receives the prompt's target features (`PromptContext`) and `observe` one
`Verified` struct per round (tree, walk, tokens kept, active rows, the target features of
the root + accepted path, the target's top-k per verified slot). Optional `verify_widths`
(static, ascending, ending at `budget`): the target then verifies only the smallest such
prefix of the tree's slots that holds every valid node of the active rows (adaptive trees
are mostly far below their budget; the walk results do not depend on the width, sampled
draws do). Not combinable with chain rejection.

Public pieces: `generate` / `generate_ar`; `speculative_round` (one round over a
`LoopState`, what the while loop runs; its verification is `specjax.verify.verify_tree`),
for users who drive rounds themselves. Inside your own
`jax.jit` / `jax.vmap`: `specjax.core` (`generate_core` / `generate_ar_core`, no host work);
`generate` / `generate_ar` trace too, checking shapes only (`specjax.inputs.validate_prompts`).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jax.experimental import checkify

from typing import Any, Callable

from specjax.drafters.protocol import PromptContext, Verified
from specjax.inputs import check_generate_args, is_traced, validate_prompts
from specjax.models.cache import KVCache, advance, check_capacity, commit, init_cache
from specjax.models.model import ModelConfig, forward, outer_params, prefill_tapped, prefill_unchecked
from specjax.numerics import DEFAULT_PRECISION, decode_compiler_options, matmul_scope
from specjax.ops import argmax, device_widths
from specjax.ops import top_k as top_k_op
from specjax.sampling import Sampling, categorical
from specjax.sharding import init_cache_on, mesh_of, replicate
from specjax.streaming import emit, listening
from specjax.tree import tree_depth
from specjax.tree_checks import check_proposed_tree, checks_trees_by_default, from_outside
from specjax.verify import verify_tree

__all__ = [
    "cache_sizes", "check_proposed_tree", "checks_trees_by_default", "eos_table", "finish", "from_outside", "generate",
    "generate_ar", "GenerateOutput", "initial_state", "is_eos",
    "LoopState", "pick_token", "RoundStats", "speculative_round", "SpeculativeOutput", "target_layers",
    "validate_prompts",
]


@struct.dataclass
class GenerateOutput:
    """What a generation returns (B rows, M = max_new_tokens, P = a row's prompt length).

    Fields:
      tokens: int32[B, M] generated tokens; pad_id after each row's end.
      num_tokens: int32[B] generated tokens per row (an EOS token counts and ends the row; <= M).
      cache: the target's final `KVCache`: row b holds the prompt and the generated tokens except
        the last one (committed length P + num_tokens - 1; the last token was never forwarded).
    """

    tokens: jax.Array
    num_tokens: jax.Array
    cache: KVCache


def pick_token(logits: jax.Array, key: jax.Array, sampling: Sampling) -> jax.Array:
    """One token int32[B] from logits f32[B, V] under `sampling` (argmax when greedy)."""
    if sampling.greedy:  # the categorical of the greedy log-probs is the argmax, without a V-wide Gumbel draw
        return argmax(logits)
    return categorical(key, sampling.log_probs(logits))


def is_eos(tokens: jax.Array, eos_ids: tuple[int, ...] | jax.Array) -> jax.Array:
    """bool of the same shape as `tokens`: token is one of `eos_ids`, a static tuple or a
    traced `eos_table` (int32[K], -1 entries match nothing)."""
    table = jnp.asarray(eos_ids, jnp.int32).reshape(-1)  # () -> int32[0]: matches nothing
    return (tokens[..., None] == table).any(-1)


def eos_table(eos_ids: tuple[int, ...], mesh=None) -> jax.Array:
    """The EOS set as a traced argument of the loops: int32[K], `eos_ids` then -1 padding,
    K = max(4, the next power of two). A static tuple would compile one program per EOS set
    (none, the config's, a user's); this way every set of up to 4 ids shares one. Placed
    explicitly (replicated over `mesh` when sharded), so passing it is no implicit transfer."""
    ids = tuple(eos_ids)
    if any(isinstance(i, bool) or not isinstance(i, (int, np.integer)) or i < 0 for i in ids):
        raise ValueError(f"eos_ids must be non-negative token ids, got {ids}")
    size = max(4, 1 << max(len(ids) - 1, 0).bit_length())
    value = np.full((size,), -1, np.int32)
    value[:len(ids)] = ids
    return _place(value, mesh)


def count_through_first_eos(eos_at: jax.Array, default: jax.Array | int) -> jax.Array:
    """int32[B]: tokens up to and including each row's first EOS (eos_at bool[B, T], True at
    an EOS), `default` (int or int32[B]) for a row without one."""
    return jnp.where(eos_at.any(axis=1), jnp.argmax(eos_at, axis=1) + 1, default).astype(jnp.int32)


_AR_JIT = dict(static_argnames=("cfg", "max_new_tokens", "sampling", "pad_id", "matmul_precision", "stream"),
               donate_argnames=("cache",))


def generate_ar_entry(params, cfg, tokens, prompt_lengths, cache, key, max_new_tokens, eos, sampling, pad_id,
                       matmul_precision=DEFAULT_PRECISION, stop=None, stream=False, listener=None):
    with matmul_scope(matmul_precision):
        return _generate_ar_body(params, cfg, tokens, prompt_lengths, cache, key, max_new_tokens, eos, sampling,
                                 pad_id, stop, stream, listener)


_generate_ar = jax.jit(generate_ar_entry, **_AR_JIT)


def _generate_ar_body(params, cfg, tokens, prompt_lengths, cache, key, max_new_tokens, eos, sampling, pad_id,
                      stop=None, stream=False, listener=None):
    # max_new_tokens (static) sizes the output; `stop` (traced int32 scalar <= it, default
    # max_new_tokens) ends the loop, so calls that differ only in it share one program.
    b = tokens.shape[0]
    limit = max_new_tokens if stop is None else stop
    key = jax.random.key(0) if key is None else key
    _, last, cache = prefill_unchecked(params, cfg, tokens, prompt_lengths, cache, matmul_precision=None)
    key, sub = jax.random.split(key)
    first = pick_token(last, sub, sampling)
    out = jnp.full((b, max_new_tokens), pad_id, jnp.int32).at[:, 0].set(first)
    done = is_eos(first, eos)
    ones_mask = jnp.ones((b, 1, 1), bool)
    if stream:  # `specjax.streaming`: the first token, then one per step and live row
        emit(listener, jnp.zeros((b,), jnp.int32), jnp.ones((b,), jnp.int32), out)

    def cond(state):
        step, _, _, _, done, _ = state
        return (step < limit) & ~jnp.all(done)

    def body(state):
        step, cur, out, cache, done, key = state
        logits, cache = forward(params, cfg, cur[:, None], cache.lengths[:, None], ones_mask, cache)
        cache = advance(cache, jnp.where(done, 0, 1))
        key, sub = jax.random.split(key)
        nxt = jnp.where(done, pad_id, pick_token(logits[:, 0], sub, sampling))
        out = out.at[:, step].set(nxt)
        if stream:
            emit(listener, jnp.full((b,), step, jnp.int32), jnp.where(done, step, step + 1).astype(jnp.int32), out)
        return step + 1, nxt, out, cache, done | is_eos(nxt, eos), key

    _, _, out, cache, _, _ = jax.lax.while_loop(cond, body, (jnp.int32(1), first, out, cache, done, key))
    written = jnp.arange(max_new_tokens)[None] < limit  # columns past `stop` hold pad_id: never an EOS
    num = count_through_first_eos(is_eos(out, eos) & written, limit)
    return GenerateOutput(tokens=out, num_tokens=num, cache=cache)


def generate_ar(
    params,
    cfg: ModelConfig,
    tokens: jax.Array,
    prompt_lengths: jax.Array | None = None,
    max_new_tokens: int | None = None,
    *,
    cache_slots: int | None = None,
    eos_ids: tuple[int, ...] | int | None = None,
    sampling: Sampling = Sampling(),
    key: jax.Array | None = None,
    pad_id: int = 0,
    cache_dtype=None,
    matmul_precision: str = DEFAULT_PRECISION,
    reserve_new_tokens: int | None = None,
    on_round: Callable[[list[np.ndarray]], None] | None = None,
) -> GenerateOutput:
    """Plain autoregressive generation: the baseline every speculative method must match.

    tokens: int32[B, T] right-padded prompts; prompt_lengths: int32[B] (or, with prompt_lengths
    None, a list of token lists or one prompt: `specjax.inputs.as_prompt_batch`). Generates up to
    `max_new_tokens` per row, stopping a row at its first token in `eos_ids` (default:
    the config's EOS ids; pass () to never stop; an int is a set of one). `key` (a PRNG key) is
    required when `sampling` samples (temperature > 0). The cache holds `cache_slots`
    (default T + max(max_new_tokens, reserve_new_tokens)) slots per row.
    `reserve_new_tokens` (>= max_new_tokens) compiles the program for that many new tokens
    and stops it after `max_new_tokens`: calls that differ only in `max_new_tokens` (e.g. a
    time-to-first-token call and the full one) share one compiled program. `matmul_precision`:
    specjax's precision policy (`specjax.numerics`; default full float32 on every backend).
    Errors are raised before compiling. Traceable (prompts, params and key may be tracers under
    `jax.jit` / `jax.vmap`; the rest static): then prompt values go unchecked (`specjax.core`).
    `on_round`: streaming (`specjax.streaming`), called on the host with each row's new token after
    the prefill and after every step (not under a transformation).
    """
    tokens, prompt_lengths, eos_ids = check_generate_args("generate_ar", cfg, tokens, prompt_lengths, max_new_tokens,
                                                          eos_ids, sampling, key, pad_id, matmul_precision)
    b, t = tokens.shape
    buffer = max(max_new_tokens, reserve_new_tokens or 0)
    slots = cache_slots if cache_slots is not None else t + buffer
    check_capacity(np.zeros(b), t + max_new_tokens, slots, what="prompt + max_new_tokens")
    dtype = cache_dtype or jax.tree.leaves(params)[0].dtype
    # Sharded inputs (`specjax.sharding`): allocate the cache in its shards, not whole on one device.
    mesh = mesh_of(params, tokens)
    cache = init_cache_on(mesh, cfg, b, slots, dtype)
    eos = eos_table(cfg.eos_token_ids if eos_ids is None else eos_ids, mesh)
    traced = is_traced(params, tokens, prompt_lengths, key)  # under jit / vmap: no donation (vmap broadcasts it)
    if on_round is not None and traced:
        raise ValueError("on_round streams to the host: call generate_ar outside jax.jit / jax.vmap to stream")
    run = _entry_point(_generate_ar, generate_ar_entry, cfg, donate=not traced)
    with listening(on_round) as listener:  # this call's listener id: its rounds reach only `on_round`
        out = run(params, cfg, jnp.asarray(tokens, jnp.int32), jnp.asarray(prompt_lengths, jnp.int32), cache, key,
                  buffer, eos, sampling, pad_id, matmul_precision, stop=_stop_bound(max_new_tokens, mesh),
                  stream=on_round is not None, listener=_listener_id(listener, mesh))
        if on_round is not None:
            out.tokens.block_until_ready()
    return out if buffer == max_new_tokens else out.replace(tokens=out.tokens[:, :max_new_tokens])


def _listener_id(listener: int | None, mesh) -> jax.Array | None:
    """A streaming call's listener id (`specjax.streaming.listening`) as the loop's traced int32 scalar."""
    return None if listener is None else _place(np.int32(listener), mesh)


def _stop_bound(max_new_tokens: int, mesh) -> jax.Array:
    """`max_new_tokens` as the loops' traced stop bound: an int32 scalar placed explicitly
    (replicated over `mesh` when sharded), so it is no implicit transfer."""
    return _place(np.int32(max_new_tokens), mesh)


def _place(value: np.ndarray, mesh) -> jax.Array:
    """A host value put on the device explicitly (allowed under `jax.transfer_guard("disallow")`),
    replicated over `mesh` when the call is sharded."""
    return jax.device_put(value) if mesh is None else replicate(value, mesh)


@struct.dataclass
class RoundStats:
    """Per-round statistics of a speculative generation (R = max_new_tokens rounds at most).

    Fields:
      accepted: int32[B, R] draft tokens accepted in each round (-1 past the row's last round);
        the last round counts only what the output kept (max_new_tokens, EOS).
      proposed: int32[B, R] valid tree nodes proposed in each round (-1 likewise).
      depth: int32[B, R] depth of the proposed tree in each round (-1 likewise).
      num_rounds: int32[B] target verification forwards per row (rounds the row was active in).
    """

    accepted: jax.Array
    proposed: jax.Array
    depth: jax.Array
    num_rounds: jax.Array

    def mean_accepted_length(self) -> np.ndarray:
        """tau / MAT per row: mean tokens emitted per round (accepted + the bonus)."""
        acc = np.asarray(self.accepted)
        rounds = np.maximum(np.asarray(self.num_rounds), 1)
        return np.where(acc >= 0, acc + 1, 0).sum(1) / rounds

    def acceptance_rate(self) -> np.ndarray:
        """Accepted draft tokens / proposed draft tokens (all tree nodes), per row."""
        acc, prop = np.asarray(self.accepted), np.asarray(self.proposed)
        return np.clip(acc, 0, None).sum(1) / np.maximum(np.clip(prop, 0, None).sum(1), 1)


@struct.dataclass
class SpeculativeOutput(GenerateOutput):
    """`GenerateOutput` plus per-round statistics and the drafter's final state.

    Fields:
      tokens: int32[B, M] generated tokens (M = max_new_tokens); pad_id after each row's end.
      num_tokens: int32[B] generated tokens per row (an EOS token counts and ends the row).
      cache: the target's final `KVCache` (committed length P + num_tokens - 1 per row).
      stats: `RoundStats` ([B, R] arrays: accepted / proposed / depth per round, num_rounds int32[B]).
      draft_state: the drafter's final state pytree (e.g. its KV cache, or a warm retrieval table that
        `carry_over` hands to the next request), for inspection.
    """

    stats: RoundStats = None
    draft_state: object = None


@struct.dataclass
class LoopState:
    """The speculative loop's carry (B rows, M = max_new_tokens, D = the drafter's max_depth).

    Fields:
      root: int32[B] last committed token, not yet processed by the target (next round's root).
      out: int32[B, M+D+1] generated tokens (the first `count` of each row are real, the rest pad_id;
        D + 1 spare columns so a round can write its whole path unclipped).
      count: int32[B] tokens generated per row (the first token, picked after prefill, included).
      done: bool[B] row finished (EOS or M tokens); done rows are left unchanged by a round.
      cache: the target's `KVCache` (committed length = position of `root`).
      draft_state: the drafter's state pytree (what its `init` / `propose` / `observe` return).
      stats: `RoundStats` recorded so far (-1 in rounds not yet run).
      key: the loop's PRNG key; each round splits it into draft / verify keys and the next key.
    """

    root: jax.Array
    out: jax.Array
    count: jax.Array
    done: jax.Array
    cache: KVCache
    draft_state: Any
    stats: RoundStats
    key: jax.Array


def speculative_round(params, cfg: ModelConfig, drafter, state: LoopState, *, max_new_tokens: int | jax.Array,
                      eos_ids: tuple[int, ...] | jax.Array, sampling: Sampling, check_trees: bool = False) -> LoopState:
    """One round of the loop: propose -> `verify_tree` -> keep -> commit -> observe -> emit.

    Pure and jittable (cfg, drafter, sampling static; `eos_ids` a static tuple or a traced
    `eos_table`); `generate`'s `lax.while_loop` calls exactly this. Rows that are done are
    left unchanged.
    `max_new_tokens`: where rows stop, a static int or a traced int32 scalar, at most the
    M that sized `state.out` (`initial_state`).
    `check_trees` (static): validate the proposed tree of every active row (`check_proposed_tree`:
    `jax.experimental.checkify` checks, so run the round under `checkify.checkify`); False adds
    nothing to the program.
    """
    b = state.root.shape[0]
    rows = jnp.arange(b)
    steps = jnp.arange(drafter.max_depth + 1)[None]  # [1, D+1]
    key, k_draft, k_verify = jax.random.split(state.key, 3)
    active = ~state.done
    tree, draft_probs, dstate = drafter.propose(state.draft_state, state.root, active, k_draft, sampling)
    if check_trees:
        check_proposed_tree(tree, active, state.stats.num_rounds, drafter, cfg.vocab_size)
    start = state.cache.lengths
    tp = verify_tree(params, cfg, tree, state.root, state.cache, k_verify, sampling, max_depth=drafter.max_depth,
                     draft_probs=draft_probs, rejection=drafter.uses_rejection(sampling),
                     feature_layers=target_layers(drafter), top_k=getattr(drafter, "target_topk", 0),
                     widths=device_widths(getattr(drafter, "verify_widths", None)), active=active)
    result = tp.result

    # Keep only what the output will hold: up to max_new_tokens and through the first EOS.
    # Committing more would let finished rows outgrow their cache while others continue.
    emitted = result.emitted  # [B, D+1]: accepted tokens then the bonus
    eos_at = is_eos(emitted, eos_ids) & (steps <= result.num_accepted[:, None])
    keep = jnp.minimum(result.num_accepted + 1, max_new_tokens - state.count)
    keep = jnp.minimum(keep, count_through_first_eos(eos_at, keep))
    keep = jnp.where(active, keep, 0)  # tokens emitted this round, >= 1 for active rows
    # The target commits the root and keep - 1 accepted nodes; the last kept token is next round's root.
    cache = commit(tp.cache, result.path_slots, keep)
    kept = result.replace(num_accepted=jnp.maximum(keep - 1, 0))
    dstate = drafter.observe(dstate, Verified(tree=tree, result=kept, num_kept=keep, active=active, start=start,
                                              features=tp.features, top_ids=tp.top_ids, top_logits=tp.top_logits))

    idx = state.count[:, None] + steps
    write = steps < keep[:, None]
    out = state.out.at[rows[:, None], idx].set(jnp.where(write, emitted, state.out[rows[:, None], idx]))
    next_root = jnp.take_along_axis(emitted, jnp.maximum(keep - 1, 0)[:, None], axis=1)[:, 0]
    count = state.count + keep
    done = state.done | eos_at.any(axis=1) | (count >= max_new_tokens)
    st, r = state.stats, state.stats.num_rounds
    record = lambda field, value: field.at[rows, r].set(jnp.where(active, value, field[rows, r]))  # noqa: E731
    stats = RoundStats(accepted=record(st.accepted, kept.num_accepted),
                       proposed=record(st.proposed, tree.valid.sum(-1).astype(jnp.int32)),
                       depth=record(st.depth, tree_depth(tree)), num_rounds=r + active.astype(jnp.int32))
    return LoopState(root=jnp.where(active, next_root, state.root), out=out, count=count, done=done, cache=cache,
                     draft_state=dstate, stats=stats, key=key)


def target_layers(drafter) -> tuple[int, ...]:
    """The target layers a drafter reads (its static `target_layers`, () if it declares none)."""
    return tuple(getattr(drafter, "target_layers", ()))


def initial_state(params, cfg: ModelConfig, drafter, draft_params, tokens: jax.Array, prompt_lengths: jax.Array,
                  key: jax.Array | None, *, max_new_tokens: int, eos_ids: tuple[int, ...] | jax.Array,
                  sampling: Sampling, pad_id: int, num_slots: int, reserve: int,
                  stop: jax.Array | int | None = None) -> LoopState:
    """Prefill the target (tapping the drafter's `target_layers`), pick the first token and
    `init` the drafter: the LoopState before the first round (traceable; no host checks —
    `generate` does those). `max_new_tokens` (static) sizes the output and the statistics;
    `stop` (default max_new_tokens; may be traced) is where rows stop, as `speculative_round`'s
    `max_new_tokens`."""
    stop = max_new_tokens if stop is None else stop
    b = tokens.shape[0]
    key = jax.random.key(0) if key is None else key  # created on device: no host transfer
    cache = init_cache(cfg, b, num_slots, jax.tree.leaves(params)[0].dtype)
    layers = target_layers(drafter)
    logits, last, cache, features = prefill_tapped(params, cfg, tokens, prompt_lengths, cache, layers,
                                                   matmul_precision=None)
    topk = getattr(drafter, "target_topk", 0)
    key, sub = jax.random.split(key)
    root = pick_token(last, sub, sampling)
    context = PromptContext(features=features if layers else None,
                            target_params=outer_params(params),
                            top_ids=top_k_op(logits, topk)[1].astype(jnp.int32) if topk else None)
    dstate = drafter.init(draft_params, tokens, prompt_lengths, reserve, context)
    count = jnp.ones((b,), jnp.int32)
    minus = jnp.full((b, max_new_tokens), -1, jnp.int32)
    widths = getattr(drafter, "verify_widths", (drafter.budget,))
    if widths[-1] != drafter.budget or (len(widths) > 1 and drafter.uses_rejection(sampling)):
        raise ValueError(f"verify_widths {widths} must end at the budget {drafter.budget} and cannot be combined "
                         f"with chain rejection (its draft probs and results have the full width)")
    return LoopState(root=root, out=jnp.full((b, max_new_tokens + drafter.max_depth + 1), pad_id, jnp.int32)
                     .at[:, 0].set(root), count=count, done=is_eos(root, eos_ids) | (count >= stop),
                     cache=cache, draft_state=dstate,
                     stats=RoundStats(accepted=minus, proposed=minus, depth=minus,
                                      num_rounds=jnp.zeros((b,), jnp.int32)), key=key)


def finish(state: LoopState, max_new_tokens: int, pad_id: int) -> "SpeculativeOutput":
    """The generation's output from the final LoopState."""
    tokens_out = jnp.where(jnp.arange(max_new_tokens)[None] < state.count[:, None], state.out[:, :max_new_tokens],
                           pad_id)
    return SpeculativeOutput(tokens=tokens_out, num_tokens=state.count, cache=state.cache, stats=state.stats,
                             draft_state=state.draft_state)


_SPEC_JIT = dict(static_argnames=("cfg", "drafter", "max_new_tokens", "sampling", "pad_id", "num_slots",
                                  "reserve", "matmul_precision", "stream"))


def generate_entry(params, cfg, drafter, draft_params, tokens, prompt_lengths, key, max_new_tokens, eos,
                    sampling, pad_id, num_slots, reserve, matmul_precision=DEFAULT_PRECISION, stop=None, stream=False,
                    listener=None, check_trees=False):
    with matmul_scope(matmul_precision):  # target and drafter, prefill, verify and decode: one policy
        return _generate_body(params, cfg, drafter, draft_params, tokens, prompt_lengths, key, max_new_tokens,
                              eos, sampling, pad_id, num_slots, reserve, stop, stream, listener, check_trees)


_generate = jax.jit(generate_entry, **_SPEC_JIT)


def generate_checked_entry(params, cfg, drafter, draft_params, tokens, prompt_lengths, key, max_new_tokens, eos,
                           sampling, pad_id, num_slots, reserve, matmul_precision=DEFAULT_PRECISION, stop=None,
                           stream=False, listener=None):
    """`generate_entry` with every proposed tree checked (`check_trees=True`), functionalized by
    `checkify`: -> (checkify.Error, SpeculativeOutput)."""
    def run(params, draft_params, tokens, prompt_lengths, key, eos, stop, listener):
        return generate_entry(params, cfg, drafter, draft_params, tokens, prompt_lengths, key, max_new_tokens, eos,
                              sampling, pad_id, num_slots, reserve, matmul_precision, stop, stream, listener,
                              check_trees=True)

    return checkify.checkify(run, errors=checkify.user_checks)(params, draft_params, tokens, prompt_lengths, key, eos,
                                                               stop, listener)


_generate_checked = jax.jit(generate_checked_entry, **_SPEC_JIT)


@functools.cache
def _compiled_with(entry, options: tuple[tuple[str, object], ...], donate: bool = True):
    """`entry` jitted with XLA `options` (specjax.numerics.decode_compiler_options): one jit
    object per option set, so each keeps its own compile cache. `donate=False`: without
    donating the cache (under `jax.vmap` it is broadcast, and a donated one would go unused)."""
    jit_args = dict(_AR_JIT if entry is generate_ar_entry else _SPEC_JIT)
    if not donate:
        jit_args.pop("donate_argnames", None)
    return jax.jit(entry, compiler_options=dict(options), **jit_args)


def _entry_point(default, entry, cfg, donate: bool = True):
    """The jitted loop for this target on this backend: `default`, or `entry` compiled with
    the decode options the backend needs (none on CPU), or without donation."""
    options = decode_compiler_options(cfg)
    return _compiled_with(entry, options, donate) if options or not donate else default


def _generate_body(params, cfg, drafter, draft_params, tokens, prompt_lengths, key, max_new_tokens, eos,
                   sampling, pad_id, num_slots, reserve, stop=None, stream=False, listener=None, check_trees=False):
    # max_new_tokens (static) sizes the buffers; `stop` (traced, default max_new_tokens) ends rows.
    stop = max_new_tokens if stop is None else stop
    state = initial_state(params, cfg, drafter, draft_params, tokens, prompt_lengths, key,
                          max_new_tokens=max_new_tokens, eos_ids=eos, sampling=sampling, pad_id=pad_id,
                          num_slots=num_slots, reserve=reserve, stop=stop)
    body = functools.partial(speculative_round, params, cfg, drafter, max_new_tokens=stop, eos_ids=eos,
                             sampling=sampling, check_trees=check_trees)
    if stream:  # `specjax.streaming`: the first token, then each round's, to the host listener
        emit(listener, jnp.zeros_like(state.count), state.count, state.out)
        body = functools.partial(_streamed, body, listener)
    return finish(jax.lax.while_loop(lambda s: ~jnp.all(s.done), body, state), max_new_tokens, pad_id)


def _streamed(round_fn, listener, state):
    new = round_fn(state)
    emit(listener, state.count, new.count, new.out)
    return new


def cache_sizes(drafter, prompt_width: int, max_new_tokens: int, reserve_new_tokens: int | None = None):
    """(target cache slots, reserve): T + M + max(N, D) slots cover every write (see `generate`).

    The verify writes N + 1 pending slots after the committed length (< T + M); `commit`
    moves D + 1 path slots with one dynamic_update_slice, which XLA would *clamp* (shift
    onto committed entries) if it ran past the end: a tree of fewer nodes than its depth
    bound (DDTree with N < L) needs the D."""
    reserve = max(max_new_tokens, reserve_new_tokens or 0)
    return prompt_width + reserve + max(drafter.budget, drafter.max_depth), reserve


def generate(
    params,
    cfg: ModelConfig,
    drafter,
    draft_params,
    tokens: jax.Array,
    prompt_lengths: jax.Array | None = None,
    max_new_tokens: int | None = None,
    *,
    sampling: Sampling = Sampling(),
    key: jax.Array | None = None,
    eos_ids: tuple[int, ...] | int | None = None,
    pad_id: int = 0,
    reserve_new_tokens: int | None = None,
    matmul_precision: str = DEFAULT_PRECISION,
    on_round: Callable[[list[np.ndarray]], None] | None = None,
    check_trees: bool | None = None,
) -> SpeculativeOutput:
    """Speculative generation with any drafter; the output distribution is the target's.

    params/cfg: the target; drafter: a drafter object (static); draft_params: its
    pytree (draft LM params, or None); tokens int32[B, T] right-padded prompts with
    prompt_lengths int32[B] (other prompt forms, `eos_ids` and `key`: as `generate_ar`). Greedy
    (default) output equals `generate_ar` token for token; with sampling (a key required) it is
    distributed as `generate_ar` with the same `Sampling`.
    Returns tokens int32[B, max_new_tokens], num_tokens, the target cache and RoundStats.
    All checks happen here, before compiling; nothing in the call transfers to the host.
    Traceable as `generate_ar` (under a transformation prompt values go unchecked; `specjax.core`).
    `reserve_new_tokens` (>= max_new_tokens) compiles the generation (caches, buffers) for
    that many new tokens and stops it after `max_new_tokens`: a short call (e.g. time to
    first token) runs the full call's compiled program on the same cache shapes.
    `matmul_precision`: specjax's precision policy for every forward of the target and the
    drafter (`specjax.numerics`; default full float32 on any backend).
    `on_round`: streaming (`specjax.streaming`): called on the host with each row's tokens after
    the prefill and after every round; the call then returns once the generation has finished.
    `check_trees`: validate every tree the drafter proposes inside the loop (`check_proposed_tree`:
    the rules of `specjax.tree.TREE_RULES` on the active rows); a broken one raises
    `jax.experimental.checkify.JaxRuntimeError` naming the row, its round, the node and the rule,
    after the call. Under your own `jax.jit` / `jax.vmap` wrap your function in `checkify.checkify`.
    Default None: on for a drafter from outside specjax (`from_outside`: your own drafter class, or one
    holding or wrapping it), off for the package's own (then the compiled program is the same as without
    it); under a transformation None is off (checking there needs your `checkify.checkify`); False: off.
    """
    tokens, prompt_lengths, eos_ids = check_generate_args("generate", cfg, tokens, prompt_lengths, max_new_tokens,
                                                          eos_ids, sampling, key, pad_id, matmul_precision)
    drafter.validate(cfg)
    check_trees = checks_trees_by_default(check_trees, drafter) and (
        check_trees is not None or not is_traced(params, tokens, prompt_lengths, key))
    # Worst case: an active row has committed < T + M - 1 tokens and writes its N + 1 pending
    # slots; a finished row has committed exactly P + num_tokens - 1 <= T + M - 1 and keeps
    # writing (uncommitted) pending slots while other rows run: T + M + N slots cover both
    # (and T + M + D the D + 1 slots that `commit` rewrites).
    num_slots, reserve = cache_sizes(drafter, tokens.shape[1], max_new_tokens, reserve_new_tokens)
    mesh = mesh_of(params, tokens)
    eos = eos_table(cfg.eos_token_ids if eos_ids is None else eos_ids, mesh)
    if on_round is not None and is_traced(params, tokens, prompt_lengths, key):
        raise ValueError("on_round streams to the host: call generate outside jax.jit / jax.vmap to stream")
    run = (_entry_point(_generate_checked, generate_checked_entry, cfg) if check_trees
           else _entry_point(_generate, generate_entry, cfg))
    with listening(on_round) as listener:  # this call's listener id: its rounds reach only `on_round`
        out = run(params, cfg, drafter, draft_params, tokens, prompt_lengths, key, reserve, eos, sampling, pad_id,
                  num_slots, reserve, matmul_precision, stop=_stop_bound(max_new_tokens, mesh),
                  stream=on_round is not None, listener=_listener_id(listener, mesh))
        if check_trees:  # under a transformation the caller's checkify reports it
            error, out = out
            checkify.check_error(error) if is_traced(params, tokens, prompt_lengths, key) else error.throw()
        if on_round is not None:
            out.tokens.block_until_ready()
    if reserve == max_new_tokens:
        return out
    trim = lambda x: x[:, :max_new_tokens]  # noqa: E731  ([B, reserve] -> [B, max_new_tokens]: nothing past is set)
    stats = out.stats.replace(accepted=trim(out.stats.accepted), proposed=trim(out.stats.proposed),
                              depth=trim(out.stats.depth))
    return out.replace(tokens=trim(out.tokens), stats=stats)
