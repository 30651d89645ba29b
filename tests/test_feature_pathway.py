"""The protocol's target pathway: what `verify_tree` hands to a drafter (path features, per-slot
top-k) against independent recomputation, and what `observe` receives through the loop."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from specjax.decode import generate, generate_ar
from specjax.drafters.fixed_tree import FixedTreeDrafter
from specjax.drafters.protocol import Drafter
from specjax.models import forward_tapped, init_cache, pad_prompts, prefill
from specjax.sampling import Sampling
from specjax.tree import ancestor_mask, node_positions, tree_from_lists
from specjax.verify import verify_tree
from tests.fixtures import MAX_NEW, PAIRS, PROMPT_WIDTH, random_pair_params

LAYERS = (1, 0)


def _setup():
    cfg, _ = PAIRS["qwen64"]
    params = random_pair_params(cfg, 21)
    tokens, lengths = pad_prompts([[1, 2, 3, 4], [5, 6]], PROMPT_WIDTH)
    _, last, cache = prefill(params, cfg, tokens, lengths, init_cache(cfg, 2, 32))
    root = jnp.argmax(last, axis=-1).astype(jnp.int32)
    return cfg, params, cache, root


def test_verify_tree_features_and_top_k_match_a_plain_forward():
    """Features gathered at the walk's path slots and the top-k at every slot equal those of a
    separate forward_tapped over the same block; slots past the verified width hold -1 / -inf."""
    cfg, params, cache, root = _setup()
    # Self-consistent tree: put the target's greedy continuation on one branch so the walk goes deep.
    block_logits, _, _ = forward_tapped(params, cfg, root[:, None], cache.lengths[:, None], jnp.ones((2, 1, 1), bool),
                                        cache)
    first = np.asarray(jnp.argmax(block_logits[:, 0], -1))
    tree = tree_from_lists([[7, int(first[0]), 9, 11], [int(first[1]), 3]], [[-1, -1, 1, 1], [-1, 0]], budget=6)
    tp = verify_tree(params, cfg, tree, root, cache, jax.random.key(0), Sampling(), max_depth=3, feature_layers=LAYERS,
                     top_k=3, widths=(4, 6))
    block = jnp.concatenate([root[:, None], tree.tokens], axis=1)
    logits, _, feats = forward_tapped(params, cfg, block, node_positions(tree, cache.lengths), ancestor_mask(tree), cache,
                                      LAYERS)
    path = np.asarray(tp.result.path_slots)
    assert int(tp.result.num_accepted[0]) >= 1  # the walk left the root in row 0
    for b in range(2):
        np.testing.assert_allclose(np.asarray(tp.features[b]), np.asarray(feats[b, path[b]]), atol=1e-5)
        order = np.argsort(-np.asarray(logits[b, :5]), axis=-1, kind="stable")[:, :3]  # width 4 -> 5 slots
        np.testing.assert_array_equal(np.asarray(tp.top_ids[b, :5]), order)
        np.testing.assert_allclose(np.asarray(tp.top_logits[b, :5]),
                                   np.take_along_axis(np.asarray(logits[b, :5]), order, -1), atol=1e-5)
        assert np.all(np.asarray(tp.top_ids[b, 5:]) == -1) and np.all(np.isneginf(np.asarray(tp.top_logits[b, 5:])))


_SEEN: list = []


@dataclasses.dataclass(frozen=True)
class TopKRecordingDrafter(FixedTreeDrafter):
    """A fixed tree that asks for the target's top-2 and features, and records what `observe` sees."""

    target_topk = 2
    target_layers = (0,)

    def observe(self, state, verified):
        jax.debug.callback(lambda *a: _SEEN.append([np.array(x, copy=True) for x in a]), verified.top_ids,
                           verified.result.emitted, verified.num_kept, verified.active, verified.features,
                           ordered=True)
        return super().observe(state, verified)


def test_observe_receives_top_k_and_features_through_the_loop():
    """Greedy: the root slot's top-1 is the round's first emitted token; features come for
    the kept path of active rows; the output is still AR's."""
    cfg, draft_cfg = PAIRS["neox32"]
    params, draft_params = random_pair_params(cfg, 31), random_pair_params(draft_cfg, 32)
    drafter = TopKRecordingDrafter(draft_cfg, 2, 2, 6)
    assert isinstance(drafter, Drafter)
    tokens, lengths = pad_prompts([[1, 2, 3], [4, 5, 6, 7, 8]], PROMPT_WIDTH)
    _SEEN.clear()
    out = generate(params, cfg, drafter, draft_params, tokens, lengths, MAX_NEW, eos_ids=())
    jax.effects_barrier()
    ar = generate_ar(params, cfg, tokens, lengths, MAX_NEW, eos_ids=())
    np.testing.assert_array_equal(np.asarray(out.tokens), np.asarray(ar.tokens))
    assert len(_SEEN) == int(np.max(np.asarray(out.stats.num_rounds)))
    for top_ids, emitted, kept, active, feats in _SEEN:
        assert top_ids.shape == (2, drafter.budget + 1, 2) and feats.shape == (2, drafter.max_depth + 1, 1, 32)
        np.testing.assert_array_equal(top_ids[active, 0, 0], emitted[active, 0])
        assert np.all(kept[active] >= 1) and np.all(kept[~active] == 0)
