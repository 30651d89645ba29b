"""The DFlash draft model (block diffusion drafter conditioned on the target's features).

Architecture ("DFlash: Block Diffusion for Flash Speculative Decoding", arXiv 2602.06036, §3, and
its reference code, z-lab/dflash `DFlashDraftModel`):
  * `fc`: Linear(n * E -> E, no bias) over the concatenated features of n tapped target
    layers, then `hidden_norm` (RMSNorm): the context vector c of each committed position;
  * N_d Qwen3-style decoder layers (`specjax.models.llama.Block` with q/k RMSNorm, SwiGLU,
    no biases), hidden size E = the target's; every layer *injects* c: its keys and values
    for a context position are k_norm(k_proj(c)), v_proj(c) at that position (c goes
    through no input_layernorm), so the draft's KV cache holds projected target features;
  * the block [root, mask, ..., mask] of `block_size` tokens attends bidirectionally to
    itself and to every context key; final `norm` (RMSNorm);
  * frozen and *shared by reference*, not part of these params: the target's token
    embedding (block inputs) and LM head (logits = W_lm norm(x)). Hence E and the vocabulary
    must be the target's.

A checkpoint directory is `config.json` (model_type "dflash", naming the target it was
trained for: hidden size, vocab, layer count, tapped layer ids) + `model.safetensors` with
the reference's tensor names (`fc.weight`, `hidden_norm.weight`, `norm.weight`,
`layers.{i}.self_attn.q_proj.weight`, ...). Loading goes through the strict loader
(`specjax.models.load_checkpoint`); `check_target` raises naming every mismatch.

The reference's own released layout (z-lab/dflash `DFlashDraftModel`: a Qwen3 config.json,
model_type "qwen3", with `dflash_config` {target_layer_ids, mask_token_id}, `block_size`,
`num_target_layers`, `auto_map`) holds the same tensor names; `load_checkpoint` recognises
it by its `dflash_config` key (`DFlashConfig.from_reference`) and
`save_checkpoint(..., layout="reference")` writes it (`DFlashConfig.to_reference`). That
layout does not record the target's model type (target_model_type None: not checked).

Taps: `target_layer_ids` are target layers whose outputs are read (the residual stream after the
layer). For the target's *last* layer the reference reads HF `hidden_states[-1]`, which is after
the target's final norm; `norm_last_layer` (set by `from_reference`) does the same here: the
drafter passes that tap through the target's final norm (`specjax.models.dflash_net.drafter_features`,
used in decoding and in training), so a reference drafter that taps the last layer runs as trained.
A drafter trained on that tap raw (norm_last_layer False) has no reference form: the norm discards each
token's scale, which its context depends on, so no change of weights converts it (`to_reference` says so).
Without `dflash_config.target_layer_ids` a reference config taps z-lab's rule (`default_target_layer_ids`).
The pure forward functions live with the drafter (`specjax.drafters.dflash`).
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

from flax import nnx

from specjax.models import llama
from specjax.models.families import register
from specjax.models.hf_config import ConfigReader, UnsupportedConfigError, check_types
from specjax.models.layers import RMSNorm
from specjax.models.loading_maps import ParamMap, Transform
from specjax.models.target_bound import TargetBound, fitted_to


def default_target_layer_ids(target_num_layers: int, num_draft_layers: int) -> tuple[int, ...]:
    """The reference's choice: [L_t // 2] for one draft layer, else round(1 + i (L_t - 4) / (N_d - 1)).
    Tiny targets get duplicates (4 layers, 2 draft layers -> (1, 1)): choose ids explicitly there."""
    if num_draft_layers == 1:
        return (target_num_layers // 2,)
    return tuple(int(round(1 + i * (target_num_layers - 4) / (num_draft_layers - 1))) for i in range(num_draft_layers))


@dataclasses.dataclass(frozen=True)
class DFlashConfig(TargetBound):
    """A DFlash drafter's config (`config.json`, model_type "dflash"; architecture: module docstring).

    `for_target(target_cfg, num_layers, ...)` fills the fields copied from the target (vocab,
    hidden size, heads, head dim, FFN, rope, norm eps, target layer count and type).

    Fields:
      vocab_size: V, the target's vocabulary (the target's embedding and LM head are shared).
      hidden_size: E, = the target's hidden size (features and block share one width).
      num_layers: N_d >= 1, draft decoder layers (the context KV cache has N_d layers).
      num_heads: query heads of each draft layer.
      num_kv_heads: K, key/value heads of each draft layer (GQA: divides num_heads).
      head_dim: D, per-head width of each draft layer (not necessarily hidden_size / num_heads).
      intermediate_size: SwiGLU FFN width of each draft layer.
      target_layer_ids: 0-based target decoder layers whose outputs (residual stream after the layer) are read
        (n = their count; the `fc` input is n * E); each in [0, target_num_layers).
      target_num_layers: decoder layer count of the target the drafter was trained for (checked).
      target_model_type: model_type of that target, e.g. "qwen3" (checked); None when the checkpoint does
        not record it (the reference layout), and then not checked.
      block_size: trained block: the root + block_size - 1 mask tokens -> block_size - 1 draft
        positions per forward (>= 2; default 16).
      mask_token_id: token id of the mask token filling the block after the root, in [0, V).
      rope_theta: RoPE base of the draft layers (the target's by `for_target`).
      rms_norm_eps: epsilon of every RMSNorm (q/k norms, hidden_norm, final norm).
      norm_last_layer: True: a tap of the target's last layer is read after the target's final norm (HF
        hidden_states[-1], the reference's convention); False: the raw residual, like every other tap
        (specjax's drafters trained before this field). No effect unless the last layer is tapped.
    """

    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    target_layer_ids: tuple[int, ...]
    target_num_layers: int
    target_model_type: str | None
    block_size: int = 16
    mask_token_id: int = 0
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-6
    norm_last_layer: bool = False

    model_type = "dflash"
    kind = "DFlash"
    tie_word_embeddings = False  # the loader asks; the LM head is the target's anyway

    def __post_init__(self):
        object.__setattr__(self, "target_layer_ids", tuple(int(i) for i in self.target_layer_ids))
        if self.block_size < 2:
            raise ValueError(f"DFlash block_size must be >= 2 (the root + at least one mask token), got {self.block_size}")
        if not 0 <= self.mask_token_id < self.vocab_size:
            raise ValueError(f"DFlash mask_token_id {self.mask_token_id} is outside the vocabulary [0, {self.vocab_size})")
        self.check_layer_ids()
        if self.num_layers < 1:
            raise ValueError(f"DFlash needs >= 1 draft layer, got {self.num_layers}")
        self.layer_config()  # head / GQA checks

    @property
    def num_features(self) -> int:
        """n: tapped target layers; the fc input is n * hidden_size."""
        return len(self.target_layer_ids)

    @property
    def num_draft_positions(self) -> int:
        """L = block_size - 1 positions drafted per forward."""
        return self.block_size - 1

    def layer_config(self) -> llama.LlamaConfig:
        """The Qwen3-style config of one draft layer (no biases, q/k norm, SwiGLU)."""
        return llama.LlamaConfig(vocab_size=self.vocab_size, hidden_size=self.hidden_size, num_layers=self.num_layers,
                                 num_heads=self.num_heads, num_kv_heads=self.num_kv_heads, head_dim=self.head_dim,
                                 intermediate_size=self.intermediate_size, rope_theta=self.rope_theta,
                                 rms_norm_eps=self.rms_norm_eps, qk_norm=True, flavor="qwen3")

    @classmethod
    def for_target(cls, target_cfg, num_layers: int = 1, target_layer_ids: tuple[int, ...] | None = None,
                   **overrides) -> "DFlashConfig":
        """A drafter config fitted to `target_cfg`: hidden size, heads, head dim, FFN and rope copied."""
        ids = target_layer_ids if target_layer_ids is not None else default_target_layer_ids(target_cfg.num_layers,
                                                                                            num_layers)
        return cls(**{**fitted_to(target_cfg, ids), "num_layers": num_layers, **overrides})

    @classmethod
    def from_hf(cls, hf: dict[str, Any]) -> "DFlashConfig":
        r = ConfigReader(hf, cls.model_type)
        if r.get("model_type") != cls.model_type:
            raise UnsupportedConfigError(f"not a {cls.kind} config: model_type {hf.get('model_type')!r}")
        cfg = cls(**cls._read_fields(r))
        r.expect("hidden_act", ("silu",), f"{cls.kind} layers use SwiGLU")
        r.expect("attention_bias", (False,), f"{cls.kind} layers have no biases")
        r.expect("tie_word_embeddings", (False,), "the LM head is the target's")
        r.get("training")  # the data recipe, kept next to the weights
        r.finish()
        return cfg

    @classmethod
    def _read_fields(cls, r: ConfigReader) -> dict[str, Any]:
        """The constructor fields from a reader (subclasses add theirs)."""
        return dict(
            vocab_size=r.get("vocab_size", required=True), hidden_size=r.get("hidden_size", required=True),
            num_layers=r.get("num_hidden_layers", required=True), num_heads=r.get("num_attention_heads", required=True),
            num_kv_heads=r.get("num_key_value_heads", required=True), head_dim=r.get("head_dim", required=True),
            intermediate_size=r.get("intermediate_size", required=True),
            target_layer_ids=tuple(r.get("target_layer_ids", required=True)),
            target_num_layers=r.get("target_num_hidden_layers", required=True),
            target_model_type=r.get("target_model_type", required=True),
            block_size=r.get("block_size", required=True), mask_token_id=r.get("mask_token_id", required=True),
            rope_theta=float(r.get("rope_theta", required=True)), rms_norm_eps=float(r.get("rms_norm_eps", 1e-6)),
            norm_last_layer=r.get("norm_last_layer", False),  # a JSON boolean (the reader checks every type)
        )

    def to_hf(self) -> dict[str, Any]:
        return {
            "architectures": ["DFlashDraftModel"], "model_type": "dflash", "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size, "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads, "num_key_value_heads": self.num_kv_heads,
            "head_dim": self.head_dim, "intermediate_size": self.intermediate_size,
            "target_layer_ids": list(self.target_layer_ids), "target_num_hidden_layers": self.target_num_layers,
            "target_model_type": self.target_model_type, "block_size": self.block_size,
            "mask_token_id": self.mask_token_id, "rope_theta": self.rope_theta, "rms_norm_eps": self.rms_norm_eps,
            "norm_last_layer": self.norm_last_layer, "hidden_act": "silu", "attention_bias": False,
            "tie_word_embeddings": False,
        }

    @classmethod
    def from_reference(cls, hf: dict[str, Any]) -> "DFlashConfig":
        """The config of a checkpoint in the reference's layout (z-lab/dflash `DFlashDraftModel`, a Qwen3
        config.json with `dflash_config`). A missing required key raises ValueError naming every one; a
        setting specjax does not implement (DFlash-2 modules, causal or sliding attention, logit scaling)
        raises UnsupportedConfigError. A tap of the target's last layer reads it after the final norm, as
        the reference does (`norm_last_layer`)."""
        return cls(**cls._reference_fields(hf, "DFlash reference layout (z-lab/dflash DFlashDraftModel)", ()))

    @classmethod
    def _reference_fields(cls, hf: dict[str, Any], where: str, extra: tuple[str, ...]) -> dict[str, Any]:
        """The DFlash fields of a reference-layout config.json (`from_reference`); `extra`: further
        dflash_config keys a subclass reads itself."""
        dc = hf.get("dflash_config")
        if not isinstance(dc, dict):
            raise ValueError(f"{where}: 'dflash_config' must be a JSON object, got {dc!r}")
        check_types(hf, where)  # "shift_label": "false" is not False; true is not a layer count
        required = ["dflash_config.mask_token_id"] if "mask_token_id" not in dc else []
        required += [k for k in ("num_target_layers", "vocab_size", "hidden_size", "num_hidden_layers",
                                 "num_attention_heads", "intermediate_size") if k not in hf]
        if required:
            raise ValueError(f"{where}: config.json is missing required key(s) {required}")
        if hf.get("model_type") != "qwen3":
            raise UnsupportedConfigError(f"{where}: model_type {hf.get('model_type')!r}, expected 'qwen3'")
        archs = hf.get("architectures", [REFERENCE_ARCHITECTURE])
        if list(archs) != [REFERENCE_ARCHITECTURE]:
            raise UnsupportedConfigError(f"{where}: architectures {archs!r} are not supported (only "
                                         f"[{REFERENCE_ARCHITECTURE!r}]; DFlash-2 adds convolutions and a selector)")
        unknown = sorted(set(dc) - {"target_layer_ids", "mask_token_id", "block_size"} - set(_REFERENCE_NEUTRAL)
                         - set(extra))
        changed = sorted(k for k, off in _REFERENCE_NEUTRAL.items() if k in dc and dc[k] not in off)
        if unknown or changed:
            raise UnsupportedConfigError(f"{where}: dflash_config entries specjax does not implement: "
                                         f"{unknown + changed}")
        if hf.get("is_causal") not in (None, False):
            raise UnsupportedConfigError(f"{where}: is_causal={hf['is_causal']!r} (specjax's block is bidirectional)")
        block = dc.get("block_size", hf.get("block_size", 16))
        if "block_size" in dc and "block_size" in hf and dc["block_size"] != hf["block_size"]:
            raise ValueError(f"{where}: block_size {hf['block_size']} and dflash_config.block_size "
                             f"{dc['block_size']} differ")
        num_target = hf["num_target_layers"]
        # z-lab/dflash dflash/model.py (DFlashDraftModel.__init__): without target_layer_ids, its own
        # build_target_layer_ids(num_target_layers, num_hidden_layers), which is `default_target_layer_ids`
        ids = dc.get("target_layer_ids")
        if ids is None and isinstance(num_target, int) and isinstance(hf["num_hidden_layers"], int):
            ids = list(default_target_layer_ids(num_target, hf["num_hidden_layers"]))
        if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
            raise ValueError(f"{where}: dflash_config.target_layer_ids must be a list of integers, got {ids!r}")
        rest = {k: v for k, v in hf.items() if k not in _REFERENCE_ONLY_KEYS}
        layer = llama.LlamaConfig.from_hf(rest)  # the Qwen3 part, strictly: rope, sliding windows, biases
        if layer.qkv_bias or layer.o_bias or layer.hidden_act != "silu":
            raise UnsupportedConfigError(f"{where}: layers with attention biases or hidden_act "
                                         f"{layer.hidden_act!r} (specjax's DFlash layers: no biases, SwiGLU)")
        if layer.rope_scaling is not None:
            raise UnsupportedConfigError(f"{where}: rope scaling in the draft layers is not supported")
        return dict(vocab_size=layer.vocab_size, hidden_size=layer.hidden_size, num_layers=layer.num_layers,
                    num_heads=layer.num_heads, num_kv_heads=layer.num_kv_heads, head_dim=layer.head_dim,
                    intermediate_size=layer.intermediate_size, target_layer_ids=tuple(ids),
                    target_num_layers=num_target, target_model_type=None, block_size=block,
                    mask_token_id=dc["mask_token_id"], rope_theta=layer.rope_theta, rms_norm_eps=layer.rms_norm_eps,
                    norm_last_layer=isinstance(num_target, int) and num_target - 1 in ids)

    def to_reference(self) -> dict[str, Any]:
        """config.json in the reference's layout (the inverse of `from_reference`; target_model_type is not
        recorded there). Raises ValueError for a drafter the reference would run differently."""
        if self.target_num_layers is None:
            raise ValueError("the DFlash reference layout records the target's layer count (num_target_layers): "
                             "set target_num_layers")
        last = self.target_num_layers - 1
        if last in self.target_layer_ids and not self.norm_last_layer:
            below = ",".join(str(i) for i in sorted({min(i, last - 1) for i in self.target_layer_ids}))
            raise ValueError(
                f"target_layer_ids {list(self.target_layer_ids)} tap the target's last layer ({last}) raw "
                f"(norm_last_layer False); the {self.kind} reference reads that layer only after the target's final "
                f"norm (HF hidden_states[-1]). No exact conversion exists: the final norm discards each token's scale "
                f"(a LayerNorm also its mean), on which this drafter's context hidden_norm(fc(features)) depends, so "
                f"no change of weights reproduces it. Nearest correct path: retrain on taps below the last layer "
                f"(python -m specjax.train {self.model_type} --target-layers {below} ...), which saves to this layout; "
                f"this drafter itself runs from specjax's layout (save_checkpoint(..., layout=\"specjax\"))")
        n = self.num_layers
        return {
            "architectures": [REFERENCE_ARCHITECTURE], "auto_map": dict(REFERENCE_AUTO_MAP), "model_type": "qwen3",
            "block_size": self.block_size, "num_target_layers": self.target_num_layers,
            "dflash_config": {"mask_token_id": self.mask_token_id, "target_layer_ids": list(self.target_layer_ids)},
            "vocab_size": self.vocab_size, "hidden_size": self.hidden_size, "intermediate_size": self.intermediate_size,
            "num_hidden_layers": n, "num_attention_heads": self.num_heads, "num_key_value_heads": self.num_kv_heads,
            "head_dim": self.head_dim, "hidden_act": "silu", "rms_norm_eps": self.rms_norm_eps,
            "rope_theta": self.rope_theta, "rope_scaling": None, "attention_bias": False, "attention_dropout": 0.0,
            "tie_word_embeddings": False, "use_sliding_window": False, "sliding_window": None,
            "max_window_layers": n, "layer_types": ["full_attention"] * n,
        }


# The reference layout (z-lab/dflash): its draft class, how transformers finds its code (the reference's
# dflash.py next to the weights), the keys specjax reads itself before parsing the Qwen3 rest, and the
# dflash_config entries of later variants accepted only at their neutral values.
REFERENCE_ARCHITECTURE = "DFlashDraftModel"
REFERENCE_AUTO_MAP = {"AutoModel": "dflash.DFlashDraftModel"}
_REFERENCE_ONLY_KEYS = ("dflash_config", "block_size", "num_target_layers", "auto_map", "is_causal", "architectures")
_REFERENCE_NEUTRAL = {"input_embedding_scale": (1, 1.0), "output_multiplier": (1, 1.0),
                      "final_logit_softcapping": (None, 0, 0.0)}


def is_reference_config(hf: dict[str, Any]) -> bool:
    """Whether a config.json dict is in the reference's DFlash layout (it has `dflash_config`)."""
    return isinstance(hf, dict) and "dflash_config" in hf


class Outer(nnx.Module):
    """Everything outside the layer stack: `fc` + `hidden_norm` (features -> context c), final `norm`."""

    def __init__(self, cfg: DFlashConfig, dtype, rngs: nnx.Rngs):
        self.fc = nnx.Linear(cfg.num_features * cfg.hidden_size, cfg.hidden_size, use_bias=False,
                             kernel_init=nnx.initializers.normal(0.02), param_dtype=dtype, rngs=rngs)
        self.hidden_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, dtype)
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, dtype)

    def context(self, features):
        """Target features [B, C, n, E] -> context vectors c [B, C, E]."""
        b, c = features.shape[:2]
        return self.hidden_norm(self.fc(features.reshape(b, c, -1).astype(self.fc.kernel.dtype)))


def Block(cfg: DFlashConfig, dtype, rngs: nnx.Rngs) -> llama.Block:
    """One draft layer: a Qwen3 decoder layer (the context K/V come from its own k/v projections)."""
    return llama.Block(cfg.layer_config(), dtype, rngs)


def param_maps(cfg: DFlashConfig) -> tuple[list[ParamMap], list[ParamMap]]:
    """Reference tensor names <-> params paths: the llama layer map without the `model.` prefix."""
    outer = [
        ParamMap("fc.weight", ("fc", "kernel"), Transform.linear()),
        ParamMap("hidden_norm.weight", ("hidden_norm", "weight"), Transform.identity()),
        ParamMap("norm.weight", ("norm", "weight"), Transform.identity()),
    ]
    _, layer = llama.param_maps(cfg.layer_config())
    return outer, [dataclasses.replace(m, hf_key=m.hf_key.replace("model.layers.", "layers.")) for m in layer]


IGNORED_KEYS = (r"layers\.\d+\.self_attn\.rotary_emb\.inv_freq", r"rotary_emb\.inv_freq")

FAMILY = register(sys.modules[__name__], DFlashConfig, ("dflash",),
                  reference=(is_reference_config, DFlashConfig.from_reference), reference_order=1)
