"""The ceiling of tree drafting: τ of the best N-node tree under the target's own law (an oracle drafter).

    python -m specjax bench-ceiling --model smollm2-135m --dataset gsm8k,humaneval --budgets 1,3,7 \\
        --temperature 1 --prompts 10 [--json PATH]

Why. A round's tree is fixed before the target's tokens are drawn, and the walk then accepts the longest prefix of
the target's own continuation that lies in the tree, so a tree T at context c accepts Σ_{u ∈ T} p(u | c) draft
tokens in expectation, p being the target's law at the decoding temperature (DDTree, "Accelerating Speculative
Decoding with Block Diffusion Draft Trees", arXiv 2604.12989, Proposition 1 with the target's law in place of the
drafter's surrogate; proofs/ddtree.md §7.2). No drafter can do better with N nodes than the N most probable
continuations under p itself. This module measures that ceiling on real prompts: what any drafter could reach at a
budget and temperature on a target, against which a trained drafter's τ (`specjax bench`) reads as a share. At
T = 0 the law is a point mass and the ceiling is trivial (a chain of N, τ = N + 1); at T > 0 it is the target's own
entropy that bounds τ.

How, per prompt: y = the target's own continuation (`generate_ar` at the temperature, `max_new_tokens`, a key per
prompt); one prefill of prompt + y gives the target's cache; a round at position t builds the tree best-first on the
true path probabilities (`best_paths`: a popped node's children ranked by the target's next-token law after it, one
forward of the path against the cache rewound to t, `path_law`), and the walk accepts `accepted_length(tree, y[t:])`
(coupled to the one sample y: exact in law, since every round's continuation is a fresh draw of p given its
context); the next round starts after the accepted tokens and the bonus. Reported per budget: τ = mean(accepted + 1)
over the rounds, and its lower-variance twin E τ = mean(1 + Σ_{u ∈ T} p(u)) over the same rounds.

Cost: one target forward of at most `depth` tokens per popped node, N - 1 per round (host best-first, a bench
tool's loop, not the decode loop's): SmolLM2-135M on 2 CPU cores ~1 minute a prompt at budgets 1, 3, 7.
"""

from __future__ import annotations

import dataclasses
import functools
import heapq
import json
import math
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from specjax.data.datasets import DATASETS, dataset_texts
from specjax.decode import generate_ar
from specjax.models.cache import init_cache
from specjax.models.model import forward, prefill
from specjax.pipeline import load_pair
from specjax.sampling import Sampling

__all__ = ["CeilingPlan", "accepted_length", "best_paths", "path_law", "rounds_of", "run", "table", "tree_ceiling",
           "write_json"]

Path = tuple[int, ...]


def best_paths(next_law: Callable[[Path], np.ndarray], n: int, depth: int) -> list[tuple[Path, float]]:
    """The n most probable token paths (at most `depth` long) under a law, in best-first order, with their log p.

    next_law(path) -> [V] log-probabilities of the token after `path` (() for the root). The first k of the
    returned paths are the k most probable for every k <= n (ties: the shorter path, then the smaller ids), a
    prefix-closed tree; paths of probability 0 are never returned, so a point-mass law gives a chain. One call
    of next_law per returned path but the last (and the root's)."""
    if n < 1 or depth < 1:
        raise ValueError(f"best_paths needs n >= 1 and depth >= 1, got n={n}, depth={depth}")
    heap: list = []

    def push(path: Path, logp: float, lp: np.ndarray) -> None:
        for v in np.argsort(-lp, kind="stable")[:n]:
            if np.isfinite(lp[v]):
                child = path + (int(v),)
                heapq.heappush(heap, (-(logp + float(lp[v])), len(child), child))

    push((), 0.0, next_law(()))
    order: list[tuple[Path, float]] = []
    while heap and len(order) < n:
        neg, _, path = heapq.heappop(heap)
        order.append((path, -neg))
        if len(order) < n and len(path) < depth:
            push(path, -neg, next_law(path))
    return order


def accepted_length(tree: Sequence[Path], continuation: Sequence[int]) -> int:
    """Draft tokens the walk accepts: the longest prefix of `continuation` that is a node of the tree."""
    nodes = set(tree)
    k = 0
    while k < len(continuation) and tuple(continuation[:k + 1]) in nodes:
        k += 1
    return k


def rounds_of(order_at: Callable[[int], list[tuple[Path, float]]], continuation: Sequence[int], budget: int
              ) -> tuple[list[int], list[float]]:
    """(tokens per round = accepted + 1, expected tokens per round = 1 + Σ p(u) over the tree) of the rounds that
    decode `continuation` with the best `budget`-node tree of each round's position t (`order_at(t)`: the
    best-first order there, at least `budget` long where the law allows). The last token is a round's bonus: the
    rounds cover positions 0 .. len - 1."""
    taus, expected = [], []
    t, m = 0, len(continuation)
    while t < m:
        tree = order_at(t)[:budget]
        acc = min(accepted_length([p for p, _ in tree], continuation[t:]), m - t - 1)
        taus.append(acc + 1)
        expected.append(1.0 + sum(math.exp(lp) for p, lp in tree if len(p) <= m - t - 1))  # as `acc`, capped
        t += acc + 1
    return taus, expected


def path_law(params, cfg, cache, base_len: int, path: Path, depth: int, sampling: Sampling) -> np.ndarray:
    """The target's next-token law after its cache's first `base_len` tokens and then `path`: float32[V]
    `sampling.log_probs` of the path's last logits (the law its samplers draw from; greedy: a point mass on the
    first argmax). One forward of the path (padded to `depth`: one compile) against the cache rewound to base_len."""
    tokens = np.zeros((1, depth), np.int32)
    tokens[0, :len(path)] = path
    return np.asarray(_path_log_probs(params, cfg, sampling, cache, jnp.int32(base_len), jnp.asarray(tokens),
                                      jnp.int32(len(path))))


@functools.partial(jax.jit, static_argnames=("cfg", "sampling"))
def _path_log_probs(params, cfg, sampling, cache, base_len, tokens, length):
    rewound = cache.replace(lengths=jnp.full(cache.lengths.shape, base_len, jnp.int32))
    t = tokens.shape[1]
    positions = base_len + jnp.arange(t, dtype=jnp.int32)[None]
    logits, _ = forward(params, cfg, tokens, positions, jnp.tril(jnp.ones((t, t), bool))[None], rewound)
    return sampling.log_probs(logits[0, length - 1])


def tree_ceiling(params, cfg, prompt: Sequence[int], budgets: Sequence[int], *, max_new_tokens: int,
                 temperature: float, depth: int, key) -> dict:
    """One prompt's ceiling: {budget: (tokens per round list, expected tokens per round list)} (`rounds_of`) of
    the target's own continuation of `prompt` (int ids) at `temperature` (`key`: its sample)."""
    p = len(prompt)
    sampling = Sampling(temperature=temperature)
    out = generate_ar(params, cfg, jnp.asarray([prompt], jnp.int32), jnp.asarray([p], jnp.int32), max_new_tokens,
                      eos_ids=(), sampling=sampling, key=None if sampling.greedy else key)
    y = [int(t) for t in np.asarray(out.tokens[0])]
    full = list(prompt) + y
    cache = init_cache(cfg, 1, len(full) + depth, jax.tree.leaves(params)[0].dtype)
    logits, _, cache = prefill(params, cfg, jnp.asarray([full], jnp.int32), jnp.asarray([len(full)], jnp.int32), cache)
    root_laws = np.asarray(sampling.log_probs(logits[0]))  # [len(full), V]: the law after each prefix
    n = max(budgets)
    memo: dict[int, list] = {}

    def order_at(t: int):
        if t not in memo:
            def next_law(path: Path) -> np.ndarray:
                if not path:
                    return root_laws[p + t - 1]
                return path_law(params, cfg, cache, p + t, path, depth, sampling)
            memo[t] = best_paths(next_law, n, depth)
        return memo[t]

    return {b: rounds_of(order_at, y, b) for b in budgets}


@dataclasses.dataclass(frozen=True)
class CeilingPlan:
    """What `run` measures (module docstring).

    Fields:
      model: a named model (`specjax.pipeline.MODELS`) or an HF checkpoint directory.
      datasets: prompt sets of `specjax.data.datasets.DATASETS` (their test split), each a row.
      prompts: prompts measured per set, after `skip`.
      skip: the sets' first prompts left out (2: the counted prompts of `specjax bench --warmup 2`).
      budgets: tree nodes N per round, each a column.
      temperature: the target's decoding temperature (0: greedy, a trivial ceiling).
      max_new_tokens: the continuation's length per prompt.
      prompt_len: each prompt keeps its last prompt_len tokens (as `specjax bench`).
      depth: the deepest node (a block-B DFlash drafter's DDTree reaches B - 1: 7 for the zoo's SmolLM2 drafter).
      seed: the continuations' keys are fold_in(key(seed), prompt index).
    """

    model: str = "smollm2-135m"
    datasets: tuple[str, ...] = ("gsm8k", "humaneval")
    prompts: int = 10
    skip: int = 2
    budgets: tuple[int, ...] = (1, 3, 7)
    temperature: float = 1.0
    max_new_tokens: int = 128
    prompt_len: int = 64
    depth: int = 7
    seed: int = 0

    def check(self) -> None:
        """Raises ValueError naming the field (before anything loads)."""
        unknown = [d for d in self.datasets if d not in DATASETS]
        if not self.datasets or unknown:
            raise ValueError(f"datasets must be some of {', '.join(DATASETS)}, got {list(self.datasets)}")
        for name in ("prompts", "max_new_tokens", "prompt_len", "depth"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.skip < 0:
            raise ValueError(f"skip must be >= 0, got {self.skip}")
        if not self.budgets or min(self.budgets) < 1:
            raise ValueError(f"budgets must be tree sizes >= 1, got {list(self.budgets)}")
        if not (self.temperature >= 0 and math.isfinite(self.temperature)):
            raise ValueError(f"temperature must be a finite number >= 0, got {self.temperature}")


def run(plan: CeilingPlan, *, log=print) -> list[dict]:
    """Each dataset's row: {"dataset", "prompts", "tau": {N: τ}, "expected_tau": {N: E τ}, "rounds": {N: count},
    "per_prompt": [{N: τ}]}, logged as a table."""
    plan.check()
    pair = load_pair(plan.model, (), layout="stacked")
    rows = []
    for ds in plan.datasets:
        texts = dataset_texts(ds, "test", chat=pair.has_chat_template)[plan.skip:plan.skip + plan.prompts]
        if len(texts) < plan.prompts:
            raise ValueError(f"prompts {plan.prompts}: {ds} has {len(texts)} after skipping {plan.skip}")
        taus = {b: [] for b in plan.budgets}
        expected = {b: [] for b in plan.budgets}
        per_prompt = []
        for i, text in enumerate(texts):
            ids = pair.encode(text, pair.has_chat_template)[-plan.prompt_len:]
            one = tree_ceiling(pair.params, pair.cfg, ids, plan.budgets, max_new_tokens=plan.max_new_tokens,
                               temperature=plan.temperature, depth=plan.depth,
                               key=jax.random.fold_in(jax.random.key(plan.seed), plan.skip + i))
            for b, (t, e) in one.items():
                taus[b] += t
                expected[b] += e
            per_prompt.append({b: float(np.mean(t)) for b, (t, _) in one.items()})
            log(f"{ds} prompt {i + 1}/{plan.prompts}: " + ", ".join(f"N={b} τ {v:.2f}" for b, v in per_prompt[-1].items()))
        rows.append({"dataset": ds, "prompts": plan.prompts, "temperature": plan.temperature,
                     "tau": {b: float(np.mean(taus[b])) for b in plan.budgets},
                     "expected_tau": {b: float(np.mean(expected[b])) for b in plan.budgets},
                     "rounds": {b: len(taus[b]) for b in plan.budgets}, "per_prompt": per_prompt})
    log(table(rows, plan))
    return rows


def table(rows: list[dict], plan: CeilingPlan) -> str:
    """The rows as a markdown table: τ (E τ) per budget and dataset."""
    head = "| dataset | " + " | ".join(f"N = {b}: τ (E τ)" for b in plan.budgets) + " |"
    lines = [f"the ceiling at T = {plan.temperature:g} ({plan.model}, {plan.prompts} prompts a set, "
             f"{plan.max_new_tokens} tokens, depth <= {plan.depth})", "", head,
             "|---" * (len(plan.budgets) + 1) + "|"]
    for r in rows:
        lines.append(f"| {r['dataset']} | " + " | ".join(f"{r['tau'][b]:.2f} ({r['expected_tau'][b]:.2f})"
                                                         for b in plan.budgets) + " |")
    return "\n".join(lines)


def write_json(path: str, rows: list[dict], plan: CeilingPlan) -> None:
    """{"plan": the plan's fields, "rows": `run`'s rows} as indented JSON at `path`."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"plan": dataclasses.asdict(plan), "rows": rows}, f, indent=1)
