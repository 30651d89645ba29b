"""The feature cache (specjax.train.features): a cached feature is the live `forward_tapped` feature
(to float16 rounding), caches are tied to their target and data, and layers are added, not recomputed."""

import hashlib
import json

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from specjax.models import causal_mask, forward_tapped, init_cache
from specjax.train.data import TokenShards
from specjax.train.features import build_feature_cache, covered_shards, length_batches, open_feature_cache
from tests.train_fixtures import TARGET, TARGET_PARAMS


def shards(seed: int = 0, n: int = 9) -> TokenShards:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(3, 40, n)
    tokens = rng.integers(1, TARGET.vocab_size, lengths.sum()).astype(np.int32)
    sha = hashlib.sha256(tokens.tobytes()).hexdigest()
    return TokenShards(tokens=tokens, offsets=np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
                       prompt_lengths=np.minimum(lengths - 1, 2).astype(np.int32),
                       temperature=np.zeros(n, np.float32), manifest={"shards": [{"sha256": sha}]})


def two_shards(data: TokenShards, first: int) -> tuple[TokenShards, TokenShards]:
    """(the first shard alone, both shards): `data` split after sequence `first`, as the data
    generator leaves a directory before and after it appended a shard."""
    o = data.offsets
    shas = [hashlib.sha256(data.tokens[:o[first]].tobytes()).hexdigest(),
            hashlib.sha256(data.tokens[o[first]:].tobytes()).hexdigest()]
    entries = [{"sha256": shas[0], "sequences": first}, {"sha256": shas[1], "sequences": len(data) - first}]
    head = TokenShards(tokens=data.tokens[:o[first]], offsets=o[:first + 1], prompt_lengths=data.prompt_lengths[:first],
                       temperature=data.temperature[:first], manifest={"shards": entries[:1]})
    return head, TokenShards(tokens=data.tokens, offsets=o, prompt_lengths=data.prompt_lengths,
                             temperature=data.temperature, manifest={"shards": entries})


def test_a_cache_grows_with_the_data_computing_only_the_new_shards(tmp_path):
    """A cache built on shard 1 is extended in place when shard 2 is appended: the old rows are left
    as they were (not recomputed), the new rows equal a cache built on both shards at once, the
    manifest lists both shards and verifies; data whose shards do not extend the cache's is refused;
    a cache whose manifest predates the shard list is matched by its combined checksum."""
    head, both = two_shards(shards(n=9), 4)
    target = (TARGET, TARGET_PARAMS)
    out, fresh = tmp_path / "grown", tmp_path / "fresh"
    build_feature_cache(target, "tiny", head, "data", (0, 1), out, max_tokens=64, progress=False)
    old_rows = np.array(open_feature_cache(out).arrays[1])
    grown = build_feature_cache(target, "tiny", both, "data", (0, 1), out, max_tokens=64, progress=False)
    whole = build_feature_cache(target, "tiny", both, "data", (0, 1), fresh, max_tokens=64, progress=False)
    n_old = int(head.offsets[-1])
    assert grown.arrays[1].shape == whole.arrays[1].shape == (int(both.offsets[-1]), TARGET.hidden_size)
    np.testing.assert_array_equal(grown.arrays[1][:n_old], old_rows)
    for layer in (0, 1):  # the new sequences: a length batch of their own, same float16 values up to one step
        np.testing.assert_allclose(grown.arrays[layer][n_old:].astype(np.float32),
                                   whole.arrays[layer][n_old:].astype(np.float32), rtol=2 ** -10, atol=1e-3)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["data"]["shards"] == [e["sha256"] for e in both.manifest["shards"]]
    open_feature_cache(out, verify=True)
    other, _ = two_shards(shards(seed=3, n=9), 4)
    with pytest.raises(ValueError, match="other target weights or data"):
        build_feature_cache(target, "tiny", other, "data", (0, 1), out, progress=False)
    legacy = json.loads((fresh / "manifest.json").read_text())  # written before manifests listed their shards
    del legacy["data"]["shards"]
    (fresh / "manifest.json").write_text(json.dumps(legacy))
    assert covered_shards(legacy, [e["sha256"] for e in both.manifest["shards"]]) == 2
    assert covered_shards(legacy, [e["sha256"] for e in both.manifest["shards"]][:1]) is None


def test_a_cached_feature_is_the_live_forward_tapped_feature(tmp_path):
    data = shards()
    cache = build_feature_cache((TARGET, TARGET_PARAMS), "tiny", data, "data", (0, 1), tmp_path / "c", max_tokens=64,
                                progress=False)
    assert cache.layers == (0, 1) and cache.arrays[1].dtype == np.float16
    for i in range(len(data)):
        a, b = int(data.offsets[i]), int(data.offsets[i + 1])
        toks = jnp.asarray(data.tokens[a:b])[None]
        n = b - a
        _, _, live = forward_tapped(TARGET_PARAMS, TARGET, toks, jnp.arange(n)[None], causal_mask(1, n),
                                    init_cache(TARGET, 1, n, jnp.float32), (0, 1))
        for k, layer in enumerate((0, 1)):
            want = np.asarray(live[0, :, k])
            # within one float16 step of the live value (a padded batch's float32 reductions differ in the
            # last bits, which can move the float16 rounding by one step)
            np.testing.assert_allclose(cache.arrays[layer][a:b].astype(np.float32), want, rtol=2 ** -10, atol=1e-3)
    got = cache.gather((1, 0), data.offsets[[2, 5]], np.diff(data.offsets)[[2, 5]], 48)
    assert got.shape == (2, 48, 2, TARGET.hidden_size)
    n2 = int(np.diff(data.offsets)[2])
    np.testing.assert_array_equal(got[0, :n2, 0], cache.arrays[1][data.offsets[2]:data.offsets[3]])
    assert not got[0, n2:].any()


def test_caches_are_tied_to_target_and_data_and_grow_by_layers(tmp_path):
    data = shards()
    out = tmp_path / "c"
    build_feature_cache((TARGET, TARGET_PARAMS), "tiny", data, "data", (1,), out, progress=False)
    before = (out / "layer-01.f16").stat().st_mtime_ns
    cache = build_feature_cache((TARGET, TARGET_PARAMS), "tiny", data, "data", (0, 1), out, progress=False)
    assert cache.layers == (0, 1) and (out / "layer-01.f16").stat().st_mtime_ns == before  # only layer 0 computed
    manifest = json.loads((out / "manifest.json").read_text())
    assert set(manifest["layers"]) == {"0", "1"} and manifest["bytes"] == 2 * data.offsets[-1] * TARGET.hidden_size * 2
    open_feature_cache(out, verify=True)
    with pytest.raises(ValueError, match="other data"):
        open_feature_cache(out, data_sha="0" * 64)
    with pytest.raises(ValueError, match="other target weights"):
        open_feature_cache(out, target_sha="0" * 64)
    with pytest.raises(ValueError, match="other target weights or data"):
        build_feature_cache((TARGET, TARGET_PARAMS), "tiny", shards(seed=1), "data", (1,), out, progress=False)
    with open(out / "layer-00.f16", "r+b") as f:  # a flipped byte is found by verify
        f.seek(10)
        f.write(b"\x7f")
    with pytest.raises(ValueError, match="sha256 differs"):
        open_feature_cache(out, verify=True)
    with pytest.raises(KeyError, match="not in the feature cache"):
        cache.gather((3,), data.offsets[:1], np.ones(1, np.int64), 4)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(1, 300), min_size=1, max_size=60), st.integers(32, 2048))
def test_length_batches_cover_every_sequence_once_within_the_token_budget(lengths, max_tokens):
    lengths = np.asarray(lengths)
    groups = length_batches(lengths, max_tokens, multiple=32)
    seen = np.concatenate([idx for idx, _ in groups])
    assert sorted(seen.tolist()) == list(range(len(lengths)))
    for idx, width in groups:
        assert width % 32 == 0 and width >= lengths[idx].max()
        assert len(idx) == 1 or len(idx) * width <= max_tokens
