"""Parity of the Flax ports with transformers (PyTorch, float32) on tiny random models.

Each variant is built from a HF config, perturbed, `save_pretrained`-ed, loaded
through specjax's loader, and compared on a batch of prompts of different lengths
(right padding handled by cache lengths, not by attention-mask hacks).
"""

import dataclasses

import numpy as np
import pytest
import torch
import transformers
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

import jax
import jax.numpy as jnp

from specjax.models import (config_from_hf, forward_tapped, init_cache, load_checkpoint, pad_prompts, prefill,
                            prefill_tapped)
from specjax.models.layers import rope_inv_freq
from specjax.models.model import LAYOUTS, _merge, with_layout
from specjax.tree import ancestor_mask, node_positions, tree_from_lists
from tests.tiny_models import LLAMA3_ROPE, VARIANTS, hf_logits

PROMPTS = [[5, 17, 3, 44, 9, 60, 2, 31, 8, 12, 40], [7, 1, 66], [23, 23, 23, 4, 58, 19]]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_logits_match_transformers(variant, layout, hf_checkpoint):
    model, directory = hf_checkpoint(variant)
    cfg, params = load_checkpoint(directory)
    params = with_layout(params, layout)  # scanned layers, or one traced copy per layer: both match HF
    tokens, lengths = pad_prompts(PROMPTS)
    logits, last, cache = prefill(params, cfg, tokens, lengths, init_cache(cfg, len(PROMPTS), 16))
    worst = 0.0
    for b, prompt in enumerate(PROMPTS):
        ref = hf_logits(model, prompt)
        ours = np.asarray(logits[b, : len(prompt)])
        worst = max(worst, float(np.abs(ours - ref).max()))
        np.testing.assert_allclose(np.asarray(last[b]), ref[-1], atol=1e-4, rtol=0)
    print(f"{variant}: max |logit diff| = {worst:.2e}")
    assert worst <= 1e-4
    np.testing.assert_array_equal(np.asarray(cache.lengths), [len(p) for p in PROMPTS])


def hf_hidden(model, tokens):
    with torch.no_grad():
        return [h[0].numpy() for h in model(torch.tensor([tokens]), output_hidden_states=True).hidden_states]


def comparable(params, cfg, feature, layer):
    """HF's hidden_states[L] (the last layer) comes after the final norm: apply ours to compare."""
    if layer < cfg.num_layers - 1:
        return np.asarray(feature)
    outer = _merge(cfg, "Outer", {k: v for k, v in params.items() if k != "layers"})
    return np.asarray(outer.final_norm(feature))


@pytest.mark.parametrize("variant", ["neox_sequential", "qwen3_gqa_tied"])
def test_tapped_features_match_transformers_prefill(variant, hf_checkpoint):
    """Feature l (forward_tapped / prefill_tapped) is HF's output_hidden_states[l + 1] on
    every prompt position of a ragged batch, only the requested layers, in request order."""
    model, directory = hf_checkpoint(variant)
    cfg, params = load_checkpoint(directory)
    layers = (1, 0)  # out of order on purpose
    tokens, lengths = pad_prompts(PROMPTS)
    _, _, _, feats = prefill_tapped(params, cfg, tokens, lengths, init_cache(cfg, len(PROMPTS), 16), layers)
    assert feats.shape == (len(PROMPTS), tokens.shape[1], len(layers), cfg.hidden_size)
    worst = 0.0
    for b, prompt in enumerate(PROMPTS):
        ref = hf_hidden(model, prompt)
        for j, layer in enumerate(layers):
            diff = np.abs(comparable(params, cfg, feats[b, : len(prompt), j], layer) - ref[layer + 1])
            worst = max(worst, float(diff.max()))
    print(f"{variant}: max |feature diff| = {worst:.2e}")
    assert worst <= 1e-4


@pytest.mark.parametrize("variant, layout", [("neox_parallel", "stacked"), ("qwen3_gqa_untied", "stacked"),
                                             ("neox_parallel", "unstacked"), ("qwen3_gqa_untied", "unstacked")])
def test_tapped_features_match_transformers_tree_block(variant, layout, hf_checkpoint):
    """Features of a verified tree block (ancestor mask, positions start + depth) equal HF's
    hidden states of the root-to-node path run as a plain sequence after the prompt, in either
    layer layout (the unstacked one writes the features from L traced layer copies, not a scan)."""
    model, directory = hf_checkpoint(variant)
    cfg, params = load_checkpoint(directory)
    params = with_layout(params, layout)
    prompt = PROMPTS[0]
    tokens, lengths = pad_prompts([prompt])
    _, _, cache = prefill(params, cfg, tokens, lengths, init_cache(cfg, 1, 32))
    root = 3
    tree = tree_from_lists([[10, 11, 12, 13, 14]], [[-1, -1, 0, 0, 2]])  # two root children, a depth-3 path
    block = jnp.concatenate([jnp.asarray([[root]]), tree.tokens], axis=1)
    layers = tuple(range(cfg.num_layers))
    _, _, feats = forward_tapped(params, cfg, block, node_positions(tree, cache.lengths), ancestor_mask(tree), cache,
                                 layers)
    paths = [[root], [root, 10], [root, 11], [root, 10, 12], [root, 10, 13], [root, 10, 12, 14]]
    worst = 0.0
    for slot, path in enumerate(paths):
        ref = hf_hidden(model, prompt + path)
        for layer in layers:
            ours = comparable(params, cfg, feats[0, slot, layer], layer)
            worst = max(worst, float(np.abs(ours - ref[layer + 1][-1]).max()))
    print(f"{variant}: max |tree feature diff| = {worst:.2e}")
    assert worst <= 1e-4


def test_feature_layer_out_of_range_raises():
    from specjax.models import GPTNeoXConfig, init_params

    cfg = GPTNeoXConfig(vocab_size=16, hidden_size=16, num_layers=2, num_heads=2, intermediate_size=32, rotary_dim=4)
    params = init_params(cfg, jax.random.key(0))
    tokens, lengths = pad_prompts([[1, 2]])
    with pytest.raises(ValueError, match="feature layer id 2 is outside the target's layers"):
        prefill_tapped(params, cfg, tokens, lengths, init_cache(cfg, 1, 4), (0, 2))


def test_llama3_rope_frequencies_match_transformers():
    """Llama 3.1-8B's own rope settings (theta 5e5, head_dim 128, factor 8 over an 8192-token original
    context): the scaled inverse frequencies equal transformers' `llama3` ones, and differ from plain RoPE's."""
    llama31 = dict(LLAMA3_ROPE, original_max_position_embeddings=8192)
    hf = transformers.LlamaConfig(hidden_size=4096, num_attention_heads=32, num_key_value_heads=8, rope_theta=500000.0,
                                  max_position_embeddings=131072, rope_scaling=llama31)
    ref, _ = ROPE_INIT_FUNCTIONS["llama3"](hf, "cpu")
    cfg = config_from_hf(hf.to_dict())
    ours = np.asarray(rope_inv_freq(cfg.head_dim, cfg.rope_theta, cfg.rope_scaling))
    np.testing.assert_allclose(ours, ref.numpy(), rtol=1e-6, atol=0)
    assert not np.allclose(ours, np.asarray(rope_inv_freq(cfg.head_dim, cfg.rope_theta)), rtol=1e-3)


def test_llama3_rope_scaling_matches_transformers_beyond_original_context(hf_checkpoint):
    """40 positions over a 16-token original context: logits equal transformers', and would not without
    the scaling (so the parity is not vacuous)."""
    model, directory = hf_checkpoint("llama3_rope_untied")
    cfg, params = load_checkpoint(directory)
    assert cfg.rope_scaling is not None and cfg.rope_scaling.original_max_position_embeddings == 16
    prompt = [int(t) for t in np.random.default_rng(0).integers(0, cfg.vocab_size, 40)]
    tokens, lengths = pad_prompts([prompt])

    def logits_of(c):  # [40, V]
        logits, _, _ = prefill(params, c, tokens, lengths, init_cache(c, 1, len(prompt)))
        return np.asarray(logits[0])

    ref = hf_logits(model, prompt)
    np.testing.assert_allclose(logits_of(cfg), ref, atol=1e-4, rtol=0)
    unscaled = logits_of(dataclasses.replace(cfg, rope_scaling=None))
    assert np.abs(unscaled[16:] - ref[16:]).max() > 1e-2
