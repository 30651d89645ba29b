"""Parity of the Flax ports with transformers (PyTorch, float32) on tiny random models.

Each variant is built from a HF config, perturbed, `save_pretrained`-ed, loaded
through specjax's loader, and compared on a batch of prompts of different lengths
(right padding handled by cache lengths, not by attention-mask hacks).
"""

import numpy as np
import pytest
import torch

from specjax.models import forward, init_cache, load_checkpoint, pad_prompts, prefill
from specjax.models.model import causal_mask
from tests.tiny_models import VARIANTS, hf_logits

PROMPTS = [[5, 17, 3, 44, 9, 60, 2, 31, 8, 12, 40], [7, 1, 66], [23, 23, 23, 4, 58, 19]]


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_logits_match_transformers(variant, hf_checkpoint):
    model, directory = hf_checkpoint(variant)
    cfg, params = load_checkpoint(directory)
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


@pytest.mark.parametrize("variant", ["neox_sequential", "qwen3_gqa_tied"])
def test_hidden_states_match_transformers(variant, hf_checkpoint):
    """hidden[i] is the residual stream after i blocks, as HF's output_hidden_states[i] (i < L)."""
    model, directory = hf_checkpoint(variant)
    cfg, params = load_checkpoint(directory)
    prompt = PROMPTS[0]
    tokens, _ = pad_prompts([prompt])
    t = len(prompt)
    positions = np.arange(t, dtype=np.int32)[None]
    layers = tuple(range(cfg.num_layers))
    _, _, hidden = forward(params, cfg, tokens, positions, causal_mask(1, t), init_cache(cfg, 1, t), hidden_layers=layers)
    with torch.no_grad():
        ref = model(torch.tensor([prompt]), output_hidden_states=True).hidden_states
    for i in layers:
        np.testing.assert_allclose(np.asarray(hidden[i, 0]), ref[i][0].numpy(), atol=1e-5, rtol=0)
