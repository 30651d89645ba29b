"""specjax's precision policy: float32 means float32 on every backend.

JAX's default precision for float32 matmuls is backend-dependent (on NVIDIA GPUs it
may run them as TF32 or bf16 passes) and user-settable (`JAX_DEFAULT_MATMUL_PRECISION`).
Speculative decoding compares the target's verify forward (T tokens) with its decode
forward (1 token): reduced precision rounds the two differently, and greedy argmax
flips at near-ties. So every jitted entry point of specjax traces its body under an
explicit policy, whatever the environment says:

    "highest"  (default) full float32 matmuls (bf16 params: bf16 inputs, the LM head
               accumulates and returns float32; attention scores/softmax and norm
               statistics are float32 in any case)
    "high"     bf16x3-class passes on GPUs (close to float32, faster)
    "default"  the backend's fast path (TF32 on NVIDIA GPUs): the opt-in trade of
               exactness for speed; `specjax.equality.near_tie_eps` widens accordingly

Jitted entry points take `matmul_precision` as a static argument; when one calls another
inside its trace it passes None, which inherits the caller's policy. The decode loops are
also compiled with per-backend XLA options (`decode_compiler_options`, below).
"""

from __future__ import annotations

import contextlib

import jax

__all__ = [
    "check_precision", "decode_compiler_options", "DEFAULT_PRECISION", "matmul_scope", "PRECISIONS",
    "TRITON_GEMM_OFF_FROM_HIDDEN",
]

PRECISIONS = ("highest", "high", "default")
DEFAULT_PRECISION = "highest"


def check_precision(precision) -> None:
    """Raise ValueError (early, on the host) for an unknown policy; None (inherit) is allowed."""
    if precision is not None and precision not in PRECISIONS:
        raise ValueError(f"matmul_precision must be one of {PRECISIONS}, got {precision!r}")


def matmul_scope(precision):
    """Context under which a jitted body is traced: the policy, or nothing for None (inherit)."""
    check_precision(precision)
    return contextlib.nullcontext() if precision is None else jax.default_matmul_precision(precision)


# ---------------------------------------------------------------------------- compiler options
#
# The matmul path is the other half of the policy. XLA:GPU's default lowers the batch-1
# matrix-vector products of decoding to Triton GEMM kernels; cuBLAS is much faster for
# them on large models. Measured on one H100 (jax 0.11.2, bf16, batch 1, random weights;
# issue 16): Qwen3-8B shape 15.8 ms/token with Triton GEMMs, 6.9 ms without (bandwidth
# bound 4.9 ms); SmolLM2-135M shape (hidden 576) 1.28 ms with, 1.48 ms without. So specjax
# compiles its decode loops without Triton GEMMs from this hidden size up, per jitted
# function (no environment variable for the user to set). The threshold sits between the
# two measured shapes; where exactly it should be is still to be measured on a GPU.
TRITON_GEMM_OFF_FROM_HIDDEN = 2048


def decode_compiler_options(cfg, backend: str | None = None) -> tuple[tuple[str, object], ...]:
    """XLA options for compiling a decode loop of target `cfg` on `backend` (default: jax's
    default backend), as a hashable tuple of (name, value): () on CPU and for small models."""
    # Not on CPU: xla_llvm_disable_expensive_passes as a per-function option left DynaTree's
    # first compile unchanged (24.1 s vs 24.3 s, zoo target, 64 new tokens) and slowed its
    # rounds 215 -> 251 ms (chain4 167 -> 189 ms); measured 2026-11-24, see issue 16's notes.
    backend = jax.default_backend() if backend is None else backend
    if backend in ("gpu", "cuda") and cfg.hidden_size >= TRITON_GEMM_OFF_FROM_HIDDEN:
        return (("xla_gpu_enable_triton_gemm", False),)
    return ()
