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
inside its trace it passes None, which inherits the caller's policy.
"""

from __future__ import annotations

import contextlib

import jax

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
