"""GPT-NeoX (the Pythia suite) in Flax NNX.

Architecture features implemented (everything else in a config raises):
  * learned token embedding `embed_in`, untied output projection `embed_out`
    (tied is accepted too);
  * pre-LayerNorm blocks with biases, LayerNorm eps `layer_norm_eps`;
  * parallel residual  x + attn(ln1(x)) + mlp(ln2(x))  or sequential
    x' = x + attn(ln1(x)); x' + mlp(ln2(x'))  (`use_parallel_residual`);
  * fused QKV projection laid out per head as (heads, 3, head_dim) on the output axis,
    optional attention biases (`attention_bias`);
  * partial rotary embedding on the first `rotary_pct * head_dim` dims of each head,
    base `rotary_emb_base` (legacy) / `rope_parameters.rope_theta`;
  * MLP dense_h_to_4h -> gelu (exact erf by default, `hidden_act`) -> dense_4h_to_h;
  * multi-head attention (no GQA), scale 1/sqrt(head_dim).

The parameters live in NNX modules; `specjax.models.model` splits them into a plain
pytree and scans the stacked `Block`s over layers.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

import jax.numpy as jnp
from flax import nnx

from specjax.models.families import MODEL, NORM_RULES, register
from specjax.models.hf_config import ConfigReader, UnsupportedConfigError, eos_ids, read_rope
from specjax.models.layers import (ACTIVATIONS, EmbedAndHead, LayerKV, apply_rotary, init_normal, merge_heads,
                                   split_heads)
from specjax.models.loading_maps import ParamMap, Transform


@dataclasses.dataclass(frozen=True)
class GPTNeoXConfig:
    """A GPT-NeoX (Pythia) target / draft config (HF `config.json` via `from_hf` / `to_hf`).

    Fields:
      vocab_size: V, token embedding rows and output projection outputs.
      hidden_size: E, the residual stream width (a multiple of num_heads; head_dim = E / num_heads).
      num_layers: decoder layers (HF `num_hidden_layers`).
      num_heads: attention heads H (multi-head, no GQA: as many KV heads).
      intermediate_size: MLP width of dense_h_to_4h / dense_4h_to_h.
      rotary_dim: leading dims of each head that get rotary, even and in [0, head_dim]
        (HF rotary_pct * head_dim, e.g. 16 = 0.25 * 64 for Pythia).
      rope_theta: RoPE base (HF `rotary_emb_base` or `rope_parameters.rope_theta`).
      layer_norm_eps: epsilon of every LayerNorm.
      use_parallel_residual: True: x + attn(ln1(x)) + mlp(ln2(x)); False: the sequential residual.
      attention_bias: biases on the fused QKV and the attention output projection.
      tie_word_embeddings: True: the output projection is the token embedding (no `embed_out`).
      hidden_act: the MLP activation, a key of `specjax.models.layers.ACTIVATIONS` ("gelu": exact erf).
      max_position_embeddings: the checkpoint's context length, recorded and saved (not enforced here).
      eos_token_ids: the model's EOS ids; `generate` / `generate_ar` stop a row at one of them when
        eos_ids is not given (() = never stop).
      bos_token_id: the BOS id, recorded and saved (None: not set); generation does not prepend it.
    """

    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    intermediate_size: int
    rotary_dim: int
    rope_theta: float = 10000.0
    layer_norm_eps: float = 1e-5
    use_parallel_residual: bool = True
    attention_bias: bool = True
    tie_word_embeddings: bool = False
    hidden_act: str = "gelu"
    max_position_embeddings: int = 2048
    eos_token_ids: tuple[int, ...] = ()
    bos_token_id: int | None = None

    model_type = "gpt_neox"

    def __post_init__(self):
        if self.hidden_size % self.num_heads:
            raise ValueError(f"hidden_size {self.hidden_size} is not divisible by num_heads {self.num_heads}")
        if self.rotary_dim % 2 or not 0 <= self.rotary_dim <= self.head_dim:
            raise ValueError(f"rotary_dim {self.rotary_dim} must be even and within [0, head_dim={self.head_dim}]")
        if self.hidden_act not in ACTIVATIONS:
            raise UnsupportedConfigError(f"gpt_neox hidden_act {self.hidden_act!r} is not supported")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def num_kv_heads(self) -> int:
        return self.num_heads

    @classmethod
    def from_hf(cls, hf: dict[str, Any]) -> "GPTNeoXConfig":
        r = ConfigReader(hf, "gpt_neox")
        rope = read_rope(r, default_theta=10000.0, legacy_theta_key="rotary_emb_base")
        pct = rope["partial_rotary_factor"]
        pct = r.get("rotary_pct", 0.25) if pct is None else pct
        hidden, heads = r.get("hidden_size", required=True), r.get("num_attention_heads", required=True)
        head_dim = hidden // heads
        r.expect("attention_bias", (True, False), "")
        r.expect("rotary_pct", (pct,), "conflicts with rope_parameters.partial_rotary_factor")
        r.expect("use_flash_attention", (False,), "")
        cfg = cls(
            vocab_size=r.get("vocab_size", required=True),
            hidden_size=hidden,
            num_layers=r.get("num_hidden_layers", required=True),
            num_heads=heads,
            intermediate_size=r.get("intermediate_size", required=True),
            rotary_dim=int(head_dim * pct),
            rope_theta=rope["theta"],
            layer_norm_eps=float(r.get("layer_norm_eps", 1e-5)),
            use_parallel_residual=bool(r.get("use_parallel_residual", True)),
            attention_bias=bool(hf.get("attention_bias", True)),
            tie_word_embeddings=bool(r.get("tie_word_embeddings", False)),
            hidden_act=r.get("hidden_act", "gelu"),
            max_position_embeddings=int(hf.get("max_position_embeddings", 2048)),
            eos_token_ids=eos_ids(hf.get("eos_token_id")),
            bos_token_id=hf.get("bos_token_id"),
        )
        r.finish()
        return cfg

    def to_hf(self) -> dict[str, Any]:
        return {
            "architectures": ["GPTNeoXForCausalLM"],
            "model_type": "gpt_neox",
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads,
            "intermediate_size": self.intermediate_size,
            "rotary_pct": self.rotary_dim / self.head_dim,
            "rotary_emb_base": self.rope_theta,
            "layer_norm_eps": self.layer_norm_eps,
            "use_parallel_residual": self.use_parallel_residual,
            "attention_bias": self.attention_bias,
            "tie_word_embeddings": self.tie_word_embeddings,
            "hidden_act": self.hidden_act,
            "max_position_embeddings": self.max_position_embeddings,
            "eos_token_id": list(self.eos_token_ids) if len(self.eos_token_ids) != 1 else self.eos_token_ids[0],
            "bos_token_id": self.bos_token_id,
        }


class Attention(nnx.Module):
    def __init__(self, cfg: GPTNeoXConfig, dtype, rngs: nnx.Rngs):
        e, h, d = cfg.hidden_size, cfg.num_heads, cfg.head_dim
        self.cfg = cfg
        self.qkv = init_normal(rngs, (e, 3, h, d), dtype)
        self.dense = init_normal(rngs, (h, d, e), dtype)
        if cfg.attention_bias:
            self.qkv_bias = nnx.Param(jnp.zeros((3, h, d), dtype))
            self.dense_bias = nnx.Param(jnp.zeros((e,), dtype))

    def __call__(self, x, positions, mask, kv: LayerKV):
        """x: [B, T, E]; kv: the stacked cache and this layer's index. Returns (out, kv)."""
        cfg = self.cfg
        qkv = jnp.moveaxis(split_heads(x, self.qkv[...]), -3, 0)  # [3, B, T, H, D]
        if cfg.attention_bias:
            qkv = qkv + self.qkv_bias[...][:, None, None]
        q, k, v = (apply_rotary(qkv[0], positions, cfg.rotary_dim, cfg.rope_theta),
                   apply_rotary(qkv[1], positions, cfg.rotary_dim, cfg.rope_theta), qkv[2])
        kv = kv.append(k, v)
        out = kv.attend(q, mask, cfg.head_dim**-0.5)  # [B, T, H, D]
        out = merge_heads(out, self.dense[...])  # [B, T, E]
        if cfg.attention_bias:
            out = out + self.dense_bias[...]
        return out, kv


class MLP(nnx.Module):
    def __init__(self, cfg: GPTNeoXConfig, dtype, rngs: nnx.Rngs):
        self.act = ACTIVATIONS[cfg.hidden_act]
        init = nnx.initializers.normal(0.02)
        self.dense_h_to_4h = nnx.Linear(cfg.hidden_size, cfg.intermediate_size, kernel_init=init,
                                        param_dtype=dtype, rngs=rngs)
        self.dense_4h_to_h = nnx.Linear(cfg.intermediate_size, cfg.hidden_size, kernel_init=init,
                                        param_dtype=dtype, rngs=rngs)

    def __call__(self, x):  # [B, T, E] -> [B, T, E]
        return self.dense_4h_to_h(self.act(self.dense_h_to_4h(x)))


def _layer_norm(cfg: GPTNeoXConfig, dtype, rngs: nnx.Rngs) -> nnx.LayerNorm:
    return nnx.LayerNorm(cfg.hidden_size, epsilon=cfg.layer_norm_eps, use_fast_variance=False,
                         param_dtype=dtype, rngs=rngs)


class Block(nnx.Module):
    """One transformer layer; `model.forward` scans it over the stacked layer params."""

    def __init__(self, cfg: GPTNeoXConfig, dtype, rngs: nnx.Rngs):
        self.parallel = cfg.use_parallel_residual
        self.input_layernorm = _layer_norm(cfg, dtype, rngs)
        self.post_attention_layernorm = _layer_norm(cfg, dtype, rngs)
        self.attention = Attention(cfg, dtype, rngs)
        self.mlp = MLP(cfg, dtype, rngs)

    def __call__(self, x, positions, mask, kv: LayerKV):
        attn, kv = self.attention(self.input_layernorm(x), positions, mask, kv)
        if self.parallel:
            x = x + attn + self.mlp(self.post_attention_layernorm(x))
        else:
            x = x + attn
            x = x + self.mlp(self.post_attention_layernorm(x))
        return x, kv


def Outer(cfg: GPTNeoXConfig, dtype, rngs: nnx.Rngs) -> EmbedAndHead:
    """Embedding `embed_in`, `final_layer_norm`, output projection `embed_out` (HF names)."""
    return EmbedAndHead(cfg.vocab_size, cfg.hidden_size, _layer_norm(cfg, dtype, rngs), cfg.tie_word_embeddings,
                        dtype, rngs)


def param_maps(cfg: GPTNeoXConfig) -> tuple[list[ParamMap], list[ParamMap]]:
    """HF checkpoint key <-> params path. Returns (outer maps, per-layer maps with '{i}')."""
    h, d, e = cfg.num_heads, cfg.head_dim, cfg.hidden_size
    T = Transform
    p = "gpt_neox.layers.{i}."
    outer = [
        ParamMap("gpt_neox.embed_in.weight", ("embed", "embedding"), T.identity()),
        ParamMap("gpt_neox.final_layer_norm.weight", ("final_norm", "scale"), T.identity()),
        ParamMap("gpt_neox.final_layer_norm.bias", ("final_norm", "bias"), T.identity()),
    ]
    if not cfg.tie_word_embeddings:
        outer.append(ParamMap("embed_out.weight", ("head", "kernel"), T.linear()))
    layer = [
        ParamMap(p + "input_layernorm.weight", ("input_layernorm", "scale"), T.identity()),
        ParamMap(p + "input_layernorm.bias", ("input_layernorm", "bias"), T.identity()),
        ParamMap(p + "post_attention_layernorm.weight", ("post_attention_layernorm", "scale"), T.identity()),
        ParamMap(p + "post_attention_layernorm.bias", ("post_attention_layernorm", "bias"), T.identity()),
        # HF rows are ordered (head, q/k/v, head_dim): Pythia's per-head fused layout.
        ParamMap(p + "attention.query_key_value.weight", ("attention", "qkv"),
                 T.reshape_transpose((h * 3 * d, e), (h, 3, d, e), (3, 1, 0, 2))),
        ParamMap(p + "attention.dense.weight", ("attention", "dense"), T.reshape_transpose((e, h * d), (e, h, d), (1, 2, 0))),
        ParamMap(p + "mlp.dense_h_to_4h.weight", ("mlp", "dense_h_to_4h", "kernel"), T.linear()),
        ParamMap(p + "mlp.dense_h_to_4h.bias", ("mlp", "dense_h_to_4h", "bias"), T.identity()),
        ParamMap(p + "mlp.dense_4h_to_h.weight", ("mlp", "dense_4h_to_h", "kernel"), T.linear()),
        ParamMap(p + "mlp.dense_4h_to_h.bias", ("mlp", "dense_4h_to_h", "bias"), T.identity()),
    ]
    if cfg.attention_bias:
        layer += [
            ParamMap(p + "attention.query_key_value.bias", ("attention", "qkv_bias"),
                     T.reshape_transpose((h * 3 * d,), (h, 3, d), (1, 0, 2))),
            ParamMap(p + "attention.dense.bias", ("attention", "dense_bias"), T.identity()),
        ]
    return outer, layer


# Non-parameter buffers older transformers versions saved into Pythia checkpoints.
IGNORED_KEYS = (
    r"gpt_neox\.layers\.\d+\.attention\.rotary_emb\.inv_freq",
    r"gpt_neox\.layers\.\d+\.attention\.bias",
    r"gpt_neox\.layers\.\d+\.attention\.masked_bias",
)

# Tensor parallel over "model": heads and the MLP's inner dimension split, the norms replicated.
LAYER_SHARDING = {
    **NORM_RULES,
    ("attention", "qkv"): (None, None, MODEL, None),  # [E, 3, H, D]
    ("attention", "qkv_bias"): (None, MODEL, None),  # [3, H, D]
    ("attention", "dense"): (MODEL, None, None),  # [H, D, E]
    ("attention", "dense_bias"): (None,),  # [E]
    ("mlp", "dense_h_to_4h", "kernel"): (None, MODEL),  # [E, F]
    ("mlp", "dense_h_to_4h", "bias"): (MODEL,),  # [F]
    ("mlp", "dense_4h_to_h", "kernel"): (MODEL, None),  # [F, E]
    ("mlp", "dense_4h_to_h", "bias"): (None,),  # [E]
}
FAMILY = register(sys.modules[__name__], GPTNeoXConfig, ("gpt_neox",), LAYER_SHARDING)
