"""The speculative loop: greedy losslessness, draft-cache bookkeeping, cache commit,
one compile and no host transfers, bad input. (Sampling losslessness through the loop:
tests/test_decode_sampling.py.)
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specjax.decode import _generate, generate, generate_ar
from specjax.equality import compare_with_ar
from specjax.drafters.chain import ChainDrafter
from specjax.drafters.fixed_tree import FixedTreeDrafter
from specjax.models import pad_prompts
from specjax.tree import Tree
from tests.fixtures import (MAX_NEW, PAIRS, PROMPT_WIDTH, assert_caches_follow_output, assert_lossless,
                            prompt_batches, random_pair_params)


def first_mismatch_margin(params, cfg, prompt, ar_tokens, spec_tokens):
    """If the outputs differ, the target's top-2 logit margin where they first differ, else None."""
    agreement = compare_with_ar(params, cfg, prompt, ar_tokens, spec_tokens)
    return agreement.margin if agreement.kind != "identical" else None


def assert_round_stats(spec, drafter):
    """Every round emits 1..D+1 tokens (accepted + bonus); the last round was needed; rows own their rounds."""
    acc, prop, rounds = (np.asarray(x) for x in (spec.stats.accepted, spec.stats.proposed, spec.stats.num_rounds))
    for b in range(acc.shape[0]):
        r = rounds[b]
        assert np.all((acc[b, :r] >= 0) & (acc[b, :r] <= drafter.max_depth)) and np.all(acc[b, r:] == -1)
        assert np.all(prop[b, :r] == drafter.budget) and np.all(prop[b, r:] == -1)
        emitted = 1 + np.cumsum(acc[b, :r] + 1)  # the first token comes from the prefill
        n = int(spec.num_tokens[b])
        assert (r == 0 and n == 1) or emitted[-1] == n  # rounds account for every output token, no more


# Static drafter settings (each compiles once); Hypothesis varies weights, prompts and seeds.
SETTINGS = [
    ("neox32", "chain", dict(num_tokens=3), 3),
    ("neox32", "fixed", dict(depth=3, branching=2, max_nodes=10), 2),
    ("qwen64", "chain", dict(num_tokens=1), 1),
    ("qwen64", "fixed", dict(depth=4, branching=3, max_nodes=40), 3),
]


def make_drafter(kind, draft_cfg, kwargs):
    return (ChainDrafter if kind == "chain" else FixedTreeDrafter)(draft_cfg, **kwargs)


@pytest.mark.parametrize("pair, kind, kwargs, batch", SETTINGS)
@settings(max_examples=8)
@given(data=st.data(), seed=st.integers(0, 2**16), self_draft=st.booleans())
def test_greedy_lossless(pair, kind, kwargs, batch, data, seed, self_draft):
    cfg, draft_cfg = PAIRS[pair]
    params = random_pair_params(cfg, seed)
    drafter = make_drafter(kind, cfg if self_draft else draft_cfg, kwargs)
    draft_params = params if self_draft else random_pair_params(draft_cfg, seed + 7)
    prompts = data.draw(prompt_batches(batch, cfg.vocab_size))
    tokens, lengths = pad_prompts(prompts, PROMPT_WIDTH)
    eos = (3,)  # static under jit: one value keeps compiles down; rows that never emit it cover the no-EOS path
    ar = generate_ar(params, cfg, tokens, lengths, MAX_NEW, eos_ids=eos)
    spec = generate(params, cfg, drafter, draft_params, tokens, lengths, MAX_NEW, eos_ids=eos)
    assert_lossless(params, cfg, prompts, ar, spec)
    assert_round_stats(spec, drafter)
    assert_caches_follow_output(params, cfg, draft_params, drafter.draft_cfg, prompts, spec)
    if self_draft:
        assert_self_draft_accepts_everything(params, cfg, prompts, spec, drafter)


def assert_self_draft_accepts_everything(params, cfg, prompts, spec, drafter):
    """A draft identical to the target must be accepted down to the tree's full depth in every
    round (except the last, cut by max_new_tokens / EOS), unless the target's own top-2
    margin at the rejected position is a float near-tie (draft and target compute the same
    logits in differently shaped blocks)."""
    acc, rounds = np.asarray(spec.stats.accepted), np.asarray(spec.stats.num_rounds)
    for b in range(acc.shape[0]):
        emitted = 1  # tokens before round r
        for r in range(rounds[b] - 1):
            if acc[b, r] < drafter.max_depth:
                j = emitted + acc[b, r]  # output index of the rejected draft token
                out = np.asarray(spec.tokens[b])
                margin = first_mismatch_margin(params, cfg, prompts[b], out[: j + 1], np.r_[out[:j], -1])
                assert margin is not None and margin < 1e-4, (
                    f"self-drafting rejected a draft token in row {b}, round {r} at target margin {margin}: "
                    "the draft cache is out of step with the target")
            emitted += acc[b, r] + 1


@dataclasses.dataclass(frozen=True)
class GarbageDrafter:
    """Adversarial drafter: random tokens on a random valid topology, no draft model."""

    vocab_size: int
    budget: int = 12

    max_depth = 12

    def validate(self, target_cfg):
        pass

    def uses_rejection(self, sampling):
        return False

    def init(self, params, tokens, prompt_lengths, max_new_tokens, context=None):
        return None

    def propose(self, state, root, active, key, sampling):
        b, n = root.shape[0], self.budget
        k_tok, k_par = jax.random.split(key)
        tokens = jax.random.randint(k_tok, (b, n), 0, self.vocab_size)
        # parent of node i uniform in {-1, ..., i-1}: a valid topological tree of depth <= n
        parents = jnp.floor(jax.random.uniform(k_par, (b, n)) * (jnp.arange(n) + 1)).astype(jnp.int32) - 1

        def depth_of(depth, i):
            p = parents[:, i]
            d = jnp.where(p < 0, 1, jnp.take_along_axis(depth, jnp.maximum(p, 0)[:, None], axis=1)[:, 0] + 1)
            return depth.at[:, i].set(d), None

        depth, _ = jax.lax.scan(depth_of, jnp.zeros((b, n), jnp.int32), jnp.arange(n))
        return Tree(tokens=tokens, parents=parents, depth=depth, valid=jnp.ones((b, n), bool)), None, state

    def observe(self, state, verified):
        return state


def test_garbage_drafter_is_still_lossless():
    cfg, _ = PAIRS["neox32"]
    params = random_pair_params(cfg, 11)
    prompts = [[1, 2, 3], [4, 5, 6, 7, 8, 9], [10]]
    tokens, lengths = pad_prompts(prompts, PROMPT_WIDTH)
    ar = generate_ar(params, cfg, tokens, lengths, MAX_NEW, eos_ids=())
    for seed in range(3):
        spec = generate(params, cfg, GarbageDrafter(cfg.vocab_size), None, tokens, lengths, MAX_NEW, eos_ids=(),
                        key=jax.random.key(seed))
        assert_lossless(params, cfg, prompts, ar, spec)


def test_rows_finishing_early_keep_exact_caches():
    """A row that stops early (EOS) keeps running while the others continue; with full-width
    prompts and deep chains its caches must neither overflow nor hold tokens past its end."""
    cfg, draft_cfg = PAIRS["qwen64"]
    params = random_pair_params(cfg, 3)
    prompts = [list(range(5, 5 + PROMPT_WIDTH)), [7, 7, 1, 30, 41, 2, 8, 9]]  # P = T for both rows
    tokens, lengths = pad_prompts(prompts, PROMPT_WIDTH)
    free = generate_ar(params, cfg, tokens, lengths, MAX_NEW, eos_ids=())
    eos = (int(free.tokens[0, 3]),)  # row 0 ends at its 4th token (row 1 wherever this token shows up)
    ar = generate_ar(params, cfg, tokens, lengths, MAX_NEW, eos_ids=eos)
    for drafter, draft_params in ((ChainDrafter(cfg, 6), params),
                                  (FixedTreeDrafter(draft_cfg, 4, 2, 12), random_pair_params(draft_cfg, 4))):
        spec = generate(params, cfg, drafter, draft_params, tokens, lengths, MAX_NEW, eos_ids=eos)
        assert_lossless(params, cfg, prompts, ar, spec)
        assert int(spec.num_tokens[0]) <= 4
        assert_caches_follow_output(params, cfg, draft_params, drafter.draft_cfg, prompts, spec)


def test_second_call_compiles_nothing_and_transfers_nothing():
    cfg, draft_cfg = PAIRS["neox32"]
    params, draft_params = random_pair_params(cfg, 5), random_pair_params(draft_cfg, 6)
    drafter = FixedTreeDrafter(draft_cfg, 2, 2, 6)
    tokens, lengths = pad_prompts([[1, 2, 3], [4, 5]], PROMPT_WIDTH)
    generate(params, cfg, drafter, draft_params, tokens, lengths, MAX_NEW).tokens.block_until_ready()
    compiled = _generate._cache_size()
    new_tokens, new_lengths = pad_prompts([[9, 9, 9, 9, 9, 1, 2], [3]], PROMPT_WIDTH)  # same shape bucket
    with jax.transfer_guard("disallow"):  # any implicit host<->device transfer raises
        out = generate(params, cfg, drafter, draft_params, new_tokens, new_lengths, MAX_NEW)
        out.tokens.block_until_ready()
    assert _generate._cache_size() == compiled


def test_eos_sets_share_one_program_and_stop_rows_at_their_first_eos():
    """The EOS set is a traced argument (`eos_table`, int32[K >= 4] padded with -1): no EOS, one
    id or four ids run one compiled program of `generate_ar` and of `generate`, and every row
    stops at its first token of the set (a numpy scan of the EOS-free output)."""
    from specjax.decode import _generate_ar, eos_table

    cfg, draft_cfg = PAIRS["neox32"]
    params, draft_params = random_pair_params(cfg, 11), random_pair_params(draft_cfg, 12)
    drafter = FixedTreeDrafter(draft_cfg, 2, 2, 6)
    tokens, lengths = pad_prompts([[1, 2, 3], [4, 5], [6]], PROMPT_WIDTH)
    free = np.asarray(generate_ar(params, cfg, tokens, lengths, MAX_NEW, eos_ids=()).tokens)
    generate(params, cfg, drafter, draft_params, tokens, lengths, MAX_NEW, eos_ids=())
    compiled = (_generate._cache_size(), _generate_ar._cache_size())
    sets = [(int(free[0, 3]),), (int(free[1, 2]), int(free[2, 5])), tuple(int(t) for t in free[:, 1]) + (31,)]
    for eos in sets:
        hit = np.isin(free, eos)
        want = np.where(hit.any(1), hit.argmax(1) + 1, MAX_NEW)
        for out in (generate_ar(params, cfg, tokens, lengths, MAX_NEW, eos_ids=eos),
                    generate(params, cfg, drafter, draft_params, tokens, lengths, MAX_NEW, eos_ids=eos)):
            np.testing.assert_array_equal(np.asarray(out.num_tokens), want)
            for b, n in enumerate(want):
                np.testing.assert_array_equal(np.asarray(out.tokens[b, :n]), free[b, :n])
    assert (_generate._cache_size(), _generate_ar._cache_size()) == compiled
    np.testing.assert_array_equal(np.asarray(eos_table((5, 0, 9, 2, 7))), [5, 0, 9, 2, 7, -1, -1, -1])
    for bad in ((-1,), (2.0,), (True,)):
        with pytest.raises(ValueError, match="eos_ids must be non-negative token ids"):
            generate_ar(params, cfg, tokens, lengths, MAX_NEW, eos_ids=bad)


def test_a_shorter_call_with_the_same_reserve_runs_the_same_program():
    """`max_new_tokens` < `reserve_new_tokens` stops the full call's compiled program early
    (the benchmark's time-to-first-token call): no new compile, and the output is the full
    output's first n tokens, with statistics, caches and lengths of an n-token generation."""
    from specjax.decode import _generate_ar

    cfg, draft_cfg = PAIRS["qwen64"]
    params, draft_params = random_pair_params(cfg, 7), random_pair_params(draft_cfg, 8)
    drafter = FixedTreeDrafter(draft_cfg, 3, 2, 8)
    prompts = [[1, 2, 3], [4, 5, 6, 7, 8]]
    tokens, lengths = pad_prompts(prompts, PROMPT_WIDTH)
    full_ar = generate_ar(params, cfg, tokens, lengths, MAX_NEW, eos_ids=(), reserve_new_tokens=MAX_NEW)
    full = generate(params, cfg, drafter, draft_params, tokens, lengths, MAX_NEW, eos_ids=(), reserve_new_tokens=MAX_NEW)
    compiled = (_generate._cache_size(), _generate_ar._cache_size())
    for n in (1, 2, 7):
        ar = generate_ar(params, cfg, tokens, lengths, n, eos_ids=(), reserve_new_tokens=MAX_NEW)
        spec = generate(params, cfg, drafter, draft_params, tokens, lengths, n, eos_ids=(), reserve_new_tokens=MAX_NEW)
        for out, ref in ((ar, full_ar), (spec, full)):
            assert out.tokens.shape == (2, n)
            np.testing.assert_array_equal(np.asarray(out.tokens), np.asarray(ref.tokens[:, :n]))
            np.testing.assert_array_equal(np.asarray(out.num_tokens), [n, n])
            np.testing.assert_array_equal(np.asarray(out.cache.lengths), np.asarray(lengths) + n - 1)
        rounds = np.asarray(spec.stats.num_rounds)
        assert spec.stats.accepted.shape == (2, n) and (rounds >= 1 if n > 1 else rounds == 0).all()
        np.testing.assert_array_equal(np.asarray(spec.stats.mean_accepted_length() * rounds) + 1, [n, n])
    assert (_generate._cache_size(), _generate_ar._cache_size()) == compiled
    # A stopped row's unwritten columns hold pad_id: with pad_id an EOS id they must not count as one.
    pad = int(full_ar.tokens[0, 0]) + 1
    ar = generate_ar(params, cfg, tokens, lengths, 2, eos_ids=(pad,), pad_id=pad, reserve_new_tokens=MAX_NEW)
    ends = [int(np.argmax(full_ar.tokens[b, :2] == pad)) + 1 if (full_ar.tokens[b, :2] == pad).any() else 2
            for b in range(2)]
    np.testing.assert_array_equal(np.asarray(ar.num_tokens), ends)


def test_bad_input_raises_before_compiling():
    cfg, draft_cfg = PAIRS["neox32"]
    other_vocab = dataclasses.replace(draft_cfg, vocab_size=33)
    params = random_pair_params(cfg, 0)
    tokens, lengths = pad_prompts([[1, 2, 3]], PROMPT_WIDTH)
    before = _generate._cache_size()
    with pytest.raises(ValueError, match="vocabularies differ: draft vocab_size=33, target vocab_size=32"):
        generate(params, cfg, ChainDrafter(other_vocab, 2), None, tokens, lengths, MAX_NEW)
    with pytest.raises(ValueError, match="node budget max_nodes must be >= 1"):
        FixedTreeDrafter(draft_cfg, 2, 2, 0)
    with pytest.raises(ValueError, match="depth must be >= 1"):
        FixedTreeDrafter(draft_cfg, 0, 2)
    with pytest.raises(ValueError, match=r"num_tokens \(K\) >= 1"):
        ChainDrafter(draft_cfg, 0)
    with pytest.raises(ValueError, match="does not fit in the KV cache"):
        generate_ar(params, cfg, tokens, lengths, MAX_NEW, cache_slots=PROMPT_WIDTH + 2)
    with pytest.raises(ValueError, match="max_new_tokens must be >= 1"):
        generate(params, cfg, ChainDrafter(draft_cfg, 2), None, tokens, lengths, 0)
    with pytest.raises(ValueError, match=r"prompt token ids \[32\] are outside the vocabulary \[0, 32\)"):
        generate(params, cfg, ChainDrafter(draft_cfg, 2), None, tokens.at[0, 1].set(32), lengths, MAX_NEW)
    for bad in ([0], [PROMPT_WIDTH + 1]):
        with pytest.raises(ValueError, match=r"prompt_lengths must lie in \[1, 8\]"):
            generate(params, cfg, ChainDrafter(draft_cfg, 2), None, tokens, jnp.asarray(bad, jnp.int32), MAX_NEW)
        with pytest.raises(ValueError, match=r"prompt_lengths must lie in \[1, 8\]"):
            generate_ar(params, cfg, tokens, jnp.asarray(bad, jnp.int32), MAX_NEW)
    assert _generate._cache_size() == before
