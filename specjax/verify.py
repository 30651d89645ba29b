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
The sampling methods are lossless w.r.t. the processed target distribution of
`specjax.sampling.process_logits` (temperature / top-k / top-p).

All functions are batched, static-shape and jit-able; the only loop is a
`lax.while_loop` over depth (<= max_depth) with a vectorised child match per step.
The cache commit is then `commit(cache, result.path_slots, result.num_accepted + 1)`.
`verify_tree` is the whole verification of a round: the target forward over [root, tree]
(`tree_forward`, at the smallest static width holding the tree) and the walk.

Randomness: the `key` given to a sampling verifier must be independent of everything
the drafter used to build the tree (split it off before drafting, never reuse it).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from flax import struct

from specjax.models.cache import KVCache, write_rows
from specjax.models.model import ModelConfig, forward_tapped
from specjax.ops import argmax, switch_on_width
from specjax.ops import top_k as top_k_op
from specjax.sampling import Sampling, categorical, process_logits, sampling_settings, target_probs
from specjax.tree import Tree, ancestor_mask, match_child, node_positions

__all__ = [
    "chain_rejection", "greedy_walk", "sample_targets", "sampling_walk", "slot_targets", "TargetPass", "tree_forward",
    "verify_tree",
    "walk",
    "WalkResult",
]

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
    return walk(tree, argmax(logits), max_depth)


def sample_targets(logits: jax.Array, key: jax.Array, temperature, top_k=None, top_p=None) -> jax.Array:
    """One independent sample of the processed target per slot: int32[B, N+1].

    logits f32[B, N+1, V]. Temperature 0 gives the argmax (same tie rule as greedy).
    """
    return categorical(key, process_logits(logits, temperature, top_k, top_p))


def slot_targets(logits: jax.Array, key: jax.Array, sampling: Sampling) -> jax.Array:
    """The target's token at every verified slot, int32[B, W+1] from logits f32[B, W+1, V]: the argmax
    (`specjax.ops.argmax`) at T = 0, else one sample of the processed target (temperature, top-k, top-p)
    per slot. What `verify_tree` hands `walk` (greedy and sampling walk alike); benchmarks that time a
    round's parts call it to time the loop's own walk."""
    if sampling.greedy:
        return argmax(logits)
    return sample_targets(logits, key, sampling.temperature, sampling.top_k, sampling.top_p)


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
    temperature, top_k, top_p = sampling_settings(temperature, top_k, top_p)
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
    resampled = categorical(key_r, jnp.log(resid))  # [B, K+1]

    greedy_tok = argmax(target_logits)  # [B, K+1]
    greedy_row = jnp.asarray(temperature, jnp.float32).reshape(-1) <= 0  # [1] or [B]
    accept = jnp.where(greedy_row[:, None], pos_ok & (draft_tokens == greedy_tok[:, :k]), accept)
    num = _leading_true(accept)
    rows = jnp.arange(b)
    bonus = jnp.where(greedy_row, greedy_tok[rows, num], resampled[rows, num])

    kept = idx[None, :] < num[:, None]
    path = jnp.concatenate([jnp.zeros((b, 1), jnp.int32), jnp.where(kept, idx[None, :] + 1, 0)], axis=1)
    return WalkResult(path_slots=path.astype(jnp.int32), num_accepted=num,
                      accepted_tokens=jnp.where(kept, draft_tokens, 0), bonus=bonus)


# ----------------------------------------------------------------------------------------
# The target's pass over a tree
# ----------------------------------------------------------------------------------------


def tree_forward(params, cfg: ModelConfig, tree: Tree, root: jax.Array, cache: KVCache,
                 feature_layers: tuple[int, ...] = (), max_depth: int | None = None, mask: jax.Array | None = None,
                 positions: jax.Array | None = None, write_cache: bool = True):
    """The target forward over the block [root, tree]: int32[B, N+1] at positions lengths + depth
    (`node_positions`), each slot attending to its ancestors (`ancestor_mask`; both may be given
    precomputed). Returns `forward_tapped`'s (logits f32[B, N+1, V], cache with the block's K/V in
    the pending slots, features [B, N+1, n, E]); `write_cache=False`: the block's K/V as `PendingRows`
    in place of the cache (`forward_tapped`)."""
    block = jnp.concatenate([root[:, None], tree.tokens], axis=1)  # [B, N+1]
    mask = ancestor_mask(tree, max_depth) if mask is None else mask
    positions = node_positions(tree, cache.lengths) if positions is None else positions
    return forward_tapped(params, cfg, block, positions, mask, cache, feature_layers, write_cache=write_cache)


@struct.dataclass
class TargetPass:
    """What one verification forward produced (before the commit; N = tree budget, D = max_depth).

    Fields:
      result: `WalkResult` over the tree (path_slots int32[B, D+1], root first).
      cache: the target `KVCache` with the block's K/V written in the pending slots, `lengths` unchanged.
      features: [B, D+1, n, E] target features (n tapped layers, E = hidden size, params dtype) of the path slots
        (root first), or None when no feature layers were asked for.
      top_ids: int32[B, N+1, k] top-k tokens of the target logits at every slot (0 = root), descending;
        slots past the verified width hold -1; None if k = 0.
      top_logits: f32[B, N+1, k] the matching logits; -inf past the verified width; None if k = 0.
    """

    result: WalkResult
    cache: KVCache
    features: jax.Array | None = None
    top_ids: jax.Array | None = None
    top_logits: jax.Array | None = None


def verify_tree(params, cfg: ModelConfig, tree: Tree, root: jax.Array, cache: KVCache, key: jax.Array,
                sampling: Sampling, *, max_depth: int, draft_probs: jax.Array | None = None, rejection: bool = False,
                feature_layers: tuple[int, ...] = (), top_k: int = 0, widths: tuple[int, ...] | None = None,
                active: jax.Array | None = None) -> TargetPass:
    """One target forward over [root, tree] with the ancestor mask, then the walk.

    tree: Tree [B, N]; root int32[B] at position cache.lengths. Greedy walk at T = 0; at
    T > 0 chain rejection when `rejection` (draft_probs f32[B, N, V] required), else the
    lossless sampling walk. `widths` (static, ascending, ending at N): verify only the
    smallest prefix of the tree slots holding every valid node of the `active` rows.
    The width branch runs the forward and reduces its logits to what the rest needs, padded
    to N + 1 slots (a target token per slot, the features of `feature_layers`, the top-k),
    so every output has a static shape; the walk runs once, after the branch.
    Nothing is committed: `commit(pass.cache, pass.result.path_slots, n)` does that.
    """
    b, budget = tree.tokens.shape
    widths = (budget,) if widths is None else tuple(widths)
    active = jnp.ones((b,), bool) if active is None else active
    walked = sampling.greedy or not rejection  # else chain rejection, which needs the logits
    # Several widths: a `lax.switch`, whose branches leave the cache untouched and return the block's K/V rows
    # padded to N + 1, written after the switch. A branch that wrote the cache would make XLA copy the whole
    # cache in every round (measured in the compiled loop: two copies of K and V per round, `LayerKV.deferred`).
    deferred = len(widths) > 1

    def run(width, cache, tree, draft_probs):
        # Only the width-dependent work is in the branch (the forward and what reads its
        # logits); the walk runs once after the switch, on the slot targets padded to N + 1
        # (one compiled walk instead of one per width: issue 16 item 5).
        sub = jax.tree.map(lambda x: x[:, :width], tree)
        logits, cache, feats = tree_forward(params, cfg, sub, root, cache, feature_layers, max_depth,
                                            write_cache=not deferred)
        pad = ((0, 0), (0, budget - width))
        if deferred:  # rows [L, B, width + 1, K, D] -> N + 1 (the padding is not written: `write_rows` count)
            cache = jax.tree.map(lambda x: jnp.pad(x, ((0, 0),) + pad + ((0, 0),) * 2), cache)
        if rejection and not sampling.greedy:  # the full width only (checked below): the result itself
            out = chain_rejection(sub.tokens, draft_probs, logits, key, sampling.temperature, sampling.top_k,
                                  sampling.top_p)
        else:  # the greedy or the lossless sampling walk's target per slot, [B, N+1] (past width + 1: unread)
            out = jnp.pad(slot_targets(logits, key, sampling), pad)
        feats = jnp.pad(feats, pad + ((0, 0),) * (feats.ndim - 2)) if feature_layers else None  # [B, N+1, n, E]
        top_ids = top_logits = None
        if top_k:
            vals, ids = top_k_op(logits, top_k)  # [B, width+1, k]
            top_ids = jnp.pad(ids.astype(jnp.int32), pad + ((0, 0),), constant_values=-1)
            top_logits = jnp.pad(vals, pad + ((0, 0),), constant_values=-jnp.inf)
        return out, jnp.int32(width), cache, feats, top_ids, top_logits

    if rejection and len(widths) > 1:
        raise ValueError("chain rejection needs the full width (its draft probs and results have it)")
    # Slots past the last valid node of every row are dead weight: verify at the smallest
    # static width that holds them (parents precede children, so a prefix of the slots is a tree).
    extent = jnp.max(jnp.where(tree.valid & active[:, None], jnp.arange(1, budget + 1)[None], 0))
    out, width, written, feats, top_ids, top_logits = switch_on_width(extent, widths, run, (cache, tree, draft_probs))
    cache = write_rows(cache, written, count=width + 1) if deferred else written  # the root and width nodes
    if walked:
        # The verified prefix only: an inactive row may hold valid nodes past `width`.
        valid = tree.valid & (jnp.arange(budget)[None] < width)
        result = walk(tree.replace(valid=valid), out, max_depth)
    else:
        result = out
    features = None
    if feature_layers:
        features = jnp.take_along_axis(feats, result.path_slots[:, :, None, None], axis=1)  # [B, D+1, n, E]
    return TargetPass(result=result, cache=cache, features=features, top_ids=top_ids, top_logits=top_logits)
