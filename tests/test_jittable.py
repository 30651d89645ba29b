"""Generation inside your own jitted code (issue 37 item 3): `specjax.core`'s `generate_ar_core` /
`generate_core` and the checked fronts `generate_ar` / `generate` under `jax.jit` and `jax.vmap`.

On the committed zoo pair (trained target, its DFlash drafter for DDTree, its draft LM for a
chain), a few prompts and 8 new tokens: a program under jit gives exactly the eager call's
tokens, a vmap over keys gives each key's separate call, and greedy output under jit is AR's.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax import zoo
from specjax.core import AR_STATIC, SPEC_STATIC, generate_ar_core, generate_core
from specjax.decode import generate, generate_ar
from specjax.drafters.chain import ChainDrafter
from specjax.drafters.ddtree import DDTreeDrafter
from specjax.drafters.dflash import DFlashDrafter
from specjax.models import pad_prompts
from specjax.sampling import Sampling

NEW = 8
TEXTS = ("Once upon a time", "The cat sat on the", "It was")
HOT = Sampling(temperature=1.0)


@pytest.fixture(scope="module")
def pair():
    cfg, params, tok = zoo.load("tiny-neox-target")
    dcfg, dparams = zoo.load_drafter("tiny-neox-dflash")
    lcfg, lparams, _ = zoo.load("tiny-neox-draft")
    tokens, lengths = pad_prompts([zoo.encode(tok, t) for t in TEXTS])
    drafters = {"ddtree": (DDTreeDrafter(DFlashDrafter(dcfg, cfg), 8), dparams),
                "chain": (ChainDrafter(lcfg, 3), lparams)}
    return cfg, params, tokens, lengths, drafters


@pytest.fixture(scope="module")
def ar(pair):
    cfg, params, tokens, lengths, _ = pair
    return generate_ar(params, cfg, tokens, lengths, NEW)


def same(got, want, fields=("tokens", "num_tokens")):
    for f in fields:
        np.testing.assert_array_equal(np.asarray(getattr(got, f)), np.asarray(getattr(want, f)), err_msg=f)


def test_ar_under_jit_equals_eager(pair, ar):
    cfg, params, tokens, lengths, _ = pair
    core = jax.jit(lambda p, t, n: generate_ar_core(p, cfg, t, n, max_new_tokens=NEW))(params, tokens, lengths)
    front = jax.jit(lambda p, t, n: generate_ar(p, cfg, t, n, NEW))(params, tokens, lengths)
    same(core, ar)
    same(front, ar)


@pytest.mark.parametrize("method", ["ddtree", "chain"])
def test_speculative_under_jit_equals_eager_and_greedy_is_ar(pair, ar, method):
    cfg, params, tokens, lengths, drafters = pair
    drafter, dparams = drafters[method]
    eager = generate(params, cfg, drafter, dparams, tokens, lengths, NEW)
    run = jax.jit(generate_core, static_argnames=SPEC_STATIC)  # the names to list when jitting the core itself
    core = run(params, cfg, drafter, dparams, tokens, lengths, max_new_tokens=NEW)
    same(core, eager)
    np.testing.assert_array_equal(np.asarray(core.stats.accepted), np.asarray(eager.stats.accepted))
    same(core, ar)  # greedy under jit: AR token for token
    assert (np.asarray(core.stats.accepted) > 0).any(), "nothing accepted: the test would not exercise trees"
    if method == "ddtree":  # the checked front is traceable too: shapes checked, values taken on trust
        front = jax.jit(lambda p, d, t, n: generate(p, cfg, drafter, d, t, n, NEW))(params, dparams, tokens, lengths)
        same(front, eager)


def test_vmap_over_keys_equals_separate_calls(pair):
    cfg, params, tokens, lengths, drafters = pair
    keys = jax.random.split(jax.random.key(7), 3)
    drafter, dparams = drafters["chain"]
    # the checked front (concrete prompts: values checked; traced key) and the core
    ar_many = jax.vmap(lambda k: generate_ar(params, cfg, tokens, lengths, NEW, sampling=HOT, key=k))(keys)
    spec_many = jax.vmap(lambda k: generate_core(params, cfg, drafter, dparams, tokens, lengths, k,
                                                 max_new_tokens=NEW, sampling=HOT))(keys)
    for i, key in enumerate(keys):
        one_ar = generate_ar(params, cfg, tokens, lengths, NEW, sampling=HOT, key=key)
        one_spec = generate(params, cfg, drafter, dparams, tokens, lengths, NEW, sampling=HOT, key=key)
        same(jax.tree.map(lambda x: x[i], ar_many), one_ar)
        same(jax.tree.map(lambda x: x[i], spec_many), one_spec)
    assert len({tuple(np.asarray(t).ravel()) for t in ar_many.tokens}) > 1, "every key drew the same tokens"


def test_static_and_shape_checks_hold_under_jit(pair):
    """Under a trace only values go unchecked: shapes, dtypes and static arguments still raise, at trace time."""
    cfg, params, tokens, lengths, _ = pair
    with pytest.raises(TypeError, match="max_new_tokens must be a Python int"):
        jax.jit(lambda p, t, n, m: generate_ar(p, cfg, t, n, m))(params, tokens, lengths, NEW)
    with pytest.raises(ValueError, match=r"tokens must be int32\[B, T\] and prompt_lengths int32\[B\]"):
        jax.jit(lambda p, t, n: generate_ar(p, cfg, t, n, NEW))(params, tokens, lengths[:1])
    with pytest.raises(ValueError, match="tokens must be integer"):
        jax.jit(lambda p, t, n: generate_ar_core(p, cfg, t, n, max_new_tokens=NEW))(params, tokens * 1.0, lengths)
    with pytest.raises(ValueError, match="a PRNG key is required when sampling"):
        generate_ar_core(params, cfg, tokens, lengths, max_new_tokens=NEW, sampling=HOT)
    assert set(AR_STATIC) >= {"cfg", "max_new_tokens", "sampling", "eos_ids"}


def test_bad_values_still_raise_before_compiling_on_concrete_input(pair):
    """The fronts keep their value checks on concrete arrays (tests/test_bad_input.py has the full list)."""
    cfg, params, _, _, _ = pair
    tokens, lengths = pad_prompts([[1, 2, cfg.vocab_size + 5]])
    with pytest.raises(ValueError, match="outside the vocabulary"):
        generate_ar(params, cfg, tokens, lengths, NEW)
    with pytest.raises(ValueError, match=r"prompt_lengths must lie in \[1, 3\]"):
        generate_ar(params, cfg, tokens, jnp.asarray([4], jnp.int32), NEW)
