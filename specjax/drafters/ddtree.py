"""DDTree (Ringel & Romano, 2026): draft trees from one pass of per-position marginals.

A block-diffusion drafter (DFlash) returns, in one forward pass, a marginal distribution
q_d over the token at each of the next L positions. DDTree scores a candidate prefix
u = (u_1..u_d) by q(u) = prod_i q_i(u_i) and verifies the `budget` prefixes with the
largest q(u): that prefix set is a valid (prefix-closed) tree and maximises the
drafter-side expected acceptance length E_{Y~Q}[alpha_T(Y)] = sum_{u in T} q(u)
(proofs: proofs/ddtree.md; tests: tests/test_ddtree_select.py).

Sections of this file:
  * Tree selection -- `select_tree`, `select_tree_scored`: log_q f32[B, L, V] -> Tree,
    a static-shape, batched, jit-compiled formulation of the paper's best-first search
    (Algorithm 1) with a documented deterministic tie-break.
  * The DDTree drafter -- `DDTreeDrafter`: a block drafter's marginals (DFlash's
    `block_logits`) -> log-softmax in f32 -> `select_tree` -> Tree, one decode-loop round.

Notation: B batch, L depth (block length), V vocabulary, N budget (the paper's B),
K = min(N, V) tokens kept per depth, rank r in [0, K) = position of a token in the
per-depth order "log-prob descending, token id ascending" (what `lax.top_k` returns).
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from flax import struct

from specjax.drafters.protocol import BlockDrafter, Wrapper
from specjax.ops import top_k, width_buckets
from specjax.tree import Tree

__all__ = [
    "DDTreeDrafter", "DDTreeState", "num_prefixes", "select_tree", "select_tree_scored", "selection_size",
]

# ======================================================================= tree selection
#
# The selection order.  sigma(rho) is the float32 log prefix probability, accumulated
# depth by depth exactly as sigma(rho_1..d) = sigma(rho_1..d-1) + log q_d[rho_d] (the
# root has sigma = 0).  Prefixes are totally ordered by
#
#     rho < rho'  iff  sigma(rho) > sigma(rho')                                 (1)
#                 or   sigma equal and depth(rho) < depth(rho')                 (2)
#                 or   both equal and parent(rho) < parent(rho') (recursively)  (3)
#                 or   parents identical and last rank of rho < that of rho'.   (4)
#
# Equivalently, a depth-d rank tuple has the lexicographic sort key
#     (-sigma_d, d, -sigma_{d-1}, ..., -sigma_1, r_1, ..., r_d),  sigma_j = sigma(r_1..r_j).
# Because float addition is monotone and log q <= 0, every prefix comes after its parent
# and after its next-better sibling, so the first n prefixes in this order form a
# prefix-closed tree, whatever the ties (proofs/ddtree.md, "Tie-breaking").  Both
# formulations below return exactly the first min(N, #prefixes) prefixes in this order,
# in this order (hence parents before children), and so does the heapq reference.


def num_prefixes(depth: int, vocab: int) -> int:
    """Number of non-empty prefixes of length <= depth over `vocab` tokens (Python int)."""
    return sum(vocab**d for d in range(1, depth + 1))


def selection_size(budget: int, depth: int, vocab: int) -> int:
    """How many valid nodes `select_tree` returns: min(budget, sum_{d<=L} V^d)."""
    total, power = 0, 1
    for _ in range(depth):  # capped running sum: V^L overflows nothing in Python, but can be huge
        power *= vocab
        total += power
        if total >= budget:
            return budget
    return total


def _check_inputs(log_q, budget) -> tuple[int, int, int]:
    """Validate shapes and budget before tracing; returns (B, L, V)."""
    if isinstance(budget, bool) or not isinstance(budget, (int, np.integer)):
        raise ValueError(f"budget must be a Python int (static), got {budget!r}")
    if budget < 1:
        raise ValueError(f"budget must be >= 1, got {budget}")
    shape = tuple(jnp.shape(log_q))
    if len(shape) != 3:
        raise ValueError(f"log_q must have rank 3 [B, L, V] (batch, depth, vocab), got shape {shape}")
    b, depth, vocab = shape
    if b < 1:
        raise ValueError(f"log_q batch size B must be >= 1, got shape {shape}")
    if depth < 1:
        raise ValueError(f"log_q depth L must be >= 1, got shape {shape}")
    if vocab < 1:
        raise ValueError(f"log_q vocabulary V must be >= 1, got shape {shape}")
    if not jnp.issubdtype(jnp.result_type(log_q), jnp.floating):
        raise ValueError(f"log_q must be floating point (log-probabilities), got {jnp.result_type(log_q)}")
    return b, depth, vocab


@functools.lru_cache(maxsize=64)
def _level_plan(budget: int, k: int, depth: int):
    """Static plan of the level-synchronous selection.

    Returns (sizes, pairs): sizes[d-1] = n_d = min(N, K^d), the number of depth-d prefixes
    kept; pairs[d-1] (for d >= 2) = (j, r) int32 arrays listing the depth-d candidates
    "child of the j-th kept depth-(d-1) prefix with rank r", ordered by (j, r), restricted
    to (j + 1) * (r + 1) <= n_d: a candidate with j*r (1-based) > n_d has at least n_d
    strictly better depth-d prefixes (all (j', r') <= (j, r)), so it cannot be kept.
    Hence len(pairs[d-1]) <= n_d * (1 + ln n_d).
    """
    sizes, power = [], 1
    for _ in range(depth):
        power = min(power * k, budget)  # min(N, K^d) without forming K^d
        sizes.append(power)
    pairs = [None]
    for d in range(1, depth):
        js, rs = [], []
        for j in range(sizes[d - 1]):
            r_max = min(k, sizes[d] // (j + 1))
            if r_max == 0:
                break
            js.append(np.full(r_max, j, np.int32))
            rs.append(np.arange(r_max, dtype=np.int32))
        j_arr, r_arr = np.concatenate(js), np.concatenate(rs)
        assert j_arr.size >= sizes[d]
        j_arr.flags.writeable = r_arr.flags.writeable = False
        pairs.append((j_arr, r_arr))
    return tuple(sizes), tuple(pairs)


def _select_row_levels(top_lq, top_ids, budget: int, n_out: int):
    """Level-synchronous selection for one row.

    top_lq f32[L, K] (per-depth top-K log-probs, descending), top_ids int32[L, K].
    Returns (tokens, parents, depth, scores), each [n_out], in selection order.

    Depth by depth it keeps D_d = the first n_d = min(N, K^d) depth-d prefixes in the
    selection order. D_d only contains children of D_{d-1} (replacing a parent by a better
    one gives a better child), so D_d = top n_d of the children of D_{d-1}, pruned by the
    j*r <= n_d bound of `_level_plan`. The answer, the first n_out prefixes overall, lies
    in the union of the D_d and is one more top-k over their concatenation. `lax.top_k`
    breaks ties by lower index; candidates are laid out (parent position, rank) within a
    level and depth-major across levels, which is rules (2)-(4) of the order.
    """
    depth, k = top_lq.shape
    sizes, pairs = _level_plan(budget, k, depth)
    scores = [top_lq[0, : sizes[0]]]  # f32[n_1]; n_1 = K, already in order
    ranks = [jnp.arange(sizes[0], dtype=jnp.int32)]
    par_pos = [jnp.full((sizes[0],), -1, jnp.int32)]  # position of the parent in the previous level
    for d in range(1, depth):
        cand_j, cand_r = pairs[d]
        cand = scores[d - 1][cand_j] + top_lq[d, cand_r]  # f32[M_d]: sigma(parent) + log q_d[r]
        s, idx = lax.top_k(cand, sizes[d])  # [n_d]
        scores.append(s)
        par_pos.append(jnp.asarray(cand_j)[idx])
        ranks.append(jnp.asarray(cand_r)[idx])

    offsets = np.cumsum([0, *sizes])  # level d occupies [offsets[d-1], offsets[d]) of the concatenation
    level_depth = np.repeat(np.arange(1, depth + 1, dtype=np.int32), sizes)  # [T]
    all_scores = jnp.concatenate(scores)  # f32[T]
    all_ranks = jnp.concatenate(ranks)
    all_parent = jnp.concatenate(  # parent's index in the concatenation, -1 for depth 1
        [par_pos[0]] + [par_pos[d] + int(offsets[d - 1]) for d in range(1, depth)]
    )
    sel_scores, sel = lax.top_k(all_scores, n_out)  # [n_out], selection order
    sel_depth = jnp.asarray(level_depth)[sel]
    # Where did each concatenation slot land in the output? (-1: not selected)
    out_pos = jnp.full(all_scores.shape, -1, jnp.int32).at[sel].set(jnp.arange(n_out, dtype=jnp.int32))
    sel_parent_slot = all_parent[sel]
    parents = jnp.where(sel_parent_slot >= 0, out_pos[jnp.maximum(sel_parent_slot, 0)], -1)
    tokens = top_ids[sel_depth - 1, all_ranks[sel]]
    return tokens, parents, sel_depth, sel_scores


def _select_row_pops(top_lq, top_ids, budget: int, n_out: int):
    """Best-first selection for one row: Algorithm 1 with the heap replaced by a candidate
    array of N+1 slots and a lexicographic arg-min per pop (same inputs/outputs as
    `_select_row_levels`).

    Each pop takes the best live candidate under the selection order, using the keys
    (-sigma, depth, parent's output index, rank); the parent index stands in for rule (3)
    because parents are popped in the selection order. The popped slot is reused for its
    next sibling, its first child is appended: at most 1 + n_out slots are ever used.
    """
    depth, k = top_lq.shape
    cap = n_out + 1
    big = jnp.iinfo(jnp.int32).max
    cand = dict(
        score=jnp.full((cap,), -jnp.inf, jnp.float32).at[0].set(top_lq[0, 0]),
        depth=jnp.zeros((cap,), jnp.int32).at[0].set(1),
        parent=jnp.full((cap,), -1, jnp.int32),
        rank=jnp.zeros((cap,), jnp.int32),
        live=jnp.zeros((cap,), bool).at[0].set(True),
    )
    out = dict(
        tokens=jnp.zeros((n_out,), jnp.int32),
        parents=jnp.full((n_out,), -1, jnp.int32),
        depth=jnp.zeros((n_out,), jnp.int32),
        scores=jnp.full((n_out,), -jnp.inf, jnp.float32),
    )

    def pick(c):
        best = jnp.max(jnp.where(c["live"], c["score"], -jnp.inf))
        tied = c["live"] & (c["score"] == best)
        for key in ("depth", "parent", "rank"):  # rules (2), (3), (4)
            tied &= c[key] == jnp.min(jnp.where(tied, c[key], big))
        return jnp.argmax(tied)  # exactly one slot is left

    def body(t, carry):
        c, o, n_slots = carry
        i = pick(c)
        s, d, p, r = c["score"][i], c["depth"][i], c["parent"][i], c["rank"][i]
        o = dict(
            tokens=o["tokens"].at[t].set(top_ids[d - 1, r]),
            parents=o["parents"].at[t].set(p),
            depth=o["depth"].at[t].set(d),
            scores=o["scores"].at[t].set(s),
        )
        parent_score = jnp.where(p >= 0, o["scores"][jnp.maximum(p, 0)], 0.0)
        sib_r = jnp.minimum(r + 1, k - 1)
        has_child = d < depth
        c = dict(  # slot i <- next sibling (if rank r+1 exists); slot n_slots <- first child
            score=c["score"].at[i].set(parent_score + top_lq[d - 1, sib_r])
            .at[n_slots].set(s + top_lq[jnp.minimum(d, depth - 1), 0]),
            depth=c["depth"].at[i].set(d).at[n_slots].set(d + 1),
            parent=c["parent"].at[i].set(p).at[n_slots].set(t),
            rank=c["rank"].at[i].set(r + 1).at[n_slots].set(0),
            live=c["live"].at[i].set(r + 1 < k).at[n_slots].set(has_child),
        )
        return c, o, n_slots + has_child.astype(jnp.int32)

    _, out, _ = lax.fori_loop(0, n_out, body, (cand, out, jnp.int32(1)))
    return out["tokens"], out["parents"], out["depth"], out["scores"]


_METHODS = {"levels": _select_row_levels, "pops": _select_row_pops}


@functools.partial(jax.jit, static_argnames=("budget", "method"))
def _select(log_q, budget: int, method: str):
    _, depth, vocab = log_q.shape
    k = min(budget, vocab)
    n_out = selection_size(budget, depth, vocab)
    # Clamped at 0: a log_softmax fused into a larger program can round the dominant token's log q to a tiny
    # positive value (its log(sum exp) approximated a few ulp below the max; seen under jit with a 200x-sharpened
    # drafter on XLA:CPU), and with log q > 0 a child outscores its parent: the "first n prefixes" came out
    # child before parent, a tree `check_trees` rejects. A direct call still refuses positive entries (they are
    # not log-probabilities); inside a trace they can only be such rounding, and q <= 1 is what they round.
    log_q = jnp.minimum(log_q.astype(jnp.float32), 0.0)
    # [B, L, K]: ranks, ties -> lower token id; the selection order treats -0.0 and +0.0 as equal.
    top_lq, top_ids = top_k(log_q, k, equal_zeros=True)
    row = functools.partial(_METHODS[method], budget=budget, n_out=n_out)
    tokens, parents, dep, scores = jax.vmap(row)(top_lq, top_ids.astype(jnp.int32))  # [B, n_out]
    pad = budget - n_out
    tree = Tree(
        tokens=jnp.pad(tokens, ((0, 0), (0, pad))),
        parents=jnp.pad(parents, ((0, 0), (0, pad)), constant_values=-1),
        depth=jnp.pad(dep, ((0, 0), (0, pad))),
        valid=jnp.pad(jnp.ones_like(tokens, bool), ((0, 0), (0, pad))),
    )
    return tree, jnp.pad(scores, ((0, 0), (0, pad)), constant_values=-jnp.inf)


def select_tree_scored(log_q: jax.Array, budget: int, *, method: str = "levels") -> tuple[Tree, jax.Array]:
    """DDTree selection plus each node's log prefix probability.

    Args:
      log_q: float[B, L, V] per-depth log-probabilities (log_softmax of the drafter's logits),
        used as given in float32; rows need not sum to one. Entries must be <= 0 (q <= 1,
        as log_softmax always gives) and not NaN; 0 (q = 1) and -inf (q = 0) are fine.
        With positive entries a child can outscore its parent and the guarantees are void.
      budget: static int N >= 1, the number of tree slots.
      method: "levels" (default; critical path of L+1 top-k calls) or "pops" (N sequential
        pops, closest to the paper's heap). Both return identical trees.

    Returns:
      (tree, scores): `Tree` with tokens/parents/depth/valid [B, N] and scores f32[B, N],
      the float32 log prefix probability sigma(u) = sum_i log q_i(u_i) of each node
      (-inf on padding). Row b holds the first n = min(N, sum_{d<=L} V^d) prefixes of
      row b in the selection order (module comment), in that order -- so parents precede
      children, parents = -1 exactly at depth 1 -- followed by N - n padding slots
      (valid=False, tokens=0, parents=-1, depth=0). Rows are independent.

    Complexity (per row; K = min(N, V), M = N (1 + ln N)):
      top-K: one `lax.top_k` over V per depth, O(L V) work, O(L K) memory.
      "levels": L-1 top-k's over <= M candidates plus one over <= L N: O(L M log M) work,
        O(L N + M) memory, critical path L+1 top-k's independent of N.
      "pops": N iterations of a `fori_loop`, each O(N) vectorised work (a lexicographic
        arg-min over N+1 candidate slots): O(N^2) work, O(N) memory, critical path N.
      The paper's host heap is O(N log N) with a sequential depth of N.
    """
    _check_inputs(log_q, budget)
    if method not in _METHODS:
        raise ValueError(f"method must be one of {sorted(_METHODS)}, got {method!r}")
    if not isinstance(log_q, jax.core.Tracer):  # a direct call: check the values too (inside a trace they are unknown)
        _check_values(log_q)
    return _select(log_q, budget=int(budget), method=method)


def _check_values(log_q) -> None:
    """NaN or positive log-probabilities void the selection's guarantees: name them (host check)."""
    values = np.asarray(jax.device_get(log_q), np.float32)
    bad = np.isnan(values)
    if bad.any():
        at = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(f"log_q has {int(bad.sum())} NaN entries (first at [b, d, v] = {at}): the drafter's logits "
                         f"are not finite")
    if (values > 0).any():
        at = tuple(int(i) for i in np.argwhere(values > 0)[0])
        raise ValueError(f"log_q must be log-probabilities (<= 0, e.g. log_softmax of the logits); found "
                         f"{float(values[at]):.4g} at [b, d, v] = {at}")


def select_tree(log_q: jax.Array, budget: int, *, method: str = "levels") -> Tree:
    """DDTree draft tree: log_q f32[B, L, V] -> Tree [B, budget] (see `select_tree_scored`).

    The tree is the set of the `budget` most probable prefixes under the factorised draft
    distribution Q(y) = prod_d q_d(y_d), which maximises sum_{u in T} q(u) = E_{Y~Q}[alpha_T(Y)]
    over all prefix-closed trees of at most `budget` nodes (DDTree Propositions 1-3).
    Jit-compiled with `budget` static; callable inside an outer `jax.jit`.
    """
    return select_tree_scored(log_q, budget, method=method)[0]


# ======================================================================= the DDTree drafter


@struct.dataclass
class DDTreeState:
    """DDTree's state (B rows, R = max_new_tokens rounds at most).

    Fields:
      block: the block drafter's state (e.g. a `DFlashState`), updated by its own propose / observe.
      surrogate: f32[B, R] sum_{u in T} q(u) of each round's proposed (kept) tree: the drafter-side
        expected number of accepted tokens; -1 past the row's last round.
      num_rounds: int32[B] rounds proposed per row (active rounds only).
    """

    block: object
    surrogate: jax.Array
    num_rounds: jax.Array


@dataclasses.dataclass(frozen=True)
class DDTreeDrafter(Wrapper):
    """DDTree decoding (paper §4, Algorithm 1) on any drafter that returns per-position marginals.

    Fields:
      block_drafter: a drafter with `block_logits(state, root, active) -> (logits f32[B, L, V],
        state)` (one parallel pass, e.g. `specjax.drafters.dflash.DFlashDrafter`); its init /
        observe / target features are used as they are.
      budget: N, tree nodes per round (the root is not counted; the target verifies N + 1).
      prune_mass: nodes with q(u) < prune_mass / N are dropped after selection, so the
        surrogate sum_{u in T} q(u) loses less than prune_mass tokens per round, and a
        confident drafter's tree (most of its N nodes far below that) is verified at a small
        width (`verify_widths`). 0 keeps the paper's full tree. Trees stay nested in N:
        T_N subset of T_N' for N < N' (the threshold only decreases). The first node is kept.
      verify_factor: ratio of consecutive static verify widths (16, 32, ... up to N).
      method: "levels" or "pops" (`select_tree`; same trees).
      tree_temperature: t, the marginals the tree is selected from are log_softmax(logits / t)
        (1: the drafter's own, the paper's rule). A probe of the drafter's calibration for tree
        selection, not of the target's sampling: the tree is fixed before the target's samples
        are drawn, so the greedy walk (T = 0) and the sampling walk (T > 0) are lossless for any
        tree, whatever t. (On SmolLM2 with the zoo's drafter t = 1 measured best, greedy and at
        T = 1: docs/results.md.)
    """

    block_drafter: object
    budget: int
    prune_mass: float = 0.01
    verify_factor: float = 2.0
    method: str = "levels"
    tree_temperature: float = 1.0

    def __post_init__(self):
        if not isinstance(self.block_drafter, BlockDrafter):
            raise TypeError(f"DDTree builds its tree from per-position marginals: the block drafter must have "
                            f"block_logits(state, root, active), {type(self.block_drafter).__name__} has none")
        if isinstance(self.budget, bool) or not isinstance(self.budget, (int, np.integer)) or self.budget < 1:
            raise ValueError(f"DDTree budget (tree nodes per round) must be an int >= 1, got {self.budget!r}")
        if not (0 <= self.prune_mass < 1) or math.isnan(self.prune_mass):
            raise ValueError(f"prune_mass must lie in [0, 1), got {self.prune_mass}")
        if self.verify_factor <= 1:
            raise ValueError(f"verify_factor must be > 1, got {self.verify_factor}")
        if self.method not in _METHODS:
            raise ValueError(f"method must be one of {sorted(_METHODS)}, got {self.method!r}")
        if not (math.isfinite(self.tree_temperature) and self.tree_temperature > 0):
            raise ValueError(f"tree_temperature must be a finite number > 0, got {self.tree_temperature}")
        if self.max_depth < 1:
            raise ValueError(f"the block drafter drafts {self.max_depth} positions per pass; DDTree needs >= 1")

    # ---------------------------------------------------------------- static attributes
    @property
    def inner(self):
        return self.block_drafter  # its block of L positions bounds the walk: max_depth = L

    @property
    def target_topk(self) -> int:
        return getattr(self.block_drafter, "target_topk", 0)

    @property
    def verify_widths(self) -> tuple[int, ...]:
        """16, 32, ... N: the target verifies the smallest that holds every kept node. Kept
        nodes are a prefix of the slots (selection order is by decreasing q(u)), so the
        width follows the tree."""
        if self.prune_mass == 0:
            return (self.budget,)
        return width_buckets(self.budget, smallest=min(16, self.budget), factor=self.verify_factor)

    @property
    def log_min_prob(self) -> float:
        """log of the pruning threshold prune_mass / N (-inf when pruning is off)."""
        return math.log(self.prune_mass / self.budget) if self.prune_mass > 0 else -math.inf

    def uses_rejection(self, sampling) -> bool:
        return False  # sampling walk (DDTree §4.4): marginals are not the path-conditional proposal

    # ---------------------------------------------------------------- the round
    def init(self, params, tokens, prompt_lengths, max_new_tokens: int, context=None) -> DDTreeState:
        b = tokens.shape[0]
        return DDTreeState(block=self.block_drafter.init(params, tokens, prompt_lengths, max_new_tokens, context),
                           surrogate=jnp.full((b, max_new_tokens), -1.0, jnp.float32),
                           num_rounds=jnp.zeros((b,), jnp.int32))

    def candidates(self, logits: jax.Array, active: jax.Array):
        """logits f32[B, L, V] -> (the N selected prefixes as a Tree [B, N] in selection order,
        their log q(u) f32[B, N], keep bool[B, N] = not pruned (the first always) and row
        active, log_q f32[B, L, V] = the log-marginals they were scored with, at `tree_temperature`)."""
        logits = logits.astype(jnp.float32)
        if self.tree_temperature != 1.0:  # static: the default round is the paper's, with no V-wide divide
            logits = logits / self.tree_temperature
        log_q = jax.nn.log_softmax(logits, axis=-1)
        tree, scores = select_tree_scored(log_q, self.budget, method=self.method)
        keep = tree.valid & (scores >= self.log_min_prob)
        return tree, scores, keep.at[:, 0].set(tree.valid[:, 0]) & active[:, None], log_q

    def tree(self, logits: jax.Array, active: jax.Array) -> tuple[Tree, jax.Array]:
        """logits f32[B, L, V] -> (Tree [B, N], surrogate f32[B] = sum of q(u) over kept nodes).

        Inactive rows (bool[B]) get an empty tree."""
        tree, scores, keep, _ = self.candidates(logits, active)
        tree = tree.replace(valid=keep, parents=jnp.where(keep, tree.parents, -1), depth=jnp.where(keep, tree.depth, 0),
                            tokens=jnp.where(keep, tree.tokens, 0))
        return tree, jnp.sum(jnp.where(keep, jnp.exp(scores), 0.0), axis=-1)

    def propose(self, state: DDTreeState, root, active, key, sampling):
        logits, block = self.block_drafter.block_logits(state.block, root, active)
        tree, mass = self.tree(logits, active)
        rows = jnp.arange(root.shape[0])
        r = jnp.minimum(state.num_rounds, state.surrogate.shape[1] - 1)
        surrogate = state.surrogate.at[rows, r].set(jnp.where(active, mass, state.surrogate[rows, r]))
        return tree, None, DDTreeState(block=block, surrogate=surrogate,
                                       num_rounds=state.num_rounds + active.astype(jnp.int32))

    def observe(self, state: DDTreeState, verified) -> DDTreeState:
        return state.replace(block=self.block_drafter.observe(state.block, verified))
