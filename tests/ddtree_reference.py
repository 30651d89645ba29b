"""Slow, obviously-correct references for DDTree tree selection (test-only).

* `heap_select`: the paper's Algorithm 1 written out with Python's `heapq`, one row at a
  time, with the tie-break of specjax/drafters/ddtree.py (heap key
  (-sigma, depth, parent's pop index, rank)).
* Brute force for tiny V, L: every prefix (`all_prefixes`), the selection order as an
  explicit sort key (`order_key`, `bruteforce_select`), the surrogate E_{Y~Q}[alpha_T(Y)]
  by summing over every Y in V^L (`surrogate_exhaustive`), and every valid (prefix-closed)
  tree of at most a given size (`valid_trees`).

Conventions: a prefix is a tuple of token ids; a row of log-probabilities is
log_q f32[L, V]; the rank of token v at depth d is its position when the row's tokens
are sorted by log-prob descending, token id ascending. Prefix log-probabilities sigma are
accumulated in float32 depth by depth, exactly like the JAX code, so the two agree bit
for bit and ties are real ties.
"""

from __future__ import annotations

import functools
import heapq
import itertools

import numpy as np


def token_order(log_q_row: np.ndarray) -> np.ndarray:
    """int[L, V]: order[d, r] = token of rank r at depth d (log-prob desc, id asc)."""
    return np.argsort(-np.asarray(log_q_row, np.float32), axis=-1, kind="stable")


def token_ranks(log_q_row: np.ndarray) -> np.ndarray:
    """int[L, V]: rank[d, v] = rank of token v at depth d (inverse of `token_order`)."""
    order = token_order(log_q_row)
    ranks = np.empty_like(order)
    np.put_along_axis(ranks, order, np.arange(order.shape[1])[None, :], axis=1)
    return ranks


def prefix_sigmas(log_q_row: np.ndarray, prefix: tuple[int, ...]) -> list[np.float32]:
    """float32 log-probabilities of every prefix of `prefix`: [sigma(u_1), sigma(u_1 u_2), ...]."""
    lq = np.asarray(log_q_row, np.float32)
    out, s = [], np.float32(0.0)
    for d, v in enumerate(prefix):
        s = np.float32(s + lq[d, v])
        out.append(s)
    return out


# ------------------------------------------------------------------------ Algorithm 1


def heap_select(log_q_row: np.ndarray, budget: int) -> list[dict]:
    """Algorithm 1 (best-first over rank tuples) for one row f32[L, V].

    Returns the popped nodes in pop order, each a dict with prefix (token tuple), ranks
    (rank tuple), token, parent (pop index of the parent, -1 for depth 1), depth, sigma.
    """
    lq = np.asarray(log_q_row, np.float32)
    depth, vocab = lq.shape
    k = min(budget, vocab)
    order = token_order(lq)[:, :k]  # top-K tokens per depth
    top = np.take_along_axis(lq, order, axis=1)  # their log-probs, descending
    # Heap entries: (-sigma, depth, parent pop index, rank, rank tuple, parent sigma).
    heap = [(-float(top[0, 0]), 1, -1, 0, (0,), np.float32(0.0))]
    popped: list[dict] = []
    while len(popped) < budget and heap:
        neg_sigma, d, parent, r, ranks, parent_sigma = heapq.heappop(heap)
        sigma = np.float32(-neg_sigma)
        t = len(popped)
        prefix = tuple(int(order[i, ranks[i]]) for i in range(d))
        popped.append(dict(prefix=prefix, ranks=ranks, token=prefix[-1], parent=parent, depth=d, sigma=sigma))
        if r + 1 < k:  # next sibling: same parent, next rank at the same depth
            s = np.float32(parent_sigma + top[d - 1, r + 1])
            heapq.heappush(heap, (-float(s), d, parent, r + 1, ranks[:-1] + (r + 1,), parent_sigma))
        if d < depth:  # first child: best token at the next depth
            s = np.float32(sigma + top[d, 0])
            heapq.heappush(heap, (-float(s), d + 1, t, 0, ranks + (0,), sigma))
    return popped


def heap_select_batch(log_q: np.ndarray, budget: int) -> dict[str, np.ndarray]:
    """`heap_select` on every row of f32[B, L, V], packed like a Tree: arrays [B, budget]
    (tokens, parents, depth, valid, scores) with the same padding conventions."""
    b = log_q.shape[0]
    out = dict(
        tokens=np.zeros((b, budget), np.int32),
        parents=np.full((b, budget), -1, np.int32),
        depth=np.zeros((b, budget), np.int32),
        valid=np.zeros((b, budget), bool),
        scores=np.full((b, budget), -np.inf, np.float32),
    )
    for row in range(b):
        for i, node in enumerate(heap_select(log_q[row], budget)):
            out["tokens"][row, i] = node["token"]
            out["parents"][row, i] = node["parent"]
            out["depth"][row, i] = node["depth"]
            out["valid"][row, i] = True
            out["scores"][row, i] = node["sigma"]
    return out


# ------------------------------------------------------------------------ brute force


def all_prefixes(depth: int, vocab: int) -> list[tuple[int, ...]]:
    """Every non-empty token tuple of length <= depth, shortest first."""
    return [p for d in range(1, depth + 1) for p in itertools.product(range(vocab), repeat=d)]


def order_key(log_q_row: np.ndarray, prefix: tuple[int, ...], ranks: np.ndarray | None = None) -> tuple:
    """Sort key of the selection order for a prefix of depth d:
    (-sigma_d, d, -sigma_{d-1}, ..., -sigma_1, r_1, ..., r_d)."""
    ranks = token_ranks(log_q_row) if ranks is None else ranks
    sig = prefix_sigmas(log_q_row, prefix)
    return (-float(sig[-1]), len(prefix), *(-float(s) for s in reversed(sig[:-1])),
            *(int(ranks[i, v]) for i, v in enumerate(prefix)))


def bruteforce_select(log_q_row: np.ndarray, budget: int) -> list[tuple[int, ...]]:
    """The first `budget` of ALL prefixes (every rank, not only the top-K) in the selection order."""
    depth, vocab = log_q_row.shape
    ranks = token_ranks(log_q_row)
    return sorted(all_prefixes(depth, vocab), key=lambda p: order_key(log_q_row, p, ranks))[:budget]


def prefix_prob(log_q_row: np.ndarray, prefix: tuple[int, ...]) -> float:
    """q(u) = prod_d q_d(u_d) in float64."""
    lq = np.asarray(log_q_row, np.float64)
    return float(np.exp(sum(lq[d, v] for d, v in enumerate(prefix))))


def surrogate_additive(log_q_row: np.ndarray, tree: set[tuple[int, ...]]) -> float:
    """sum_{u in T} q(u) in float64 (the right-hand side of Proposition 1)."""
    return float(sum(prefix_prob(log_q_row, u) for u in tree))


def surrogate_exhaustive(log_q_row: np.ndarray, tree: set[tuple[int, ...]]) -> float:
    """E_{Y~Q}[alpha_T(Y)] by enumerating every Y in V^L (float64), alpha_T(Y) = the
    largest d with Y_{1:d} in T (0 if none); Q(Y) = prod_d q_d(Y_d)."""
    lq = np.asarray(log_q_row, np.float64)
    depth, vocab = lq.shape
    total = 0.0
    for y in itertools.product(range(vocab), repeat=depth):
        alpha = 0
        for d in range(1, depth + 1):
            if y[:d] in tree:
                alpha = d
        total += np.exp(sum(lq[d, v] for d, v in enumerate(y))) * alpha
    return float(total)


def is_prefix_closed(tree: set[tuple[int, ...]]) -> bool:
    return all(len(u) == 1 or u[:-1] in tree for u in tree)


def valid_trees(depth: int, vocab: int, max_size: int):
    """Yield every prefix-closed set of prefixes (length <= depth) with at most max_size
    nodes, each exactly once, as a tuple of prefixes."""

    def forest(prefix: tuple[int, ...], levels_left: int, budget: int, first: int):
        # Subsets hanging below `prefix` using children with token >= first.
        if levels_left == 0 or first == vocab:
            yield ()
            return
        yield from forest(prefix, levels_left, budget, first + 1)  # child `first` absent
        if budget >= 1:
            child = prefix + (first,)
            for below in forest(child, levels_left - 1, budget - 1, 0):
                for rest in forest(prefix, levels_left, budget - 1 - len(below), first + 1):
                    yield (child, *below, *rest)

    yield from forest((), depth, max_size, 0)


@functools.lru_cache(maxsize=None)
def count_valid_trees(depth: int, vocab: int) -> int:
    """Number of prefix-closed sets (the empty one included) below a root with `depth`
    levels: g(0) = 1, g(h) = (1 + g(h-1))^V."""
    return 1 if depth == 0 else (1 + count_valid_trees(depth - 1, vocab)) ** vocab


def tree_row_prefixes(tokens, parents, depth, valid) -> list[tuple[int, ...]]:
    """Token prefixes of the valid nodes of one packed row, in slot order (parents first)."""
    by_slot: dict[int, tuple[int, ...]] = {}
    for i in range(len(tokens)):
        if valid[i]:
            base = () if parents[i] < 0 else by_slot[int(parents[i])]
            by_slot[i] = base + (int(tokens[i]),)
    return list(by_slot.values())
