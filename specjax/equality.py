"""Is a greedy speculative output the AR output? Identical, a near-tie, or a mismatch.

Greedy speculative decoding emits exactly AR's tokens *given the same logits*. The two
runs compute the logits of a position by different reductions (the verify forward over
a tree of T tokens vs the decode forward over 1 token), so they agree only to the
floating-point error of that computation; where AR's top-2 logits are closer than that
error, argmax may flip and the continuations legitimately part. Anything else is a bug.

`compare_with_ar` finds the first position where the outputs differ, recomputes AR's
logits there with a plain prefill of prompt + AR's tokens so far, and classifies:

    identical   same tokens, same length
    near-tie    first difference where AR's top-2 margin m < eps (the run is lossless up to
                float rounding; everything after it is a different, equally valid continuation)
    MISMATCH    first difference where m >= eps: a losslessness bug

`near_tie_eps(dtype, matmul_precision, scale)` is the threshold: eps = K u s, u the unit
roundoff of the arithmetic that produces the logits (float32 2^-24, TF32 2^-11, bfloat16
2^-8) and s = max(1, max |logit|) of AR's logits at that position. Two reduction orders
of the same forward differ by a few units in the last place of the values they round, so
the two runs' logits differ by c u s with a small c, and argmax can flip only where the
margin is below twice that.

K comes from the measured c (`MEASURED_GAP`; tests/rounding_gap.py: the zoo target's decode
forward vs its prefill forward, 3 prompts x 48 tokens, XLA's default flags): K = 2 * FLIP_FACTOR *
GAP_BOUND, where GAP_BOUND = GAP_MARGIN * max measured c = 1.5 * 21.44 = 32.16 bounds c on every
x86-64 CPU measured with room for kernels not measured (XLA:CPU blocks and vectorises reductions
per CPU -- Intel AMX, AMD AVX-512, AVX2 -- so c moves with the machine), and FLIP_FACTOR = 3 keeps
the threshold three times above the flip condition 2 c u s. So K = 192.96; a margin above eps is
not a rounding effect. (The earlier K = 128 allowed c <= 21.33 and failed on AMD EPYC's 21.44.)
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from specjax.models import init_cache, pad_prompts, prefill

__all__ = ["Agreement", "ar_logits", "compare_with_ar", "count", "near_tie_eps", "FLIP_FACTOR", "GAP_BOUND",
           "GAP_MARGIN", "MEASURED_GAP", "NEAR_TIE_FACTOR", "UNIT_ROUNDOFF"]

# unit roundoff of the arithmetic the logits come from (TF32 keeps 10 mantissa bits; bf16x3 ~ f32)
UNIT_ROUNDOFF = {"float32": 2.0**-24, "tensorfloat32": 2.0**-11, "bfloat16": 2.0**-8, "float16": 2.0**-11}

# c = max |decode logits - prefill logits| / (u * max(1, max|logit|)) measured by tests/rounding_gap.py at
# XLA's default flags, per dtype and CPU. XLA:CPU flag variations on the AMD host (2026-11-26), float32:
# --xla_cpu_max_isa=SSE4_2 19.97, =AVX2 21.44, --xla_cpu_prefer_vector_width=128 23.60, =512 22.93,
# --xla_cpu_enable_fast_math=true 21.66; the suite's O0 flags (tests/xla_flags.py) 23.30 (24.6 recorded on an
# earlier host): all below GAP_BOUND.
MEASURED_GAP = {
    "float32": {"Intel Xeon, AVX-512 + AMX": 18.0, "AMD EPYC, AVX-512 (no AMX)": 21.44},
    "bfloat16": {"Intel Xeon, AVX-512 + AMX": 1.3, "AMD EPYC, AVX-512 (no AMX)": 1.0},
}
GAP_MARGIN = 1.5  # room over the largest measured c for kernels not measured
GAP_BOUND = GAP_MARGIN * max(c for gaps in MEASURED_GAP.values() for c in gaps.values())  # 32.16
FLIP_FACTOR = 3  # eps stays this many times above the argmax flip condition 2 c u s
NEAR_TIE_FACTOR = 2 * FLIP_FACTOR * GAP_BOUND  # K = 192.96 in eps = K u s


def near_tie_eps(dtype, matmul_precision: str = "highest", scale: float = 16.0) -> float:
    """Margin below which a divergence from AR is a rounding effect (module docstring).

    dtype: the params' / activations' dtype; matmul_precision: the policy the run used
    ("highest": full precision for float32; "high" / "default" may use TF32-class float32
    matmuls on GPUs); scale: max |logit| at the position (clamped below at 1)."""
    name = jnp.dtype(dtype).name
    if name not in UNIT_ROUNDOFF:
        raise ValueError(f"no near-tie threshold for dtype {name!r}; known: {sorted(UNIT_ROUNDOFF)}")
    if name == "float32" and matmul_precision not in ("highest", "float32"):
        name = "tensorfloat32"  # reduced-precision float32 matmuls (TF32 class on NVIDIA GPUs)
    return NEAR_TIE_FACTOR * UNIT_ROUNDOFF[name] * max(1.0, float(scale))


@dataclasses.dataclass(frozen=True)
class Agreement:
    """How a greedy output compares with AR's on one prompt (module docstring).

    Fields:
      kind: "identical" | "near-tie" | "MISMATCH" (a MISMATCH is a losslessness bug; so is a pure
        length difference: one output stopped early with the same prefix).
      position: index into the generated tokens of the first difference (for a pure length
        difference, the shorter output's length); None if identical.
      margin: AR's top-2 logit margin at `position` (float64 of AR's float32 logits); None for
        identical, and for a pure length difference.
      eps: the near-tie threshold used, in logit units (`near_tie_eps` or the caller's).
    """

    kind: str
    position: int | None
    margin: float | None
    eps: float

    def __str__(self) -> str:
        if self.kind == "identical":
            return "identical"
        where = f"at generated token {self.position}"
        if self.margin is None:
            return f"{self.kind} {where} (lengths differ)"
        rel = "<" if self.kind == "near-tie" else ">="
        return f"{self.kind} {where} (AR top-2 margin {self.margin:.3g} {rel} eps {self.eps:.3g})"


def ar_logits(params, cfg, sequence, matmul_precision: str = "highest") -> np.ndarray:
    """AR's float32 logits f64[V] for the token after `sequence` (a plain prefill)."""
    tokens, lengths = pad_prompts([list(sequence)])
    dtype = jax.tree.leaves(params)[0].dtype
    logits, _, _ = prefill(params, cfg, tokens, lengths, init_cache(cfg, 1, tokens.shape[1], dtype),
                           matmul_precision=matmul_precision)
    return np.asarray(logits[0, -1], np.float64)


def compare_with_ar(params, cfg, prompt, ar_tokens, spec_tokens, *, eps: float | None = None,
                    matmul_precision: str = "highest") -> Agreement:
    """Classify a greedy output against AR's (module docstring).

    prompt: token ids; ar_tokens / spec_tokens: the generated tokens of each (only the
    real ones: trimmed to each row's num_tokens). eps defaults to `near_tie_eps` of the
    params' dtype under `matmul_precision`, at the scale of AR's logits there."""
    ar, spec = (np.asarray(x).reshape(-1) for x in (ar_tokens, spec_tokens))
    dtype = jax.tree.leaves(params)[0].dtype
    n = min(len(ar), len(spec))
    diff = np.nonzero(ar[:n] != spec[:n])[0]
    if len(diff) == 0:
        fixed = near_tie_eps(dtype, matmul_precision) if eps is None else eps
        if len(ar) == len(spec):
            return Agreement("identical", None, None, fixed)
        return Agreement("MISMATCH", n, None, fixed)  # same prefix, one stopped early: not a rounding effect
    j = int(diff[0])
    logits = ar_logits(params, cfg, list(prompt) + ar[:j].tolist(), matmul_precision)
    top2 = np.sort(logits)[-2:]
    margin = float(top2[1] - top2[0])
    if eps is None:
        eps = near_tie_eps(dtype, matmul_precision, np.max(np.abs(logits)))
    return Agreement("near-tie" if margin < eps else "MISMATCH", j, margin, eps)


def count(agreements) -> dict[str, int]:
    """{"identical": n, "near-tie": n, "MISMATCH": n} over a list of Agreement."""
    out = {"identical": 0, "near-tie": 0, "MISMATCH": 0}
    for a in agreements:
        out[a.kind] += 1
    return out
