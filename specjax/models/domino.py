"""The Domino draft model: a DFlash backbone plus a causal correction head (PAPER_NOTES 2.1).

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
  * the released checkpoints' (`shift_label=True`): rho(i) = i - 1, K = block_size (row 0,
    the root's own row, predicts the next token); with `pure_prefix_len` P = 1 there,
    drafts i <= P use the base logits only (they still feed the GRU).
Both variants therefore share one rollout (`specjax.drafters.domino`): only rho and K differ.

A checkpoint is `config.json` (model_type "domino": the DFlash fields + `gru_hidden_dim`,
`head_rank`, `shift_label`, `pure_draft_prefix_len`) + `model.safetensors` (the DFlash
tensor names + `head.gru.weight_ih_l0` [3 d_s, E], `head.gru.weight_hh_l0` [3 d_s, d_s] in
PyTorch's (r, z, n) row order, `head.w1.weight` [r, E + d_s], `head.w2.weight` [V, r]).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from flax import nnx

from specjax.models import dflash
from specjax.models.hf_config import ConfigReader
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
        """K drafts per round: block_size - 1 (paper) or block_size (shifted labels)."""
        return self.block_size if self.shift_label else self.block_size - 1

    def backbone(self) -> dflash.DFlashConfig:
        """The DFlash config of the backbone alone (the same layer stack and `fc`)."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(dflash.DFlashConfig)}
        return dflash.DFlashConfig(**fields)

    @classmethod
    def _read_fields(cls, r: ConfigReader) -> dict[str, Any]:
        return {**super()._read_fields(r), "gru_hidden": r.get("gru_hidden_dim", required=True),
                "head_rank": r.get("head_rank", required=True), "shift_label": bool(r.get("shift_label", False)),
                "pure_prefix_len": int(r.get("pure_draft_prefix_len", 0))}

    def to_hf(self) -> dict[str, Any]:
        return {**super().to_hf(), "architectures": ["DominoDraftModel"], "model_type": "domino",
                "gru_hidden_dim": self.gru_hidden, "head_rank": self.head_rank, "shift_label": self.shift_label,
                "pure_draft_prefix_len": self.pure_prefix_len}


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


def param_maps(cfg: DominoConfig) -> tuple[list[ParamMap], list[ParamMap]]:
    outer, layer = dflash.param_maps(cfg)
    head = [
        ParamMap("head.gru.weight_ih_l0", ("head", "w_ih", "kernel"), Transform.linear()),
        ParamMap("head.gru.weight_hh_l0", ("head", "w_hh", "kernel"), Transform.linear()),
        ParamMap("head.w1.weight", ("head", "w1", "kernel"), Transform.linear()),
        ParamMap("head.w2.weight", ("head", "w2", "kernel"), Transform.linear()),
    ]
    return outer + head, layer


IGNORED_KEYS = dflash.IGNORED_KEYS
