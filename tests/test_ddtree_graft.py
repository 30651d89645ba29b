"""DDTree + retrieval (`specjax.drafters.ddtree_graft`) against independent references.

* The proposal: against a brute-force path-set construction from DDTree's selection order
  and a numpy walk over the table (first N - U prefixes, every valid retrieved path, then
  DDTree's next prefixes until N paths, no duplicate path, a valid tree), and its recorded
  surrogate against sum_{u in T} q(u) by enumeration.
* DDTree Prop. 2 seen from the other side: at equal N, the grafted tree's surrogate never
  exceeds DDTree's (retrieval can only pay through the target, not through q).
* Through the loop: greedy output equals AR (random weights, Hypothesis), retrieved tokens
  accepted where the text repeats, and a sampling G-test against the exact target law.
* Named errors.
"""

import zlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from specjax import testing
from specjax.decode import generate, generate_ar
from specjax.drafters import dflash as D
from specjax.drafters.ddtree import DDTreeDrafter, select_tree
from specjax.drafters.ddtree_graft import DDTreeGraftDrafter, tree_log_q
from specjax.drafters.graft import graft_params
from specjax.models import pad_prompts
from specjax.sampling import Sampling
from specjax.tree import check_tree
from tests.drafter_fixtures import (DFLASH_SMALL, DFLASH_SMALL_PARAMS, TARGETS, drafter_cfg, random_dflash_params,
                                    slot_paths)
from tests.fixtures import (MAX_NEW, PROMPT, PROMPT_WIDTH, TARGET, TARGET_PARAMS, VOCAB, assert_lossless, exact_law,
                            g_test)


def make(target, budget, ret, block=5, width=3, prune=0.0, merge=True, cfg=None):
    cfg = cfg or drafter_cfg(target, block_size=block)
    return DDTreeGraftDrafter(DDTreeDrafter(D.DFlashDrafter(cfg, target), budget, prune_mass=prune), ret,
                              width=width, merge=merge)


def random_table(rng, vocab, width, empty=0.3):
    """Rows of distinct tokens (as top-k writes give), a fraction of entries empty (-1)."""
    table = np.stack([rng.permutation(vocab)[:width] for _ in range(vocab)]).astype(np.int32)
    table[rng.random(table.shape) < empty] = -1
    return table


def reference_paths(cand_paths, cand_ok, table, root, template, budget, ret):
    """Brute force: kept = the first N - U ok DDTree prefixes; retrieved = every template path
    whose table walk from the root meets no empty entry; then the next ok prefixes (selection
    order) not yet present, until N paths. -> (all paths, retrieved paths)."""
    kept = [p for p, ok in zip(cand_paths[:budget - ret], cand_ok[:budget - ret]) if ok]
    node_path: dict[int, tuple[int, ...]] = {}  # template node -> its token path, if valid
    for i, (par, r) in enumerate(zip(template.parents, template.ranks)):
        if par >= 0 and par not in node_path:
            continue
        prev = root if par < 0 else node_path[par][-1]
        if table[prev, r] >= 0:
            node_path[i] = (node_path[par] if par >= 0 else ()) + (int(table[prev, r]),)
    retrieved = set(node_path.values())
    out = set(kept) | retrieved
    for p, ok in zip(cand_paths[budget - ret:], cand_ok[budget - ret:]):
        if len(out) >= budget:
            break
        if ok:
            out.add(p)
    return out, retrieved


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**16), prune=st.sampled_from([0.0, 0.3]), budget_ret=st.sampled_from([(6, 2), (12, 5),
                                                                                                   (20, 9)]))
@example(seed=2856, prune=0.3, budget_ret=(6, 2))  # a template path equal to a pruned prefix among the first N - U
def test_proposal_equals_path_set_reference(seed, prune, budget_ret):
    budget, ret = budget_ret
    target = TARGETS["neox"]
    drafter = make(target, budget, ret, block=5, width=3, prune=prune)
    rng = np.random.default_rng(seed)
    b, v = 3, target.vocab_size
    logits = jnp.asarray(rng.normal(size=(b, 4, v)) * rng.choice([1.0, 6.0]), jnp.float32)
    table = random_table(rng, v, 3)
    root = jnp.asarray(rng.integers(0, v, b), jnp.int32)
    active = jnp.asarray([True, True, False])
    tree, retrieved, mass, optimal = drafter.tree(logits, jnp.asarray(table), root, active)
    check_tree(tree)
    log_q = np.asarray(jax.nn.log_softmax(logits, -1), np.float64)
    full = select_tree(jax.nn.log_softmax(logits, -1), budget)
    for row in range(2):
        cand = slot_paths(full, row)
        q = lambda p: np.exp(sum(log_q[row, d, t] for d, t in enumerate(p)))  # noqa: E731
        ok = [i == 0 or q(p) >= prune / budget * (1 - 1e-5) for i, p in enumerate(cand)]
        want, want_ret = reference_paths(cand, ok, table, int(root[row]), drafter.template, budget, ret)
        got = slot_paths(tree, row)
        assert len(got) == len(set(got)), "a path is verified twice"
        assert set(got) == want
        got_ret = {p for p, r in zip(got, np.asarray(retrieved[row])[np.asarray(tree.valid[row])]) if r}
        kept = {p for p, o in zip(cand[:budget - ret], ok[:budget - ret]) if o}  # a pruned prefix is not kept: a
        assert got_ret == want_ret - kept, "retrieved nodes = valid template paths not kept"  # template may add it
        np.testing.assert_allclose(float(mass[row]), sum(q(p) for p in got), rtol=1e-4)
        np.testing.assert_allclose(float(optimal[row]), sum(q(p) for p, o in zip(cand, ok) if o), rtol=1e-4)
        if prune == 0.0:
            assert len(got) == budget  # N distinct candidates always exist here: exactly N nodes
    assert not np.asarray(tree.valid[2]).any() and float(mass[2]) == 0.0 and float(optimal[2]) == 0.0


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**16), ret=st.integers(1, 11))
def test_grafted_surrogate_never_exceeds_ddtree(seed, ret):
    """DDTree Prop. 2 at equal N: no N-node tree, the grafted one included, beats the N most
    probable prefixes on sum_{u in T} q(u); the kept prefix is DDTree's own first N - U nodes."""
    target = TARGETS["qwen"]
    rng = np.random.default_rng(seed)
    drafter = make(target, 12, ret, block=5, width=3)
    logits = jnp.asarray(rng.normal(size=(2, 4, target.vocab_size)) * 3.0, jnp.float32)
    table = jnp.asarray(random_table(rng, target.vocab_size, 3, empty=0.1))
    root = jnp.asarray(rng.integers(0, target.vocab_size, 2), jnp.int32)
    _, _, grafted, recorded = drafter.tree(logits, table, root, jnp.ones((2,), bool))
    _, optimal = drafter.ddtree.tree(logits, jnp.ones((2,), bool))
    np.testing.assert_allclose(np.asarray(recorded), np.asarray(optimal), rtol=1e-6)
    assert np.all(np.asarray(grafted) <= np.asarray(optimal) * (1 + 1e-5))


# ============================================================================ through the loop


@pytest.mark.parametrize("name, block, budget, ret", [("neox", 5, 8, 3), ("qwen", 9, 24, 9)])
@settings(max_examples=4, deadline=None)
@given(data=st.data(), seed=st.integers(0, 2**16), eos=st.booleans(), prune=st.sampled_from([0.0, 0.05]))
def test_greedy_lossless_random_weights(name, block, budget, ret, data, seed, eos, prune):
    target = TARGETS[name]
    cfg = drafter_cfg(target, block_size=block)
    params, dparams = random_dflash_params(target, seed), random_dflash_params(cfg, seed + 3)
    drafter = make(target, budget, ret, cfg=cfg, prune=prune)
    prompts = [data.draw(st.lists(st.integers(0, target.vocab_size - 1), min_size=1, max_size=PROMPT_WIDTH))
               for _ in range(2)]
    prompts[0] = (prompts[0] * 4)[:PROMPT_WIDTH]  # repetition: the table proposes what the target repeats
    tokens, lengths = pad_prompts(prompts, PROMPT_WIDTH)
    eos_ids = (3,) if eos else ()
    gp = graft_params(dparams, target.vocab_size, 3, ())
    ar = generate_ar(params, target, tokens, lengths, MAX_NEW, eos_ids=eos_ids)
    out = generate(params, target, drafter, gp, tokens, lengths, MAX_NEW, eos_ids=eos_ids)
    assert_lossless(params, target, prompts, ar, out)
    prop = np.asarray(out.stats.proposed)
    assert np.all(prop[prop >= 0] <= budget)
    warm = generate(params, target, drafter, drafter.carry_over(gp, out.draft_state), tokens, lengths, MAX_NEW,
                    eos_ids=eos_ids)  # hot start: a warm table changes the trees, never the output
    assert_lossless(params, target, prompts, ar, warm)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_retrieval_is_accepted_where_the_text_repeats(seed):
    """Random target and drafter weights: the target's greedy text falls into loops that the
    drafter does not know and the table learns; retrieved tokens are accepted and, at equal
    N, raise the accepted length over DDTree alone. Output = AR either way."""
    target = TARGETS["neox"]
    cfg = drafter_cfg(target, block_size=5)
    params, dparams = random_dflash_params(target, seed), random_dflash_params(cfg, seed + 3)
    prompts = [[5, 9, 2, 7, 5, 9, 2], [1, 2, 3]]
    tokens, lengths = pad_prompts(prompts, PROMPT_WIDTH)
    ar = generate_ar(params, target, tokens, lengths, 24)
    plain = generate(params, target, DDTreeDrafter(D.DFlashDrafter(cfg, target), 8), dparams, tokens, lengths, 24)
    out = generate(params, target, make(target, 8, 3, cfg=cfg), graft_params(dparams, target.vocab_size, 3, ()),
                   tokens, lengths, 24)
    assert_lossless(params, target, prompts, ar, out)
    acc = np.asarray(out.draft_state.retrieved_accepted)
    tau = lambda o: float(np.mean(o.stats.mean_accepted_length()))  # noqa: E731
    print(f"seed {seed}: DDTree-8 tau {tau(plain):.2f}, 5 DDTree + 3 retrieved {tau(out):.2f}, "
          f"retrieved accepted {acc[acc > 0].sum()}")
    assert acc.max() >= 1 and tau(out) > tau(plain)


def test_sampling_matches_exact_target_law():
    """20k generations of 5 tokens at T = 1 (DDTree 4 + 2 retrieved nodes over a 4-token
    vocabulary, block 3, duplicates merged) against the enumerated target law."""
    samples = 20_000
    sampling = Sampling(1.0)
    tokens, lengths = pad_prompts([PROMPT] * samples)
    drafter = make(TARGET, 6, 2, width=2, cfg=DFLASH_SMALL)
    out = generate(TARGET_PARAMS, TARGET, drafter, graft_params(DFLASH_SMALL_PARAMS, VOCAB, 2, ()), tokens, lengths, 5,
                   sampling=sampling, key=jax.random.key(zlib.crc32(b"ddtree-graft")), eos_ids=())
    flat = np.ravel_multi_index(np.asarray(out.tokens).T, (VOCAB,) * 5)
    p_value, dof = g_test(np.bincount(flat, minlength=VOCAB**5), exact_law(sampling))
    acc = np.asarray(out.draft_state.retrieved_accepted)
    print(f"DDTree + retrieval walk: G-test dof {dof}, p = {p_value:.3g}, retrieved accepted {acc[acc > 0].sum()}")
    assert acc.max() >= 1, "no retrieved token was accepted: the test would not exercise grafting"
    assert p_value > 1e-3, f"samples do not follow the target law (p={p_value:.2e})"


# ============================================================================ errors


def test_bad_inputs_are_named():
    target = TARGETS["neox"]
    for ret in (0, 8):
        with pytest.raises(ValueError, match=r"retrieval nodes U must be in \[1, N\)"):
            make(target, 8, ret)
    with pytest.raises(ValueError, match="width k must be >= 1"):
        make(target, 8, 2, width=0)
    with pytest.raises(TypeError, match="wraps a DDTreeDrafter"):
        DDTreeGraftDrafter(D.DFlashDrafter(drafter_cfg(target), target), 2)
    drafter = make(target, 8, 2)
    tokens, lengths = pad_prompts([[1, 2]], 4)
    with pytest.raises(ValueError, match="takes GraftParams"):
        generate(random_dflash_params(target, 0), target, drafter, random_dflash_params(drafter_cfg(target), 1), tokens,
                 lengths, 4)


@settings(max_examples=20, deadline=None)
@given(tree=testing.trees(batch=2, budget=12, vocab=5, min_nodes=1), seed=st.integers(0, 2**16))
def test_tree_log_q_is_the_sum_of_log_q_along_the_root_path(tree, seed):
    """`tree_log_q` (the grafted tree's surrogate): log q(u) = sum over the root path of log q_depth(token), per
    node, against a loop over each node's ancestors in numpy; -inf on invalid nodes."""
    depth_l = 12
    log_q = np.log(np.random.default_rng(seed).dirichlet(np.ones(5), size=(2, depth_l))).astype(np.float32)
    got = np.asarray(tree_log_q(tree, jnp.asarray(log_q)))
    tokens, parents, depth, valid = (np.asarray(x) for x in (tree.tokens, tree.parents, tree.depth, tree.valid))
    for b in range(2):
        for i in range(tokens.shape[1]):
            if not valid[b, i]:
                assert got[b, i] == -np.inf
                continue
            want, node = 0.0, i
            while node >= 0:
                want += float(log_q[b, depth[b, node] - 1, tokens[b, node]])
                node = parents[b, node]
            np.testing.assert_allclose(got[b, i], want, rtol=1e-5, atol=1e-5)


def test_tree_log_q_is_one_loop_whatever_the_depth():
    """The compile-time regression of 2026-11-27: L unrolled passes, each reading the previous one twice, made
    XLA fuse 2^L copies (69 s to compile at L = 15). The traced program is a loop: its size does not grow with L."""
    tree = testing.tree_from_arrays(np.array([[1, 2, 3]]), np.array([[-1, 0, 1]]), np.ones((1, 3), bool))

    def size(depth_l):
        log_q = jnp.zeros((1, depth_l, 5), jnp.float32)
        return len(jax.make_jaxpr(tree_log_q)(tree, log_q).eqns)

    assert size(3) == size(15) == size(64)
