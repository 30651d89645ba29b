"""DFlash: the drafter that reads the target (features pathway, context cache, training view,
chain decoding losslessness, sampling law, strict loading, bad inputs).

References: the target's own features recomputed from scratch (prefill of the committed
sequence), per-anchor inference forwards for the training mask, plain greedy decoding
for losslessness, the enumerated target law for sampling (G-test, with a broken control
that does min(1, p/q) with the drafter's marginals).
"""

import dataclasses
import zlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specjax.decode import _generate, generate, generate_ar
from specjax.drafters import dflash as D
from specjax.drafters.protocol import Drafter, PromptContext
from specjax.models import CheckpointError, load_checkpoint, pad_prompts, save_checkpoint
from specjax.models import dflash_net as DN
from specjax.models.dflash import DFlashConfig, default_target_layer_ids
from specjax.models.model import project_to_vocab
from specjax.sampling import Sampling
from tests.drafter_fixtures import (DFLASH_SMALL, DFLASH_SMALL_PARAMS, ROUNDS_MAX_NEW, TARGETS,
                                    check_lossless_on_random_weights, committed_rounds, draw_zoo_prompts, drafter_cfg,
                                    features_of, random_dflash_params, zoo_pair)
from tests.fixtures import (MAX_NEW, PROMPT, PROMPT_WIDTH, TARGET, TARGET_PARAMS, VOCAB, assert_lossless, exact_law,
                            g_test)
from tests.rounding_gap import assert_close_f32
from tests.zoo_prompts import PROMPTS

# ============================================================================ architecture, loading, errors


def test_default_layer_ids_follow_the_reference_rule():
    assert default_target_layer_ids(36, 5) == (1, 9, 17, 25, 33)  # Qwen3-8B
    assert default_target_layer_ids(30, 5) == (1, 8, 14, 20, 27)  # SmolLM2-135M
    assert default_target_layer_ids(6, 1) == (3,)


def test_save_load_round_trip_and_strict_keys(tmp_path):
    target = TARGETS["qwen"]
    cfg = drafter_cfg(target)
    params = random_dflash_params(cfg, 0)
    save_checkpoint(tmp_path / "d", cfg, params)
    cfg2, params2 = load_checkpoint(tmp_path / "d")
    assert cfg2 == cfg
    jax.tree.map(lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)), params, params2)
    import json

    hf = json.loads((tmp_path / "d" / "config.json").read_text())
    assert hf["target_layer_ids"] == [0, 2] and hf["target_num_hidden_layers"] == 3 and hf["model_type"] == "dflash"
    from specjax.models.loading import read_safetensors, write_safetensors

    tensors = dict(read_safetensors(tmp_path / "d" / "model.safetensors"))
    assert "fc.weight" in tensors and "layers.1.self_attn.k_norm.weight" in tensors
    tensors["layers.0.extra.weight"] = np.zeros((2,), np.float32)
    del tensors["hidden_norm.weight"]
    write_safetensors(tmp_path / "d" / "model.safetensors", tensors)
    with pytest.raises(CheckpointError, match=r"missing tensors: \['hidden_norm.weight'\].*layers.0.extra.weight"):
        load_checkpoint(tmp_path / "d")


def test_bad_inputs_raise_named_errors():
    target = TARGETS["neox"]
    with pytest.raises(ValueError, match="block_size must be >= 2"):
        drafter_cfg(target, block_size=1)
    with pytest.raises(ValueError, match="mask_token_id 40 is outside the vocabulary"):
        DFlashConfig.for_target(target, num_layers=1, target_layer_ids=(0,), mask_token_id=40)
    with pytest.raises(ValueError, match=r"target layer ids \[3\] are outside the target's 3 layers"):
        drafter_cfg(target, layers=(0, 3))
    cfg = drafter_cfg(target)
    with pytest.raises(ValueError, match="block size must be >= 2"):
        D.DFlashDrafter(cfg, target, block_size=1)
    wider = dataclasses.replace(target, hidden_size=48, num_heads=4)
    with pytest.raises(ValueError, match="trained for another target: hidden size: drafter 32, target 48"):
        D.DFlashDrafter(cfg, wider)
    with pytest.raises(ValueError, match="vocab size: drafter 40, target 41"):
        D.DFlashDrafter(cfg, dataclasses.replace(target, vocab_size=41))
    shallow = dataclasses.replace(target, num_layers=2)
    with pytest.raises(ValueError, match=r"layer count.*layer ids \[2\] >= the target's 2 layers"):
        D.DFlashDrafter(cfg, shallow)
    # generate() checks the drafter against the target it is given, before compiling
    drafter = D.DFlashDrafter(cfg, target)
    params = random_dflash_params(dataclasses.replace(target, vocab_size=41), 0)
    tokens, lengths = pad_prompts([[1, 2]], 4)
    before = _generate._cache_size()
    with pytest.raises(ValueError, match="vocab size: drafter 40, target 41"):
        generate(params, dataclasses.replace(target, vocab_size=41), drafter, None, tokens, lengths, 4)
    assert _generate._cache_size() == before
    assert isinstance(drafter, Drafter)


# ============================================================================ training view == inference


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_training_mask_forward_equals_inference_for_every_anchor(name):
    """anchored_hidden (all anchors in one forward) == block_logits after ingesting features[:a] (per anchor)."""
    target = TARGETS[name]
    cfg = drafter_cfg(target, block_size=4)
    tparams, dparams = random_dflash_params(target, 1), random_dflash_params(cfg, 2)
    s = 11
    tokens = jax.random.randint(jax.random.key(3), (2, s), 0, target.vocab_size - 1)
    feats = features_of(tparams, target, np.asarray(tokens).tolist(), cfg.target_layer_ids, s)
    anchors = jnp.asarray([[1, 4, 9, 10], [0, 3, 5, 0]], jnp.int32)
    valid = jnp.asarray([[True, True, True, True], [True, True, True, False]])
    hidden = DN.anchored_hidden(dparams, cfg, DN.target_outer(tparams), target, feats, tokens, anchors, valid)
    train_logits = project_to_vocab(DN.target_outer(tparams), target, hidden[:, :, 1:])  # [B, W, L, V]
    drafter = D.DFlashDrafter(cfg, target)
    worst = 0.0
    for b in range(2):
        for j in range(4):
            if not valid[b, j]:
                continue
            a = int(anchors[b, j])
            state = drafter.init(dparams, tokens[b:b + 1], jnp.asarray([max(a, 1)]), 4,
                                 PromptContext(features=feats[b:b + 1], target_params=DN.target_outer(tparams)))
            if a == 0:  # no context at all: empty the cache
                state = state.replace(cache=state.cache.replace(lengths=jnp.zeros((1,), jnp.int32)))
            logits, _ = drafter.block_logits(state, tokens[b:b + 1, a])
            worst = max(worst, float(jnp.abs(logits[0] - train_logits[b, j]).max()))
    print(f"{name}: max |train - inference logit| = {worst:.2e}")
    assert worst < 1e-4


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_per_layer_drafter_params_run_the_same_layers(name):
    """`per_layer` (what decoding carries: layer i's arrays sliced once) holds the stacked rows, is idempotent,
    and `context_kv` / `draft_hidden` over it equal the scanned forms within the float32 bound of two
    reduction orders (tests/rounding_gap.py: 2 draft layers, 4 residual branches, reduction <= FFN width)."""
    target = TARGETS[name]
    cfg = drafter_cfg(target, block_size=4)
    tparams, dparams = random_dflash_params(target, 1), random_dflash_params(cfg, 2)
    flat = DN.per_layer(dparams)
    assert DN.per_layer(flat) is flat and len(flat["layers"]) == cfg.num_layers
    for i, layer in enumerate(flat["layers"]):
        jax.tree.map(lambda one, stacked, i=i: np.testing.assert_array_equal(one, stacked[i]), layer, dparams["layers"])
    feats = features_of(tparams, target, [[3, 9, 4, 1, 7, 2]], cfg.target_layer_ids, 6)
    pos = jnp.arange(6, dtype=jnp.int32)[None]
    n = max(cfg.hidden_size, cfg.intermediate_size)
    for got, want in zip(DN.context_kv(flat, cfg, feats, pos), DN.context_kv(dparams, cfg, feats, pos)):
        assert_close_f32(got, want, n, 1, "context K/V")
    cache = DN.write_region(DN.init_draft_cache(cfg, 1, 16, jnp.float32), *DN.context_kv(dparams, cfg, feats, pos))
    block = jnp.asarray([[5, cfg.mask_token_id, cfg.mask_token_id, cfg.mask_token_id]], jnp.int32)
    mask = jnp.ones((1, 4, 10), bool)
    outs = [DN.draft_hidden(p, cfg, DN.target_outer(tparams), target, block, 6 + pos[:, :4], mask, cache, 6)
            for p in (flat, dparams)]
    assert_close_f32(outs[0][0], outs[1][0], n, 2 * cfg.num_layers, "draft hidden")
    for got, want in zip((outs[0][1].k, outs[0][1].v), (outs[1][1].k, outs[1][1].v)):
        assert_close_f32(got, want, n, 2 * cfg.num_layers, "block K/V")


# ============================================================================ context cache after every round


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_context_cache_equals_features_of_the_committed_tokens_after_every_round(name):
    """Round by round (through the public speculative_round): context length + pending ==
    the target's committed length == the root's position; the cached K/V equal those built
    from scratch from the target features of all committed tokens; the pending features are
    those of the last round's committed tokens. Self-consistent drafter weights would hide an
    off-by-one, so the drafter is random and acceptance varies."""
    target = TARGETS[name]
    cfg = drafter_cfg(target)
    tparams, dparams = random_dflash_params(target, 4), random_dflash_params(cfg, 5)
    drafter = D.DFlashDrafter(cfg, target)
    prompts = [[1, 2, 3], [4, 5, 6, 7, 8, 9], [10]]
    width = PROMPT_WIDTH + ROUNDS_MAX_NEW
    rounds = 0
    for state, seqs in committed_rounds(tparams, target, drafter, dparams, prompts):
        rounds += 1
        ds = state.draft_state
        ctx, pend, tlen = (np.asarray(x) for x in (ds.cache.lengths, ds.pending_n, state.cache.lengths))
        np.testing.assert_array_equal(ctx + pend, tlen)
        feats = features_of(tparams, target, seqs, cfg.target_layer_ids, width)
        ref = DN.ingest_context(dparams, cfg, DN.init_draft_cache(cfg, len(seqs), width + 2 * drafter.block,
                                                               jnp.float32), feats, jnp.asarray(ctx))
        # Two reduction orders of one float32 computation (tree verify forwards vs a prefill from scratch):
        # the derived bound of tests/rounding_gap.py, not one CPU's measured gap. Longest reduction: the
        # FFN / fc width; stages: two residual branches per target layer up to the deepest tap, + the
        # drafter's fc and k / v projections for the cache.
        n, stages = max(target.intermediate_size, cfg.num_features * target.hidden_size), 2 * (max(cfg.target_layer_ids) + 1)
        for b in range(len(prompts)):
            m, p = int(ctx[b]), int(pend[b])
            assert_close_f32(ds.cache.k[:, b, :, :m], ref.k[:, b, :, :m], n, stages + 2, "context K")
            assert_close_f32(ds.cache.v[:, b, :, :m], ref.v[:, b, :, :m], n, stages + 2, "context V")
            assert_close_f32(ds.pending[b, :p], feats[b, m:m + p], n, stages, "pending features")
    assert rounds >= 3


# ============================================================================ greedy losslessness


SETTINGS = [("neox", 5, 2), ("qwen", 3, 3), ("neox", 9, 1)]  # target, block size, batch


@pytest.mark.parametrize("name, block, batch", SETTINGS)
@settings(max_examples=6)
@given(data=st.data(), seed=st.integers(0, 2**16), eos=st.booleans())
def test_chain_dflash_greedy_lossless_random_weights(name, block, batch, data, seed, eos):
    spec = check_lossless_on_random_weights(name, block, batch, data, seed, eos, D.DFlashDrafter)
    assert np.all(np.asarray(spec.stats.accepted) <= block - 1)


def test_transfer_guard_and_one_compile():
    target = TARGETS["neox"]
    cfg = drafter_cfg(target)
    params, dparams = random_dflash_params(target, 8), random_dflash_params(cfg, 9)
    drafter = D.DFlashDrafter(cfg, target)
    tokens, lengths = pad_prompts([[1, 2, 3], [4, 5]], PROMPT_WIDTH)
    generate(params, target, drafter, dparams, tokens, lengths, MAX_NEW).tokens.block_until_ready()
    compiled = _generate._cache_size()
    new_tokens, new_lengths = pad_prompts([[9, 9, 9, 9, 9, 1, 2], [3]], PROMPT_WIDTH)
    with jax.transfer_guard("disallow"):  # features, context cache, top-k: nothing crosses to the host
        generate(params, target, drafter, dparams, new_tokens, new_lengths, MAX_NEW).tokens.block_until_ready()
    assert _generate._cache_size() == compiled


# ============================================================================ sampling law


@dataclasses.dataclass(frozen=True)
class MarginalRejectionDFlash(D.DFlashDrafter):
    """Broken on purpose (why DDTree §4.4 verifies by the target's own rule, not by a ratio):
    argmax drafts verified by chain rejection min(1, p/q) with q = the drafter's marginals,
    which are not the law the drafted tokens were drawn from."""

    def uses_rejection(self, sampling):
        return True

    def propose(self, state, root, active, key, sampling):
        logits, state = self.block_logits(state, root, active)
        tokens = jnp.argmax(logits, axis=-1).astype(jnp.int32)
        from specjax.tree import chain_tree

        return chain_tree(tokens, jnp.where(active, self.budget, 0)), jax.nn.softmax(logits, axis=-1), state


@pytest.mark.slow
@pytest.mark.parametrize("broken", [False, True], ids=["walk", "broken-marginal-rejection"])
def test_chain_dflash_sampling_matches_exact_target_law(broken):
    samples = 20_000
    cls = MarginalRejectionDFlash if broken else D.DFlashDrafter
    drafter = cls(DFLASH_SMALL, TARGET)
    sampling = Sampling(1.0)
    law = exact_law(sampling)
    tokens, lengths = pad_prompts([PROMPT] * samples)
    out = generate(TARGET_PARAMS, TARGET, drafter, DFLASH_SMALL_PARAMS, tokens, lengths, 5, sampling=sampling,
                   key=jax.random.key(zlib.crc32(b"dflash" + bytes([broken]))), eos_ids=())
    flat = np.ravel_multi_index(np.asarray(out.tokens).T, (VOCAB,) * 5)
    p_value, dof = g_test(np.bincount(flat, minlength=VOCAB**5), law)
    tau = float(np.mean(out.stats.mean_accepted_length()))
    print(f"chain DFlash {'broken' if broken else 'walk'}: G-test dof {dof}, p = {p_value:.3g}, tau {tau:.2f}")
    assert tau > 1.05, "the draft was never accepted: the test would not exercise acceptance"
    if broken:
        assert p_value < 1e-6, f"the G-test failed to detect min(1, p/q) with marginals (p={p_value:.2e})"
    else:
        assert p_value > 1e-3, f"chain DFlash samples do not follow the target law (p={p_value:.2e})"


# ============================================================================ the trained zoo drafter


ZOO_MIN_TAU = 3.0  # chain DFlash (block 16), greedy, 32 tokens on the held-out zoo prompts: measured 4.07


def test_zoo_drafter_is_trained_for_the_zoo_target():
    """The committed drafter names its target, loads strictly and beats a floor on held-out prompts."""
    from specjax import zoo

    tcfg, tparams, tok, dcfg, dparams = zoo_pair()
    assert dcfg.target_num_layers == tcfg.num_layers and dcfg.hidden_size == tcfg.hidden_size
    assert (zoo.path("tiny-neox-dflash") / "recipe.json").exists()
    tokens, lengths = pad_prompts([zoo.encode(tok, p) for _, p in PROMPTS])
    drafter = D.DFlashDrafter(dcfg, tcfg)
    out = generate(tparams, tcfg, drafter, dparams, tokens, lengths, 32, eos_ids=())
    ref = generate_ar(tparams, tcfg, tokens, lengths, 32, eos_ids=())
    np.testing.assert_array_equal(np.asarray(out.tokens), np.asarray(ref.tokens))
    tau = out.stats.mean_accepted_length()
    print(f"zoo chain DFlash tau per prompt {np.round(tau, 2).tolist()}, mean {tau.mean():.3f}")
    assert tau.mean() > ZOO_MIN_TAU


@settings(max_examples=5)
@given(data=st.data(), eos=st.booleans(), block=st.sampled_from([16, 6]))
def test_chain_dflash_greedy_lossless_trained_weights(data, eos, block):
    """Trained weights (long accepted runs), ragged batches of held-out text prefixes and random
    tokens, EOS (the zoo's id 0 or a frequent token) and max-token stops."""
    tcfg, tparams, tok, dcfg, dparams = zoo_pair()
    rows, tokens, lengths, eos_ids = draw_zoo_prompts(data, eos)
    new = data.draw(st.sampled_from([17, 40]))
    ar = generate_ar(tparams, tcfg, tokens, lengths, new, eos_ids=eos_ids)
    spec = generate(tparams, tcfg, D.DFlashDrafter(dcfg, tcfg, block_size=block), dparams, tokens, lengths, new,
                    eos_ids=eos_ids)
    assert_lossless(tparams, tcfg, rows, ar, spec)
