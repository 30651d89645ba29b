"""KV-cache consistency and tree attention of the uniform forward.

* prefill + one-token decode steps reproduce one full causal forward;
* greedy generation equals transformers' `generate(do_sample=False)`;
* a cache longer than `ATTENTION_MIN_SLOTS` is read only up to the visible prefix bucket;
* (Hypothesis) one forward over a random tree gives every node the logits of decoding
  its root-to-node path, writing the tree chunk by chunk into the pending region gives
  the same logits, and `commit` of any path leaves the cache that prefilling
  prefix + path directly would leave.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from specjax.decode import generate_ar
from specjax.models import commit, config_from_hf, forward_jit, init_cache, load_checkpoint, pad_prompts, prefill
from specjax.models.model import causal_mask
from specjax.testing import random_params
from tests.tiny_models import hf_model

MAX_PREFIX, MAX_NODES, MAX_DEPTH = 8, 24, 6
SLOTS = MAX_PREFIX + 1 + MAX_NODES + 2


def random_model(variant: str, seed: int = 0):
    cfg = config_from_hf(hf_model(variant).config.to_dict())
    return cfg, random_params(cfg, seed, 0.2)


MODELS = {v: random_model(v) for v in ("neox_parallel", "qwen3_gqa_tied")}


@pytest.mark.parametrize("variant", sorted(MODELS))
def test_prefill_then_decode_matches_full_forward(variant):
    cfg, params = MODELS[variant]
    rng = np.random.default_rng(0)
    prompts = [rng.integers(0, cfg.vocab_size, n).tolist() for n in (9, 4)]
    steps = 6
    continuation = rng.integers(0, cfg.vocab_size, (2, steps))
    full = [p + c.tolist() for p, c in zip(prompts, continuation)]
    tokens, lengths = pad_prompts(full)
    full_logits, _, _ = prefill(params, cfg, tokens, lengths, init_cache(cfg, 2, 20))

    tokens, lengths = pad_prompts(prompts)
    _, _, cache = prefill(params, cfg, tokens, lengths, init_cache(cfg, 2, 20))
    for s in range(steps):
        tok = jnp.asarray(continuation[:, s : s + 1], jnp.int32)
        logits, cache = forward_jit(params, cfg, tok, cache.lengths[:, None], causal_mask(2, 1), cache)
        cache = commit(cache, jnp.zeros((2, 1), jnp.int32), jnp.ones((2,), jnp.int32))
        for b, p in enumerate(prompts):
            np.testing.assert_allclose(np.asarray(logits[b, 0]), np.asarray(full_logits[b, len(p) + s]), atol=1e-5, rtol=0)
    np.testing.assert_array_equal(np.asarray(cache.lengths), [len(p) + steps for p in prompts])


@pytest.mark.parametrize("variant", ["neox_parallel", "qwen3_gqa_untied"])
def test_greedy_generation_matches_hf_generate(variant, hf_checkpoint):
    model, directory = hf_checkpoint(variant)
    cfg, params = load_checkpoint(directory)
    prompts = [[3, 14, 15, 9, 26, 5], [35, 8]]
    tokens, lengths = pad_prompts(prompts)
    out = generate_ar(params, cfg, tokens, lengths, 32, eos_ids=())
    for b, prompt in enumerate(prompts):
        with torch.no_grad():
            ref = model.generate(torch.tensor([prompt]), max_new_tokens=32, min_new_tokens=32, do_sample=False)
        assert np.asarray(out.tokens[b]).tolist() == ref[0, len(prompt):].tolist()
    assert np.asarray(out.num_tokens).tolist() == [32, 32]


@st.composite
def trees_with_prefixes(draw, vocab: int):
    """A batch of random trees (random parents, depth <= 6, <= 24 nodes) under random prefixes."""
    batch = draw(st.sampled_from([2, 3]))
    rows = []
    for _ in range(batch):
        n = draw(st.integers(1, MAX_NODES))
        parents, depth = [], []
        for i in range(n):
            p = draw(st.sampled_from([-1] + [j for j in range(i) if depth[j] < MAX_DEPTH]))
            parents.append(p)
            depth.append(1 if p < 0 else depth[p] + 1)
        tokens = draw(st.lists(st.integers(0, vocab - 1), min_size=n, max_size=n))
        prefix = draw(st.lists(st.integers(0, vocab - 1), min_size=1, max_size=MAX_PREFIX))
        root = draw(st.integers(0, vocab - 1))
        target = draw(st.integers(0, n - 1))  # the node whose path gets committed
        rows.append(dict(parents=parents, depth=depth, tokens=tokens, prefix=prefix, root=root, target=target))
    return rows


def path_to(row, node):
    """Node indices from the root's child down to `node`."""
    path = []
    while node >= 0:
        path.append(node)
        node = row["parents"][node]
    return path[::-1]


def block_inputs(rows, lengths):
    """Pending block [root, node 0, ..., node 23]: tokens, positions, ancestor mask (numpy reference)."""
    b, t = len(rows), 1 + MAX_NODES
    tokens = np.zeros((b, t), np.int32)
    positions = np.zeros((b, t), np.int32)
    mask = np.zeros((b, t, t), bool)
    for r, row in enumerate(rows):
        tokens[r, 0] = row["root"]
        positions[r] = lengths[r]
        mask[r, :, 0] = True
        mask[r, np.arange(t), np.arange(t)] = True  # padding nodes see root + self only
        for i, tok in enumerate(row["tokens"]):
            tokens[r, i + 1] = tok
            positions[r, i + 1] = lengths[r] + row["depth"][i]
            for a in path_to(row, i):
                mask[r, i + 1, a + 1] = True
    return jnp.asarray(tokens), jnp.asarray(positions), jnp.asarray(mask)


@pytest.mark.parametrize("variant", sorted(MODELS))
@settings(max_examples=25)
@given(data=st.data())
def test_tree_forward_matches_path_decoding_and_commit(variant, data):
    cfg, params = MODELS[variant]
    rows = data.draw(trees_with_prefixes(cfg.vocab_size))
    b = len(rows)
    prefix_tokens, prefix_lengths = pad_prompts([r["prefix"] for r in rows], MAX_PREFIX)
    _, _, cache = prefill(params, cfg, prefix_tokens, prefix_lengths, init_cache(cfg, b, SLOTS))
    lengths = np.asarray(cache.lengths)
    tokens, positions, mask = block_inputs(rows, lengths)
    chunked_cache = jax.tree.map(jnp.copy, cache)
    logits, cache = forward_jit(params, cfg, tokens, positions, mask, cache)

    # The same tree written chunk by chunk into the pending region (how drafters expand a
    # tree level by level) gives the same logits: each chunk masks in earlier chunks' slots.
    chunk = 5
    for start in range(0, 1 + MAX_NODES, chunk):
        part = slice(start, start + chunk)
        chunk_logits, chunked_cache = forward_jit(params, cfg, tokens[:, part], positions[:, part], mask[:, part],
                                                  chunked_cache, region_offset=start)
        np.testing.assert_allclose(np.asarray(chunk_logits), np.asarray(logits[:, part]), atol=1e-5, rtol=0)

    # Reference: every (row, slot) decoded as prefix + root + path in its own causal sequence.
    seqs, where = [], []
    for r, row in enumerate(rows):
        seqs.append(row["prefix"] + [row["root"]])
        where.append((r, 0))
        for i in range(len(row["tokens"])):
            seqs.append(row["prefix"] + [row["root"]] + [row["tokens"][a] for a in path_to(row, i)])
            where.append((r, i + 1))
    seqs += [[0]] * (b * (1 + MAX_NODES) - len(seqs))  # fixed batch shape: one compile per b
    ref_tokens, ref_lengths = pad_prompts(seqs, MAX_PREFIX + 1 + MAX_DEPTH)
    _, ref_last, _ = prefill(params, cfg, ref_tokens, ref_lengths, init_cache(cfg, len(seqs), MAX_PREFIX + 1 + MAX_DEPTH))
    got = np.asarray(logits)[tuple(np.array(where).T)]
    np.testing.assert_allclose(got, np.asarray(ref_last)[: len(where)], atol=1e-5, rtol=0)

    # Commit root + the path to each row's target node, compare with prefilling prefix + root + path.
    slots = np.zeros((b, 1 + MAX_DEPTH), np.int32)
    n = np.zeros((b,), np.int32)
    committed = []
    for r, row in enumerate(rows):
        path = path_to(row, row["target"])
        slots[r, : 1 + len(path)] = [0] + [a + 1 for a in path]
        n[r] = 1 + len(path)
        committed.append(row["prefix"] + [row["root"]] + [row["tokens"][a] for a in path])
    cache = commit(cache, jnp.asarray(slots), jnp.asarray(n))
    direct_tokens, direct_lengths = pad_prompts(committed, MAX_PREFIX + 1 + MAX_DEPTH)
    _, _, direct = prefill(params, cfg, direct_tokens, direct_lengths, init_cache(cfg, b, SLOTS))
    np.testing.assert_array_equal(np.asarray(cache.lengths), np.asarray(direct.lengths))
    for r in range(b):
        m = int(direct.lengths[r])
        np.testing.assert_allclose(np.asarray(cache.k[:, r, :, :m]), np.asarray(direct.k[:, r, :, :m]), atol=1e-5, rtol=0)
        np.testing.assert_allclose(np.asarray(cache.v[:, r, :, :m]), np.asarray(direct.v[:, r, :, :m]), atol=1e-5, rtol=0)


def test_attention_reads_only_the_visible_prefix(monkeypatch):
    """A cache longer than `ATTENTION_MIN_SLOTS` is attended over the smallest prefix bucket
    holding every slot a pending token can see (`LayerKV.attend`): slots past that bucket are
    never read (NaN keys/values there leave the logits finite), and the logits and the written
    cache equal those of reading every slot up to float32 summation order (a softmax over fewer
    masked zeros), greedy generation exactly. The minimum is lowered to 32
    so that a 200-slot cache has buckets (32, 128, 200). One family suffices: both call the
    same `LayerKV.attend` (the GQA one, whose head grouping the slicing must keep)."""
    from specjax.models import layers

    cfg, params = MODELS["qwen3_gqa_tied"]
    slots, rng = 200, np.random.default_rng(3)
    tree = jnp.asarray([[True, False, False], [True, True, False], [True, False, True]])  # root + 2 children
    results = {}
    for minimum in (10**9, 32):  # every slot, then prefix buckets
        monkeypatch.setattr(layers, "ATTENTION_MIN_SLOTS", minimum)
        jax.clear_caches()  # the minimum is read at trace time
        assert layers.attention_widths(slots) == ((slots,) if minimum > slots else (32, 128, slots))
        for prompt_lengths, bucket in (((9, 4), 32), ((60, 41), 128)):
            prompts = [rng.integers(0, cfg.vocab_size, n).tolist() for n in prompt_lengths] if minimum > slots \
                else results[prompt_lengths, "prompts"]
            results[prompt_lengths, "prompts"] = prompts
            tokens, lengths = pad_prompts(prompts)
            _, _, cache = prefill(params, cfg, tokens, lengths, init_cache(cfg, 2, slots))
            if minimum == 32:  # poison every slot past the bucket the step may read
                cache = cache.replace(k=cache.k.at[:, :, :, bucket:].set(jnp.nan), v=cache.v.at[:, :, :, bucket:].set(jnp.nan))
            step = jnp.asarray([[5, 7, 11], [13, 17, 19]], jnp.int32)
            positions = cache.lengths[:, None] + jnp.asarray([0, 1, 1], jnp.int32)[None]
            logits, after = forward_jit(params, cfg, step, positions, jnp.broadcast_to(tree, (2, 3, 3)), cache)
            written = after.k[:, :, :, :bucket]
            results[prompt_lengths, minimum] = (np.asarray(logits), np.asarray(written))
        tokens, lengths = pad_prompts(results[(9, 4), "prompts"])
        results["generate", minimum] = np.asarray(generate_ar(params, cfg, tokens, lengths, 12, eos_ids=(),
                                                              cache_slots=slots).tokens)
    for prompt_lengths in ((9, 4), (60, 41)):
        (full, full_k), (prefix, prefix_k) = results[prompt_lengths, 10**9], results[prompt_lengths, 32]
        assert np.isfinite(prefix).all(), "a slot past the visible prefix bucket was read"
        np.testing.assert_allclose(prefix, full, atol=1e-5, rtol=0)
        np.testing.assert_allclose(prefix_k, full_k, atol=1e-5, rtol=0)  # layer >= 1 keys: summation order
    np.testing.assert_array_equal(results["generate", 32], results["generate", 10**9])


@pytest.mark.parametrize("layout", ["stacked", "unstacked"])
@pytest.mark.parametrize("variant", sorted(MODELS))
def test_a_forward_that_holds_its_rows_apart_equals_one_that_writes_them(variant, layout):
    """`forward_tapped(..., write_cache=False)` (what a verify-width branch runs, `LayerKV.deferred`) attends to
    the block's own K/V as if written, and `write_rows` then writes them where the writing forward does: every
    other slot untouched, the rows, the logits and the features up to float32 rounding (the softmax's sums in
    another order; two compiled programs), at region offsets 0 and 3, on ragged rows with a tree
    mask, stacked and per-layer caches."""
    from specjax.models.cache import per_layer_cache, write_rows
    from specjax.models.model import forward_tapped, with_layout

    cfg, params = MODELS[variant]
    params = with_layout(params, layout)
    rng = np.random.default_rng(1)
    prompts = [rng.integers(0, cfg.vocab_size, n).tolist() for n in (7, 3)]
    tokens, lengths = pad_prompts(prompts)
    _, _, cache = prefill(with_layout(params, "stacked"), cfg, tokens, lengths, init_cache(cfg, 2, 24))
    cache = per_layer_cache(cache) if layout == "unstacked" else cache
    t = 5
    block = jnp.asarray(rng.integers(0, cfg.vocab_size, (2, t)), jnp.int32)
    parents = np.array([-1, 0, 0, 1, 3])  # a tree: each token sees its ancestors and itself
    tree_mask = np.eye(t, dtype=bool)
    for i, p in enumerate(parents):
        while p >= 0:
            tree_mask[i, p], p = True, parents[p]
    mask = jnp.broadcast_to(jnp.asarray(tree_mask), (2, t, t))
    for offset in (0, 3):
        region = jnp.zeros((2, t + offset, t + offset), bool).at[:, offset:, offset:].set(mask)
        region = region.at[:, offset:, :offset].set(True)  # earlier pending slots of the region, visible
        positions = cache.lengths[:, None] + offset + jnp.asarray([0, 1, 1, 2, 3])[None]
        blk = jnp.concatenate([jnp.zeros((2, offset), jnp.int32), block], axis=1) if offset else block
        pos = jnp.concatenate([cache.lengths[:, None] + jnp.arange(offset)[None], positions], 1) if offset else positions
        _, before, _ = forward_tapped(params, cfg, blk[:, :offset], pos[:, :offset], region[:, :offset, :offset],
                                      cache) if offset else (None, cache, None)
        want_logits, want_cache, want_feats = forward_tapped(params, cfg, block, positions, region[:, offset:], before,
                                                             (0,), region_offset=offset)
        logits, rows, feats = forward_tapped(params, cfg, block, positions, region[:, offset:], before, (0,),
                                             region_offset=offset, write_cache=False)
        got_cache = write_rows(before, rows, offset)
        slot = np.arange(24)[None, :]
        block_slots = (slot >= np.asarray(before.lengths)[:, None] + offset) & (slot < np.asarray(before.lengths)[:, None] + offset + t)
        for got, want in zip(jax.tree.leaves(got_cache), jax.tree.leaves(want_cache), strict=True):
            got, want = np.asarray(got), np.asarray(want)
            if got.ndim == 5:  # [L, B, K, S, D]: every other slot untouched; the block's rows where the writer put
                # them, up to the rounding of two compiled programs (their products may block differently)
                outside = ~block_slots[None, :, None, :, None]
                np.testing.assert_array_equal(np.where(outside, got, 0), np.where(outside, want, 0))
                np.testing.assert_allclose(got, want, atol=1e-5, rtol=2e-6)
            else:
                np.testing.assert_array_equal(got, want)
        scale = float(np.max(np.abs(np.asarray(want_logits))))
        np.testing.assert_allclose(np.asarray(logits), np.asarray(want_logits), atol=64 * np.finfo(np.float32).eps * scale,
                                   rtol=0)
        np.testing.assert_allclose(np.asarray(feats), np.asarray(want_feats), atol=1e-5, rtol=1e-5)
        np.testing.assert_array_equal(np.asarray(rows.k.shape), [cfg.num_layers, 2, t, cfg.num_kv_heads, cfg.head_dim])
        # count = 2: the first two rows written as above, the slots of the other three left as they were
        two = write_rows(before, rows, offset, count=2)
        first_two = block_slots & (slot < np.asarray(before.lengths)[:, None] + offset + 2)
        for got, full, old in zip(jax.tree.leaves(two), jax.tree.leaves(got_cache), jax.tree.leaves(before)):
            if np.asarray(got).ndim == 5:
                keep = first_two[None, :, None, :, None]
                np.testing.assert_array_equal(np.asarray(got), np.where(keep, np.asarray(full), np.asarray(old)))
