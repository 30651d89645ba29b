"""The Llama family in Flax NNX: Llama (SmolLM2), Qwen2 and Qwen3 as one model with flags.

Architecture features implemented (everything else in a config raises):
  * token embedding `embed_tokens`; output `lm_head`, or tied to the embedding
    (`tie_word_embeddings`, e.g. SmolLM2 and small Qwen3s);
  * pre-RMSNorm blocks (statistics in float32), eps `rms_norm_eps`;
  * grouped-query attention: `num_key_value_heads` divides `num_attention_heads`,
    explicit `head_dim` (Qwen3) or hidden_size / heads;
  * biases: q/k/v only (Qwen2), q/k/v/o (`attention_bias`, Llama and Qwen3), MLP (`mlp_bias`);
  * Qwen3's per-head RMSNorm on queries and keys (`q_norm`, `k_norm`) before rotary;
  * full rotary embedding, "rotate half" layout, base `rope_theta`, optionally with Llama 3.1's
    frequency scaling (`rope_scaling` / `rope_parameters` of `rope_type: "llama3"`; other scalings raise);
  * SwiGLU MLP: down(silu(gate(x)) * up(x)).
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

import jax.numpy as jnp
from flax import nnx

from specjax.models.families import MODEL, NORM_RULES, register
from specjax.models.hf_config import ConfigReader, UnsupportedConfigError, eos_ids, read_rope
from specjax.models.layers import (ACTIVATIONS, EmbedAndHead, LayerKV, Llama3RopeScaling, RMSNorm, apply_rotary,
                                   init_normal, merge_heads, project_out_major, split_heads)
from specjax.models.loading_maps import ParamMap, Transform

_ARCHITECTURES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}


@dataclasses.dataclass(frozen=True)
class LlamaConfig:
    """A Llama-family target / draft config (Llama, Qwen2, Qwen3; HF `config.json` via `from_hf` / `to_hf`).

    Fields:
      vocab_size: V, token embedding rows and LM head outputs.
      hidden_size: E, the residual stream width.
      num_layers: decoder layers (HF `num_hidden_layers`).
      num_heads: query heads H (HF `num_attention_heads`).
      num_kv_heads: key/value heads K (GQA; divides num_heads; HF default: num_heads).
      head_dim: D, per-head width, even (rotary); HF `head_dim` (Qwen3) or hidden_size // num_heads.
      intermediate_size: FFN width of the gated MLP down(act(gate(x)) * up(x)).
      rope_theta: RoPE base (full rotary, "rotate half" layout).
      rope_scaling: Llama 3.1's inverse-frequency scaling (HF `rope_type: "llama3"`), None: plain RoPE.
      rms_norm_eps: epsilon of every RMSNorm (statistics in float32).
      tie_word_embeddings: True: the LM head is the token embedding (no `lm_head` param).
      qkv_bias: biases on the q / k / v projections (always for Qwen2; `attention_bias` otherwise).
      o_bias: bias on the output projection (Llama / Qwen3 with `attention_bias`; never Qwen2).
      mlp_bias: biases on the MLP's gate / up / down projections (Llama's `mlp_bias`).
      qk_norm: Qwen3's per-head RMSNorm on queries and keys before rotary.
      hidden_act: the MLP activation, a key of `specjax.models.layers.ACTIVATIONS` ("silu": SwiGLU).
      flavor: "llama" | "qwen2" | "qwen3": the HF model_type (`model_type`) and architecture to save as;
        `to_hf` refuses flags that do not match it.
      max_position_embeddings: the checkpoint's context length, recorded and saved (not enforced here).
      eos_token_ids: the model's EOS ids; `generate` / `generate_ar` stop a row at one of them when
        eos_ids is not given (() = never stop).
      bos_token_id: the BOS id, recorded and saved (None: not set); generation does not prepend it.
    """

    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-6
    tie_word_embeddings: bool = False
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False
    hidden_act: str = "silu"
    flavor: str = "llama"
    max_position_embeddings: int = 2048
    eos_token_ids: tuple[int, ...] = ()
    bos_token_id: int | None = None
    rope_scaling: Llama3RopeScaling | None = None

    @property
    def model_type(self) -> str:
        return self.flavor

    def __post_init__(self):
        if self.flavor not in _ARCHITECTURES:
            raise ValueError(f"unknown llama-family flavor {self.flavor!r}; expected one of {sorted(_ARCHITECTURES)}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads {self.num_heads} is not a multiple of num_kv_heads {self.num_kv_heads}")
        if self.head_dim % 2:
            raise ValueError(f"head_dim {self.head_dim} must be even for rotary embeddings")
        if self.hidden_act not in ACTIVATIONS:
            raise UnsupportedConfigError(f"{self.flavor} hidden_act {self.hidden_act!r} is not supported")

    @classmethod
    def from_hf(cls, hf: dict[str, Any]) -> "LlamaConfig":
        flavor = hf.get("model_type")
        if flavor not in _ARCHITECTURES:
            raise UnsupportedConfigError(f"model_type {flavor!r} is not a supported llama-family type")
        r = ConfigReader(hf, flavor)
        rope = read_rope(r, default_theta=10000.0, scaled_types=("llama3",))
        if rope["partial_rotary_factor"] not in (None, 1.0):
            raise UnsupportedConfigError(f"{flavor} partial rotary is not supported")
        hidden, heads = r.get("hidden_size", required=True), r.get("num_attention_heads", required=True)
        head_dim = r.get("head_dim") or hidden // heads
        r.expect("pretraining_tp", (1,), "tensor-parallel slicing of the checkpoint")
        r.expect("use_sliding_window", (False,), "sliding-window attention")
        r.get("max_window_layers")  # only meaningful with use_sliding_window
        if hf.get("use_sliding_window", False) is False:
            r.get("sliding_window")
        else:
            r.expect("sliding_window", (None,), "sliding-window attention")
        layer_types = r.get("layer_types")
        if layer_types is not None and set(layer_types) - {"full_attention"}:
            raise UnsupportedConfigError(f"{flavor} config field 'layer_types' has non-full attention layers")
        attention_bias = bool(r.get("attention_bias", False))
        if flavor == "qwen2":
            r.expect("attention_bias", (False,), "qwen2 has fixed q/k/v biases and no o bias")
        cfg = cls(
            vocab_size=r.get("vocab_size", required=True),
            hidden_size=hidden,
            num_layers=r.get("num_hidden_layers", required=True),
            num_heads=heads,
            num_kv_heads=r.get("num_key_value_heads") or heads,
            head_dim=head_dim,
            intermediate_size=r.get("intermediate_size", required=True),
            rope_theta=rope["theta"],
            rope_scaling=rope["scaling"],
            rms_norm_eps=float(r.get("rms_norm_eps", 1e-6)),
            tie_word_embeddings=bool(r.get("tie_word_embeddings", False)),
            qkv_bias=flavor == "qwen2" or attention_bias,
            o_bias=flavor != "qwen2" and attention_bias,
            mlp_bias=bool(r.get("mlp_bias", False)) if flavor == "llama" else False,
            qk_norm=flavor == "qwen3",
            hidden_act=r.get("hidden_act", "silu"),
            flavor=flavor,
            max_position_embeddings=int(hf.get("max_position_embeddings", 2048)),
            eos_token_ids=eos_ids(hf.get("eos_token_id")),
            bos_token_id=hf.get("bos_token_id"),
        )
        r.finish()
        return cfg

    def to_hf(self) -> dict[str, Any]:
        out = {
            "architectures": [_ARCHITECTURES[self.flavor]],
            "model_type": self.flavor,
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads,
            "num_key_value_heads": self.num_kv_heads,
            "head_dim": self.head_dim,
            "intermediate_size": self.intermediate_size,
            "rope_theta": self.rope_theta,
            "rms_norm_eps": self.rms_norm_eps,
            "tie_word_embeddings": self.tie_word_embeddings,
            "hidden_act": self.hidden_act,
            "max_position_embeddings": self.max_position_embeddings,
            "eos_token_id": list(self.eos_token_ids) if len(self.eos_token_ids) != 1 else self.eos_token_ids[0],
            "bos_token_id": self.bos_token_id,
        }
        if self.rope_scaling is not None:
            out["rope_scaling"] = {"rope_type": "llama3", **dataclasses.asdict(self.rope_scaling)}
        if self.flavor == "llama":
            out.update(attention_bias=self.qkv_bias, mlp_bias=self.mlp_bias)
        elif self.flavor == "qwen3":
            out.update(attention_bias=self.qkv_bias)
        if (self.flavor == "qwen2") != (self.qkv_bias and not self.o_bias) or self.qk_norm != (self.flavor == "qwen3"):
            raise ValueError(f"config flags do not match HF {self.flavor}: cannot save it as that model_type")
        return out


class Attention(nnx.Module):
    """Grouped-query self-attention: `q` [E, H, D], `k` / `v` [E, K, D], `o` [H, D, E]; `fused`
    (`fuse_layer`): output-major `qkv` [H + 2K, D, E] (one product instead of three) and `out` [E, H, D]."""

    def __init__(self, cfg: LlamaConfig, dtype, rngs: nnx.Rngs, fused: bool = False):
        e, h, k, d = cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        self.cfg, self.fused = cfg, fused
        if fused:
            self.qkv = init_normal(rngs, (h + 2 * k, d, e), dtype)
            self.out = init_normal(rngs, (e, h, d), dtype)
        else:
            self.q = init_normal(rngs, (e, h, d), dtype)
            self.k = init_normal(rngs, (e, k, d), dtype)
            self.v = init_normal(rngs, (e, k, d), dtype)
            self.o = init_normal(rngs, (h, d, e), dtype)
        if cfg.qkv_bias:
            self.q_bias = nnx.Param(jnp.zeros((h, d), dtype))
            self.k_bias = nnx.Param(jnp.zeros((k, d), dtype))
            self.v_bias = nnx.Param(jnp.zeros((k, d), dtype))
        if cfg.o_bias:
            self.o_bias = nnx.Param(jnp.zeros((e,), dtype))
        if cfg.qk_norm:
            self.q_norm = RMSNorm(d, cfg.rms_norm_eps, dtype)
            self.k_norm = RMSNorm(d, cfg.rms_norm_eps, dtype)

    def _kernels(self):
        """(q [E, H, D], k [E, K, D], v [E, K, D]) kernels, sliced out of `qkv` when fused."""
        if not self.fused:
            return self.q[...], self.k[...], self.v[...]
        h, k = self.cfg.num_heads, self.cfg.num_kv_heads
        qkv = self.qkv[...].transpose(2, 0, 1)  # [E, H + 2K, D]
        return qkv[:, :h], qkv[:, h:h + k], qkv[:, h + k:]

    def _finish_queries(self, q, positions):
        """Projected queries [B, T, H, D] -> rotated (bias, Qwen3 q_norm, rotary)."""
        cfg = self.cfg
        if cfg.qkv_bias:
            q = q + self.q_bias[...]
        if cfg.qk_norm:
            q = self.q_norm(q)
        return apply_rotary(q, positions, cfg.head_dim, cfg.rope_theta, cfg.rope_scaling)

    def _finish_keys_values(self, k, v, positions):
        """Projected keys, values [B, T, K, D] -> (rotated keys, values) (bias, Qwen3 k_norm, rotary)."""
        cfg = self.cfg
        if cfg.qkv_bias:
            k, v = k + self.k_bias[...], v + self.v_bias[...]
        if cfg.qk_norm:
            k = self.k_norm(k)
        return apply_rotary(k, positions, cfg.head_dim, cfg.rope_theta, cfg.rope_scaling), v

    def queries(self, x, positions):
        """x: [B, T, E] -> rotated queries [B, T, H, D] (bias, Qwen3 q_norm, rotary)."""
        return self._finish_queries(split_heads(x, self._kernels()[0]), positions)

    def keys_values(self, x, positions):
        """x: [B, T, E] -> (rotated keys, values) [B, T, K, D] each (bias, Qwen3 k_norm, rotary).
        DFlash also projects the target's context features through this."""
        _, k, v = self._kernels()
        return self._finish_keys_values(split_heads(x, k), split_heads(x, v), positions)

    def __call__(self, x, positions, mask, kv: LayerKV):
        """x: [B, T, E]; kv: the stacked cache and this layer's index. Returns (out, kv)."""
        cfg = self.cfg
        if self.fused:  # one product, then the head axis split into q | k | v
            h, k = cfg.num_heads, cfg.num_kv_heads
            qkv = project_out_major(x, self.qkv[...])  # [B, T, H + 2K, D]
            q = self._finish_queries(qkv[:, :, :h], positions)
            keys, values = self._finish_keys_values(qkv[:, :, h:h + k], qkv[:, :, h + k:], positions)
        else:
            q, (keys, values) = self.queries(x, positions), self.keys_values(x, positions)
        kv = kv.append(keys, values)
        out = kv.attend(q, mask, cfg.head_dim**-0.5)  # [B, T, H, D]
        if self.fused:
            out = project_out_major(out.reshape(*out.shape[:-2], -1), self.out[...].reshape(cfg.hidden_size, -1))
        else:
            out = merge_heads(out, self.o[...])  # [B, T, E]
        if cfg.o_bias:
            out = out + self.o_bias[...]
        return out, kv


class MLP(nnx.Module):
    """SwiGLU MLP down(act(gate(x)) * up(x)): `gate_proj`, `up_proj`, `down_proj` (nnx.Linear, kernels
    [in, out]); `fused` (`fuse_layer`): output-major `gate_up` [2F, E] and `down` [E, F] kernels, biases
    `gate_up_bias` [2F] / `down_bias` [E] when the config has MLP biases."""

    def __init__(self, cfg: LlamaConfig, dtype, rngs: nnx.Rngs, fused: bool = False):
        self.act, self.fused, self.bias = ACTIVATIONS[cfg.hidden_act], fused, cfg.mlp_bias
        e, f = cfg.hidden_size, cfg.intermediate_size
        if fused:
            self.gate_up, self.down = init_normal(rngs, (2 * f, e), dtype), init_normal(rngs, (e, f), dtype)
            if cfg.mlp_bias:
                self.gate_up_bias, self.down_bias = nnx.Param(jnp.zeros((2 * f,), dtype)), nnx.Param(jnp.zeros((e,), dtype))
            return
        lin = dict(use_bias=cfg.mlp_bias, kernel_init=nnx.initializers.normal(0.02), param_dtype=dtype, rngs=rngs)
        self.gate_proj = nnx.Linear(e, f, **lin)
        self.up_proj = nnx.Linear(e, f, **lin)
        self.down_proj = nnx.Linear(f, e, **lin)

    def __call__(self, x):  # [B, T, E] -> [B, T, E]
        if not self.fused:
            return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))
        gate_up = project_out_major(x, self.gate_up[...])
        gate, up = jnp.split(gate_up + self.gate_up_bias[...] if self.bias else gate_up, 2, axis=-1)
        out = project_out_major(self.act(gate) * up, self.down[...])
        return out + self.down_bias[...] if self.bias else out


class Block(nnx.Module):
    """One transformer layer; `model.forward` scans it over the stacked layer params."""

    def __init__(self, cfg: LlamaConfig, dtype, rngs: nnx.Rngs, fused: bool = False):
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, dtype)
        self.self_attn = Attention(cfg, dtype, rngs, fused)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, dtype)
        self.mlp = MLP(cfg, dtype, rngs, fused)

    def __call__(self, x, positions, mask, kv: LayerKV):
        attn, kv = self.self_attn(self.input_layernorm(x), positions, mask, kv)
        x = x + attn
        return x + self.mlp(self.post_attention_layernorm(x)), kv


def FusedBlock(cfg: LlamaConfig, dtype, rngs: nnx.Rngs) -> Block:
    """`Block` holding `fuse_layer`'s params: what one layer of the unstacked layout runs."""
    return Block(cfg, dtype, rngs, fused=True)


# Fused projections (the unstacked layout's per-layer copies, `specjax.models.model.unstack_layers`): at
# batch 1 a decode step is a chain of small matrix-vector products, and on XLA:CPU three products of
# [E, 576 | 192 | 192] cost more than one of [E, 960] over the same weights (SmolLM2-135M). The fused
# kernels are also stored output-major ([out, in], as torch stores a Linear): XLA:CPU multiplies 1 to 17
# rows by them 5-19% faster than by [in, out] kernels (SmolLM2's 30 layers of products alone, 2 cores:
# 1 row 21.1 -> 19.8 ms, 9 rows 45.9 -> 38.5 ms). Checkpoints, sharding and the scanned layout keep the
# separate [in, out] arrays; `unfuse_layer` restores them exactly.
_MLP = ("gate_proj", "up_proj", "down_proj")


def is_fused(layer: dict) -> bool:
    """Whether one layer's plain params are `fuse_layer`'s."""
    return "qkv" in layer.get("self_attn", {})


def fuse_layer(layer: dict) -> dict:
    """One Llama-family layer's plain params (leaves without a layer axis) as `FusedBlock` holds them:
    q, k, v concatenated on the head axis and stored output-major as `qkv` [H + 2K, D, E], `o` as `out`
    [E, H, D], the MLP's gate and up projections as one `gate_up` [2F, E] and `down` as [E, F] (biases
    `gate_up_bias` [2F], `down_bias` [E]). Anything else is returned as is."""
    attn, mlp = layer.get("self_attn", {}), layer.get("mlp", {})
    if not {"q", "k", "v", "o"} <= set(attn) or not set(_MLP) <= set(mlp):
        return layer
    qkv = jnp.concatenate([attn["q"], attn["k"], attn["v"]], axis=1)  # [E, H + 2K, D]
    attn = {**{n: a for n, a in attn.items() if n not in ("q", "k", "v", "o")},
            "qkv": qkv.transpose(1, 2, 0), "out": attn["o"].transpose(2, 0, 1)}
    gate, up, down = (mlp[n] for n in _MLP)
    fused = {**{n: a for n, a in mlp.items() if n not in _MLP},
             "gate_up": jnp.concatenate([gate["kernel"], up["kernel"]], axis=-1).T, "down": down["kernel"].T}
    if "bias" in gate:
        fused.update(gate_up_bias=jnp.concatenate([gate["bias"], up["bias"]]), down_bias=down["bias"])
    return {**layer, "self_attn": attn, "mlp": fused}


def unfuse_layer(layer: dict) -> dict:
    """The inverse of `fuse_layer` (exact: transposes and slices of the concatenations); H = the `out`
    kernel's second axis, F = half of `gate_up`'s first. Unfused params are returned as is."""
    if not is_fused(layer):
        return layer
    attn, mlp = layer["self_attn"], layer["mlp"]
    h = attn["out"].shape[1]
    k = (attn["qkv"].shape[0] - h) // 2
    qkv = attn["qkv"].transpose(2, 0, 1)  # [E, H + 2K, D]
    attn = {**{n: a for n, a in attn.items() if n not in ("qkv", "out")},
            "q": qkv[:, :h], "k": qkv[:, h:h + k], "v": qkv[:, h + k:], "o": attn["out"].transpose(1, 2, 0)}
    gate, up = jnp.split(mlp["gate_up"].T, 2, axis=-1)
    parts = {"gate_proj": {"kernel": gate}, "up_proj": {"kernel": up}, "down_proj": {"kernel": mlp["down"].T}}
    if "gate_up_bias" in mlp:
        gate_bias, up_bias = jnp.split(mlp["gate_up_bias"], 2)
        parts["gate_proj"]["bias"], parts["up_proj"]["bias"], parts["down_proj"]["bias"] = gate_bias, up_bias, mlp["down_bias"]
    rest = {n: a for n, a in mlp.items() if n not in ("gate_up", "down", "gate_up_bias", "down_bias")}
    return {**layer, "self_attn": attn, "mlp": {**rest, **parts}}


def Outer(cfg: LlamaConfig, dtype, rngs: nnx.Rngs) -> EmbedAndHead:
    """Embedding `embed_tokens`, final `norm`, output projection `lm_head` (HF names)."""
    return EmbedAndHead(cfg.vocab_size, cfg.hidden_size, RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, dtype),
                        cfg.tie_word_embeddings, dtype, rngs)


def param_maps(cfg: LlamaConfig) -> tuple[list[ParamMap], list[ParamMap]]:
    """HF checkpoint key <-> params path. Returns (outer maps, per-layer maps with '{i}')."""
    e, h, k, d = cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    T = Transform
    p = "model.layers.{i}."
    outer = [
        ParamMap("model.embed_tokens.weight", ("embed", "embedding"), T.identity()),
        ParamMap("model.norm.weight", ("final_norm", "weight"), T.identity()),
    ]
    if not cfg.tie_word_embeddings:
        outer.append(ParamMap("lm_head.weight", ("head", "kernel"), T.linear()))
    heads_in = lambda n: T.reshape_transpose((n * d, e), (n, d, e), (2, 0, 1))  # [n*D, E] -> [E, n, D]
    layer = [
        ParamMap(p + "input_layernorm.weight", ("input_layernorm", "weight"), T.identity()),
        ParamMap(p + "post_attention_layernorm.weight", ("post_attention_layernorm", "weight"), T.identity()),
        ParamMap(p + "self_attn.q_proj.weight", ("self_attn", "q"), heads_in(h)),
        ParamMap(p + "self_attn.k_proj.weight", ("self_attn", "k"), heads_in(k)),
        ParamMap(p + "self_attn.v_proj.weight", ("self_attn", "v"), heads_in(k)),
        ParamMap(p + "self_attn.o_proj.weight", ("self_attn", "o"), T.reshape_transpose((e, h * d), (e, h, d), (1, 2, 0))),
    ]
    for name in ("gate_proj", "up_proj", "down_proj"):
        layer.append(ParamMap(p + f"mlp.{name}.weight", ("mlp", name, "kernel"), T.linear()))
        if cfg.mlp_bias:
            layer.append(ParamMap(p + f"mlp.{name}.bias", ("mlp", name, "bias"), T.identity()))
    if cfg.qkv_bias:
        layer += [
            ParamMap(p + "self_attn.q_proj.bias", ("self_attn", "q_bias"), T.reshape_transpose((h * d,), (h, d), (0, 1))),
            ParamMap(p + "self_attn.k_proj.bias", ("self_attn", "k_bias"), T.reshape_transpose((k * d,), (k, d), (0, 1))),
            ParamMap(p + "self_attn.v_proj.bias", ("self_attn", "v_bias"), T.reshape_transpose((k * d,), (k, d), (0, 1))),
        ]
    if cfg.o_bias:
        layer.append(ParamMap(p + "self_attn.o_proj.bias", ("self_attn", "o_bias"), T.identity()))
    if cfg.qk_norm:
        layer += [
            ParamMap(p + "self_attn.q_norm.weight", ("self_attn", "q_norm", "weight"), T.identity()),
            ParamMap(p + "self_attn.k_norm.weight", ("self_attn", "k_norm", "weight"), T.identity()),
        ]
    return outer, layer


IGNORED_KEYS = (r"model\.layers\.\d+\.self_attn\.rotary_emb\.inv_freq",)

# Tensor parallel over "model": heads and the MLP's inner dimension split, the norms replicated.
LAYER_SHARDING = {
    **NORM_RULES,
    ("self_attn", "q"): (None, MODEL, None),  # [E, H, D]
    ("self_attn", "k"): (None, MODEL, None),  # [E, K, D]
    ("self_attn", "v"): (None, MODEL, None),  # [E, K, D]
    ("self_attn", "o"): (MODEL, None, None),  # [H, D, E]
    ("self_attn", "q_bias"): (MODEL, None),  # [H, D]
    ("self_attn", "k_bias"): (MODEL, None),  # [K, D]
    ("self_attn", "v_bias"): (MODEL, None),  # [K, D]
    ("self_attn", "o_bias"): (None,),  # [E]
    ("self_attn", "q_norm", "weight"): (None,),  # [D]
    ("self_attn", "k_norm", "weight"): (None,),  # [D]
    ("mlp", "gate_proj", "kernel"): (None, MODEL),  # [E, F]
    ("mlp", "up_proj", "kernel"): (None, MODEL),
    ("mlp", "down_proj", "kernel"): (MODEL, None),  # [F, E]
    ("mlp", "gate_proj", "bias"): (MODEL,),  # [F]
    ("mlp", "up_proj", "bias"): (MODEL,),
    ("mlp", "down_proj", "bias"): (None,),  # [E]
}
FAMILY = register(sys.modules[__name__], LlamaConfig, ("llama", "qwen2", "qwen3"), LAYER_SHARDING)
