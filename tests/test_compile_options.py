"""Per-backend XLA options of the decode loops (`specjax.numerics.decode_compiler_options`).

The GPU choice (no Triton GEMMs for large models) cannot be timed on a CPU; what is tested
here is the policy itself and that the loops compiled with those options are the same
programs: on CPU the GPU option is accepted and ignored, and the outputs are identical."""

import dataclasses

import numpy as np

from specjax.decode import (_compiled_with, _generate, _generate_ar, cache_sizes, generate_ar, generate_ar_entry,
                            generate_entry)
from specjax.drafters.chain import ChainDrafter
from specjax.models import init_cache, pad_prompts
from specjax.numerics import TRITON_GEMM_OFF_FROM_HIDDEN, decode_compiler_options
from specjax.sampling import Sampling
from tests.fixtures import MAX_NEW, PAIRS, PROMPT_WIDTH, random_pair_params

OFF = (("xla_gpu_enable_triton_gemm", False),)


def test_policy_by_backend_and_size():
    cfg = PAIRS["qwen64"][0]
    big = dataclasses.replace(cfg, hidden_size=TRITON_GEMM_OFF_FROM_HIDDEN, head_dim=TRITON_GEMM_OFF_FROM_HIDDEN // 4)
    assert decode_compiler_options(big, "gpu") == OFF and decode_compiler_options(big, "cuda") == OFF
    assert decode_compiler_options(cfg, "gpu") == ()  # small models keep XLA's default (faster there, measured)
    assert decode_compiler_options(big, "cpu") == () and decode_compiler_options(big, "tpu") == ()
    assert decode_compiler_options(big) == ()  # this test runs on CPU


def test_loops_compiled_with_the_gpu_options_give_the_same_tokens():
    cfg, dcfg = PAIRS["neox32"]
    params, dparams = random_pair_params(cfg, 3), random_pair_params(dcfg, 4)
    tokens, lengths = pad_prompts([[1, 2, 3, 4], [5, 6]], PROMPT_WIDTH)
    ar = generate_ar(params, cfg, tokens, lengths, MAX_NEW, eos_ids=())
    with_options = _compiled_with(generate_ar_entry, OFF)
    assert with_options is _compiled_with(generate_ar_entry, OFF) and with_options is not _generate_ar
    cache = init_cache(cfg, 2, PROMPT_WIDTH + MAX_NEW, np.float32)
    out = with_options(params, cfg, tokens, lengths, cache, None, MAX_NEW, (), Sampling(), 0)
    np.testing.assert_array_equal(np.asarray(out.tokens), np.asarray(ar.tokens))
    drafter = ChainDrafter(dcfg, 3)
    slots, reserve = cache_sizes(drafter, PROMPT_WIDTH, MAX_NEW)
    args = (params, cfg, drafter, dparams, tokens, lengths, None, MAX_NEW, (), Sampling(), 0, slots, reserve)
    spec = _compiled_with(generate_entry, OFF)(*args)
    np.testing.assert_array_equal(np.asarray(spec.tokens), np.asarray(_generate(*args).tokens))
    np.testing.assert_array_equal(np.asarray(spec.tokens), np.asarray(ar.tokens))
