"""Tiny random Hugging Face models for tests, built from configs (never downloaded).

Every parameter is perturbed with N(0, sigma) noise so that biases, norm weights and
logits are far from their trivial initial values and a layout mistake shows up in the
logits instead of hiding behind zeros and ones.
"""

from __future__ import annotations

import torch
import transformers as tf

COMMON = dict(hidden_size=32, num_hidden_layers=2, intermediate_size=64, vocab_size=67, bos_token_id=None,
              eos_token_id=None, pad_token_id=None)

LLAMA3_ROPE = dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                   original_max_position_embeddings=16)

# name -> (config class, model class, config kwargs). The parity variants issue 2 asks for.
VARIANTS = {
    "neox_parallel": (tf.GPTNeoXConfig, tf.GPTNeoXForCausalLM,
                      dict(num_attention_heads=4, rotary_pct=0.25, use_parallel_residual=True)),
    "neox_sequential": (tf.GPTNeoXConfig, tf.GPTNeoXForCausalLM,
                        dict(num_attention_heads=4, rotary_pct=0.5, rotary_emb_base=500.0, use_parallel_residual=False)),
    "qwen3_gqa_tied": (tf.Qwen3Config, tf.Qwen3ForCausalLM,
                       dict(num_attention_heads=4, num_key_value_heads=2, head_dim=16, tie_word_embeddings=True)),
    "qwen3_gqa_untied": (tf.Qwen3Config, tf.Qwen3ForCausalLM,
                         dict(num_attention_heads=4, num_key_value_heads=1, head_dim=8, tie_word_embeddings=False,
                              attention_bias=True)),
    "qwen2_bias": (tf.Qwen2Config, tf.Qwen2ForCausalLM,
                   dict(num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False)),
    "llama_tied": (tf.LlamaConfig, tf.LlamaForCausalLM,
                   dict(num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True, rope_theta=1000.0)),
    # Llama 3.1's rope scaling with a 16-token "original" context (head_dim 8: one blended and three
    # divided frequencies), untied LM head
    "llama3_rope_untied": (tf.LlamaConfig, tf.LlamaForCausalLM,
                           dict(num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False,
                                max_position_embeddings=64, rope_scaling=LLAMA3_ROPE)),
}


def hf_model(variant: str, seed: int = 0, sigma: float = 0.2) -> torch.nn.Module:
    config_cls, model_cls, kwargs = VARIANTS[variant]
    torch.manual_seed(seed)
    model = model_cls(config_cls(**COMMON, **kwargs)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(sigma * torch.randn_like(p))
    return model


def hf_logits(model: torch.nn.Module, tokens: list[int]):
    with torch.no_grad():
        return model(torch.tensor([tokens])).logits[0].numpy()
