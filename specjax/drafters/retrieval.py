"""Retrieval for Graft and Token Recycling: the successor table and static templates.

The successor table M int32[V, k] (Token Recycling's adjacency matrix, arXiv 2408.08696; Graft's
"GPU-resident adjacency matrix", arXiv 2605.20104, §3.2)
holds for each token the target's k most likely next tokens, most likely first; -1 marks
an empty entry (never proposed: a retrieved node whose entry is -1 is an invalid node, and
so is everything below it). It is filled from the prefill (M[x_j] <- top-k of the target
after x_j for every prompt position) and after every round from EVERY verified node,
accepted or rejected, root included (`update_table`); when one token is written more than
once in a batch of writes, the last write in flattened (row-major, slot-ascending) order
wins, deterministically. The table is shared by the rows of a batch and outlives a
`generate` call ("hot start": pass `out.draft_state.table` into the next call's params).

A `Template` is a static tree of rank paths: node u hangs under its parent and carries rank
r_u; under an anchor token a its token is x_u = M[x_parent(u), r_u] (x_parent = a for the
template's depth-1 nodes), materialised level by level with one gather per depth
(`retrieve`). `Template.from_counts` reproduces the paper's per-depth counts (Table 7)
with a deterministic rule; `Template.best_first` is the best `size` rank paths under the
same rank prior (Token Recycling's template at a given budget, our choice).

The grafting of a retrieved template into a drafted tree is `specjax.drafters.grafting.graft`.

Shapes: B batch, V vocab, k table width, U template nodes, C draft candidates, N budget.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from specjax.tree import Tree

__all__ = [
    "accepted_from_table", "default_rank_prior", "empty_table", "measured_rank_prior", "PAPER_TEMPLATES",
    "retrieve", "table_rows_used", "Template", "template_tree", "union", "update_from_prompt", "update_from_round",
    "update_table",
]

# Table 7 of the Graft paper: retrieval nodes per depth 1..9 (only the counts are published).
PAPER_TEMPLATES = {
    "envelope": (8, 16, 14, 11, 8, 7, 6, 5, 5),  # 80 nodes, the design envelope (Figure 6)
    "d0": (8, 10, 8, 6, 5, 4, 4, 4, 3),  # 52: pruned at the root, 8 draft nodes kept
    "d1": (6, 7, 5, 4, 4, 3, 3, 2, 2),  # 36: pruned after depth 1, 24 kept
    "d5": (4, 3, 3, 2, 2, 2, 2, 1, 1),  # 20: pruned after depth 5, 40 kept
}


def default_rank_prior(width: int) -> tuple[float, ...]:
    """w(r) = 2^-(r+1): the assumed chance that rank r of a table row is the target's next token."""
    return tuple(0.5 ** (r + 1) for r in range(width))


# ============================================================================ the table


def empty_table(vocab_size: int, width: int = 8) -> jax.Array:
    """A table with every entry empty: int32[V, k] of -1."""
    if width < 1:
        raise ValueError(f"the successor table needs width k >= 1 (successors per token), got {width}")
    if vocab_size < 1:
        raise ValueError(f"the successor table needs a vocabulary of >= 1 tokens, got {vocab_size}")
    return jnp.full((vocab_size, width), -1, jnp.int32)


def update_table(table: jax.Array, tokens: jax.Array, successors: jax.Array, valid: jax.Array) -> jax.Array:
    """M[tokens[i]] <- successors[i, :k] for every valid write i; the last valid write of a
    token (flattened row-major order) wins.

    table int32[V, k]; tokens int32[..., L]; successors int32[..., L, k'] (k' >= k, the
    target's top-k' ids, most likely first); valid bool[..., L]. Writes whose successors are
    all -1 (slots the target did not verify) are skipped.
    """
    v, k = table.shape
    if successors.shape[-1] < k:
        raise ValueError(f"table width {k} needs the target's top-{k} at every slot, got top-{successors.shape[-1]}")
    toks = tokens.reshape(-1).astype(jnp.int32)
    succ = successors[..., :k].reshape(-1, k).astype(jnp.int32)
    ok = valid.reshape(-1) & (toks >= 0) & (toks < v) & (succ[:, 0] >= 0)
    order = jnp.arange(toks.shape[0], dtype=jnp.int32)
    # Deterministic last writer: a scatter-max of the write index, then only winners write.
    winner = jnp.full((v,), -1, jnp.int32).at[jnp.where(ok, toks, v)].max(order, mode="drop")
    wins = ok & (winner[jnp.clip(toks, 0, v - 1)] == order)
    return table.at[jnp.where(wins, toks, v)].set(succ, mode="drop")


def update_from_prompt(table, tokens, prompt_lengths, top_ids) -> jax.Array:
    """The prefill update: M[x_j] <- top-k after x_j for j < prompt_length (tokens int32[B, T],
    top_ids int32[B, T, k'] of the target's prefill logits)."""
    valid = jnp.arange(tokens.shape[1])[None] < prompt_lengths[:, None]
    return update_table(table, tokens, top_ids, valid)


def update_from_round(table, root, verified) -> jax.Array:
    """The round update: every verified slot (root + valid tree nodes of active rows) writes
    the target's top-k at that slot. verified: `specjax.drafters.protocol.Verified`."""
    tokens = jnp.concatenate([root[:, None], verified.tree.tokens], axis=1)  # slot order
    valid = jnp.concatenate([jnp.ones_like(root[:, None], bool), verified.tree.valid], axis=1)
    return update_table(table, tokens, verified.top_ids, valid & verified.active[:, None])


def accepted_from_table(retrieved: jax.Array, result) -> jax.Array:
    """int32[B]: accepted nodes of a walk `result` (`specjax.verify.WalkResult`) that were
    retrieved (bool[B, N] per tree slot), i.e. tokens the table contributed this round."""
    steps = jnp.arange(result.max_depth)[None]
    nodes = jnp.maximum(result.path_slots[:, 1:] - 1, 0)
    hit = jnp.take_along_axis(retrieved, nodes, axis=1) & (steps < result.num_accepted[:, None])
    return jnp.sum(hit, axis=1).astype(jnp.int32)


def measured_rank_prior(table, sequences) -> tuple[float, ...]:
    """w(r) = P(M[x, r] is the next token) over the consecutive pairs (x, y) of `sequences`
    (host lists of token ids, e.g. the target's own generations), Laplace-smoothed into (0, 1):
    the rank prior `Template.best_first` / `from_counts` take, measured instead of assumed."""
    m = np.asarray(jax.device_get(table))
    hits, pairs = np.zeros(m.shape[1]), 0
    for seq in sequences:
        seq = np.asarray(seq, np.int64)
        if seq.size < 2:
            continue
        rows = m[np.clip(seq[:-1], 0, m.shape[0] - 1)]  # [n, k]
        hits += np.sum(rows == seq[1:, None], axis=0)
        pairs += seq.size - 1
    return tuple(float(x) for x in (hits + 1) / (pairs + 2))


def table_rows_used(table) -> int:
    """Populated rows of the table (host): what Graft's Table 4 counts as storage."""
    return int(np.sum(np.asarray(jax.device_get(table))[:, 0] >= 0))


# ============================================================================ templates


@dataclasses.dataclass(frozen=True)
class Template:
    """A static retrieval tree below an anchor token, U nodes sorted by depth (parents first). Node
    u's token is M[token of its parent (or of the anchor), ranks[u]]. Hashable: static under jit.

    Fields:
      parents: per node, the index of its parent node (-1 = directly under the anchor).
      ranks: per node, the table rank r (column of the successor table M) its token is read from.
      depths: per node, its depth below the anchor (1 = a child of the anchor).
    """

    parents: tuple[int, ...]
    ranks: tuple[int, ...]
    depths: tuple[int, ...]

    @property
    def size(self) -> int:
        return len(self.parents)

    @property
    def max_depth(self) -> int:
        return max(self.depths, default=0)

    @property
    def width(self) -> int:
        """Largest rank used + 1: the table width the template needs."""
        return max(self.ranks, default=-1) + 1

    def counts(self) -> tuple[int, ...]:
        return tuple(self.depths.count(d) for d in range(1, self.max_depth + 1))

    def rank_paths(self) -> list[tuple[int, ...]]:
        paths: list[tuple[int, ...]] = []
        for p, r in zip(self.parents, self.ranks):
            paths.append((paths[p] if p >= 0 else ()) + (r,))
        return paths

    @staticmethod
    def from_paths(paths) -> "Template":
        """From rank paths (a prefix-closed set); nodes sorted by (depth, path)."""
        paths = sorted({tuple(int(r) for r in p) for p in paths}, key=lambda p: (len(p), p))
        index = {p: i for i, p in enumerate(paths)}
        for p in paths:
            if not p or min(p) < 0:
                raise ValueError(f"template rank paths must be non-empty and of ranks >= 0, got {p}")
            if len(p) > 1 and p[:-1] not in index:
                raise ValueError(f"template rank paths must be prefix-closed: {p} lacks its parent {p[:-1]}")
        return Template(parents=tuple(index[p[:-1]] if len(p) > 1 else -1 for p in paths),
                        ranks=tuple(p[-1] for p in paths), depths=tuple(len(p) for p in paths))

    @staticmethod
    def from_counts(counts, width: int = 8, prior=None) -> "Template":
        """Our rule for the paper's templates (Graft App. A.1 gives only per-depth counts and a
        qualitative rule): a rank path's prior score is
        sum_i log w(r_i); depth d takes the counts[d-1] best children (ranks < width) of the
        depth d-1 nodes, ties to the smaller rank path. A decreasing prior gives the greedy
        rank-0 chain to the full depth and more children under the likelier nodes."""
        prior = default_rank_prior(width) if prior is None else tuple(prior)
        _check_prior(prior, width)
        logw = [math.log(w) for w in prior]
        level: list[tuple[float, tuple[int, ...]]] = [(0.0, ())]
        chosen: list[tuple[int, ...]] = []
        for d, n in enumerate(counts, start=1):
            cands = [(s + logw[r], p + (r,)) for s, p in level for r in range(width)]
            if not 1 <= n <= len(cands):
                raise ValueError(f"template depth {d} asks for {n} nodes; its parents offer 1..{len(cands)} "
                                 f"(width {width})")
            level = sorted(cands, key=lambda c: (-c[0], c[1]))[:n]
            chosen += [p for _, p in level]
        return Template.from_paths(chosen)

    @staticmethod
    def best_first(size: int, width: int = 8, max_depth: int = 9, prior=None) -> "Template":
        """The `size` rank paths of highest prior score (depth <= max_depth): the best static
        tree when rank r is right with probability w(r) independently per depth."""
        prior = default_rank_prior(width) if prior is None else tuple(prior)
        _check_prior(prior, width)
        if size < 1 or max_depth < 1:
            raise ValueError(f"a template needs size >= 1 and max_depth >= 1, got {size}, {max_depth}")
        logw = [math.log(w) for w in prior]
        frontier = [(logw[r], (r,)) for r in range(width)]
        chosen = []
        while frontier and len(chosen) < size:
            frontier.sort(key=lambda c: (-c[0], len(c[1]), c[1]))
            s, p = frontier.pop(0)
            chosen.append(p)
            if len(p) < max_depth:
                frontier += [(s + logw[r], p + (r,)) for r in range(width)]
        return Template.from_paths(chosen)

    @staticmethod
    def chain(length: int) -> "Template":
        """The rank-0 chain of `length` nodes (Graft(TAIL)'s tail)."""
        return Template.from_paths([(0,) * d for d in range(1, length + 1)])


def _check_prior(prior, width: int) -> None:
    if width < 1:
        raise ValueError(f"template width must be >= 1, got {width}")
    if len(prior) < width or not all(0 < w <= 1 for w in prior[:width]):
        raise ValueError(f"rank prior needs {width} probabilities in (0, 1], got {prior}")


def union(templates) -> tuple[Template, np.ndarray]:
    """(U, member bool[S, U]): the union of S templates (as rank-path sets) and each one's nodes."""
    sets = [set(t.rank_paths()) for t in templates]
    u = Template.from_paths(set().union(*sets))
    paths = u.rank_paths()
    return u, np.asarray([[p in s for p in paths] for s in sets], bool).reshape(len(sets), u.size)


# ============================================================================ retrieval


@functools.partial(jax.jit, static_argnames=("template",))
def retrieve(table: jax.Array, anchor: jax.Array, template: Template) -> jax.Array:
    """Tokens of the template under `anchor` int32[B]: int32[B, U], -1 where the table is
    empty or the parent is (one gather per depth: the critical path is the depth)."""
    v, k = table.shape
    if template.width > k:
        raise ValueError(f"template uses rank {template.width - 1}, the table has width {k}")
    b = anchor.shape[0]
    toks = jnp.full((b, template.size), -1, jnp.int32)
    parents, ranks, depths = (np.asarray(x, np.int32) for x in (template.parents, template.ranks, template.depths))
    for d in range(1, template.max_depth + 1):
        idx = np.nonzero(depths == d)[0]
        par_tok = anchor[:, None] if d == 1 else toks[:, parents[idx]]
        par_tok = jnp.broadcast_to(par_tok, (b, idx.size))
        got = table[jnp.clip(par_tok, 0, v - 1), jnp.asarray(ranks[idx])[None]]
        toks = toks.at[:, idx].set(jnp.where((par_tok >= 0) & (par_tok < v), got, -1))
    return toks


def template_tree(tokens: jax.Array, template: Template, member: jax.Array | None = None) -> Tree:
    """A retrieved template as a Tree [B, U] under the root (Token Recycling's proposal):
    invalid where the token is -1 or any ancestor is invalid (or outside `member` bool[B, U])."""
    b, n = tokens.shape
    parents = np.asarray(template.parents, np.int32)
    ok = tokens >= 0 if member is None else (tokens >= 0) & member
    for d in range(2, template.max_depth + 1):  # parents first: one pass per depth propagates
        idx = np.nonzero(np.asarray(template.depths) == d)[0]
        ok = ok.at[:, idx].set(ok[:, idx] & ok[:, parents[idx]])
    return Tree(tokens=jnp.where(ok, tokens, 0), parents=jnp.where(ok, jnp.asarray(parents)[None], -1),
                depth=jnp.where(ok, jnp.asarray(template.depths, jnp.int32)[None], 0), valid=ok)
