"""Flax ports of the target/draft architectures as pure functions over params pytrees."""

from specjax.models.cache import KVCache, check_capacity, commit, init_cache
from specjax.models.gpt_neox import GPTNeoXConfig
from specjax.models.hf_config import UnsupportedConfigError
from specjax.models.llama import LlamaConfig
from specjax.models.loading import CheckpointError, load_checkpoint, load_config, save_checkpoint
from specjax.models.model import (
    ModelConfig, causal_mask, config_from_hf, embed_tokens, forward, forward_jit, forward_tapped, init_params,
    pad_prompts, param_shapes, prefill, prefill_tapped, project_to_vocab,
)

__all__ = [
    "KVCache", "check_capacity", "commit", "init_cache", "GPTNeoXConfig", "LlamaConfig", "ModelConfig",
    "UnsupportedConfigError", "CheckpointError", "load_checkpoint", "load_config", "save_checkpoint",
    "causal_mask", "config_from_hf", "embed_tokens", "forward", "forward_jit", "forward_tapped", "prefill_tapped",
    "project_to_vocab", "init_params", "pad_prompts", "param_shapes", "prefill",
]
