"""How tokens are drawn: the static `Sampling` settings shared by the decode loop, the verifiers and
the drafters, the logit processing they all draw from (`process_logits`: temperature, top-k,
top-p; `target_probs`: its softmax), and the draw itself (`categorical`).

Why not `jax.random.categorical`: its Gumbel trick draws one random number per vocabulary entry, and
XLA:CPU makes threefry numbers at ~19 ns each (2026-11-28, 2-core AMD EPYC: 354 ms for the 18.9M
entries of [256, 9, 8192] logits, 654 ms the whole draw). A sampled round draws at every verified
slot: on SmolLM2 (49,152 tokens) one sample per slot of a 9-slot verify took 21-22 ms, now 0.6 ms
(`categorical`: the same law from ~2 sqrt(V) numbers). top-k found the k-th largest logit with a full
sort of the vocabulary (top-k 20 on those 9 slots: 150-157 ms, now 2.7-2.9 ms with the top-k kernel),
and so did top-p (top-p 0.9: 153-161 ms, now 9 ms by bisection, `_nucleus_threshold`) and a per-row
top-k (now a bisection too, `_kth_largest`). In the loop
(`specjax bench --model smollm2-135m --temperature 1 --round-split`, same run, old code then new): the
walk of a DDTree round 8.2 / 11.2 ms -> 1.9 / 1.6 ms (budgets 3 / 7); AR 20.6 -> 22.3 tok/s."""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp

from specjax.ops import argmax, top_k as ops_top_k

__all__ = ["NEG_INF", "Sampling", "categorical", "process_logits", "sampling_settings", "target_probs"]

NEG_INF = -jnp.inf


@dataclasses.dataclass(frozen=True)
class Sampling:
    """How tokens are drawn: temperature, then top-k, then top-p (`process_logits`). Hashable: static under jit.

    One convention for the loop and the verifiers: `log_probs(logits f32[B, ..., V])` gives the
    processed log-probabilities every sampler in specjax draws from.

    Fields:
      temperature: T >= 0 dividing the logits; 0 = greedy (argmax, the first on ties; top_k / top_p
        then change nothing).
      top_k: keep the tokens whose logit is >= the k-th largest (ties at the boundary kept), k >= 1;
        None disables it (k >= V keeps everything).
      top_p: nucleus threshold in (0, 1]: keep the smallest descending prefix whose mass reaches top_p
        (of the distribution left after temperature and top-k); None (or 1) disables it.
    """

    temperature: float = 0.0
    top_k: int | None = None
    top_p: float | None = None

    def __post_init__(self):
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if self.top_k is not None and self.top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {self.top_k}")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must lie in (0, 1], got {self.top_p}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def log_probs(self, logits: jax.Array) -> jax.Array:
        """Processed log-probabilities (temperature, top-k, top-p) of f32[..., V] logits."""
        return jax.nn.log_softmax(process_logits(logits, self.temperature, self.top_k, self.top_p), axis=-1)


def _per_row(x, ndim: int, dtype) -> jax.Array:
    """Scalar or [B] parameter -> array broadcastable against [B, ..., V] (ndim dims)."""
    x = jnp.asarray(x, dtype)
    return x.reshape(x.shape + (1,) * (ndim - x.ndim))


def sampling_settings(temperature, top_k, top_p):
    """(temperature, top_k, top_p) of the arguments a sampler takes: a `Sampling` in the temperature
    slot stands for all three settings (the convention of `generate`); else they are as given."""
    if isinstance(temperature, Sampling):
        if top_k is not None or top_p is not None:
            raise ValueError("pass either a Sampling or temperature / top_k / top_p, not both")
        return temperature.temperature, temperature.top_k, temperature.top_p
    return temperature, top_k, top_p


def process_logits(logits: jax.Array, temperature, top_k=None, top_p=None) -> jax.Array:
    """Temperature, then top-k, then top-p (nucleus); removed tokens get -inf.

    logits f32[B, ..., V]; temperature, top_k, top_p: Python scalars or arrays of shape
    [B] (per row), or one `Sampling` in place of all three (the convention of `generate`;
    every verifier below takes either). Returns f32[B, ..., V] whose softmax is the
    processed target.

    * temperature == 0: greedy; only the (first) argmax keeps a finite logit (0).
    * top_k: keep the tokens whose logit is >= the k-th largest (ties at the boundary are
      kept); k <= 0 or k >= V disables it. None skips it. Never a sort of V: one Python int
      ranks with the top-k kernel, a per-row array bisects (`_kth_largest`).
    * top_p: on the distribution left after temperature and top-k, keep the smallest
      prefix of the descending order whose mass reaches top_p, i.e. token j is kept iff
      the mass strictly before it is < top_p (ties with the last kept probability are
      kept); top_p >= 1 disables it. None skips it.
    """
    temperature, top_k, top_p = sampling_settings(temperature, top_k, top_p)
    logits = logits.astype(jnp.float32)
    nd, v = logits.ndim, logits.shape[-1]
    t = _per_row(temperature, nd, jnp.float32)
    greedy = t <= 0
    x = logits / jnp.where(greedy, 1.0, t)
    static_k = _static_int(top_k)
    ranked = static_k is not None and 0 < static_k < v
    if ranked:  # one k for every row (a `Sampling`'s): the k largest, not a sort of V
        top_values, top_ids = ops_top_k(x, static_k)  # kept on XLA's top-k kernel
        x = jnp.where(x < top_values[..., static_k - 1:], NEG_INF, x)
    elif top_k is not None and static_k is None:  # per-row k: each row's k-th largest by bisection
        k = _per_row(top_k, nd, jnp.int32)
        on = (k > 0) & (k < v)
        x = jnp.where(on & (x < _kth_largest(x, jnp.clip(k, 1, v))), NEG_INF, x)
    if top_p is not None:
        p = _per_row(top_p, nd, jnp.float32)
        probs = jax.nn.softmax(x, axis=-1)
        if ranked:
            # After a static top-k only the k largest (and ties with the k-th) have mass, so the descending
            # prefix that reaches top_p lies among the k largest, already ranked (softmax keeps the order):
            # read their probabilities. A prefix that would run past them (rounding) ends on a tie with the
            # k-th or on a zero: either way nothing more is removed.
            desc = jnp.take_along_axis(probs, top_ids, axis=-1)
            before = jnp.cumsum(desc, axis=-1) - desc  # mass strictly before each sorted entry
            count = jnp.maximum(jnp.sum(before < p, axis=-1, keepdims=True), 1)
            threshold = jnp.take_along_axis(desc, count - 1, axis=-1)
        else:
            threshold = _nucleus_threshold(probs, p)
        x = jnp.where((p < 1.0) & (probs < threshold), NEG_INF, x)
    hard = jnp.where(jnp.arange(v) == argmax(logits)[..., None], 0.0, NEG_INF)
    return jnp.where(greedy, hard, x)


def target_probs(logits: jax.Array, temperature, top_k=None, top_p=None) -> jax.Array:
    """Processed target distribution f32[B, ..., V] (softmax of `process_logits`)."""
    return jax.nn.softmax(process_logits(logits, temperature, top_k, top_p), axis=-1)


def _nucleus_threshold(probs: jax.Array, p: jax.Array) -> jax.Array:
    """The smallest kept probability of top-p, f32[..., 1], without sorting the vocabulary.

    Token j is kept iff the mass strictly before it in the descending order is < p, ties with the
    last kept one included (`process_logits`); equivalently iff S(p_j) < p, where S(t) is the mass of
    the tokens with probability > t. S only falls as t grows, so the kept tokens are those at or
    above t0, the smallest float with S(t0) < p: found by bisection over the bit patterns of the
    non-negative floats (their order is the integers'), 32 masked sums over V. A float sum of fewer
    non-negative terms is never larger, so the computed S falls too and the bisection is exact for
    it. XLA:CPU sorts a row of 49,152 in ~15 ms; this takes ~1."""
    bits = lambda t: jax.lax.bitcast_convert_type(t, jnp.int32)  # noqa: E731
    floats = lambda i: jax.lax.bitcast_convert_type(i, jnp.float32)  # noqa: E731

    def under(t):  # S(t) < p, [..., 1]
        return jnp.sum(jnp.where(probs > t, probs, 0.0), axis=-1, keepdims=True) < p

    def halve(_, bounds):  # invariant: S(floats(hi)) < p; S(floats(lo)) >= p unless lo is 0
        lo, hi = bounds
        mid = lo + (hi - lo) // 2
        yes = under(floats(mid))
        return jnp.where(yes, lo, mid), jnp.where(yes, mid, hi)

    lo = jnp.zeros(probs.shape[:-1] + (1,), jnp.int32)
    hi = bits(jnp.max(probs, axis=-1, keepdims=True))  # S(max) = 0 < p
    lo, hi = jax.lax.fori_loop(0, 32, halve, (lo, hi))
    return jnp.where(under(jnp.zeros_like(probs[..., :1])), 0.0, floats(hi))  # S(0) < p: every token


def _kth_largest(x: jax.Array, k: jax.Array) -> jax.Array:
    """The k-th largest entry of each row of x f32[..., V] (ties counted: the largest value t with at least
    k entries >= t), f32[..., 1]; k int32 broadcastable to [..., 1], 1 <= k <= V. No NaN in x.

    Without a sort (a per-row top-k; a single k uses the top-k kernel): the float bit patterns are mapped
    to unsigned integers in the floats' own order (a negative float's bits inverted, a non-negative's top
    bit set), and the largest integer m with count(keys >= m) >= k is found by bisection: count falls as
    m grows, so 32 halvings of the 32-bit range land exactly on the key of an entry, the k-th largest.
    32 counts over V. The keys order -0.0 before +0.0, a refinement of the float order, so the k-th
    entry in theirs equals the k-th in the float order as a float, and the caller compares floats."""
    top = jnp.uint32(1 << 31)
    b = jax.lax.bitcast_convert_type(x, jnp.uint32)
    keys = jnp.where(b >= top, ~b, b | top)

    def halve(_, bounds):  # invariant: count(keys >= lo) >= k > count(keys >= hi)
        lo, hi = bounds
        mid = lo + (hi - lo) // 2
        yes = jnp.sum(keys >= mid, axis=-1, keepdims=True, dtype=jnp.int32) >= k
        return jnp.where(yes, mid, lo), jnp.where(yes, hi, mid)

    lo = jnp.min(keys, axis=-1, keepdims=True)  # every entry counts: V >= k
    hi = jnp.max(keys, axis=-1, keepdims=True) + 1  # +inf's key is 0xFF800000: no wrap without NaN
    lo, _ = jax.lax.fori_loop(0, 32, halve, (lo, hi))
    return jax.lax.bitcast_convert_type(jnp.where(lo >= top, lo & ~top, ~lo), jnp.float32)


def _static_int(x) -> int | None:
    """x as a Python int when it is one (a static setting, the same for every row), else None."""
    return int(x) if isinstance(x, int) and not isinstance(x, bool) else None


def categorical(key: jax.Array, logits: jax.Array) -> jax.Array:
    """One draw from softmax(logits) along the last axis: int32[...] from f32[..., V] (-inf: never drawn).

    The law is exactly `jax.random.categorical`'s, drawn in two stages with the Gumbel-max trick: the
    vocabulary is cut into blocks of b tokens (b the power of two nearest above sqrt(V); -inf pads the
    last one), a block is drawn with probability proportional to its mass (Gumbel noise on the
    blocks' logsumexp), then a token within it in proportion to its own (noise on its b logits). So
    P(token j of block c) = (sum_c e^x / sum e^x) (e^x_j / sum_c e^x) = softmax(x)_j, from V / b + b
    random numbers instead of V (module docstring). Unlike inverting a cumulative sum, no token's
    probability is a difference of large partial sums: each is a ratio of sums of positive terms,
    so rare tokens keep their relative accuracy. Every row needs at least one finite logit."""
    v = logits.shape[-1]
    width = 1 << max(0, math.ceil(math.log2(math.sqrt(v))))
    blocks = -(-v // width)
    x = logits.astype(jnp.float32)
    if blocks * width > v:
        x = jnp.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, blocks * width - v)], constant_values=NEG_INF)
    x = x.reshape(x.shape[:-1] + (blocks, width))
    key_block, key_token = jax.random.split(key)
    mass = jax.nn.logsumexp(x, axis=-1)  # [..., blocks]; -inf for a block without a finite logit
    block = argmax(mass + jax.random.gumbel(key_block, mass.shape, jnp.float32))
    inside = jnp.take_along_axis(x, block[..., None, None], axis=-2)[..., 0, :]  # [..., width]
    token = argmax(inside + jax.random.gumbel(key_token, inside.shape, jnp.float32))
    return (block * width + token).astype(jnp.int32)
