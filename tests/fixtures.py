"""Helpers and constants that several test modules share (not a test module).

* the speculative loop's greedy checks: the two tiny target/draft `PAIRS`, their prompt width
  and generation length, `random_pair_params`, `prompt_batches` (Hypothesis), `assert_lossless`
  (every row identical to AR or parting at a near-tie), `assert_caches_follow_output`;
* the exact sampling law: a tiny 4-token `TARGET` (and its `DRAFT`) whose law over the next
  `NEW` tokens after `PROMPT` is enumerated by `exact_law`, and `g_test`, which compares a
  sample of `SAMPLES` generations with it (accepted at p > `ACCEPT_P`).

The drafters' shared helpers (the targets they read, DFlash configs, the trained zoo pair) are in
tests/drafter_fixtures.py, the held-out zoo prompts in tests/zoo_prompts.py, the package
registry probe in tests/registry_probe.py.
"""

import itertools

import numpy as np
from hypothesis import strategies as st
from scipy import stats

from specjax.equality import compare_with_ar
from specjax.models import GPTNeoXConfig, LlamaConfig, init_cache, pad_prompts, prefill
from specjax.sampling import Sampling
from specjax.testing import random_params

# ============================================================================ the loop's greedy checks

PROMPT_WIDTH, MAX_NEW = 8, 20

# Two target/draft pairs with different vocabularies and architectures (same vocab within a pair).
PAIRS = {
    "neox32": (GPTNeoXConfig(vocab_size=32, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64, rotary_dim=4),
               GPTNeoXConfig(vocab_size=32, hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32, rotary_dim=8)),
    "qwen64": (LlamaConfig(vocab_size=64, hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=8,
                           intermediate_size=64, qk_norm=True, flavor="qwen3"),
               LlamaConfig(vocab_size=64, hidden_size=16, num_layers=1, num_heads=2, num_kv_heads=1, head_dim=8,
                           intermediate_size=32, tie_word_embeddings=True)),
}


# Perturbed random params of a `PAIRS` model: cfg, seed -> params (drawn on the host, N(0, 0.3) noise).
random_pair_params = random_params


def assert_lossless(params, cfg, prompts, ar, spec, pad_id=0):
    """Every row identical to AR, or parting from it at a near-tie (`specjax.equality`)."""
    for b, prompt in enumerate(prompts):
        n_ar, n_spec = int(ar.num_tokens[b]), int(spec.num_tokens[b])
        agreement = compare_with_ar(params, cfg, prompt, ar.tokens[b, :n_ar], spec.tokens[b, :n_spec])
        if agreement.kind == "near-tie":
            print(f"row {b}: {agreement}")
            continue  # after a legitimate near-tie the two continuations may differ (and end elsewhere)
        assert agreement.kind == "identical", f"row {b}: speculative output vs AR: {agreement}"
        assert np.all(np.asarray(spec.tokens[b, n_spec:]) == pad_id)


def assert_caches_follow_output(params, cfg, draft_params, draft_cfg, prompts, spec, max_lag: int = 1):
    """Target cache = prefill(prompt + output[:-1]); draft cache = draft prefill of its committed part.
    `max_lag`: accepted tokens the draft may not have forwarded yet (pending; more than one
    when retrieved paths are grafted)."""
    width = PROMPT_WIDTH + MAX_NEW
    target_len = np.asarray(spec.cache.lengths)
    draft_len = np.asarray(spec.draft_state.cache.lengths)
    seqs = []
    for b, prompt in enumerate(prompts):
        seq = prompt + np.asarray(spec.tokens[b, : int(spec.num_tokens[b])]).tolist()
        assert target_len[b] == len(seq) - 1, "the target committed more or less than prompt + output[:-1]"
        # the draft has processed the committed tokens except possibly the last accepted ones (pending)
        assert target_len[b] - max_lag <= draft_len[b] <= target_len[b] + 1
        seqs.append(seq)
    for cache, lens, p, c in ((spec.cache, target_len, params, cfg), (spec.draft_state.cache, draft_len, draft_params, draft_cfg)):
        tokens, lengths = pad_prompts([s[: int(m)] for s, m in zip(seqs, lens)], width)
        _, _, ref = prefill(p, c, tokens, lengths, init_cache(c, len(seqs), width))
        for b, m in enumerate(lens):
            # fp32: a K entry of ~10 may differ in its last bits between a tree forward and a prefill
            np.testing.assert_allclose(np.asarray(cache.k[:, b, :, :m]), np.asarray(ref.k[:, b, :, :m]), atol=1e-5, rtol=2e-6)
            np.testing.assert_allclose(np.asarray(cache.v[:, b, :, :m]), np.asarray(ref.v[:, b, :, :m]), atol=1e-5, rtol=2e-6)
        assert np.isfinite(np.asarray(cache.k)).all() and np.isfinite(np.asarray(cache.v)).all()


@st.composite
def prompt_batches(draw, batch: int, vocab: int):
    return [draw(st.lists(st.integers(0, vocab - 1), min_size=1, max_size=PROMPT_WIDTH)) for _ in range(batch)]


# ============================================================================ the exact sampling law

VOCAB, NEW, SAMPLES = 4, 5, 20_000
PROMPT = [1, 3, 2]
ACCEPT_P = 1e-3
TARGET = GPTNeoXConfig(vocab_size=VOCAB, hidden_size=16, num_layers=2, num_heads=2, intermediate_size=32, rotary_dim=4)
DRAFT = GPTNeoXConfig(vocab_size=VOCAB, hidden_size=8, num_layers=1, num_heads=2, intermediate_size=16, rotary_dim=4)
TARGET_PARAMS = random_params(TARGET, 0, 0.6)
DRAFT_PARAMS = random_params(DRAFT, 2, 0.6)


def exact_law(sampling: Sampling) -> np.ndarray:
    """P(x_1..x_NEW | prompt) under the processed target, float64[V] * NEW."""
    prefixes = list(itertools.product(range(VOCAB), repeat=NEW - 1))
    tokens, lengths = pad_prompts([PROMPT + list(x) for x in prefixes])
    logits, _, _ = prefill(TARGET_PARAMS, TARGET, tokens, lengths, init_cache(TARGET, len(prefixes), tokens.shape[1]))
    logp = np.asarray(sampling.log_probs(logits), np.float64)  # [V^(NEW-1), P + NEW - 1, V]
    p = len(PROMPT)
    law = np.zeros((VOCAB,) * NEW)
    for row, x in enumerate(prefixes):
        law[x] = np.exp(sum(logp[row, p - 1 + i, t] for i, t in enumerate(x)) + logp[row, p + NEW - 2])
    return law / law.sum()


def g_test(counts: np.ndarray, law: np.ndarray) -> tuple[float, int]:
    """G-test p-value, pooling cells with expected count < 5 into one."""
    expected = law.ravel() * counts.sum()
    assert counts[expected == 0].sum() == 0, "sampled a sequence the target gives probability 0"
    small = expected < 5
    obs = np.append(counts[~small], counts[small].sum())
    exp = np.append(expected[~small], expected[small].sum())
    keep = exp > 0
    return float(stats.power_divergence(obs[keep], exp[keep], lambda_="log-likelihood").pvalue), int(keep.sum() - 1)
