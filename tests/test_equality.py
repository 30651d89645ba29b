"""The precision policy (specjax.numerics) and the near-tie accounting (specjax.equality).

References: the lowered HLO of the jitted entry points (every dot at the policy's
precision, whatever the ambient JAX setting); the zoo target's logits computed two ways
(the 1-token decode forward vs the prefill forward) to measure the rounding gap the
near-tie threshold must cover, in float32 and bfloat16; hand-built divergences for the
classifier; and, with reduced precision forced on a CPU (bfloat16 params), every
speculative method's long generations classified against AR.
"""

import functools
import json
import os
import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax import zoo
from specjax.decode import _generate, _generate_ar, cache_sizes, eos_table, generate_ar
from specjax.equality import (GAP_BOUND, MEASURED_GAP, NEAR_TIE_FACTOR, Agreement, ar_logits, compare_with_ar, count,
                              near_tie_eps)
from specjax.models import init_cache, pad_prompts
from specjax.numerics import check_precision
from specjax.sampling import Sampling
from tests.reduced_precision import SPECS as REDUCED_PRECISION_SPECS
from tests.drafter_fixtures import zoo_pair
from tests.xla_flags import RUN_HEAVY_XLA_FLAGS, child_env
from tests.zoo_prompts import HELDOUT


def dots(hlo: str) -> list[str]:
    return re.findall(r"dot_general.*?precision = \[(\w+), (\w+)\]", hlo)


@pytest.mark.parametrize("policy, expect", [("highest", "HIGHEST"), ("default", "DEFAULT")])
def test_policy_is_specjax_s_not_the_environment_s(policy, expect):
    """A user environment asking for bfloat16 matmuls does not reach specjax's entry points:
    the lowered AR and speculative programs carry the policy's precision on every dot."""
    tcfg, tparams, tok, dcfg, dparams = zoo_pair()
    from specjax.drafters.dflash import DFlashDrafter

    tokens, lengths = pad_prompts([[5, 6, 7]])
    drafter = DFlashDrafter(dcfg, tcfg, block_size=4)
    slots, reserve = cache_sizes(drafter, 3, 8)
    with jax.default_matmul_precision("bfloat16"):  # what JAX_DEFAULT_MATMUL_PRECISION=bfloat16 would set
        ar = _generate_ar.lower(tparams, tcfg, tokens, lengths, init_cache(tcfg, 1, 11), None, max_new_tokens=8,
                                eos=eos_table(()), sampling=Sampling(), pad_id=0, matmul_precision=policy).as_text()
        spec = _generate.lower(tparams, tcfg, drafter, dparams, tokens, lengths, None, max_new_tokens=8,
                               eos=eos_table(()),
                               sampling=Sampling(), pad_id=0, num_slots=slots, reserve=reserve,
                               matmul_precision=policy).as_text()
    for hlo in (ar, spec):
        found = dots(hlo)
        assert len(found) > 10 and all(a == b == expect for a, b in found), sorted(set(found))
    with pytest.raises(ValueError, match="matmul_precision must be one of"):
        generate_ar(tparams, tcfg, tokens, lengths, 4, matmul_precision="tf32")
    with pytest.raises(ValueError, match="matmul_precision must be one of"):
        check_precision("bfloat16")


def test_near_tie_threshold_per_dtype():
    k = 2 * 3 * 1.5 * 21.44  # from the measured gaps: 2 * FLIP_FACTOR * GAP_MARGIN * max c (specjax/equality.py)
    assert NEAR_TIE_FACTOR == pytest.approx(k) and GAP_BOUND == pytest.approx(1.5 * 21.44)
    assert near_tie_eps(jnp.float32) == pytest.approx(k * 2.0**-24 * 16)
    assert near_tie_eps(jnp.float32, "default") == pytest.approx(k * 2.0**-11 * 16)  # TF32-class float32
    assert near_tie_eps(jnp.bfloat16, scale=0.1) == pytest.approx(k * 2.0**-8)  # scale clamped at 1
    with pytest.raises(ValueError, match="no near-tie threshold for dtype 'int32'"):
        near_tie_eps(jnp.int32)


def child_with_xla_flags(module: str, flags: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """`python -m <module>` from the repository root, compiled with XLA's default flags plus `flags`
    (tests/xla_flags.py) instead of the suite's TEST_XLA_FLAGS."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = child_env(flags)
    env["PYTHONPATH"] = os.pathsep.join([root, os.path.join(root, "tests"), *filter(None, [env.get("PYTHONPATH")])])
    return subprocess.run([sys.executable, "-m", module], env=env, cwd=root, capture_output=True, text=True)


@functools.lru_cache(maxsize=1)
def rounding_gaps_with_default_flags() -> dict[str, float]:
    """tests/rounding_gap.py's gap of both dtypes, measured in a child process compiled with XLA's default
    flags: the threshold must cover the library's numerics, not the suite's cheaper
    compilation (tests/xla_flags.py; at XLA:CPU O0 the float32 gap measured 24.6)."""
    run = child_with_xla_flags("tests.rounding_gap")
    assert run.returncode == 0, run.stderr[-4000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("dtype_name", ["float32", "bfloat16"])
def test_threshold_covers_the_measured_rounding_gap(dtype_name):
    """Decode and prefill logits differ by c u s; an argmax flip needs a margin below 2 c u s;
    the threshold K u s (K = 2 * 3 * GAP_BOUND = 192.96) exceeds that by a factor 3 for any c up to
    GAP_BOUND = 32.16: 1.5x over every c measured (specjax.equality.MEASURED_GAP: float32 18 on Intel
    AVX-512 + AMX, 21.44 on AMD EPYC AVX-512, where the former K = 128 failed; bfloat16 1.0 to 1.3).
    This machine's c must stay within the bound, with XLA's default flags."""
    c = rounding_gaps_with_default_flags()[dtype_name]
    print(f"{dtype_name}: decode vs prefill logits differ by up to {c:.2f} u * max|logit| "
          f"(measured elsewhere: {MEASURED_GAP[dtype_name]}; bound {GAP_BOUND:.2f})")
    assert 0 < c <= GAP_BOUND and 2 * c * 3 <= NEAR_TIE_FACTOR, c


def test_classifier_identical_near_tie_mismatch():
    tcfg, tparams, tok, _, _ = zoo_pair()
    prompt = zoo.encode(tok, HELDOUT[0][1])[:20]
    ar = np.asarray(generate_ar(tparams, tcfg, *pad_prompts([prompt]), 12, eos_ids=()).tokens[0])
    assert compare_with_ar(tparams, tcfg, prompt, ar, ar).kind == "identical"
    logits = ar_logits(tparams, tcfg, prompt + ar[:5].tolist())
    top2 = np.sort(logits)[-2:]
    wrong = ar.copy()
    wrong[5] = int(np.argsort(logits)[-2])  # AR's runner-up at position 5
    a = compare_with_ar(tparams, tcfg, prompt, ar, wrong)
    assert (a.kind, a.position) == ("MISMATCH", 5) and a.margin == pytest.approx(top2[1] - top2[0], rel=1e-6)
    assert a.eps == pytest.approx(near_tie_eps(jnp.float32, scale=np.max(np.abs(logits))))
    assert compare_with_ar(tparams, tcfg, prompt, ar, wrong, eps=a.margin * 2).kind == "near-tie"
    short = compare_with_ar(tparams, tcfg, prompt, ar, ar[:7])
    assert (short.kind, short.position, short.margin) == ("MISMATCH", 7, None)
    assert "near-tie at generated token 5" in str(Agreement("near-tie", 5, 1e-6, 1e-5))
    assert count([a, short, Agreement("identical", None, None, 1.0)]) == {"identical": 1, "near-tie": 0, "MISMATCH": 2}


@pytest.mark.slow
def test_reduced_precision_divergences_are_all_classified():
    """Reduced precision forced on a CPU: bfloat16 params, every speculative family, 200 new
    tokens on the held-out prompts. Each row is identical or parts at a near-tie -- never a
    MISMATCH -- and the classifier calls a row identical exactly when the tokens are equal.
    Run by tests/reduced_precision.py in a child process compiled with RUN_HEAVY_XLA_FLAGS
    (tests/xla_flags.py: LLVM O1, the suite's two other cheap flags): any compilation is a valid
    test of the classifier, and this one compiles and runs these generations fastest."""
    run = child_with_xla_flags("tests.reduced_precision", RUN_HEAVY_XLA_FLAGS)
    assert run.returncode == 0, (run.stdout[-2000:], run.stderr[-4000:])
    tally = json.loads(run.stdout.strip().splitlines()[-1])
    assert sorted(tally) == sorted(REDUCED_PRECISION_SPECS)
    for spec, kinds in tally.items():
        assert kinds["MISMATCH"] == 0 and kinds["identical"] + kinds["near-tie"] == len(HELDOUT), (spec, kinds)
    print(f"bfloat16, {len(HELDOUT)} prompts x 200 tokens: {tally}")
