"""How tokens are drawn: the static `Sampling` settings shared by the decode loop, the verifiers and
the drafters, and the logit processing they all draw from (`process_logits`: temperature, top-k,
top-p; `target_probs`: its softmax)."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from specjax.ops import argmax

__all__ = ["NEG_INF", "Sampling", "process_logits", "sampling_settings", "target_probs"]

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
      kept); k <= 0 or k >= V disables it. None skips it (no sort).
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
    if top_k is not None:
        k = _per_row(top_k, nd, jnp.int32)
        desc = -jnp.sort(-x, axis=-1)
        kth = jnp.take_along_axis(desc, jnp.broadcast_to(jnp.clip(k - 1, 0, v - 1), desc.shape[:-1] + (1,)), axis=-1)
        on = (k > 0) & (k < v)
        x = jnp.where(on & (x < kth), NEG_INF, x)
    if top_p is not None:
        p = _per_row(top_p, nd, jnp.float32)
        probs = jax.nn.softmax(x, axis=-1)
        desc = -jnp.sort(-probs, axis=-1)
        before = jnp.cumsum(desc, axis=-1) - desc  # mass strictly before each sorted entry
        count = jnp.maximum(jnp.sum(before < p, axis=-1, keepdims=True), 1)
        threshold = jnp.take_along_axis(desc, count - 1, axis=-1)
        x = jnp.where((p < 1.0) & (probs < threshold), NEG_INF, x)
    hard = jnp.where(jnp.arange(v) == argmax(logits)[..., None], 0.0, NEG_INF)
    return jnp.where(greedy, hard, x)


def target_probs(logits: jax.Array, temperature, top_k=None, top_p=None) -> jax.Array:
    """Processed target distribution f32[B, ..., V] (softmax of `process_logits`)."""
    return jax.nn.softmax(process_logits(logits, temperature, top_k, top_p), axis=-1)
