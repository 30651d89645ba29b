"""The EAGLE-3 draft model: one decoder layer over (token embedding, fused target features).

Architecture (EAGLE-3, PAPER_NOTES section 4; [code:EAGLE traineagle3/cnets.py]):
  * `fc`: Linear(n * E -> E, no bias) over the concatenated outputs of n tapped target
    layers (low / mid / high): g_t = fc(f_t), the drafter's input state at a committed
    position t. At later draft steps g is the drafter's *own* previous output hidden
    state (the "training-time test" unroll; `specjax.train.eagle3`);
  * one decoder layer (`Layer`): x = concat(input_layernorm(emb(token)), hidden_norm(g))
    of width 2E feeds q/k/v projections 2E -> heads; the residual stream is g itself:
    h = g + o_proj(attn(x)); out = h + mlp(post_attention_layernorm(h)) (SwiGLU, no
    biases, Llama-style attention without q/k norm, rotary);
  * final `norm` (RMSNorm), then the *target's* frozen LM head (shared by reference, not
    stored; logits = W_lm norm(out)), and the target's frozen token embedding. The
    reference trains its own head over a reduced 32k draft vocabulary (d2t map); specjax
    keeps the target's head [choice], so E and V are the target's; an optional draft
    vocabulary (`specjax.draft_vocab`, params["draft_vocab"]["ids"], saved as the tensor
    `draft_vocab.ids`) restricts drafting to K columns of that head.

Pairing (what makes the drafter's rows line up with the target): the row of committed
position t reads (f_t, token x_{t+1}) at rotary position t and predicts x_{t+2}; a tree node
at depth d below a root at target position r reads (its parent's output, its token) at
position r - 1 + d. So the root (bonus token) *is* drafted from known features f_{r-1}.

A checkpoint directory is `config.json` (model_type "eagle3", naming the target: hidden size,
vocab, layer count, tapped layer ids) + `model.safetensors` with the reference's tensor
names (`fc.weight`, `midlayer.self_attn.q_proj.weight`, ..., `norm.weight`); loading is the
strict loader's (`specjax.models.load_checkpoint`); `check_target` names every mismatch.
The pure forward functions live with the drafter (`specjax.drafters.eagle3`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp
from flax import nnx

from specjax.models import llama
from specjax.models.hf_config import ConfigReader, UnsupportedConfigError
from specjax.models.layers import LayerKV, RMSNorm, init_normal
from specjax.models.loading_maps import ParamMap, Transform
from specjax.models.target_bound import TargetBound, fitted_to


def default_target_layer_ids(target_num_layers: int) -> tuple[int, int, int]:
    """EAGLE-3's low / mid / high taps: layers 2, L // 2, L - 3 (0-based, as the reference's
    `hidden_states` indices 3, L//2 + 1, L - 2 count the embedding as 0), clamped into range
    and made distinct for tiny targets (4 layers -> (0, 2, 3))."""
    if target_num_layers < 3:
        raise ValueError(f"EAGLE-3 reads three target layers; the target has only {target_num_layers}")
    low, mid, high = 2, target_num_layers // 2, target_num_layers - 3
    if not low < mid < high:  # tiny targets
        low, mid, high = 0, target_num_layers // 2, target_num_layers - 1
    return (low, mid, high)


@dataclasses.dataclass(frozen=True)
class Eagle3Config(TargetBound):
    """An EAGLE-3 drafter's config (`config.json`, model_type "eagle3"; architecture: module docstring).

    `for_target(target_cfg, ...)` fills the fields copied from the target and taps its low / mid /
    high layers (`default_target_layer_ids`).

    Fields:
      vocab_size: V, the target's vocabulary (the target's embedding and LM head are shared; a
        reduced draft vocabulary lives in the params, not here: `specjax.draft_vocab`).
      hidden_size: E, = the target's hidden size (the attention input is 2E: token embedding ; g).
      num_heads: query heads of the decoder layer.
      num_kv_heads: key/value heads (GQA: divides num_heads).
      head_dim: per-head width (not necessarily hidden_size / num_heads).
      intermediate_size: SwiGLU FFN width.
      target_layer_ids: 0-based target decoder layers whose outputs (residual stream after the layer)
        are fused by `fc` (n = their count, usually 3; the `fc` input is n * E).
      target_num_layers: decoder layer count of the target the drafter was trained for (checked).
      target_model_type: model_type of that target, e.g. "llama" (checked).
      rope_theta: RoPE base of the decoder layer (the target's by `for_target`).
      rms_norm_eps: epsilon of every RMSNorm (input, hidden, post-attention and final norms).
      num_layers: must be 1: EAGLE-3 is one decoder layer (its KV cache has one layer).
    """

    vocab_size: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    target_layer_ids: tuple[int, ...]
    target_num_layers: int
    target_model_type: str
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-6
    num_layers: int = 1

    model_type = "eagle3"
    kind = "EAGLE-3"
    tie_word_embeddings = False  # the loader asks; the LM head is the target's anyway

    def __post_init__(self):
        object.__setattr__(self, "target_layer_ids", tuple(int(i) for i in self.target_layer_ids))
        if self.num_layers != 1:
            raise ValueError(f"EAGLE-3 has exactly one decoder layer, got num_layers={self.num_layers}")
        self.check_layer_ids()
        self.layer_config()  # head / GQA checks

    @property
    def num_features(self) -> int:
        """n: tapped target layers; the fc input is n * hidden_size."""
        return len(self.target_layer_ids)

    def layer_config(self) -> llama.LlamaConfig:
        """The Llama config of the decoder layer (its attention input is 2E, see `Attention`)."""
        return llama.LlamaConfig(vocab_size=self.vocab_size, hidden_size=self.hidden_size, num_layers=1,
                                 num_heads=self.num_heads, num_kv_heads=self.num_kv_heads, head_dim=self.head_dim,
                                 intermediate_size=self.intermediate_size, rope_theta=self.rope_theta,
                                 rms_norm_eps=self.rms_norm_eps)

    @classmethod
    def for_target(cls, target_cfg, target_layer_ids: tuple[int, ...] | None = None, **overrides) -> "Eagle3Config":
        """A drafter config fitted to `target_cfg`: hidden size, heads, head dim, FFN and rope copied."""
        ids = target_layer_ids if target_layer_ids is not None else default_target_layer_ids(target_cfg.num_layers)
        return cls(**{**fitted_to(target_cfg, ids), **overrides})

    @classmethod
    def from_hf(cls, hf: dict[str, Any]) -> "Eagle3Config":
        r = ConfigReader(hf, "eagle3")
        if r.get("model_type") != "eagle3":
            raise UnsupportedConfigError(f"not an EAGLE-3 config: model_type {hf.get('model_type')!r}")
        cfg = cls(
            vocab_size=r.get("vocab_size", required=True), hidden_size=r.get("hidden_size", required=True),
            num_layers=r.get("num_hidden_layers", required=True), num_heads=r.get("num_attention_heads", required=True),
            num_kv_heads=r.get("num_key_value_heads", required=True), head_dim=r.get("head_dim", required=True),
            intermediate_size=r.get("intermediate_size", required=True),
            target_layer_ids=tuple(r.get("target_layer_ids", required=True)),
            target_num_layers=r.get("target_num_hidden_layers", required=True),
            target_model_type=r.get("target_model_type", required=True),
            rope_theta=float(r.get("rope_theta", required=True)), rms_norm_eps=float(r.get("rms_norm_eps", 1e-6)),
        )
        r.expect("hidden_act", ("silu",), "the EAGLE-3 layer uses SwiGLU")
        r.expect("attention_bias", (False,), "the EAGLE-3 layer has no biases")
        r.expect("tie_word_embeddings", (False,), "the LM head is the target's")
        r.expect("draft_vocab_size", (None, hf.get("vocab_size")), "a reduced draft vocabulary (d2t map)")
        r.finish()
        return cfg

    def to_hf(self) -> dict[str, Any]:
        return {
            "architectures": ["Eagle3DraftModel"], "model_type": "eagle3", "vocab_size": self.vocab_size,
            "draft_vocab_size": self.vocab_size, "hidden_size": self.hidden_size, "num_hidden_layers": 1,
            "num_attention_heads": self.num_heads, "num_key_value_heads": self.num_kv_heads,
            "head_dim": self.head_dim, "intermediate_size": self.intermediate_size,
            "target_layer_ids": list(self.target_layer_ids), "target_num_hidden_layers": self.target_num_layers,
            "target_model_type": self.target_model_type, "rope_theta": self.rope_theta,
            "rms_norm_eps": self.rms_norm_eps, "hidden_act": "silu", "attention_bias": False,
            "tie_word_embeddings": False,
        }


class Outer(nnx.Module):
    """Everything outside the layer: `fc` (features -> g) and the final `norm`."""

    def __init__(self, cfg: Eagle3Config, dtype, rngs: nnx.Rngs):
        self.fc = nnx.Linear(cfg.num_features * cfg.hidden_size, cfg.hidden_size, use_bias=False,
                             kernel_init=nnx.initializers.normal(0.02), param_dtype=dtype, rngs=rngs)
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, dtype)

    def fuse(self, features):
        """Target features [B, C, n, E] -> g [B, C, E]."""
        b, c = features.shape[:2]
        return self.fc(features.reshape(b, c, -1).astype(self.fc.kernel.dtype))


class Attention(llama.Attention):
    """Llama attention whose q/k/v read the 2E-wide concat(embedding, state); o maps back to E."""

    def __init__(self, cfg: llama.LlamaConfig, dtype, rngs: nnx.Rngs):
        e, h, k, d = cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        self.cfg = cfg
        self.q = init_normal(rngs, (2 * e, h, d), dtype)
        self.k = init_normal(rngs, (2 * e, k, d), dtype)
        self.v = init_normal(rngs, (2 * e, k, d), dtype)
        self.o = init_normal(rngs, (h, d, e), dtype)


class Block(nnx.Module):
    """The EAGLE-3 decoder layer (`midlayer` in the reference)."""

    def __init__(self, cfg: Eagle3Config, dtype, rngs: nnx.Rngs):
        lcfg = cfg.layer_config()
        self.hidden_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, dtype)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, dtype)
        self.self_attn = Attention(lcfg, dtype, rngs)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, dtype)
        self.mlp = llama.MLP(lcfg, dtype, rngs)

    def __call__(self, emb, g, positions, mask, kv: LayerKV):
        """emb, g [B, T, E] -> (out [B, T, E], kv): out is also the next step's g."""
        x = jnp.concatenate([self.input_layernorm(emb), self.hidden_norm(g)], axis=-1)  # [B, T, 2E]
        attn, kv = self.self_attn(x, positions, mask, kv)
        h = g + attn
        return h + self.mlp(self.post_attention_layernorm(h)), kv


def param_maps(cfg: Eagle3Config) -> tuple[list[ParamMap], list[ParamMap]]:
    """Reference tensor names <-> params paths: the Llama layer map under `midlayer.`, with 2E-wide
    q/k/v, plus `hidden_norm`; `fc` and the final `norm` outside."""
    e, h, k, d = cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    wide = {"q": h, "k": k, "v": k}  # heads of the projections that read concat(embedding, state)
    outer = [ParamMap("fc.weight", ("fc", "kernel"), Transform.linear()),
             ParamMap("norm.weight", ("norm", "weight"), Transform.identity())]
    layer = [ParamMap("midlayer.hidden_norm.weight", ("hidden_norm", "weight"), Transform.identity())]
    for m in llama.param_maps(cfg.layer_config())[1]:
        m = dataclasses.replace(m, hf_key=m.hf_key.replace("model.layers.{i}.", "midlayer."))
        if m.path[0] == "self_attn" and m.path[1] in wide:
            n = wide[m.path[1]]
            m = dataclasses.replace(m, transform=Transform.reshape_transpose((n * d, 2 * e), (n, d, 2 * e), (2, 0, 1)))
        layer.append(m)
    return outer, layer


IGNORED_KEYS = (r"midlayer\.self_attn\.rotary_emb\.inv_freq",)
