"""Sampling losslessness of the whole speculative loop (statistical).

A tiny target transformer with a 4-token vocabulary; the exact law of its next 5
tokens after a prompt is enumerated (4^5 sequences, one batched forward). Five tokens
need several rounds after the prefill's first token, so accepted paths, their commits
and the bonus after a fully accepted chain all shape the sampled law. Then 20,000
rows of the same prompt go through `generate` (each row draws its own randomness, so
rows are independent samples) and a G-test compares the empirical law with the exact
one — for the sampling walk over a fixed tree and for chain rejection sampling. A
deliberately broken drafter (it samples from the draft but reports uniform draft
probabilities to the rejection step) must be rejected by the same test. (The target, its
enumerated law and the G-test are in tests/fixtures.py: the drafters' sampling tests share them.)
"""

import dataclasses
import zlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax.decode import generate
from specjax.drafters.chain import ChainDrafter
from specjax.drafters.fixed_tree import FixedTreeDrafter
from specjax.models import pad_prompts
from specjax.sampling import Sampling
from tests.fixtures import (ACCEPT_P, DRAFT, DRAFT_PARAMS, NEW, PROMPT, SAMPLES, TARGET, TARGET_PARAMS, VOCAB,
                            exact_law, g_test)

REJECT_P = 1e-6


def empirical_counts(drafter, sampling: Sampling, seed: int) -> np.ndarray:
    tokens, lengths = pad_prompts([PROMPT] * SAMPLES)
    out = generate(TARGET_PARAMS, TARGET, drafter, DRAFT_PARAMS, tokens, lengths, NEW, sampling=sampling,
                   key=jax.random.key(seed), eos_ids=())
    assert np.all(np.asarray(out.num_tokens) == NEW)
    flat = np.ravel_multi_index(np.asarray(out.tokens).T, (VOCAB,) * NEW)
    return np.bincount(flat, minlength=VOCAB**NEW), out.stats


@dataclasses.dataclass(frozen=True)
class LyingChainDrafter(ChainDrafter):
    """Broken on purpose: samples from the draft but tells the rejection step q = uniform."""

    def choose(self, parent_logits, k, level, key, sampling):
        token, probs = super().choose(parent_logits, k, level, key, sampling)
        return token, None if probs is None else jnp.full_like(probs, 1.0 / probs.shape[-1])


CASES = [
    ("fixed-tree walk", FixedTreeDrafter(DRAFT, depth=2, branching=2), Sampling(1.0), "accept"),
    ("fixed-tree walk, T=0.7 top-p 0.9", FixedTreeDrafter(DRAFT, depth=2, branching=3), Sampling(0.7, top_p=0.9), "accept"),
    ("chain rejection", ChainDrafter(DRAFT, 2), Sampling(1.0), "accept"),
    ("broken chain (wrong q)", LyingChainDrafter(DRAFT, 2), Sampling(1.0), "reject"),
]


@pytest.mark.parametrize("name, drafter, sampling, expect", CASES, ids=[c[0] for c in CASES])
def test_speculative_sampling_matches_exact_target_law(name, drafter, sampling, expect):
    law = exact_law(sampling)
    counts, round_stats = empirical_counts(drafter, sampling, seed=zlib.crc32(name.encode()))  # stable seed
    p_value, dof = g_test(counts, law)
    mean_acc = float(np.mean(round_stats.mean_accepted_length()))
    print(f"{name}: {SAMPLES} samples, G-test dof {dof}, p = {p_value:.3g}, mean tokens/round {mean_acc:.2f}")
    assert mean_acc > 1.05, "the draft was never accepted: the test would not exercise acceptance"
    if expect == "accept":
        assert p_value > ACCEPT_P, f"{name}: speculative samples do not follow the target law (p={p_value:.2e})"
    else:
        assert p_value < REJECT_P, f"{name}: the G-test failed to detect a broken sampler (p={p_value:.2e})"
