"""The Domino draft model: a DFlash backbone plus a causal correction head (Domino, arXiv 2605.29707, §4.1).

Backbone: the DFlash drafter (`specjax.models.dflash`) unchanged; its block rows H_k (after
the final norm) give the *base* logits W_lm H_k through the target's frozen LM head.

Head (the only new parameters, `head.*`):
  * a one-layer unidirectional GRU without biases over the target's frozen, raw token
    embeddings, hidden size d_s = `gru_hidden`, h_0 = 0, PyTorch's gate convention:
        r = sigmoid(W_ir e + W_hr h), z = sigmoid(W_iz e + W_hz h),
        n = tanh(W_in e + r * (W_hn h)), h' = (1 - z) * n + z * h;
  * a low-rank correction in *logit* space, no biases, rank r = `head_rank`:
        L_i = base_{rho(i)} + W_2 SiLU(W_1 [H_{rho(i)} ; s_i]).

Draft i (i = 1 .. K, the token at position root + i) reads GRU state s_i = GRU(e(root),
e(y_1), ..., e(y_{i-1})) -- the state after i inputs, always starting from h_0 = 0 on the
root (bonus) token of the round -- and the block row rho(i):
  * the paper's alignment (`shift_label=False`, default): rho(i) = i, K = block_size - 1
    (the backbone is exactly a DFlash drafter: same-position labels);
  * the released checkpoints' (`shift_label=True`): rho(i) = i - 1 (row 0, the root's own row,
    predicts the next token), trained on K = block_size rows (`num_draft_positions`); at inference
    the reference drafts block_size - 1 of them (`num_inference_drafts`, the default of
    `DominoDrafter`; `DominoDrafter(num_drafts=block_size)` drafts all K). With `pure_prefix_len`
    P = 1 there, drafts i <= P use the base logits only (they still feed the GRU).
Both variants therefore share one rollout (`specjax.drafters.domino`): only rho and K differ.

A checkpoint is `config.json` (model_type "domino": the DFlash fields + `gru_hidden_dim`,
`head_rank`, `shift_label`, `pure_draft_prefix_len`) + `model.safetensors` (the DFlash
tensor names + `head.gru.weight_ih_l0` [3 d_s, E], `head.gru.weight_hh_l0` [3 d_s, d_s] in
PyTorch's (r, z, n) row order, `head.w1.weight` [r, E + d_s], `head.w2.weight` [V, r]).

The reference's own layout (SpecForge `DominoDraftModel`, a DFlash drafter in z-lab's layout) loads
and saves too (`DominoConfig.from_reference` / `to_reference`, recognised by `is_reference_config`):
a Qwen3 config.json whose `dflash_config` adds `projector_type` "domino", `emb_dim` (= head_rank r),
`gru_hidden_dim`, `shift_label`, `pure_draft_prefix_len`; the head's tensors are the torch module's
`prefix_gru.weight_ih_l0` / `prefix_gru.weight_hh_l0` (a bias-free nn.GRU) and
`embed_proj.0.weight` / `embed_proj.2.weight` (Linear, SiLU, Linear, no biases).
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

from flax import nnx

from specjax.models import dflash
from specjax.models.families import register
from specjax.models.hf_config import ConfigReader, UnsupportedConfigError, check_types
from specjax.models.loading_maps import ParamMap, Transform


@dataclasses.dataclass(frozen=True)
class DominoConfig(dflash.DFlashConfig):
    """A Domino drafter's config: `DFlashConfig`'s fields (see there) plus the head's (module docstring).

    Fields:
      gru_hidden: d_s >= 1, the GRU's hidden size (`gru_hidden_dim` in config.json).
      head_rank: r >= 1, rank of the low-rank logit correction W_2 SiLU(W_1 [H ; s]).
      shift_label: False: the paper's alignment (block row i drafts position root + i, K = block_size - 1
        drafts); True: the released checkpoints' (row i - 1 drafts it, K = block_size).
      pure_prefix_len: P in [0, K): drafts 1..P use the base logits only (they still feed the GRU);
        0 = the head corrects every draft (`pure_draft_prefix_len` in config.json).
    """

    gru_hidden: int = 64
    head_rank: int = 32
    shift_label: bool = False
    pure_prefix_len: int = 0

    model_type = "domino"
    kind = "Domino"

    def __post_init__(self):
        super().__post_init__()
        if self.gru_hidden < 1 or self.head_rank < 1:
            raise ValueError(f"Domino needs gru_hidden >= 1 and head_rank >= 1, got {self.gru_hidden}, "
                             f"{self.head_rank}")
        if not 0 <= self.pure_prefix_len < self.num_draft_positions:
            raise ValueError(f"Domino pure_prefix_len must lie in [0, {self.num_draft_positions}) (drafts per "
                             f"round), got {self.pure_prefix_len}")

    @property
    def num_draft_positions(self) -> int:
        """K trained draft positions per block: block_size - 1 (paper) or block_size (shifted labels)."""
        return self.block_size if self.shift_label else self.block_size - 1

    @property
    def num_inference_drafts(self) -> int:
        """Drafts per round at inference as the reference runs it: block_size - 1 in both alignments (the
        verified block is [root, y_1 .. y_{block_size - 1}])."""
        return self.block_size - 1

    def backbone(self) -> dflash.DFlashConfig:
        """The DFlash config of the backbone alone (the same layer stack and `fc`)."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(dflash.DFlashConfig)}
        return dflash.DFlashConfig(**fields)

    @classmethod
    def _read_fields(cls, r: ConfigReader) -> dict[str, Any]:
        return {**super()._read_fields(r), "gru_hidden": r.get("gru_hidden_dim", required=True),
                "head_rank": r.get("head_rank", required=True), "shift_label": r.get("shift_label", False),
                "pure_prefix_len": r.get("pure_draft_prefix_len", 0)}  # typed by the reader: no coercion

    def to_hf(self) -> dict[str, Any]:
        return {**super().to_hf(), "architectures": ["DominoDraftModel"], "model_type": "domino",
                "gru_hidden_dim": self.gru_hidden, "head_rank": self.head_rank, "shift_label": self.shift_label,
                "pure_draft_prefix_len": self.pure_prefix_len}

    @classmethod
    def from_reference(cls, hf: dict[str, Any]) -> "DominoConfig":
        """The config of a checkpoint in the reference's layout (SpecForge `DominoDraftModel`: DFlash's
        reference layout, `dflash_config` with the head's entries). Missing keys raise ValueError naming
        every one; a setting specjax does not implement raises UnsupportedConfigError."""
        where = f"Domino reference layout (SpecForge {REFERENCE_ARCHITECTURE})"
        dc = hf.get("dflash_config")
        if not isinstance(dc, dict):
            raise ValueError(f"{where}: 'dflash_config' must be a JSON object, got {dc!r}")
        check_types(hf, where)  # before any value is used: "shift_label": "false" would read as True
        missing = [f"dflash_config.{k}" for k in ("emb_dim", "gru_hidden_dim") if k not in dc]
        if missing:
            raise ValueError(f"{where}: config.json is missing required key(s) {missing}")
        if dc.get("projector_type", "domino") != "domino":
            raise UnsupportedConfigError(f"{where}: dflash_config.projector_type {dc['projector_type']!r}, "
                                         f"expected 'domino'")
        archs = hf.get("architectures", [REFERENCE_ARCHITECTURE])
        if list(archs) not in ([REFERENCE_ARCHITECTURE], [dflash.REFERENCE_ARCHITECTURE]):
            raise UnsupportedConfigError(f"{where}: architectures {archs!r} are not supported (only "
                                         f"[{REFERENCE_ARCHITECTURE!r}])")
        # SpecForge's published template (configs/qwen3-8b-domino.json) also carries a top-level `emb_dim`; its model
        # (specforge/modeling/draft/domino.py, DominoDraftModel._init_draft_head) reads only dflash_config["emb_dim"],
        # so the top-level copy is ignored here too (typed by check_types above), whatever its value.
        dflash_hf = {**{k: v for k, v in hf.items() if k not in _REFERENCE_IGNORED_KEYS},
                     "architectures": [dflash.REFERENCE_ARCHITECTURE]}  # the backbone's checks
        fields = cls._reference_fields(dflash_hf, where, _REFERENCE_HEAD_KEYS)
        return cls(**fields, gru_hidden=dc["gru_hidden_dim"], head_rank=dc["emb_dim"],  # typed by check_types
                   shift_label=dc.get("shift_label", False), pure_prefix_len=dc.get("pure_draft_prefix_len", 0))

    def to_reference(self) -> dict[str, Any]:
        """config.json in the reference's layout (the inverse of `from_reference`)."""
        hf = super().to_reference()
        hf["dflash_config"].update(projector_type="domino", emb_dim=self.head_rank, gru_hidden_dim=self.gru_hidden,
                                   shift_label=self.shift_label, pure_draft_prefix_len=self.pure_prefix_len)
        return {**hf, "architectures": [REFERENCE_ARCHITECTURE]}


REFERENCE_ARCHITECTURE = "DominoDraftModel"
_REFERENCE_HEAD_KEYS = ("projector_type", "emb_dim", "gru_hidden_dim", "shift_label", "pure_draft_prefix_len")
_REFERENCE_IGNORED_KEYS = ("emb_dim",)  # top-level copies the reference never reads (from_reference)


def is_reference_config(hf: dict[str, Any]) -> bool:
    """Whether a config.json dict is in the reference's Domino layout: DFlash's (a `dflash_config`) whose
    `dflash_config` names the Domino projector or carries its head's sizes."""
    dc = hf.get("dflash_config") if isinstance(hf, dict) else None
    return isinstance(dc, dict) and (dc.get("projector_type") == "domino" or "gru_hidden_dim" in dc)


class Head(nnx.Module):
    """The GRU + low-rank correction (module docstring). Kernels are stored (in, out)."""

    def __init__(self, cfg: DominoConfig, dtype, rngs: nnx.Rngs):
        lin = lambda i, o: nnx.Linear(i, o, use_bias=False, kernel_init=nnx.initializers.normal(0.02),  # noqa: E731
                                      param_dtype=dtype, rngs=rngs)
        e, d, r = cfg.hidden_size, cfg.gru_hidden, cfg.head_rank
        self.w_ih = lin(e, 3 * d)  # columns (r, z, n)
        self.w_hh = lin(d, 3 * d)
        self.w1 = lin(e + d, r)
        self.w2 = lin(r, cfg.vocab_size)


class Outer(dflash.Outer):
    """DFlash's outer params (`fc`, `hidden_norm`, `norm`) + the Domino `head`."""

    def __init__(self, cfg: DominoConfig, dtype, rngs: nnx.Rngs):
        super().__init__(cfg, dtype, rngs)
        self.head = Head(cfg, dtype, rngs)


Block = dflash.Block


HEAD_KEYS = ("head.gru.weight_ih_l0", "head.gru.weight_hh_l0", "head.w1.weight", "head.w2.weight")
REFERENCE_HEAD_TENSORS = ("prefix_gru.weight_ih_l0", "prefix_gru.weight_hh_l0", "embed_proj.0.weight",
                          "embed_proj.2.weight")  # the same four, as the reference names them (same shapes)


def param_maps(cfg: DominoConfig) -> tuple[list[ParamMap], list[ParamMap]]:
    outer, layer = dflash.param_maps(cfg)
    paths = (("head", "w_ih", "kernel"), ("head", "w_hh", "kernel"), ("head", "w1", "kernel"), ("head", "w2", "kernel"))
    return outer + [ParamMap(k, p, Transform.linear()) for k, p in zip(HEAD_KEYS, paths)], layer


def from_reference_names(tensors: dict) -> dict:
    """A reference-layout state dict renamed to specjax's Domino tensor names (the head's four; the rest agree)."""
    renamed = dict(zip(REFERENCE_HEAD_TENSORS, HEAD_KEYS))
    return {renamed.get(k, k): v for k, v in tensors.items()}


def to_reference_names(tensors: dict) -> dict:
    """The inverse of `from_reference_names`."""
    renamed = dict(zip(HEAD_KEYS, REFERENCE_HEAD_TENSORS))
    return {renamed.get(k, k): v for k, v in tensors.items()}


IGNORED_KEYS = dflash.IGNORED_KEYS

FAMILY = register(sys.modules[__name__], DominoConfig, ("domino",),  # before DFlash: its layout extends DFlash's
                  reference=(is_reference_config, DominoConfig.from_reference), reference_order=0)
