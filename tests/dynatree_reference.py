"""Slow, obviously-correct references for DynaTree (test-only, pure Python + numpy).

* `reference_tree`: Algorithm 1's DRAFTTREE, one row at a time, with an explicit FIFO
  frontier (`collections.deque`) and one draft "forward" (`logp_of(path)`) per expanded
  node, with the conventions documented in specjax/drafters/dynatree.py (u_0 = top-1
  token; d(u) = tokens on the root-to-u path; a child with p < tau is pruned at
  creation; the gate of line 14-25 is checked when a node is popped; children in rank
  order "log-prob descending, token id ascending"; stop adding at N_max nodes).
  Cumulative log-probs are accumulated in float32 parent + child, exactly like the JAX
  code, and compared with the same float32 log-thresholds, so the two agree bit for bit.
* `synthetic_table`, `context_hash`: a draft "model" whose next-token log-probs depend
  on the whole context through a hash of the token path; the JAX test plugs the same
  table into `build_tree`.
* `max_level_counts`: brute-force maxima of the per-level node counts (Lemma 1).
* `reference_schedule`: the Phase-3 schedule of the module docstring, round by round.
"""

from __future__ import annotations

import collections

import numpy as np

HASH_MUL, HASH_ADD = 131, 7


def context_hash(root_hash: int, path, contexts: int) -> int:
    """Hash of (root context, token path) into [0, contexts): h <- (h * 131 + t + 7) mod P."""
    h = int(root_hash)
    for t in path:
        h = (h * HASH_MUL + int(t) + HASH_ADD) % contexts
    return h


def synthetic_table(rng: np.random.Generator, contexts: int, vocab: int) -> np.ndarray:
    """f32[P, V] normalised log-probs with varied sharpness, exact ties and p = 1 rows."""
    scale = rng.choice([0.3, 1.0, 3.0, 8.0], size=(contexts, 1))
    logits = rng.standard_normal((contexts, vocab)) * scale
    quantised = rng.random(contexts) < 0.3  # coarse grid: exact ties between tokens
    logits[quantised] = np.round(logits[quantised])
    onehot = rng.random(contexts) < 0.05  # certain next token: log p = 0 and -inf elsewhere
    logits[onehot] = -np.inf
    logits[onehot, rng.integers(0, vocab, onehot.sum())] = 0.0
    logp = logits - np.logaddexp.reduce(logits, axis=1, keepdims=True)
    return logp.astype(np.float32)


def rank_order(logp: np.ndarray) -> np.ndarray:
    """Tokens by log-prob descending, token id ascending (the `lax.top_k` order)."""
    logp = np.where(logp == 0, np.float32(0), logp)  # -0.0 == +0.0
    return np.argsort(-logp, kind="stable")


def reference_tree(root_logp, logp_of, knobs: dict, max_nodes: int, num_levels: int) -> dict:
    """One row of DRAFTTREE. root_logp f32[V]; logp_of(path tuple) -> f32[V]; knobs: the
    float32 log-thresholds log_tau_h, log_tau_l, log_rho_stop, log_rho_deep, log_tau and
    the ints d0, d_max, b_min, b_mid, b_max (b's already within [1, K]); num_levels: the
    static depth bound (D_max, or D_0 in Phase 1).

    Returns lists in insertion (= BFS) order: tokens, parents, depth, cum (float32), and,
    for every node with depth < num_levels, `expandable` (passes the gate of lines 14-25)
    and `branching` (B(u) from the confidence rule); False / 0 for the others.
    """
    f32 = np.float32

    def branching(logp):  # line 27
        conf = logp[rank_order(logp)[0]]
        if conf >= knobs["log_tau_h"]:
            return knobs["b_min"]
        return knobs["b_mid"] if conf >= knobs["log_tau_l"] else knobs["b_max"]

    def expandable(d, lbar):  # lines 14-25 plus the static depth bound
        return bool(d < num_levels and lbar >= knobs["log_tau"] and d < knobs["d_max"]
                    and lbar >= knobs["log_rho_stop"] and (d < knobs["d0"] or lbar >= knobs["log_rho_deep"]))

    u0 = int(rank_order(root_logp)[0])
    nodes = dict(tokens=[u0], parents=[-1], depth=[1], cum=[f32(root_logp[u0])], paths=[(u0,)])
    frontier = collections.deque([0])  # line 11
    while frontier and len(nodes["tokens"]) < max_nodes:  # line 12
        u = frontier.popleft()  # line 13: FIFO
        d, lbar = nodes["depth"][u], nodes["cum"][u]
        if not expandable(d, lbar):
            continue
        logp = np.asarray(logp_of(nodes["paths"][u]), np.float32)  # line 26: one draft step from u
        for v in rank_order(logp)[: branching(logp)]:  # line 28, until N_max
            if len(nodes["tokens"]) >= max_nodes:
                break
            cv = f32(lbar + logp[v])
            if cv < knobs["log_tau"]:  # pruned at creation (costs no budget)
                continue
            nodes["tokens"].append(int(v))
            nodes["parents"].append(u)
            nodes["depth"].append(d + 1)
            nodes["cum"].append(cv)
            nodes["paths"].append(nodes["paths"][u] + (int(v),))
            frontier.append(len(nodes["tokens"]) - 1)
    forwarded = [d < num_levels for d in nodes["depth"]]
    nodes["expandable"] = [expandable(d, c) for d, c in zip(nodes["depth"], nodes["cum"])]
    nodes["branching"] = [branching(np.asarray(logp_of(p), np.float32)) if f else 0
                          for p, f in zip(nodes["paths"], forwarded)]
    return nodes


def max_level_counts(max_nodes: int, num_levels: int, max_branch: int) -> list[int]:
    """Brute force over every level-count sequence n_1 = 1, 1 <= n_{d+1} <=
    min(K n_d, N - S_d): the largest n_d reachable at each depth (stops at the first
    unreachable depth)."""
    best = [0] * num_levels

    def go(d, n_d, s_d):  # level d (1-based) holds n_d nodes, s_d in total so far
        best[d - 1] = max(best[d - 1], n_d)
        if d == num_levels:
            return
        for c in range(1, min(max_branch * n_d, max_nodes - s_d) + 1):
            go(d + 1, c, s_d + c)

    go(1, 1, 1)
    return [w for w in best if w > 0]


def reference_schedule(a_rounds, active_rounds, knobs0: dict, sched) -> list[dict]:
    """The Phase-3 schedule for one row. a_rounds: per-round statistics; active_rounds:
    per-round booleans; knobs0: {'d0', 'tau_h', 'tau_l'}. Returns the knobs after each
    round (float32 arithmetic like the device)."""
    f32 = np.float32
    k = dict(d0=int(knobs0["d0"]), tau_h=f32(knobs0["tau_h"]), tau_l=f32(knobs0["tau_l"]))
    recent: list[float] = []  # since the last move, newest last
    out = []
    for a, active in zip(a_rounds, active_rounds):
        if active:
            recent = (recent + [f32(a)])[-sched.window:]
            mean = f32(np.sum(np.asarray(recent[::-1], np.float32), dtype=np.float32)) / f32(len(recent))
            high, low = f32(sched.accept_high), f32(sched.accept_low)
            if len(recent) >= sched.min_rounds and (mean > high or mean < low):
                sign = 1 if mean > high else -1
                k["d0"] = int(np.clip(k["d0"] + sign, *sched.d0_range))
                for name, (lo, hi) in (("tau_h", sched.tau_h_range), ("tau_l", sched.tau_l_range)):
                    k[name] = f32(np.clip(f32(k[name] - sign * f32(sched.step)), f32(lo), f32(hi)))
                recent = []
        out.append(dict(k))
    return out
