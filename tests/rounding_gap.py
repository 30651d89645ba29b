"""Float32 rounding: the gap between the zoo target's decode and prefill logits (tests/test_equality.py),
and the tolerance of a comparison between two reduction orders of one computation (`assert_close_f32`).

`python -m tests.rounding_gap` prints {dtype: gap} as JSON for float32 and bfloat16; the test
runs it in a child process with XLA's default flags (tests/xla_flags.py). Kept apart from the
test module so that the child imports nothing but specjax and the held-out prompts.

The tolerance, derived rather than fitted to one CPU (issue 51: AMD AVX-512 kernels failed a fixed
atol 2e-5 / rtol 1e-5 that Intel's passed). A float32 dot product of length n computed in any order
has error |fl(x.w) - x.w| <= gamma_n sum_i |x_i w_i|, gamma_n = n u / (1 - n u) ~ n u, u = 2^-24
(Higham, Accuracy and Stability of Numerical Algorithms, eq. 3.5); two orders (blocked, vectorised
differently: AMX vs AVX-512, a tree verify forward vs a whole-sequence prefill) differ by at most
twice that. Each element's error scales with its *inputs'* magnitude sum |x_i w_i|, not with its own
value: an element that cancels to ~0.2 can carry the error of its neighbours of ~5 -- so a relative
tolerance per element is wrong and the scale is the compared tensor's max |value| s (after RMSNorm
the rows are O(1), the tiny random weights keep sum |x_i w_i| within a small multiple of s). Through a
chain of `stages` matmuls on residual paths (each layer: attention and MLP branch) the errors add:

    |a - b| <= atol = 2 * stages * n * u * max(1, s)        (rtol 0)

with n the longest reduction on the path. E.g. tests/test_dflash.py's qwen target (E 32, FFN 64, taps
after layers 0 and 2: 3 layers, 6 branches) on features of s ~ 5: atol = 2 * 6 * 64 * 2^-24 * 5 =
2.3e-4, 10x the 2.24e-5 measured on AMD EPYC (the old atol 2e-5 + rtol 1e-5 |b| allowed 2.2e-5 on
an element of 0.2). Measured on AMD EPYC (2026-11-26), the DFlash / EAGLE-3 cache tests, max |a - b| / atol:
0.033 at XLA's default flags, 0.030 at the suite's, 0.037 with --xla_cpu_max_isa=AVX2 or
--xla_cpu_prefer_vector_width=128, 0.044 with --xla_cpu_enable_fast_math=true -- while an off-by-one
row differs by O(1), thousands of atols.
"""

import json

import jax
import jax.numpy as jnp
import numpy as np

from specjax import zoo
from specjax.decode import generate_ar
from specjax.equality import UNIT_ROUNDOFF
from specjax.models import init_cache, pad_prompts, prefill
from specjax.models.cache import commit
from specjax.models.model import forward
from tests.zoo_prompts import HELDOUT

F32_UNIT_ROUNDOFF = UNIT_ROUNDOFF["float32"]


def float32_atol(reference, reduction_length: int, stages: int) -> float:
    """The absolute tolerance between two reduction orders of one float32 computation (module docstring):
    2 * stages * reduction_length * u * max(1, max |reference|)."""
    scale = max(1.0, float(np.max(np.abs(np.asarray(reference, np.float64)), initial=0.0)))
    return 2 * stages * reduction_length * F32_UNIT_ROUNDOFF * scale


def assert_close_f32(actual, reference, reduction_length: int, stages: int, what: str = "") -> float:
    """Assert |actual - reference| <= float32_atol elementwise; returns the worst |actual - reference| / atol
    (the measured fraction of the derived bound)."""
    actual, reference = np.asarray(actual, np.float64), np.asarray(reference, np.float64)
    assert actual.shape == reference.shape, (what, actual.shape, reference.shape)
    atol = float32_atol(reference, reduction_length, stages)
    worst = float(np.max(np.abs(actual - reference), initial=0.0))
    assert worst <= atol, (f"{what}: max |diff| {worst:.3g} > atol {atol:.3g} = 2 * {stages} stages * n {reduction_length}"
                           f" * u * max(1, max|ref| {np.max(np.abs(reference), initial=0.0):.3g})")
    return worst / atol


def rounding_gap(dtype_name: str):
    """max over positions of |decode logits - prefill logits| / (u * max|logit|) on the zoo
    target: 3 held-out prompts, 32 prompt tokens, 48 greedy tokens each."""
    tcfg, tparams, tok = zoo.load("tiny-neox-target")
    dtype = jnp.dtype(dtype_name)
    params = jax.tree.map(lambda x: x.astype(dtype), tparams)
    worst = 0.0
    step = jax.jit(lambda p, x, c: forward(p, tcfg, x, c.lengths[:, None], jnp.ones((1, 1, 1), bool), c))
    for _, text in HELDOUT[:3]:
        ids = zoo.encode(tok, text)[:32]
        tokens, lengths = pad_prompts([ids])
        out = generate_ar(params, tcfg, tokens, lengths, 48, eos_ids=())
        seq = ids + np.asarray(out.tokens[0]).tolist()
        full, _, _ = prefill(params, tcfg, *pad_prompts([seq]), init_cache(tcfg, 1, len(seq), dtype))
        _, _, cache = prefill(params, tcfg, tokens, lengths, init_cache(tcfg, 1, len(seq) + 1, dtype))
        for j in range(len(ids), len(seq)):
            logits, cache = step(params, jnp.asarray([[seq[j]]], jnp.int32), cache)
            cache = commit(cache, jnp.zeros((1, 1), jnp.int32), jnp.ones((1,), jnp.int32))
            ref = np.asarray(full[0, j], np.float64)
            gap = np.max(np.abs(np.asarray(logits[0, 0], np.float64) - ref))
            worst = max(worst, gap / (UNIT_ROUNDOFF[dtype_name] * max(1.0, np.max(np.abs(ref)))))
    return worst


if __name__ == "__main__":
    print(json.dumps({d: rounding_gap(d) for d in ("float32", "bfloat16")}))
