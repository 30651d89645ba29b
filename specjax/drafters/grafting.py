"""Grafting (Graft, arXiv 2605.20104, §3 and App. A.1, Alg. 1-2): a drafted candidate list and a retrieved template
(`specjax.drafters.retrieval`) merged into one tree of at most N nodes.

`graft` merges a drafted candidate list with a retrieved template into one tree of at most
N nodes (`graft`'s docstring): paths are compared by token content, so a retrieved
node whose path the draft already holds is merged into the draft node (its children
graft below it) and its slot goes to the next draft candidate: no verify slot holds a
duplicate path. (Retrieved paths are distinct among themselves because a table row holds
distinct tokens, as every top-k write does; draft candidate paths are distinct because
siblings come from one top-k.)

Used by Graft (`specjax.drafters.graft`) and DDTree + retrieval (`specjax.drafters.ddtree_graft`).

Shapes: B batch, U template nodes, C draft candidates, N budget.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from specjax.drafters.retrieval import Template
from specjax.tree import Tree

__all__ = ["graft"]


@functools.partial(jax.jit, static_argnames=("template", "budget", "merge", "fill"))
def graft(cand_tok, cand_par, cand_depth, cand_ok, cand_slot, num_draft, ret_tok, template: Template, ret_member,
          anchor, budget: int, *, merge: bool = True, fill: bool = True):
    """Merge draft candidates and a retrieved template into one tree.

    Draft candidates [B, C], in priority order (every prefix is prefix-closed): tokens,
    parents (candidate index, -1 = root), depths, ok (real candidates), region slots (-1:
    never forwarded). The first num_draft int32[B] of them are kept. ret_tok int32[B, U]:
    the template's tokens under `anchor` int32[B] (a candidate index, -1 = the root);
    ret_member bool[B, U]: the template nodes this row grafts.

    A retrieved node's path is compared with the candidates' by token content. If a kept
    draft node has it (and `merge`), the retrieved node is that node (its children graft
    below it); if a not-kept candidate has it, the retrieved node stands for it (the
    candidate is "shadowed"). With `fill`, slots freed by merged duplicates and by empty
    table entries go to the next unshadowed candidates. Nodes are ordered by depth (parents
    first). Returns (Tree [B, budget], node_slots int32[B, budget] region slot or -1,
    retrieved bool[B, budget]).
    """
    b, c = cand_tok.shape
    u = template.size
    parents_t = np.asarray(template.parents, np.int32)
    depths_t = np.asarray(template.depths, np.int32)
    rows = jnp.arange(b)[:, None]
    cidx = jnp.arange(c, dtype=jnp.int32)[None]
    kept = cand_ok & (cidx < num_draft[:, None])

    cand_key = jnp.where(cand_ok, cand_tok * (c + 3) + cand_par + 2, -1)
    # Valid retrieved nodes and the candidate holding each one's path (-1 none), by depth.
    ok = jnp.zeros((b, u), bool)
    match = jnp.full((b, u), -1, jnp.int32)
    for d in range(1, template.max_depth + 1):
        idx = np.nonzero(depths_t == d)[0]
        par = parents_t[idx]
        par_ok = jnp.ones((b, idx.size), bool) if d == 1 else ok[:, par]
        want = jnp.broadcast_to(anchor[:, None], (b, idx.size)) if d == 1 else jnp.where(match[:, par] >= 0,
                                                                                          match[:, par], -2)
        node_ok = ret_member[:, idx] & (ret_tok[:, idx] >= 0) & par_ok
        # One integer key per (parent, token): a single compare (XLA:CPU miscompiles some large
        # fused and-of-compares over bool vectors). At most one candidate matches (unique paths).
        want_key = ret_tok[:, idx] * (c + 3) + want + 2  # [B, W]
        eq = cand_key[:, None, :] == want_key[:, :, None]  # [B, W, C]
        m = jnp.max(jnp.where(eq, cidx[:, None, :], -1), axis=-1)
        ok = ok.at[:, idx].set(node_ok)
        match = match.at[:, idx].set(jnp.where(node_ok, m, -1))
    if not merge:
        match = jnp.full_like(match, -1)
    matched_kept = (match >= 0) & jnp.take_along_axis(kept, jnp.maximum(match, 0), axis=1)
    new_ret = ok & ~matched_kept
    shadow_of = jnp.full((b, c + 1), -1, jnp.int32).at[rows, jnp.where(new_ret & (match >= 0), match, c)].set(
        jnp.broadcast_to(jnp.arange(u, dtype=jnp.int32), (b, u)))[:, :c]
    # int32, not bool: XLA:CPU (AVX-512) fails to compile this and-of-compares fused with a
    # gather at some batch sizes ("Cannot select ... SUBV_BROADCAST_LOAD" on v64i8).
    extra_ok = jnp.where(cand_ok & (shadow_of < 0), 1, 0) * jnp.where(kept, 0, 1)
    room = budget - jnp.sum(kept, 1) - jnp.sum(new_ret, 1)
    extra = (extra_ok * jnp.cumsum(extra_ok, axis=1) * (jnp.cumsum(extra_ok, axis=1) <= room[:, None]) > 0
             if fill else jnp.zeros_like(kept))
    inc = jnp.concatenate([kept | extra, new_ret], axis=1)  # [B, C + U]

    # Slots: by depth, then priority (draft candidates, then the template in its order).
    depth_all = jnp.concatenate([cand_depth, depths_t[None] + _depth_of(cand_depth, anchor)[:, None]], axis=1)
    key = jnp.where(inc, depth_all * (c + u) + jnp.arange(c + u)[None], jnp.iinfo(jnp.int32).max)
    order = jnp.argsort(key, axis=1, stable=True)[:, :budget].astype(jnp.int32)
    slot_of = jnp.full((b, c + u), -1, jnp.int32).at[rows, order].set(jnp.arange(budget, dtype=jnp.int32))
    slot_of = jnp.where(inc, slot_of, -1)
    via_ret = jnp.take_along_axis(slot_of[:, c:], jnp.maximum(shadow_of, 0), axis=1)
    rep_draft = jnp.where(slot_of[:, :c] >= 0, slot_of[:, :c], jnp.where(shadow_of >= 0, via_ret, -1))
    rep_anchor = jnp.where(anchor >= 0, jnp.take_along_axis(rep_draft, jnp.maximum(anchor, 0)[:, None], 1)[:, 0], -1)
    rep_ret = jnp.where(new_ret, slot_of[:, c:], jnp.where(ok & (match >= 0),
                                                           jnp.take_along_axis(rep_draft, jnp.maximum(match, 0), 1), -1))
    par_d = jnp.where(cand_par >= 0, jnp.take_along_axis(rep_draft, jnp.maximum(cand_par, 0), axis=1), -1)
    par_r = jnp.where(jnp.asarray(parents_t)[None] >= 0, rep_ret[:, np.maximum(parents_t, 0)], rep_anchor[:, None])
    tok_all = jnp.concatenate([cand_tok, ret_tok], axis=1)
    par_all = jnp.concatenate([par_d, par_r], axis=1)
    rslot_all = jnp.concatenate([cand_slot, jnp.where(match >= 0, jnp.take_along_axis(
        cand_slot, jnp.maximum(match, 0), axis=1), -1)], axis=1)
    valid = jnp.take_along_axis(inc, order, axis=1)
    pick = lambda x, fill_value: jnp.where(valid, jnp.take_along_axis(x, order, axis=1), fill_value)  # noqa: E731
    tree = Tree(tokens=pick(tok_all, 0), parents=pick(par_all, -1), depth=pick(depth_all, 0), valid=valid)
    retrieved = valid & (order >= c)
    return tree, pick(rslot_all, -1), retrieved


def _depth_of(cand_depth, anchor):
    """Depth of the anchor candidate (0 for the root)."""
    return jnp.where(anchor >= 0, jnp.take_along_axis(cand_depth, jnp.maximum(anchor, 0)[:, None], 1)[:, 0], 0)
