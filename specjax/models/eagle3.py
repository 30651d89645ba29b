"""The EAGLE-3 draft model: one decoder layer over (token embedding, fused target features).

Architecture ("EAGLE-3: Scaling up Inference Acceleration of Large Language Models via
Training-Time Test", arXiv 2503.01840, §3; the reference code's `LlamaForCausalLMEagle3`):
  * `fc`: Linear(n * E -> E, no bias) over the concatenated outputs of n tapped target
    layers (low / mid / high): g_t = fc(f_t), the drafter's input state at a committed
    position t. At later draft steps g is the drafter's *own* previous output hidden
    state (the "training-time test" unroll; `specjax.train.eagle3`);
  * one decoder layer (`Block`, `midlayer` in the reference): x = concat(input_layernorm(emb(token)),
    hidden_norm(g)) of width 2E feeds q/k/v projections 2E -> heads; the residual stream is g
    itself: h = g + o_proj(attn(x)); out = h + mlp(post_attention_layernorm(h)) (SwiGLU, no
    biases, Llama-style attention without q/k norm, rotary);
  * final `norm` (RMSNorm), then an LM head, in one of two modes (`draft_vocab_size`):
      - the paper's (draft_vocab_size = K): the drafter's *own* trained `lm_head` [E, K] over a
        reduced draft vocabulary, whose ids (params["draft_vocab"]["ids"] int32[K],
        `specjax.models.draft_vocab`; the reference's `d2t` / `t2d` maps) place its K logits in the
        target's vocabulary (every other column EXCLUDED_LOGIT: verification stays lossless);
      - the target's frozen LM head (draft_vocab_size None; the zoo drafters trained before the
        own head existed), optionally restricted to the K columns of a draft vocabulary.
    The token embedding is always the target's frozen one (shared by reference, not stored), so
    E and V are the target's.

Taps: `target_layer_ids` are 0-based target layers whose *outputs* are read. The reference
captures the *inputs* of layers 2, L // 2, L - 3, i.e. the outputs of layers 1, L // 2 - 1,
L - 4 (`default_target_layer_ids`); SpecForge's `eagle_config.eagle_aux_hidden_state_layer_ids`
counts as specjax does (outputs of layer i; its serving code captures the input of layer i + 1).

Pairing (what makes the drafter's rows line up with the target): the row of committed
position t reads (f_t, token x_{t+1}) at rotary position t and predicts x_{t+2}; a tree node
at depth d below a root at target position r reads (its parent's output, its token) at
position r - 1 + d. So the root (bonus token) *is* drafted from known features f_{r-1}.

A checkpoint directory is `config.json` (model_type "eagle3", naming the target: hidden size,
vocab, layer count, tapped layer ids, `draft_vocab_size` and `own_lm_head`) + `model.safetensors`
with the reference's tensor names (`fc.weight`, `midlayer.self_attn.q_proj.weight`, ...,
`norm.weight`, `lm_head.weight` [K, E] with the own head, `draft_vocab.ids`); loading is the
strict loader's (`specjax.models.load_checkpoint`); `check_target` names every mismatch.
The reference's own layout (a Llama config.json with `draft_vocab_size`, tensors `d2t` / `t2d`)
loads too (`Eagle3Config.from_reference`, recognised by `is_reference_config`) and
`save_checkpoint(..., layout="reference")` writes it (`Eagle3Config.to_reference`). A published config
without `eagle_config` leaves the taps to the target, as both references do (`reference_target_layer_ids`,
`with_target_taps`; `load_checkpoint(DIR, target_cfg=)`).
The pure forward functions live with the drafter (`specjax.drafters.eagle3`).
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

import jax.numpy as jnp
from flax import nnx

from specjax.models import llama
from specjax.models.families import register
from specjax.models.hf_config import ConfigReader, UnsupportedConfigError, check_types
from specjax.models.layers import LayerKV, RMSNorm, init_normal
from specjax.models.loading_maps import ParamMap, Transform
from specjax.models.target_bound import TargetBound, fitted_to


def default_target_layer_ids(target_num_layers: int) -> tuple[int, int, int]:
    """EAGLE-3's low / mid / high taps as the reference takes them: it captures the *inputs* of
    layers 2, L // 2, L - 3, i.e. the outputs of layers (1, L // 2 - 1, L - 4), 0-based (32 layers ->
    (1, 15, 28)). Targets too small for three distinct such layers (L < 7) get (0, L // 2, L - 1)
    instead (4 layers -> (0, 2, 3)), a choice of specjax's."""
    if target_num_layers < 3:
        raise ValueError(f"EAGLE-3 reads three target layers; the target has only {target_num_layers}")
    low, mid, high = 1, target_num_layers // 2 - 1, target_num_layers - 4
    if not 0 <= low < mid < high:  # tiny targets
        low, mid, high = 0, target_num_layers // 2, target_num_layers - 1
    return (low, mid, high)


@dataclasses.dataclass(frozen=True)
class Eagle3Config(TargetBound):
    """An EAGLE-3 drafter's config (`config.json`, model_type "eagle3"; architecture: module docstring).

    `for_target(target_cfg, ...)` fills the fields copied from the target and taps its low / mid /
    high layers (`default_target_layer_ids`).

    Fields:
      vocab_size: V, the target's vocabulary (the target's embedding is shared; the draft vocabulary's
        ids live in the params, params["draft_vocab"]["ids"]: `specjax.models.draft_vocab`).
      hidden_size: E, = the target's hidden size (the attention input is 2E: token embedding ; g).
      num_heads: query heads of the decoder layer.
      num_kv_heads: key/value heads (GQA: divides num_heads).
      head_dim: per-head width (not necessarily hidden_size / num_heads).
      intermediate_size: SwiGLU FFN width.
      target_layer_ids: 0-based target decoder layers whose outputs (residual stream after the layer)
        are fused by `fc` (n = their count, usually 3; the `fc` input is n * E).
      target_num_layers: decoder layer count of the target the drafter was trained for (checked); None
        when the checkpoint does not record it (the reference layout), and then only the ids are checked.
      target_model_type: model_type of that target, e.g. "llama" (checked); None when unrecorded.
      rope_theta: RoPE base of the decoder layer (the target's by `for_target`; 10000 when a reference
        config omits it).
      rms_norm_eps: epsilon of every RMSNorm (input, hidden, post-attention and final norms).
      num_layers: must be 1: EAGLE-3 is one decoder layer (its KV cache has one layer).
      draft_vocab_size: K, the paper's mode: the drafter's own `lm_head` [E, K] (params["lm_head"]),
        its columns the ids params["draft_vocab"]["ids"] int32[K] (required unless K == V); None: the
        target's LM head (the mode of the zoo's older drafters). Recorded in config.json as
        `own_lm_head` + `draft_vocab_size`.
    """

    vocab_size: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    target_layer_ids: tuple[int, ...]
    target_num_layers: int | None
    target_model_type: str | None
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-6
    num_layers: int = 1
    draft_vocab_size: int | None = None

    model_type = "eagle3"
    kind = "EAGLE-3"
    tie_word_embeddings = False  # the loader asks; the LM head is the target's anyway

    def __post_init__(self):
        object.__setattr__(self, "target_layer_ids", tuple(int(i) for i in self.target_layer_ids))
        if self.num_layers != 1:
            raise ValueError(f"EAGLE-3 has exactly one decoder layer, got num_layers={self.num_layers}")
        k = self.draft_vocab_size
        if k is not None and (isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= self.vocab_size):
            raise ValueError(f"EAGLE-3 draft_vocab_size (its own lm_head's K) must be an int in [1, "
                             f"{self.vocab_size}] or None (the target's head), got {k!r}")
        self.check_layer_ids()
        self.layer_config()  # head / GQA checks

    @property
    def num_features(self) -> int:
        """n: tapped target layers; the fc input is n * hidden_size."""
        return len(self.target_layer_ids)

    @property
    def own_head(self) -> bool:
        """Whether the drafter projects with its own `lm_head` [E, K] (the paper's) rather than the target's."""
        return self.draft_vocab_size is not None

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
            draft_vocab_size=r.get("draft_vocab_size", required=True) if r.get("own_lm_head", False) else None,
        )
        r.expect("hidden_act", ("silu",), "the EAGLE-3 layer uses SwiGLU")
        r.expect("attention_bias", (False,), "the EAGLE-3 layer has no biases")
        r.expect("tie_word_embeddings", (False,), "the LM head is the drafter's own or the target's")
        if not cfg.own_head:
            r.expect("draft_vocab_size", (None, hf.get("vocab_size")), "with the target's head (own_lm_head false) "
                     "the draft vocabulary is the tensor draft_vocab.ids; set own_lm_head true for a trained lm_head")
        r.finish()
        return cfg

    def to_hf(self) -> dict[str, Any]:
        return {
            "architectures": ["Eagle3DraftModel"], "model_type": "eagle3", "vocab_size": self.vocab_size,
            "own_lm_head": self.own_head, "draft_vocab_size": self.draft_vocab_size or self.vocab_size,
            "hidden_size": self.hidden_size, "num_hidden_layers": 1,
            "num_attention_heads": self.num_heads, "num_key_value_heads": self.num_kv_heads,
            "head_dim": self.head_dim, "intermediate_size": self.intermediate_size,
            "target_layer_ids": list(self.target_layer_ids), "target_num_hidden_layers": self.target_num_layers,
            "target_model_type": self.target_model_type, "rope_theta": self.rope_theta,
            "rms_norm_eps": self.rms_norm_eps, "hidden_act": "silu", "attention_bias": False,
            "tie_word_embeddings": False,
        }


    @classmethod
    def from_reference(cls, hf: dict[str, Any]) -> "Eagle3Config":
        """The config of a checkpoint in the reference's layout (SpecForge `LlamaForCausalLMEagle3`, or
        SafeAILab/EAGLE's training config, architectures ["LlamaForCausalLM"]: a Llama config.json with
        `draft_vocab_size`; the rest is read as a Llama config whatever its model_type says, as both references
        read it; `head_dim` defaults to hidden / heads and `rope_theta` to 10000 when absent, as the reference
        reads them; keys its draft model never reads are ignored). The tapped layers are
        `eagle_config.eagle_aux_hidden_state_layer_ids` (outputs of layer i, as specjax counts); a config without
        them leaves them to the target (`with_target_taps`, `load_checkpoint(..., target_cfg=)`); the target's
        layer count and type are not recorded (None: not checked). A missing key raises ValueError naming every
        one; a setting specjax does not implement raises UnsupportedConfigError; a field of the wrong JSON type
        raises ConfigTypeError naming it."""
        check_types(hf, REFERENCE_WHERE)
        required = [k for k in ("vocab_size", "draft_vocab_size", "hidden_size", "num_attention_heads",
                                "intermediate_size") if k not in hf]
        if required:
            raise ValueError(f"{REFERENCE_WHERE}: config.json is missing required key(s) {required}")
        archs = list(hf.get("architectures") or [REFERENCE_ARCHITECTURE])
        if archs not in ([REFERENCE_ARCHITECTURE], [EAGLE_TRAIN_ARCHITECTURE]):
            raise UnsupportedConfigError(f"{REFERENCE_WHERE}: architectures {archs!r} are not supported (only "
                                         f"[{REFERENCE_ARCHITECTURE!r}] or EAGLE's [{EAGLE_TRAIN_ARCHITECTURE!r}])")
        if archs == [EAGLE_TRAIN_ARCHITECTURE] and hf.get("head_dim", hf["hidden_size"] // hf["num_attention_heads"]) \
                != hf["hidden_size"] // hf["num_attention_heads"]:  # EAGLE's cnets.py: head_dim = hidden // heads
            raise UnsupportedConfigError(f"{REFERENCE_WHERE}: head_dim {hf['head_dim']} (EAGLE's drafter ignores "
                                         f"it and uses hidden_size // num_attention_heads)")
        changed = sorted(k for k, neutral in _REFERENCE_NEUTRAL.items() if hf.get(k) not in neutral)
        if changed:
            raise UnsupportedConfigError(f"{REFERENCE_WHERE}: {changed} set (EAGLE-3 variants specjax does not "
                                         f"implement: fc_norm adds an RMSNorm per tapped layer; norm_output false "
                                         f"skips the final norm)")
        ec = hf.get("eagle_config") or {}
        if not isinstance(ec, dict):
            raise ValueError(f"{REFERENCE_WHERE}: 'eagle_config' must be a JSON object, got {ec!r}")
        ids = ec.get("eagle_aux_hidden_state_layer_ids")
        if ids is None:
            raise UnsupportedConfigError(
                f"{REFERENCE_WHERE}: config.json does not say which target layers the drafter reads (no "
                f"eagle_config.eagle_aux_hidden_state_layer_ids); the reference then takes the outputs of layers "
                f"[1, L // 2 - 1, L - 4] of its L-layer target: load it with "
                f"specjax.models.load_checkpoint(DIR, target_cfg=TARGET_CFG), or add \"eagle_config\": "
                f"{{\"eagle_aux_hidden_state_layer_ids\": [1, L // 2 - 1, L - 4]}} to config.json")
        if not isinstance(ids, list) or len(ids) != 3 or not all(isinstance(i, int) for i in ids):
            raise ValueError(f"{REFERENCE_WHERE}: eagle_config.eagle_aux_hidden_state_layer_ids must be a list of "
                             f"three integers (the reference's fc reads 3 * hidden_size), got {ids!r}")
        unknown = sorted(set(ec) - {"eagle_aux_hidden_state_layer_ids", "use_aux_hidden_state"})
        if unknown or ec.get("use_aux_hidden_state", True) is not True:
            raise UnsupportedConfigError(f"{REFERENCE_WHERE}: eagle_config entries specjax does not implement: "
                                         f"{unknown or ['use_aux_hidden_state']}")
        if hf.get("target_hidden_size", hf["hidden_size"]) != hf["hidden_size"]:
            raise UnsupportedConfigError(f"{REFERENCE_WHERE}: target_hidden_size {hf['target_hidden_size']} differs "
                                         f"from hidden_size {hf['hidden_size']} (specjax's drafter has the target's width)")
        if hf.get("num_hidden_layers", 1) != 1:
            raise UnsupportedConfigError(f"{REFERENCE_WHERE}: num_hidden_layers {hf['num_hidden_layers']} (EAGLE-3 is "
                                         f"one decoder layer)")
        rest = {k: v for k, v in hf.items() if k not in _REFERENCE_ONLY_KEYS + _REFERENCE_IGNORED_KEYS}
        # strictly: rope, biases, the rest; read as Llama's whatever model_type says (the reference's LlamaConfig)
        layer = llama.LlamaConfig.from_hf({**rest, "model_type": "llama", "num_hidden_layers": 1})
        if layer.qkv_bias or layer.o_bias or layer.mlp_bias or layer.hidden_act != "silu":
            raise UnsupportedConfigError(f"{REFERENCE_WHERE}: a layer with biases or hidden_act {layer.hidden_act!r} "
                                         f"(specjax's EAGLE-3 layer: no biases, SwiGLU)")
        if layer.rope_scaling is not None:
            raise UnsupportedConfigError(f"{REFERENCE_WHERE}: rope_scaling in the draft layer is not supported")
        if layer.tie_word_embeddings:
            raise UnsupportedConfigError(f"{REFERENCE_WHERE}: tie_word_embeddings true (the drafter's lm_head is its own)")
        return cls(vocab_size=layer.vocab_size, hidden_size=layer.hidden_size, num_heads=layer.num_heads,
                   num_kv_heads=layer.num_kv_heads, head_dim=layer.head_dim, intermediate_size=layer.intermediate_size,
                   target_layer_ids=tuple(ids), target_num_layers=None, target_model_type=None,
                   rope_theta=layer.rope_theta, rms_norm_eps=layer.rms_norm_eps,
                   draft_vocab_size=hf["draft_vocab_size"])

    def to_reference(self) -> dict[str, Any]:
        """config.json in the reference's layout (the inverse of `from_reference`; the target's layer count and
        type are not recorded there). Raises ValueError for a drafter the layout cannot hold."""
        if not self.own_head:
            raise ValueError("the EAGLE-3 reference layout stores the drafter's own lm_head: this drafter uses the "
                             "target's (draft_vocab_size None); convert it with specjax.models.eagle3_net."
                             "with_own_head(params, cfg, target_params, target_cfg) first (the same logits)")
        if self.num_features != 3:
            raise ValueError(f"the EAGLE-3 reference layout reads exactly three target layers (fc: 3 * hidden_size), "
                             f"this drafter reads {list(self.target_layer_ids)}")
        return {
            "architectures": [REFERENCE_ARCHITECTURE], "model_type": "llama", "vocab_size": self.vocab_size,
            "draft_vocab_size": self.draft_vocab_size, "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size, "num_hidden_layers": 1, "num_attention_heads": self.num_heads,
            "num_key_value_heads": self.num_kv_heads, "head_dim": self.head_dim, "hidden_act": "silu",
            "rms_norm_eps": self.rms_norm_eps, "rope_theta": self.rope_theta, "rope_scaling": None,
            "max_position_embeddings": REFERENCE_MAX_POSITIONS, "attention_bias": False, "attention_dropout": 0.0,
            "mlp_bias": False, "pretraining_tp": 1, "tie_word_embeddings": False,
            "eagle_config": {"eagle_aux_hidden_state_layer_ids": list(self.target_layer_ids),
                             "use_aux_hidden_state": True},
        }


# The reference layout (SpecForge / EAGLE): its draft class (SpecForge's; EAGLE's own training config names the
# plain Llama class), the keys specjax reads itself before parsing the Llama rest, the keys the reference's draft
# model never reads (SpecForge specforge/modeling/draft/llama3_eagle.py, LlamaForCausalLMEagle3 and its
# LlamaAttention: no sliding window, no MoE, no target type; published configs copied from their target's carry
# them), the variants' keys accepted at their neutral values, and the rotary table length written (the reference
# extends its table past it when needed).
REFERENCE_ARCHITECTURE = "LlamaForCausalLMEagle3"
EAGLE_TRAIN_ARCHITECTURE = "LlamaForCausalLM"  # SafeAILab/EAGLE eagle/traineagle3/config.json
REFERENCE_WHERE = "EAGLE-3 reference layout (SpecForge / EAGLE LlamaForCausalLMEagle3)"
REFERENCE_MAX_POSITIONS = 2048
REFERENCE_TENSORS = ("d2t", "t2d")  # int64[K] offsets, bool[V] membership: the draft vocabulary's maps
_REFERENCE_ONLY_KEYS = ("draft_vocab_size", "eagle_config", "architectures", "target_hidden_size", "num_hidden_layers",
                        "fc_norm", "norm_output")
_REFERENCE_IGNORED_KEYS = ("use_sliding_window", "sliding_window", "max_window_layers", "layer_types",
                           "decoder_sparse_step", "target_model_type")
_REFERENCE_NEUTRAL = {"fc_norm": (None, False), "norm_output": (None, True)}


def reference_target_layer_ids(target_num_layers: int) -> tuple[int, int, int]:
    """The taps both references take when a config.json names none: the outputs of layers 1, L // 2 - 1, L - 4
    (0-based) of an L-layer target, whatever L (no tiny-target fallback, unlike `default_target_layer_ids`).

    SafeAILab/EAGLE eagle/model/modeling_llama_kv.py (LlamaModel.forward) appends the hidden state *entering*
    layers idx == 2, L // 2 and L - 3, i.e. the outputs of layers 1, L // 2 - 1, L - 4. SpecForge
    specforge/algorithms/model_providers.py (resolve_eagle_capture_layers) falls back to [1, L // 2 - 1, L - 4]
    counted as *outputs*: its capture hook (sglang set_eagle3_layers_to_capture) adds 1 and records the input of
    that layer. The same three layers. Raises ValueError for L < 4 (L - 4 would be negative)."""
    if target_num_layers < 4:
        raise ValueError(f"the EAGLE-3 reference's default taps [1, L // 2 - 1, L - 4] need a target of >= 4 layers, "
                         f"got {target_num_layers}")
    return (1, target_num_layers // 2 - 1, target_num_layers - 4)


def with_target_taps(hf: dict[str, Any], target_num_layers: int) -> dict[str, Any]:
    """A reference-layout config.json dict whose taps are left to the target (no
    `eagle_config.eagle_aux_hidden_state_layer_ids`, as SpecForge's llama3-8B-eagle3.json and EAGLE's own
    training config) with them filled in as the reference takes them from a `target_num_layers`-layer target
    (`reference_target_layer_ids`); any other dict unchanged. Pure: `hf` is not modified."""
    ec = hf.get("eagle_config") if isinstance(hf, dict) else None
    if not is_reference_config(hf) or (isinstance(ec, dict) and ec.get("eagle_aux_hidden_state_layer_ids") is not None):
        return hf
    if ec is not None and not isinstance(ec, dict):
        return hf  # from_reference names the malformed entry
    taps = list(reference_target_layer_ids(target_num_layers))
    return {**hf, "eagle_config": {**(ec or {}), "eagle_aux_hidden_state_layer_ids": taps}}


def is_reference_config(hf: dict[str, Any]) -> bool:
    """Whether a config.json dict is in the reference's EAGLE-3 layout: not specjax's model_type "eagle3", and a
    `draft_vocab_size` key or an EAGLE-3 architecture name."""
    if not isinstance(hf, dict) or hf.get("model_type") == "eagle3":
        return False
    archs = hf.get("architectures") or []
    return "draft_vocab_size" in hf or any("Eagle3" in str(a) for a in archs)


class Outer(nnx.Module):
    """Everything outside the layer: `fc` (features -> g), the final `norm` and, in the paper's mode,
    the own `lm_head` (kernel [E, K])."""

    def __init__(self, cfg: Eagle3Config, dtype, rngs: nnx.Rngs):
        self.fc = nnx.Linear(cfg.num_features * cfg.hidden_size, cfg.hidden_size, use_bias=False,
                             kernel_init=nnx.initializers.normal(0.02), param_dtype=dtype, rngs=rngs)
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, dtype)
        if cfg.own_head:
            self.lm_head = nnx.Linear(cfg.hidden_size, cfg.draft_vocab_size, use_bias=False,
                                      kernel_init=nnx.initializers.normal(0.02), param_dtype=dtype, rngs=rngs)

    def fuse(self, features):
        """Target features [B, C, n, E] -> g [B, C, E]."""
        b, c = features.shape[:2]
        return self.fc(features.reshape(b, c, -1).astype(self.fc.kernel.dtype))


class Attention(llama.Attention):
    """Llama attention whose q/k/v read the 2E-wide concat(embedding, state); o maps back to E."""

    def __init__(self, cfg: llama.LlamaConfig, dtype, rngs: nnx.Rngs):
        e, h, k, d = cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        self.cfg, self.fused = cfg, False  # separate q / k / v kernels (`llama.Attention`'s unfused form)
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
    if cfg.own_head:
        outer.append(ParamMap("lm_head.weight", ("lm_head", "kernel"), Transform.linear()))
    layer = [ParamMap("midlayer.hidden_norm.weight", ("hidden_norm", "weight"), Transform.identity())]
    for m in llama.param_maps(cfg.layer_config())[1]:
        m = dataclasses.replace(m, hf_key=m.hf_key.replace("model.layers.{i}.", "midlayer."))
        if m.path[0] == "self_attn" and m.path[1] in wide:
            n = wide[m.path[1]]
            m = dataclasses.replace(m, transform=Transform.reshape_transpose((n * d, 2 * e), (n, d, 2 * e), (2, 0, 1)))
        layer.append(m)
    return outer, layer


# The target's embedding, which the reference's checkpoints may carry (SpecForge drops it when saving, EAGLE
# loads it from the target): specjax always embeds with the target's own, so a copy is not read.
IGNORED_KEYS = (r"midlayer\.self_attn\.rotary_emb\.inv_freq", r"embed_tokens\.weight")

FAMILY = register(sys.modules[__name__], Eagle3Config, ("eagle3",),
                  reference=(is_reference_config, Eagle3Config.from_reference), reference_order=1)
