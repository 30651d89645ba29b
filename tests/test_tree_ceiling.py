"""The tree ceiling (`specjax.bench.tree_ceiling`): best-first on the target's own law against brute-force
enumeration, the walk's accepted length, and the cache-rewound path forward against fresh prefills."""

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specjax.bench import tree_ceiling as C
from specjax.models import init_cache, prefill
from specjax.sampling import Sampling
from tests.fixtures import PAIRS, random_pair_params


def random_law(vocab: int, seed: int):
    """next_law(path) -> float64[V]: a fixed random log-softmax per path (a law that depends on the whole path)."""
    calls = []

    def next_law(path):
        calls.append(path)
        rng = np.random.default_rng([seed, len(path), *path])
        z = 2.0 * rng.standard_normal(vocab)
        return z - np.log(np.exp(z).sum())
    return next_law, calls


@settings(max_examples=30, deadline=None)
@given(vocab=st.integers(2, 5), depth=st.integers(1, 3), n=st.integers(1, 14), seed=st.integers(0, 2**16))
def test_best_paths_are_the_n_most_probable_paths_by_enumeration(vocab, depth, n, seed):
    next_law, calls = random_law(vocab, seed)
    every = [p for d in range(1, depth + 1) for p in itertools.product(range(vocab), repeat=d)]
    logp = {p: sum(next_law(p[:i])[p[i]] for i in range(len(p))) for p in every}
    calls.clear()
    got = C.best_paths(next_law, n, depth)
    want = sorted(every, key=lambda p: (-logp[p], len(p), p))[:n]
    assert [p for p, _ in got] == want
    np.testing.assert_allclose([lp for _, lp in got], [logp[p] for p in want], rtol=1e-12)
    assert all(p[:-1] in {q for q, _ in got} or len(p) == 1 for p, _ in got)  # prefix-closed
    assert len(calls) <= len(got)  # the root's law and one per returned path but the last


def test_a_point_mass_law_gives_a_chain():
    """At T = 0 the target's law (`Sampling().log_probs`: a point mass on the first argmax) makes a chain."""
    logits = np.array([1.0, 3.0, 3.0, -2.0], np.float32)
    greedy = lambda path: np.asarray(Sampling().log_probs(jnp.asarray(np.roll(logits, len(path)))))  # noqa: E731
    got = C.best_paths(greedy, 6, 4)
    assert [p for p, _ in got] == [(1,), (1, 2), (1, 2, 0), (1, 2, 0, 0)] and all(lp == 0 for _, lp in got)


def test_accepted_length_and_rounds():
    tree = [(5,), (5, 6), (7,), (5, 6, 1)]
    assert C.accepted_length(tree, [5, 6, 1, 2]) == 3
    assert C.accepted_length(tree, [5, 7]) == 1
    assert C.accepted_length(tree, [6, 5]) == 0
    # a chain order that predicts y exactly two tokens deep from every position
    y = [3, 1, 4, 1, 5, 9, 2]
    order_at = lambda t: [(tuple(y[t:t + 1]), math.log(0.5)), (tuple(y[t:t + 2]), math.log(0.25)),  # noqa: E731
                          ((0,) * 3, math.log(0.1))]
    taus, expected = C.rounds_of(order_at, y, 2)
    assert taus == [3, 3, 1] and sum(taus) == len(y)  # the last round: only its bonus is left
    np.testing.assert_allclose(expected, [1.75, 1.75, 1.0])  # ... and no path fits in it
    assert C.rounds_of(order_at, y, 1)[0] == [2, 2, 2, 1]


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_path_law_equals_a_fresh_forward_of_context_and_path(name):
    """The cache rewound to t and the path forwarded against it = the last logits of prefill(context + path)."""
    cfg = PAIRS[name][0]
    params = random_pair_params(cfg, 3)
    rng = np.random.default_rng(0)
    full = rng.integers(1, cfg.vocab_size, 14).tolist()
    depth = 4
    cache = init_cache(cfg, 1, len(full) + depth)
    _, _, cache = prefill(params, cfg, jnp.asarray([full]), jnp.asarray([len(full)]), cache)
    for base, path in [(5, (2,)), (9, (1, 7, 3)), (14, (4, 4, 4, 4))]:
        got = C.path_law(params, cfg, cache, base, path, depth, Sampling(temperature=0.7))
        seq = full[:base] + list(path)
        fresh = init_cache(cfg, 1, len(seq))
        _, last, _ = prefill(params, cfg, jnp.asarray([seq]), jnp.asarray([len(seq)]), fresh)
        z = np.asarray(last[0], np.float64) / 0.7
        want = z - z.max() - np.log(np.exp(z - z.max()).sum())
        # the same float32 products summed in other orders (cache against fresh attention): each of the model's
        # reductions (<= hidden_size terms) errs by <= hidden_size * u relative, u = 2^-24, on logits of size
        # max|z|; 8x for the layers and the log-softmax. (Seen: <= 1.5e-6 at max|z| 6; the bound: ~9e-5.)
        tol = 8 * cfg.hidden_size * 2.0**-24 * max(1.0, np.abs(z).max())
        np.testing.assert_allclose(got, want, atol=tol)


def test_the_greedy_ceiling_is_a_full_chain_and_sampled_rounds_cover_the_continuation():
    cfg = PAIRS["qwen64"][0]
    params = random_pair_params(cfg, 1)
    prompt = [3, 9, 27, 17, 51]
    greedy = C.tree_ceiling(params, cfg, prompt, (1, 3), max_new_tokens=12, temperature=0.0, depth=3,
                            key=jax.random.key(0))
    for b, (taus, expected) in greedy.items():
        assert sum(taus) == 12 and taus[:-1] == [b + 1] * (len(taus) - 1)  # every round a full chain of b
        np.testing.assert_allclose(expected, [b + 1.0] * len(taus))
    sampled = C.tree_ceiling(params, cfg, prompt, (1, 3, 7), max_new_tokens=16, temperature=1.0, depth=3,
                             key=jax.random.key(0))
    for b, (taus, expected) in sampled.items():
        assert sum(taus) == 16 and all(1 <= t <= min(b, 3) + 1 for t in taus)
        assert all(1 <= e <= b + 1 for e in expected)


def test_bad_plans_are_named():
    for kw, match in [({"datasets": ("nope",)}, "datasets must be some of"), ({"budgets": (0,)}, "budgets"),
                      ({"temperature": -1.0}, "temperature"), ({"prompts": 0}, "prompts must be >= 1"),
                      ({"skip": -1}, "skip")]:
        with pytest.raises(ValueError, match=match):
            C.CeilingPlan(**kw).check()
