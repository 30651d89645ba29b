"""Verification: walk a verified draft tree and return the accepted path + bonus token.

After one target forward over the pending block [root, node 0, ..., node N-1] the
verifier holds target logits f32[B, N+1, V] (index 0 = root: the distribution of the
token after the root; index i + 1 = node i). This module turns them into a `WalkResult`:

  * `greedy_walk`     -- follow the child equal to the target argmax (exact greedy).
  * `sampling_walk`   -- draw one target sample per slot, follow the child equal to the
                         sample; the first unmatched sample is the bonus. Exactly lossless
                         for *any* tree proposal (proofs/sampling_walk.md).
  * `chain_rejection` -- Leviathan-style rejection sampling of a chain drafted with known
                         draft probabilities (proofs/chain_rejection.md).
  * `walk`            -- the shared pointer chase given one target token per slot.
  * `process_logits`, `target_probs` -- temperature / top-k / top-p processing; the
                         sampling methods are lossless w.r.t. this processed distribution.

All functions are batched, static-shape and jit-able; the only loop is a
`lax.while_loop` over depth (<= max_depth) with a vectorised child match per step.
The cache commit is then `commit(cache, result.path_slots, result.num_accepted + 1)`.

Randomness: the `key` given to a sampling verifier must be independent of everything
the drafter used to build the tree (split it off before drafting, never reuse it).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from flax import struct

from specjax.tree import Tree, match_child

__all__ = [
    "chain_rejection", "greedy_walk", "process_logits", "sample_targets", "sampling_walk", "target_probs", "walk",
    "WalkResult",
]

_NEG_INF = -jnp.inf


@struct.dataclass
class WalkResult:
    """Outcome of verifying one tree per batch row (D = max_depth; padding entries are 0).

    Fields:
      path_slots: int32[B, D+1] slot 0 (the root) first, then 1 + node index of each accepted node,
        in root-to-leaf order (what `commit` gathers).
      num_accepted: int32[B] accepted draft nodes, excluding the root (<= D).
      accepted_tokens: int32[B, D] tokens of the accepted nodes, in path order.
      bonus: int32[B] the target's token after the last accepted node (its correction or bonus token).
    """

    path_slots: jax.Array
    num_accepted: jax.Array
    accepted_tokens: jax.Array
    bonus: jax.Array

    @property
    def max_depth(self) -> int:
        return self.accepted_tokens.shape[1]

    @property
    def last_slot(self) -> jax.Array:
        """int32[B]: slot of the last accepted node (0 = root when nothing accepted)."""
        return jnp.take_along_axis(self.path_slots, self.num_accepted[:, None], axis=1)[:, 0]

    @property
    def emitted(self) -> jax.Array:
        """int32[B, D+1]: accepted tokens followed by the bonus (num_accepted + 1 valid)."""
        toks = jnp.concatenate([self.accepted_tokens, jnp.zeros_like(self.bonus[:, None])], axis=1)
        return toks.at[jnp.arange(toks.shape[0]), self.num_accepted].set(self.bonus)


# ----------------------------------------------------------------------------------------
# Logit processing
# ----------------------------------------------------------------------------------------


def _per_row(x, ndim: int, dtype) -> jax.Array:
    """Scalar or [B] parameter -> array broadcastable against [B, ..., V] (ndim dims)."""
    x = jnp.asarray(x, dtype)
    return x.reshape(x.shape + (1,) * (ndim - x.ndim))


def _unpack(temperature, top_k, top_p):
    """A `specjax.sampling.Sampling` in the temperature slot stands for all three settings."""
    if hasattr(temperature, "temperature") and hasattr(temperature, "top_p"):
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
    temperature, top_k, top_p = _unpack(temperature, top_k, top_p)
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
        x = jnp.where(on & (x < kth), _NEG_INF, x)
    if top_p is not None:
        p = _per_row(top_p, nd, jnp.float32)
        probs = jax.nn.softmax(x, axis=-1)
        desc = -jnp.sort(-probs, axis=-1)
        before = jnp.cumsum(desc, axis=-1) - desc  # mass strictly before each sorted entry
        count = jnp.maximum(jnp.sum(before < p, axis=-1, keepdims=True), 1)
        threshold = jnp.take_along_axis(desc, count - 1, axis=-1)
        x = jnp.where((p < 1.0) & (probs < threshold), _NEG_INF, x)
    hard = jnp.where(jnp.arange(v) == jnp.argmax(logits, axis=-1, keepdims=True), 0.0, _NEG_INF)
    return jnp.where(greedy, hard, x)


def target_probs(logits: jax.Array, temperature, top_k=None, top_p=None) -> jax.Array:
    """Processed target distribution f32[B, ..., V] (softmax of `process_logits`)."""
    return jax.nn.softmax(process_logits(logits, temperature, top_k, top_p), axis=-1)


# ----------------------------------------------------------------------------------------
# Tree walks
# ----------------------------------------------------------------------------------------


@functools.partial(jax.jit, static_argnames=("max_depth",))
def walk(tree: Tree, targets: jax.Array, max_depth: int | None = None) -> WalkResult:
    """Follow, from the root, the valid child whose token equals the target token at the
    current slot; stop when none matches or after `max_depth` accepted nodes.

    tree: Tree [B, N]; targets int32[B, N+1]: the target's token at every slot (argmax
    for greedy, one sample per slot for sampling). The bonus is the target token at the
    last accepted slot. Duplicate siblings: the lowest-index match is followed.
    max_depth is static (default N).
    """
    b, n = tree.tokens.shape
    d = n if max_depth is None else int(max_depth)
    targets = targets.astype(jnp.int32)
    rows = jnp.arange(b)

    def cond(state):
        t, _, done, *_ = state
        return (t < d) & ~jnp.all(done)

    def body(state):
        t, cur, done, num, path, toks = state
        tgt = targets[rows, cur]  # [B]
        found, child = match_child(tree, cur, tgt)
        adv = found & ~done
        path = path.at[:, t + 1].set(jnp.where(adv, child, 0))
        toks = toks.at[:, t].set(jnp.where(adv, tgt, 0))
        return t + 1, jnp.where(adv, child, cur), done | ~found, num + adv, path, toks

    zeros = jnp.zeros((b,), jnp.int32)
    init = (jnp.array(0, jnp.int32), zeros, jnp.zeros((b,), bool), zeros,
            jnp.zeros((b, d + 1), jnp.int32), jnp.zeros((b, d), jnp.int32))
    _, cur, _, num, path, toks = jax.lax.while_loop(cond, body, init)
    return WalkResult(path_slots=path, num_accepted=num, accepted_tokens=toks, bonus=targets[rows, cur])


def greedy_walk(tree: Tree, logits: jax.Array, max_depth: int | None = None) -> WalkResult:
    """Greedy verification: follow the child equal to the target argmax at each node.

    tree: Tree [B, N]; logits f32[B, N+1, V] (0 = root, i+1 = node i). The accepted
    tokens + bonus are exactly what plain greedy decoding would emit (ties: first index).
    """
    return walk(tree, jnp.argmax(logits, axis=-1), max_depth)


def sample_targets(logits: jax.Array, key: jax.Array, temperature, top_k=None, top_p=None) -> jax.Array:
    """One independent sample of the processed target per slot: int32[B, N+1].

    logits f32[B, N+1, V]. Temperature 0 gives the argmax (same tie rule as greedy).
    """
    return jax.random.categorical(key, process_logits(logits, temperature, top_k, top_p), axis=-1).astype(jnp.int32)


def sampling_walk(
    tree: Tree, logits: jax.Array, key: jax.Array, temperature, top_k=None, top_p=None, max_depth: int | None = None
) -> WalkResult:
    """Lossless sampling verification of an arbitrary tree.

    tree: Tree [B, N]; logits f32[B, N+1, V]; key: PRNG key independent of the drafter;
    temperature / top_k / top_p: scalars or [B]. Draws one sample of the processed
    target at every slot (vectorised), then walks: accept the child equal to the sample
    at the current node; the first sample without a matching child is the bonus. The
    emitted tokens are distributed exactly as sequential sampling from the processed
    target, whatever the tree (proofs/sampling_walk.md).
    """
    return walk(tree, sample_targets(logits, key, temperature, top_k, top_p), max_depth)


# ----------------------------------------------------------------------------------------
# Chain rejection sampling
# ----------------------------------------------------------------------------------------


def _leading_true(x: jax.Array) -> jax.Array:
    """int32[B]: length of the all-True prefix of bool[B, K]."""
    return jnp.sum(jnp.cumprod(x.astype(jnp.int32), axis=-1), axis=-1).astype(jnp.int32)


def chain_rejection(
    draft_tokens: jax.Array,
    draft_probs: jax.Array,
    target_logits: jax.Array,
    key: jax.Array,
    temperature,
    top_k=None,
    top_p=None,
    num_draft: jax.Array | None = None,
) -> WalkResult:
    """Speculative (rejection) sampling of a drafted chain, exactly lossless.

    draft_tokens int32[B, K]: token i was drawn from draft_probs[:, i] (f32[B, K, V], the
      draft's distribution given the prefix + draft tokens < i, as actually sampled from);
    target_logits f32[B, K+1, V]: position 0 = after the root, position i = after draft
      token i-1 (i.e. the tree logits of `chain_tree(draft_tokens)`);
    key: PRNG key independent of the drafter; temperature/top_k/top_p: target
      processing (scalars or [B]); num_draft int32[B]: valid leading draft tokens
      (default K).

    With p the processed target: token i is accepted with probability
    min(1, p(x_i) / q(x_i)); at the first rejection the bonus is drawn from
    norm(max(0, p - q)); if all are accepted the bonus is drawn from p at position
    num_draft. Temperature 0 (per row) is handled explicitly: accept while the draft
    token equals the target argmax, bonus = argmax. Result as `walk`, with
    path_slots = 0, 1, ..., num_accepted (then padding) and max_depth K.
    """
    temperature, top_k, top_p = _unpack(temperature, top_k, top_p)
    b, k = draft_tokens.shape
    draft_tokens = draft_tokens.astype(jnp.int32)
    idx = jnp.arange(k)
    n_valid = jnp.full((b,), k, jnp.int32) if num_draft is None else num_draft.astype(jnp.int32)
    pos_ok = idx[None, :] < n_valid[:, None]  # [B, K]
    key_u, key_r = jax.random.split(key)

    p = target_probs(target_logits, temperature, top_k, top_p)  # [B, K+1, V]
    q = jnp.where(pos_ok[..., None], draft_probs.astype(jnp.float32), 0.0)
    q = jnp.concatenate([q, jnp.zeros_like(q[:, :1])], axis=1)  # [B, K+1, V]; q = 0 past the chain
    px = jnp.take_along_axis(p[:, :k], draft_tokens[..., None], axis=-1)[..., 0]  # [B, K]
    qx = jnp.take_along_axis(q[:, :k], draft_tokens[..., None], axis=-1)[..., 0]
    u = jax.random.uniform(key_u, (b, k))
    accept = pos_ok & (u * qx < px)  # u < p/q without dividing; q(x) = 0 < p(x) accepts

    # Residual distribution at every position; past the chain (q = 0) it is p itself.
    # Zero residual mass means p == q, where a rejection cannot happen; use p there.
    resid = jnp.maximum(p - q, 0.0)
    mass = resid.sum(-1, keepdims=True)
    resid = jnp.where(mass > 0, resid / jnp.where(mass > 0, mass, 1.0), p)
    resampled = jax.random.categorical(key_r, jnp.log(resid), axis=-1).astype(jnp.int32)  # [B, K+1]

    greedy_tok = jnp.argmax(target_logits, axis=-1).astype(jnp.int32)  # [B, K+1]
    greedy_row = jnp.asarray(temperature, jnp.float32).reshape(-1) <= 0  # [1] or [B]
    accept = jnp.where(greedy_row[:, None], pos_ok & (draft_tokens == greedy_tok[:, :k]), accept)
    num = _leading_true(accept)
    rows = jnp.arange(b)
    bonus = jnp.where(greedy_row, greedy_tok[rows, num], resampled[rows, num])

    kept = idx[None, :] < num[:, None]
    path = jnp.concatenate([jnp.zeros((b, 1), jnp.int32), jnp.where(kept, idx[None, :] + 1, 0)], axis=1)
    return WalkResult(path_slots=path.astype(jnp.int32), num_accepted=num,
                      accepted_tokens=jnp.where(kept, draft_tokens, 0), bonus=bonus)

