"""specjax/ops.py: width buckets and the width switch (exact branch choice at the edges), top-k and argmax
against their references."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specjax.ops import argmax, device_widths, switch_on_width, top_k, verify_buckets, width_buckets


@pytest.mark.parametrize("width, smallest, factor, expected", [
    (1, 1, 4, (1,)),
    (3, 1, 4, (1, 3)),
    (169, 1, 4, (1, 4, 16, 64, 169)),
    (16, 4, 1.5, (4, 6, 9, 14, 16)),
    (256, 4, 1.5, (4, 6, 9, 14, 21, 32, 48, 72, 108, 162, 243, 256)),
    (4, 4, 2, (4,)),
    (5, 4, 2, (4, 5)),
])
def test_width_buckets(width, smallest, factor, expected):
    assert width_buckets(width, smallest, factor) == expected


@pytest.mark.parametrize("budget", [*range(1, 40), 63, 64, 100, 255, 256, 257])
def test_verify_buckets_are_widths_whose_forwards_have_power_of_two_rows(budget):
    """Independent of width_buckets: 2^k - 1 nodes past the root (2^k rows, k >= 2) below the
    budget, then the budget."""
    expected = [2 ** k - 1 for k in range(2, 12) if 2 ** k - 1 < budget] + [budget]
    assert verify_buckets(budget) == tuple(expected)


def test_device_widths_merge_the_buckets_a_backend_runs_at_flat_cost():
    dynatree = (4, 6, 9, 14, 21, 32, 48, 72, 108, 162, 243, 256)
    assert device_widths(dynatree, "cpu") == dynatree  # every verified token costs on a CPU
    assert device_widths(dynatree, "gpu") == (72, 108, 162, 243, 256)  # 12 compiled branches -> 5
    assert device_widths((16, 32, 64), "tpu") == (64,)  # the budget always stays
    assert device_widths(None, "gpu") is None and device_widths((8,), "gpu") == (8,)
    assert device_widths(dynatree) == dynatree  # this test runs on CPU
    # a width counts nodes past the root: its forward is w + 1 tokens, so 63 (64 tokens) is flat on a GPU
    assert device_widths(verify_buckets(256), "gpu") == (63, 127, 255, 256)
    assert device_widths((62, 63, 64, 100), "gpu") == (63, 64, 100)


def test_width_buckets_rejects_bad_input():
    for args in [(0, 1, 2), (4, 0, 2), (4, 1, 1)]:
        with pytest.raises(ValueError, match="need width"):
            width_buckets(*args)


@jax.jit
def _which(live):
    """The width chosen for `live` (and a zero-width marker from `empty`)."""
    return switch_on_width(live, (2, 5, 9), lambda w, x: x + w, (jnp.int32(0),), empty=lambda x: x - 1)


@pytest.mark.parametrize("live, chosen", [(0, -1), (1, 2), (2, 2), (3, 5), (5, 5), (6, 9), (9, 9)])
def test_switch_on_width_picks_the_smallest_width_holding_live(live, chosen):
    assert int(_which(jnp.int32(live))) == chosen


def test_switch_on_width_single_width_runs_the_branch_directly():
    out = switch_on_width(jnp.int32(3), (7,), lambda w, x: x * w, (jnp.float32(2),))
    assert float(out) == 14.0


def test_top_k_equals_lax_top_k_with_ties():
    x = jnp.asarray(np.random.default_rng(0).integers(0, 4, (3, 50)).astype(np.float32))
    values, indices = top_k(x, 5)
    ref_values, ref_indices = jax.lax.top_k(x, 5)
    np.testing.assert_array_equal(values, ref_values)
    np.testing.assert_array_equal(indices, ref_indices)


def test_top_k_equal_zeros_ties_signed_zeros_by_index():
    x = jnp.asarray([[-0.0, 0.0, -1.0], [0.0, -0.0, -2.0]], jnp.float32)
    assert jax.lax.top_k(x, 2)[1].tolist() == [[1, 0], [0, 1]]  # lax.top_k: -0.0 below +0.0
    values, indices = top_k(x, 2, equal_zeros=True)
    assert indices.tolist() == [[0, 1], [0, 1]]
    assert not np.signbit(np.asarray(values)).any()


# Two-stage ranking (`chunk`) against one `lax.top_k`: values from a handful (ties, signed zeros, infinities;
# no NaN, which the chunked form does not promise to place), a vocabulary not a multiple of the chunk, k up
# to the chunk. One compiled shape per parameter set.
_NO_NAN = st.sampled_from([0.0, -0.0, 1.0, -1.0, 2.5, np.inf, -np.inf, 3e38, -3e38])


@pytest.mark.parametrize("vocab, chunk, k", [(37, 8, 8), (64, 16, 5), (101, 10, 1), (12, 16, 4)])
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_chunked_top_k_is_lax_top_k(vocab, chunk, k, data):
    x = np.asarray(data.draw(st.lists(_NO_NAN, min_size=2 * vocab, max_size=2 * vocab)), np.float32).reshape(2, vocab)
    for equal_zeros in (False, True):
        values, indices = top_k(jnp.asarray(x), k, equal_zeros=equal_zeros, chunk=chunk)
        ref_values, ref_indices = top_k(jnp.asarray(x), k, equal_zeros=equal_zeros)
        np.testing.assert_array_equal(indices, ref_indices)
        np.testing.assert_array_equal(np.signbit(values), np.signbit(ref_values))
        np.testing.assert_array_equal(values, ref_values)


# Values drawn from a handful, so ties, infinities, signed zeros and NaNs are common.
_SPECIAL = st.sampled_from([0.0, -0.0, 1.0, -1.0, 2.5, np.inf, -np.inf, np.nan, 3e38, -3e38])


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 3), st.integers(1, 40), st.data())
def test_argmax_is_numpys_first_argmax_with_ties_infinities_and_nans(rows, width, data):
    x = np.asarray(data.draw(st.lists(st.lists(_SPECIAL, min_size=width, max_size=width), min_size=rows,
                                       max_size=rows)), np.float32)
    got = np.asarray(jax.jit(argmax)(jnp.asarray(x)))
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, np.argmax(x, axis=-1))
    np.testing.assert_array_equal(got, np.asarray(jnp.argmax(jnp.asarray(x), axis=-1)))
