"""DDTree decoding end to end: the drafter pass -> best-first tree -> one verify -> walk -> commit.

References: plain greedy decoding (losslessness, random and trained weights, ragged
batches, budgets 1..256), the enumerated target law (sampling G-test through the loop),
Proposition 1 by enumeration (the expected accepted length of one sampling-walk round is
sum_{u in T} p(u) under the target and sum_{u in T} q(u) under the drafter's own law,
against empirical means over many independent rounds), nested trees / monotone acceptance
in the budget (P6), and the verify width following a confident drafter's tree.
The selection itself is tested against brute force in tests/test_ddtree_select.py.
"""

import dataclasses
import functools
import zlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specjax.decode import _generate, cache_sizes, generate, generate_ar, initial_state, speculative_round
from specjax.drafters import dflash as D
from specjax.drafters.ddtree import DDTreeDrafter, select_tree
from specjax.drafters.chain import ChainDrafter
from specjax.drafters.protocol import Drafter
from specjax.equality import compare_with_ar
from specjax.models import init_cache, pad_prompts, prefill
from specjax.sampling import Sampling
from specjax.tree import token_paths
from specjax.verify import walk
from tests.drafter_fixtures import (DFLASH_SMALL, DFLASH_SMALL_PARAMS, TARGETS, check_lossless_on_random_weights,
                                    draw_zoo_prompts, drafter_cfg, random_dflash_params, slot_paths, zoo_pair)
from tests.fixtures import (MAX_NEW, PROMPT, PROMPT_WIDTH, TARGET, TARGET_PARAMS, VOCAB, assert_lossless, exact_law,
                            g_test)
from tests.zoo_prompts import PROMPTS


def ddtree(cfg, target, budget, block=None, **kw):
    return DDTreeDrafter(D.DFlashDrafter(cfg, target, block_size=block), budget, **kw)


# ============================================================================ bad inputs


def test_bad_inputs_raise_named_errors():
    target = TARGETS["neox"]
    cfg = drafter_cfg(target)
    base = D.DFlashDrafter(cfg, target)
    for budget in (0, -3):
        with pytest.raises(ValueError, match="budget .* must be an int >= 1"):
            DDTreeDrafter(base, budget)
    with pytest.raises(ValueError, match="must be an int >= 1"):
        DDTreeDrafter(base, 4.0)
    with pytest.raises(ValueError, match="block size must be >= 2"):  # a block of length 0 or 1 drafts nothing
        ddtree(cfg, target, 8, block=0)
    with pytest.raises(ValueError, match="temperature must be >= 0"):
        Sampling(temperature=-0.5)
    with pytest.raises(TypeError, match="must have block_logits.*ChainDrafter has none"):
        DDTreeDrafter(ChainDrafter(TARGETS["neox"], 4), 8)
    with pytest.raises(ValueError, match=r"prune_mass must lie in \[0, 1\)"):
        DDTreeDrafter(base, 8, prune_mass=1.0)
    with pytest.raises(ValueError, match="verify_factor must be > 1"):
        DDTreeDrafter(base, 8, verify_factor=1.0)
    with pytest.raises(ValueError, match="method must be one of"):
        DDTreeDrafter(base, 8, method="heap")
    for t in (0.0, -1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="tree_temperature must be a finite number > 0"):
            DDTreeDrafter(base, 8, tree_temperature=t)
    # the target is checked by generate(), before compiling
    other = dataclasses.replace(target, vocab_size=41)
    tokens, lengths = pad_prompts([[1, 2]], 4)
    before = _generate._cache_size()
    with pytest.raises(ValueError, match="vocab size: drafter 40, target 41"):
        generate(random_dflash_params(other, 0), other, DDTreeDrafter(base, 8), None, tokens, lengths, 4)
    assert _generate._cache_size() == before
    assert isinstance(DDTreeDrafter(base, 8), Drafter)


def test_tree_is_select_tree_of_the_untempered_marginals_pruned_to_a_prefix():
    """`DDTreeDrafter.tree` = select_tree(log_softmax(logits)) (no temperature), minus the
    nodes with q(u) < prune_mass / N, which form a suffix of the slots; surrogate = sum q(u)."""
    target = TARGETS["neox"]
    drafter = DDTreeDrafter(D.DFlashDrafter(drafter_cfg(target), target), 40, prune_mass=0.5)
    logits = 8.0 * jax.random.normal(jax.random.key(0), (3, 4, target.vocab_size))
    active = jnp.array([True, True, False])
    tree, mass = drafter.tree(logits, active)
    full = select_tree(jax.nn.log_softmax(logits, -1), 40)
    log_q = np.asarray(jax.nn.log_softmax(logits, -1), np.float64)
    for b in range(2):
        n = int(tree.valid[b].sum())
        assert 1 <= n < 40 and np.all(np.asarray(tree.valid[b, :n]))  # a prefix of the slots
        np.testing.assert_array_equal(np.asarray(tree.tokens[b, :n]), np.asarray(full.tokens[b, :n]))
        np.testing.assert_array_equal(np.asarray(tree.parents[b, :n]), np.asarray(full.parents[b, :n]))
        q = [np.exp(sum(log_q[b, d, t] for d, t in enumerate(path))) for path in slot_paths(tree, b)]
        assert min(q) >= 0.5 / 40 * (1 - 1e-5) or n == 1
        full_q = [np.exp(sum(log_q[b, d, t] for d, t in enumerate(p))) for p in slot_paths(full, b)]
        assert all(x < 0.5 / 40 * (1 + 1e-5) for x in full_q[n:])  # what was dropped was below the threshold
        np.testing.assert_allclose(float(mass[b]), sum(q), rtol=1e-5)
    assert not np.asarray(tree.valid[2]).any() and float(mass[2]) == 0.0
    unpruned, _ = DDTreeDrafter(drafter.block_drafter, 40, prune_mass=0.0).tree(logits, active)
    assert unpruned.valid[:2].all() and drafter.verify_widths == (16, 32, 40)


def test_tree_temperature_selects_from_the_scaled_marginals():
    """tree_temperature t: the tree is select_tree(log_softmax(logits / t)), not the untempered one."""
    target = TARGETS["neox"]
    block = D.DFlashDrafter(drafter_cfg(target), target)
    logits = 3.0 * jax.random.normal(jax.random.key(1), (2, 4, target.vocab_size))
    active = jnp.array([True, True])
    plain, _ = DDTreeDrafter(block, 12, prune_mass=0.0).tree(logits, active)
    for t in (0.5, 2.0):
        tree, mass = DDTreeDrafter(block, 12, prune_mass=0.0, tree_temperature=t).tree(logits, active)
        log_q = jax.nn.log_softmax(logits / t, -1)
        want = select_tree(log_q, 12)
        np.testing.assert_array_equal(np.asarray(tree.tokens), np.asarray(want.tokens))
        np.testing.assert_array_equal(np.asarray(tree.parents), np.asarray(want.parents))
        lq = np.asarray(log_q, np.float64)
        for b in range(2):
            q = [np.exp(sum(lq[b, d, v] for d, v in enumerate(path))) for path in slot_paths(tree, b)]
            np.testing.assert_allclose(float(mass[b]), sum(q), rtol=1e-5)
        # sharper marginals (t < 1) make deeper trees, flatter ones (t > 1) wider ones
        deeper = np.asarray(tree.depth).mean() > np.asarray(plain.depth).mean()
        assert deeper == (t < 1)


# ============================================================================ DD7: greedy losslessness


SETTINGS = [("neox", 5, 2, 1), ("qwen", 3, 3, 7), ("neox", 9, 2, 64), ("qwen", 5, 1, 256)]  # target, block, batch, N


@pytest.mark.parametrize("name, block, batch, budget", SETTINGS)
@settings(max_examples=5, deadline=None)
@given(data=st.data(), seed=st.integers(0, 2**16), eos=st.booleans(), prune=st.sampled_from([0.0, 0.01, 0.5]))
def test_ddtree_greedy_lossless_random_weights(name, block, batch, budget, data, seed, eos, prune):
    spec = check_lossless_on_random_weights(name, block, batch, data, seed, eos,
                                            lambda cfg, target: ddtree(cfg, target, budget, prune_mass=prune))
    acc, prop = np.asarray(spec.stats.accepted), np.asarray(spec.stats.proposed)
    assert np.all(acc <= block - 1) and np.all(prop <= budget)


def test_budget_below_depth_keeps_the_committed_cache():
    """Regression (found by the test above): with N < L the loop commits D + 1 = L + 1 path
    slots; a target cache of T + M + N slots made that write run past the end, where
    dynamic_update_slice clamps it back onto committed entries. The last token went wrong."""
    target = TARGETS["neox"]
    cfg = drafter_cfg(target, block_size=5)
    params, dparams = random_dflash_params(target, 0), random_dflash_params(cfg, 3)
    prompts = [[0], [0] * 8]
    tokens, lengths = pad_prompts(prompts, PROMPT_WIDTH)
    ar = generate_ar(params, target, tokens, lengths, MAX_NEW, eos_ids=())
    spec = generate(params, target, ddtree(cfg, target, 1, prune_mass=0.0), dparams, tokens, lengths, MAX_NEW,
                    eos_ids=())
    np.testing.assert_array_equal(np.asarray(spec.tokens), np.asarray(ar.tokens))
    assert cache_sizes(ddtree(cfg, target, 1), PROMPT_WIDTH, MAX_NEW)[0] == PROMPT_WIDTH + MAX_NEW + 4


@settings(max_examples=6, deadline=None)
@given(data=st.data(), eos=st.booleans(), budget=st.sampled_from([1, 3, 32, 256]))
def test_ddtree_greedy_lossless_trained_weights(data, eos, budget):
    """The trained zoo drafter (deep accepted paths, wide trees), ragged batches of held-out
    text prefixes and random tokens, EOS and max-token stops."""
    tcfg, tparams, tok, dcfg, dparams = zoo_pair()
    rows, tokens, lengths, eos_ids = draw_zoo_prompts(data, eos)
    ar = generate_ar(tparams, tcfg, tokens, lengths, 40, eos_ids=eos_ids)
    spec = generate(tparams, tcfg, ddtree(dcfg, tcfg, budget), dparams, tokens, lengths, 40, eos_ids=eos_ids)
    assert_lossless(tparams, tcfg, rows, ar, spec)


def test_transfer_guard_and_one_compile():
    target = TARGETS["neox"]
    cfg = drafter_cfg(target)
    params, dparams = random_dflash_params(target, 8), random_dflash_params(cfg, 9)
    drafter = ddtree(cfg, target, 24)
    tokens, lengths = pad_prompts([[1, 2, 3], [4, 5]], PROMPT_WIDTH)
    generate(params, target, drafter, dparams, tokens, lengths, MAX_NEW).tokens.block_until_ready()
    compiled = _generate._cache_size()
    new_tokens, new_lengths = pad_prompts([[9, 9, 9, 9, 9, 1, 2], [3]], PROMPT_WIDTH)
    with jax.transfer_guard("disallow"):  # selection, pruning, surrogate: all on device
        generate(params, target, drafter, dparams, new_tokens, new_lengths, MAX_NEW).tokens.block_until_ready()
    assert _generate._cache_size() == compiled


# ============================================================================ sampling


@pytest.mark.slow
def test_ddtree_sampling_matches_exact_target_law():
    """20k generations of 5 tokens at T = 1 through the whole loop (trees of 6 nodes over a
    4-token vocabulary, block 3) against the enumerated target law."""
    samples = 20_000
    sampling = Sampling(1.0)
    tokens, lengths = pad_prompts([PROMPT] * samples)
    out = generate(TARGET_PARAMS, TARGET, ddtree(DFLASH_SMALL, TARGET, 6), DFLASH_SMALL_PARAMS, tokens, lengths, 5,
                   sampling=sampling, key=jax.random.key(zlib.crc32(b"ddtree")), eos_ids=())
    flat = np.ravel_multi_index(np.asarray(out.tokens).T, (VOCAB,) * 5)
    p_value, dof = g_test(np.bincount(flat, minlength=VOCAB**5), exact_law(sampling))
    tau = float(np.mean(out.stats.mean_accepted_length()))
    print(f"DDTree walk: G-test dof {dof}, p = {p_value:.3g}, tau {tau:.2f}")
    assert tau > 1.2, "the tree was rarely accepted: the test would not exercise the walk"
    assert p_value > 1e-3, f"DDTree samples do not follow the target law (p={p_value:.2e})"


@functools.lru_cache(maxsize=4)
def one_round(budget: int, temperature: float, samples: int):
    """S identical rows after prefill (greedy root), then one round at `temperature`:
    (tree of row 0 as token paths, recorded surrogate of row 0, accepted per row int[S])."""
    drafter = ddtree(DFLASH_SMALL, TARGET, budget, prune_mass=0.0)
    tokens, lengths = pad_prompts([PROMPT] * samples)
    max_new = 8
    slots, reserve = cache_sizes(drafter, tokens.shape[1], max_new)
    start = jax.jit(functools.partial(initial_state, max_new_tokens=max_new, eos_ids=(), sampling=Sampling(),
                                      pad_id=0, num_slots=slots, reserve=reserve), static_argnums=(1, 2))
    state = start(TARGET_PARAMS, TARGET, drafter, DFLASH_SMALL_PARAMS, tokens, lengths, None)
    state = state.replace(key=jax.random.key(zlib.crc32(b"prop1") + budget))
    step = jax.jit(functools.partial(speculative_round, max_new_tokens=max_new, eos_ids=(),
                                     sampling=Sampling(temperature)), static_argnums=(1, 2))
    after = step(TARGET_PARAMS, TARGET, drafter, state)
    tree, _, _ = drafter.propose(state.draft_state, state.root, ~state.done, None, Sampling(temperature))
    root = int(state.root[0])
    return (root, tree, float(after.draft_state.surrogate[0, 0]), np.asarray(after.stats.accepted[:, 0]),
            drafter, state)


@pytest.mark.parametrize("budget", [3, 9])
def test_proposition1_expected_accepted_length_end_to_end(budget):
    """Prop. 1 through the loop: one sampling-walk round from a fixed state accepts on average
    sum_{u in T} p(u) drafted tokens, p(u) = prod_i p(u_i | prompt, root, u_<i) the target's
    path probability (enumerated by plain prefill forwards), over 20k independent rounds.
    With the drafter's own factorised law in place of the target (Y_d ~ q_d independently,
    walked with the same `walk`), the mean is sum_{u in T} q(u) = the surrogate the drafter
    recorded for that round."""
    samples = 20_000
    root, tree, surrogate, accepted, drafter, state = one_round(budget, 1.0, samples)
    paths = token_paths(jax.tree.map(lambda x: x[:1], tree))[0]
    assert len(paths) == budget and max(map(len, paths)) >= 2  # a real tree: branching and depth
    # target side: enumerate p(u) for every node
    seqs = [PROMPT + [root] + list(p) for p in paths]
    toks, lens = pad_prompts(seqs)
    logits, _, _ = prefill(TARGET_PARAMS, TARGET, toks, lens, init_cache(TARGET, len(seqs), toks.shape[1]))
    logp = np.asarray(jax.nn.log_softmax(logits.astype(jnp.float32), -1), np.float64)
    p0 = len(PROMPT)  # row p0 + i - 1 of the logits predicts path token i (0-based: the root sits at p0)
    p_paths = [np.exp(sum(logp[r, p0 + i, t] for i, t in enumerate(p))) for r, p in enumerate(paths)]
    expected_p = sum(p_paths)
    se = accepted.std() / np.sqrt(samples)
    print(f"budget {budget}: sum p(u) = {expected_p:.4f}, empirical {accepted.mean():.4f} +- {se:.4f}")
    assert abs(accepted.mean() - expected_p) < 4 * se + 1e-9
    # drafter side: the marginals the tree was built from, Y ~ Q, the same walk
    logits_q, _ = drafter.block_drafter.block_logits(state.draft_state.block,
                                                     state.root, ~state.done)
    log_q = np.asarray(jax.nn.log_softmax(logits_q[0].astype(jnp.float32), -1), np.float64)  # [L, V]
    expected_q = sum(np.exp(sum(log_q[i, t] for i, t in enumerate(p))) for p in paths)
    np.testing.assert_allclose(surrogate, expected_q, rtol=1e-5)
    ys = jax.random.categorical(jax.random.key(5), jnp.asarray(log_q), axis=-1, shape=(samples, log_q.shape[0]))
    row_tree = jax.tree.map(lambda x: jnp.broadcast_to(x[:1], (samples,) + x.shape[1:]), tree)
    depth = jnp.concatenate([jnp.zeros((samples, 1), jnp.int32), row_tree.depth], axis=1)  # slot 0 = the root
    targets = jnp.take_along_axis(ys, jnp.minimum(depth, log_q.shape[0] - 1), axis=1)  # posterior at slot = Y_{d+1}
    acc_q = np.asarray(walk(row_tree, targets, drafter.max_depth).num_accepted)
    se_q = acc_q.std() / np.sqrt(samples)
    print(f"budget {budget}: sum q(u) = {expected_q:.4f}, empirical {acc_q.mean():.4f} +- {se_q:.4f}")
    assert abs(acc_q.mean() - expected_q) < 4 * se_q + 1e-9


# ============================================================================ P6: monotone in the budget


BUDGETS = (1, 4, 16, 64, 256)


def test_trees_nested_and_acceptance_monotone_in_budget_per_round():
    """From one fixed state (the zoo pair after prefill), T_N is a subset of T_N' for N < N'
    (the optimal trees are nested; pruning keeps them nested) and the greedy round accepts
    at least as many tokens."""
    from specjax import zoo

    tcfg, tparams, tok, dcfg, dparams = zoo_pair()
    tokens, lengths = pad_prompts([zoo.encode(tok, p) for _, p in PROMPTS])
    static = dict(max_new_tokens=32, eos_ids=(), sampling=Sampling())
    # One start state for every budget: DDTree's draft state does not depend on N, and the
    # largest budget's cache holds every smaller budget's round (one prefill program, not five).
    largest = ddtree(dcfg, tcfg, BUDGETS[-1])
    slots, reserve = cache_sizes(largest, tokens.shape[1], 32)
    start = jax.jit(functools.partial(initial_state, pad_id=0, num_slots=slots, reserve=reserve, **static),
                    static_argnums=(1, 2))
    state = start(tparams, tcfg, largest, dparams, tokens, lengths, None)
    step = jax.jit(functools.partial(speculative_round, **static), static_argnums=(1, 2))
    # The marginals of this round, once: each budget's tree is `tree` of them (what `propose` does).
    active = ~state.done
    logits, _ = jax.jit(largest.block_drafter.block_logits)(state.draft_state.block, state.root, active)
    prompts = [zoo.encode(tok, p) for _, p in PROMPTS]
    prev_paths, prev = None, None
    for budget in BUDGETS:
        drafter = ddtree(dcfg, tcfg, budget)
        after = step(tparams, tcfg, drafter, state)
        tree, _ = drafter.tree(logits, active)
        paths = [set(p) for p in token_paths(tree)]
        acc = np.asarray(after.stats.accepted[:, 0])
        if prev_paths is not None:
            assert all(a <= b for a, b in zip(prev_paths, paths))
            for b in np.nonzero(prev[1] > acc)[0]:  # fewer accepted from a superset tree: only at a near-tie
                _assert_parted_at_a_near_tie(tparams, tcfg, prompts[b], prev[0], after, b, budget)
        prev_paths, prev = paths, (after, acc)
    assert prev[1].max() > 1


def _assert_parted_at_a_near_tie(params, cfg, prompt, before, after, row: int, budget: int):
    """The rounds of two budgets committed different tokens on `row` where the larger tree accepted
    less: with the same target choices at every node a superset tree accepts at least as much, so the
    two verify forwards (different widths, so different float reductions: on a GPU, different kernels)
    must have chosen differently where the target's top-2 logits are within rounding (`specjax.equality`)."""
    small = np.asarray(before.out[row, : int(before.count[row])])
    large = np.asarray(after.out[row, : int(after.count[row])])
    agreement = compare_with_ar(params, cfg, prompt, small, large)
    assert agreement.kind == "near-tie", (f"budget {budget}, row {row}: the larger tree accepted less and the "
                                          f"rounds part with {agreement}")


def test_tau_non_decreasing_in_budget_on_a_prompt_set():
    """P6 over whole generations: greedy tau of the zoo pair on the held-out prompts is
    non-decreasing in the budget, and DDTree with 16 nodes beats chain DFlash with 15."""
    from specjax import zoo

    tcfg, tparams, tok, dcfg, dparams = zoo_pair()
    prompts = [zoo.encode(tok, p) for _, p in PROMPTS]
    tokens, lengths = pad_prompts(prompts)
    ar = generate_ar(tparams, tcfg, tokens, lengths, 48, eos_ids=())
    chain = generate(tparams, tcfg, D.DFlashDrafter(dcfg, tcfg), dparams, tokens, lengths, 48, eos_ids=())
    runs = [generate(tparams, tcfg, ddtree(dcfg, tcfg, budget), dparams, tokens, lengths, 48, eos_ids=())
            for budget in (1, 4, 16, 64)]
    # The same text in every run, so tau is compared on the same continuations: each run is AR's output or
    # parts from it at a classified near-tie (the verify widths differ, and on a GPU so do the kernels and
    # their rounding); rows where any run parted leave the comparison. On a CPU every row is identical.
    same = np.ones(len(prompts), bool)
    for out in (chain, *runs):
        for b, prompt in enumerate(prompts):
            agreement = compare_with_ar(tparams, tcfg, prompt, ar.tokens[b, : int(ar.num_tokens[b])],
                                        out.tokens[b, : int(out.num_tokens[b])])
            assert agreement.kind != "MISMATCH", f"row {b}: {agreement}"
            same[b] &= agreement.kind == "identical"
    assert same.sum() >= 0.75 * len(prompts), f"only {same.sum()} of {len(prompts)} rows identical to AR"
    taus = [float(out.stats.mean_accepted_length()[same].mean()) for out in runs]
    tau_chain = float(chain.stats.mean_accepted_length()[same].mean())
    print(f"tau chain {tau_chain:.3f}; DDTree budgets 1/4/16/64: {np.round(taus, 3).tolist()}")
    assert all(a <= b for a, b in zip(taus, taus[1:])), taus
    assert taus[2] > tau_chain


# ============================================================================ verify width follows the tree


@dataclasses.dataclass(frozen=True)
class ConfidentDFlash(D.DFlashDrafter):
    """The same drafter with its logits sharpened 200x: nearly all mass on one path."""

    def block_logits(self, state, root, active=None):
        logits, state = super().block_logits(state, root, active)
        return 200.0 * logits, state


def test_confident_drafter_prunes_a_1024_budget_to_a_narrow_verify():
    """With budget 1024 a confident drafter's tree keeps a handful of nodes, all in the
    first verify bucket (16), so the 1024-wide forward never runs; output stays lossless."""
    target = TARGETS["qwen"]
    cfg = drafter_cfg(target, block_size=5)
    params, dparams = random_dflash_params(target, 1), random_dflash_params(cfg, 2)
    drafter = DDTreeDrafter(ConfidentDFlash(cfg, target), 1024)
    assert drafter.verify_widths == (16, 32, 64, 128, 256, 512, 1024)
    tokens, lengths = pad_prompts([[1, 2, 3], [5, 6, 7, 8]], PROMPT_WIDTH)
    out = generate(params, target, drafter, dparams, tokens, lengths, MAX_NEW, eos_ids=())
    ar = generate_ar(params, target, tokens, lengths, MAX_NEW, eos_ids=())
    np.testing.assert_array_equal(np.asarray(out.tokens), np.asarray(ar.tokens))
    prop = np.asarray(out.stats.proposed)
    assert prop.max() <= 16 and prop[prop >= 0].min() >= 1, prop
    full = generate(params, target, DDTreeDrafter(ConfidentDFlash(cfg, target), 1024, prune_mass=0.0), dparams,
                    tokens, lengths, 4, eos_ids=())
    assert np.asarray(full.stats.proposed)[:, 0].min() == 1024  # unpruned: the paper's full tree
