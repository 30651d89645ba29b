"""The layer layouts of a model's params (`specjax.models.model.LAYOUTS`): stacked (scanned),
unstacked (one traced copy per layer, the faster CPU decode step) and dual (both). Every layout's
forward is checked against transformers in `test_model_parity.py`; here: the conversions, whole
generations (AR and a speculative method) token for token across layouts, the feature cache,
saving and the options that choose a layout."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specjax import zoo
from specjax.bench.suite import bench_models
from specjax.cli import main
from specjax.decode import generate, generate_ar
from specjax.drafters.registry import method
from specjax.models import load_checkpoint, pad_prompts, save_checkpoint
from specjax.models.cache import KVCache, advance, commit, init_cache, per_layer_cache, stacked_cache
from specjax.models.layers import KERNEL_FIRST_MAX_ROWS, project_out_major
from specjax.models.model import (LAYER_COPIES, LAYOUTS, causal_mask, forward, is_unstacked, layer_features,
                                  layout_of, num_params, prefill, stack_layers, unstack_layers, with_layout)
from specjax.pipeline import Pipeline


@pytest.fixture(scope="module")
def target():
    cfg, params, _ = zoo.load("tiny-neox-target")
    return cfg, params


def test_unstack_and_stack_are_inverse_and_idempotent(target):
    cfg, params = target
    flat = unstack_layers(params)
    assert is_unstacked(flat) and not is_unstacked(params) and len(flat["layers"]) == cfg.num_layers
    for i, layer in enumerate(flat["layers"]):  # layer i's leaves are the stacked leaves' row i
        jax.tree.map(lambda one, stacked, i=i: np.testing.assert_array_equal(one, stacked[i]), layer, params["layers"])
    assert unstack_layers(flat) is flat and stack_layers(params) is params
    back = stack_layers(flat)
    jax.tree.map(np.testing.assert_array_equal, back, params)
    assert jax.tree.structure(back) == jax.tree.structure(params)
    dual = with_layout(params, "dual")  # the stacked arrays themselves plus per-layer copies
    assert layout_of(dual) == "dual" and dual["layers"] is params["layers"] and len(dual[LAYER_COPIES]) == cfg.num_layers
    assert [layout_of(with_layout(p, t)) for p in (params, flat, dual) for t in LAYOUTS] == list(LAYOUTS) * 3
    jax.tree.map(np.testing.assert_array_equal, stack_layers(dual), params)
    assert num_params(dual) == num_params(flat) == num_params(params) == 4_925_568  # each weight once (TRAINING.md)
    jax.tree.map(np.testing.assert_array_equal, unstack_layers(dual), flat)
    with pytest.raises(ValueError, match="unknown layer layout 'flat'; choose one of stacked, unstacked, dual"):
        with_layout(params, "flat")


def test_a_per_layer_cache_holds_and_gives_what_the_stacked_one_does(target):
    """`per_layer_cache` splits [L, B, K, S, D] into L arrays [1, B, K, S, D] (`stacked_cache` joins
    them); a one-token forward of per-layer params over it returns the stacked forward's logits and
    writes the same K/V; `commit` and `advance` move the same slots; stacked params over a per-layer
    cache are refused, naming the fix."""
    cfg, params = target
    tokens, lengths = pad_prompts([[0, 51, 7, 300, 12, 9], [0, 1200, 44]])
    _, _, cache = prefill(params, cfg, tokens, lengths, init_cache(cfg, 2, 16))
    split = per_layer_cache(cache)
    assert split.per_layer and len(split.k) == cfg.num_layers and split.k[0].shape == (1,) + cache.k.shape[1:]
    assert (split.num_slots, split.batch_size) == (cache.num_slots, cache.batch_size) == (16, 2)
    assert per_layer_cache(split) is split and stacked_cache(cache) is cache
    jax.tree.map(np.testing.assert_array_equal, stacked_cache(split), cache)
    step = jnp.asarray([[5], [17]], jnp.int32)
    want_logits, want = forward(params, cfg, step, cache.lengths[:, None], causal_mask(2, 1), cache)
    for layout in ("unstacked", "dual"):
        logits, got = forward(with_layout(params, layout), cfg, step, cache.lengths[:, None], causal_mask(2, 1),
                              per_layer_cache(cache))
        np.testing.assert_allclose(logits, want_logits, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(stacked_cache(got).k, want.k, rtol=1e-5, atol=1e-6)
        keep = jnp.asarray([1, 0], jnp.int32)
        moved = commit(got, jnp.zeros((2, 1), jnp.int32), keep)
        assert moved.per_layer
        jax.tree.map(np.testing.assert_array_equal, stacked_cache(moved), commit(stacked_cache(got), jnp.zeros(
            (2, 1), jnp.int32), keep))
        jax.tree.map(np.testing.assert_array_equal, advance(got, keep), moved)  # a one-token commit moves nothing
    with pytest.raises(ValueError, match="a per-layer KV cache is read by per-layer forwards only .* stacked params "
                                         "with 1 tokens: use stacked_cache"):
        forward(params, cfg, step, cache.lengths[:, None], causal_mask(2, 1), per_layer_cache(cache))


@settings(max_examples=20, deadline=None)
@given(data=st.data(), m=st.sampled_from([1, 3, 6]), per_layer=st.booleans())
def test_advance_is_the_commit_of_rows_written_at_region_offset_zero(data, m, per_layer):
    """A forward of M tokens written at region offset 0 (a prefill, a draft LM's or EAGLE-3's catch-up, DFlash's
    context rows) leaves pending slot j at lengths + j, exactly where `commit(cache, arange(M) per row, n)` moves
    it: `advance(cache, n)`, which moves only `lengths`, returns the same cache, bit for bit, for every n <= M and
    lengths + M <= S, stacked or per layer."""
    s = 10
    lengths = np.asarray(data.draw(st.lists(st.integers(0, s - m), min_size=3, max_size=3)), np.int32)
    n = jnp.asarray(data.draw(st.lists(st.integers(0, m), min_size=3, max_size=3)), jnp.int32)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    k, v = (jnp.asarray(rng.normal(size=(2, 3, 2, s, 4)), jnp.float32) for _ in range(2))
    cache = KVCache(k=k, v=v, lengths=jnp.asarray(lengths))
    cache = per_layer_cache(cache) if per_layer else cache
    moved = commit(cache, jnp.broadcast_to(jnp.arange(m, dtype=jnp.int32), (3, m)), n)
    jax.tree.map(np.testing.assert_array_equal, advance(cache, n), moved)


def test_generations_are_identical_in_both_layouts(target):
    """AR, DDTree (drafter reading tapped target features) and a draft-LM chain (the draft laid out as the
    target) emit the same tokens, rounds and per-round acceptances whether the layers are scanned or unstacked."""
    cfg, params = target
    tokens, lengths = pad_prompts([[0, 51, 7, 300, 12, 9], [0, 1200, 44]])
    dcfg, dparams = zoo.load_drafter("tiny-neox-dflash")
    m = method("ddtree-8", cfg, dflash=(dcfg, dparams))
    draft_cfg, draft_params, _ = zoo.load("tiny-neox-draft")
    lm = method("chain4", cfg, draft=(draft_cfg, draft_params))
    runs = {}
    for layout in LAYOUTS:
        p = with_layout(params, layout)
        ar = generate_ar(p, cfg, tokens, lengths, 24)
        spec = generate(p, cfg, m.drafter, m.params, tokens, lengths, 24)
        chain = generate(p, cfg, lm.drafter, with_layout(draft_params, layout), tokens, lengths, 24)
        runs[layout] = (ar, spec, chain)
    ar_s, *specs_s = runs["stacked"]
    for layout in ("unstacked", "dual"):
        ar, *specs = runs[layout]
        np.testing.assert_array_equal(ar.tokens, ar_s.tokens)
        for spec, spec_s in zip(specs, specs_s):
            np.testing.assert_array_equal(spec.tokens, spec_s.tokens)
            np.testing.assert_array_equal(spec.stats.num_rounds, spec_s.stats.num_rounds)
            np.testing.assert_array_equal(spec.stats.accepted, spec_s.stats.accepted)
    for spec_s in specs_s:
        np.testing.assert_array_equal(spec_s.tokens, ar_s.tokens)  # and lossless, as ever
        assert spec_s.stats.mean_accepted_length().min() > 1  # the drafters are trained: rounds accept tokens


def test_feature_cache_and_checkpoints_do_not_depend_on_the_layout(target, tmp_path):
    cfg, params = target
    tokens = jnp.asarray([[0, 5, 9, 77, 31, 2, 8, 100]], jnp.int32)
    stacked = layer_features(params, cfg, tokens, (1, 3))
    flat = layer_features(unstack_layers(params), cfg, tokens, (1, 3))
    np.testing.assert_allclose(np.asarray(flat), np.asarray(stacked), rtol=1e-5, atol=1e-5)  # fusion order
    np.testing.assert_array_equal(layer_features(with_layout(params, "dual"), cfg, tokens, (1, 3)), stacked)
    for layout in ("unstacked", "dual"):  # saved in the checkpoint's (stacked) layout, each weight once
        save_checkpoint(tmp_path / layout, cfg, with_layout(params, layout))
        cfg2, back = load_checkpoint(tmp_path / layout)
        assert cfg2 == cfg and layout_of(back) == "stacked"
        jax.tree.map(np.testing.assert_array_equal, back, params)


def test_llama_layers_are_fused_per_layer_and_unfused_exactly():
    """Unstacked, a Llama-family layer holds q | k | v as one output-major [H + 2K, D, E] kernel, o as
    [E, H, D], gate | up as one [2F, E] and down as [E, F] (`llama.fuse_layer`, run by `FusedBlock`);
    stacking transposes and slices them back bit for bit,
    and a forward through the fused copies (Qwen3 flags: q/k biases, qk-norm, GQA; an MLP bias) gives the
    scanned separate layers' logits and K/V. (Parity with transformers in every layout:
    test_model_parity.py.)"""
    from specjax.models import LlamaConfig, init_params
    from specjax.models.llama import fuse_layer, is_fused, unfuse_layer

    cfg = LlamaConfig(vocab_size=97, hidden_size=32, num_layers=3, num_heads=4, num_kv_heads=2, head_dim=8,
                      intermediate_size=48, qkv_bias=True, o_bias=True, mlp_bias=True, qk_norm=True, flavor="llama")
    params = jax.tree.map(lambda x: x + 0.01 * jnp.arange(x.size, dtype=x.dtype).reshape(x.shape) / x.size,
                          init_params(cfg, jax.random.key(3)))  # non-zero biases and norms
    flat = unstack_layers(params)
    layer = flat["layers"][1]
    attn, mlp = layer["self_attn"], layer["mlp"]
    assert is_fused(layer) and attn["qkv"].shape == (4 + 2 * 2, 8, 32) and attn["out"].shape == (32, 4, 8)
    assert mlp["gate_up"].shape == (96, 32) and mlp["gate_up_bias"].shape == (96,)
    assert mlp["down"].shape == (32, 48) and mlp["down_bias"].shape == (32,)
    assert not {"q", "o"} & set(attn) and not {"gate_proj", "down_proj"} & set(mlp)
    np.testing.assert_array_equal(attn["qkv"][4 + 2 + 1, 5], params["layers"]["self_attn"]["v"][1, :, 1, 5])
    np.testing.assert_array_equal(mlp["gate_up"][48 + 7], params["layers"]["mlp"]["up_proj"]["kernel"][1, :, 7])
    jax.tree.map(np.testing.assert_array_equal, stack_layers(flat), params)
    one = jax.tree.map(lambda x: x[1], params["layers"])
    assert fuse_layer(layer) is layer and unfuse_layer(one) is one  # each passes the other's form through
    jax.tree.map(np.testing.assert_array_equal, unfuse_layer(fuse_layer(one)), one)
    assert num_params(flat) == num_params(params)
    tokens, lengths = pad_prompts([[5, 17, 3, 60, 2], [9, 1]])
    want_logits, _, want = prefill(params, cfg, tokens, lengths, init_cache(cfg, 2, 12))
    for layout in ("unstacked", "dual"):
        logits, _, got = prefill(with_layout(params, layout), cfg, tokens, lengths, init_cache(cfg, 2, 12))
        np.testing.assert_allclose(logits, want_logits, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got.k, want.k, rtol=1e-5, atol=1e-6)
        step = jnp.asarray([[4], [8]], jnp.int32)
        np.testing.assert_allclose(
            forward(with_layout(params, layout), cfg, step, got.lengths[:, None], causal_mask(2, 1), got)[0],
            forward(params, cfg, step, want.lengths[:, None], causal_mask(2, 1), want)[0], rtol=1e-5, atol=1e-5)


def test_pipeline_and_cli_choose_the_layout(capsys):
    pipe = Pipeline.load("zoo", method="ar", layout="unstacked")
    assert is_unstacked(pipe.pair.params)
    stacked = Pipeline.load("zoo", method="ar").generate("The river", max_new_tokens=8)[0]
    assert pipe.generate("The river", max_new_tokens=8)[0].token_ids == stacked.token_ids
    with pytest.raises(ValueError, match="unknown layer layout 'flat'"):
        Pipeline.load("zoo", method="ar", layout="flat")
    for layout in ("unstacked", "dual"):  # the draft LM runs in the target's layout, loaded or random
        pair = Pipeline.load("zoo", method="chain4", layout=layout).pair
        assert layout_of(pair.params) == layout_of(pair.draft[1]) == layout
        models = bench_models(random=True, layout=layout)
        assert layout_of(models.target[1]) == layout_of(models.draft[1]) == layout
    assert main(["generate", "--method", "ar", "--layout", "flat"]) == 2
    assert "invalid choice: 'flat'" in capsys.readouterr().err


def test_one_token_attention_of_a_batch_by_multiply_and_sum_is_grouped_query_attention():
    """At batch >= ONE_TOKEN_REDUCE_MIN_BATCH a one-token query attends by multiply-and-sum over the
    [B, K, S, D] cache; checked against a numpy softmax attention with grouped heads
    and a ragged mask, and against the batched-product path on the same inputs."""
    from specjax.models import layers

    rng = np.random.default_rng(0)
    b, s, kh, g, d = layers.ONE_TOKEN_REDUCE_MIN_BATCH + 1, 37, 3, 2, 16
    q = rng.normal(size=(b, 1, kh * g, d)).astype(np.float32)
    k, v = (rng.normal(size=(b, kh, s, d)).astype(np.float32) for _ in range(2))
    visible = rng.integers(1, s + 1, b)
    mask = np.arange(s)[None, None, :] < visible[:, None, None]  # [B, 1, S]
    got = np.asarray(layers.attend(jnp.asarray(q), jnp.asarray(k), jnp.asarray(v), jnp.asarray(mask), 0.25))
    want = np.zeros_like(q)
    for r in range(b):
        for h in range(kh * g):
            scores = k[r, h // g, :visible[r]] @ q[r, 0, h] * 0.25
            p = np.exp(scores - scores.max())
            want[r, 0, h] = (p / p.sum()) @ v[r, h // g, :visible[r]]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    product = np.concatenate([np.asarray(layers.attend(jnp.asarray(q[i:i + 1]), jnp.asarray(k[i:i + 1]),
                                                       jnp.asarray(v[i:i + 1]), jnp.asarray(mask[i:i + 1]), 0.25))
                              for i in range(b)])  # batch 1: the product path
    np.testing.assert_allclose(got, product, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("rows", [1, 2, 5, 9, 16, KERNEL_FIRST_MAX_ROWS, KERNEL_FIRST_MAX_ROWS + 1])
def test_products_of_a_few_rows_run_kernel_first_on_a_cpu_and_equal_the_product(rows):
    """`project_out_major` of 2..KERNEL_FIRST_MAX_ROWS rows on a CPU is the kernel times the rows (a dot_general
    whose left operand is the [1, O, I] kernel), else x times the kernel's transpose; either way each output
    is within the float32 bound of a length-I dot product, |err| <= 2 I u sum_i |x_i w_i| (Higham eq. 3.5;
    both orders), of the float64 product."""
    rng = np.random.default_rng(rows)
    x = rng.standard_normal((1, rows, 96)).astype(np.float32)
    kernel = rng.standard_normal((6, 10, 96)).astype(np.float32)  # [*out, I], output-major
    got = np.asarray(jax.jit(project_out_major)(x, kernel), np.float64)
    x64, k64 = x.astype(np.float64), kernel.astype(np.float64)
    want = np.einsum("bti,ohi->btoh", x64, k64)
    bound = 2 * 96 * 2.0**-24 * np.einsum("bti,ohi->btoh", np.abs(x64), np.abs(k64))
    assert got.shape == (1, rows, 6, 10) and np.all(np.abs(got - want) <= bound)
    dots = [e for e in jax.make_jaxpr(project_out_major)(x, kernel).eqns if e.primitive.name == "dot_general"]
    kernel_first = [e.invars[0].aval.shape == (1, 60, 96) for e in dots]
    assert kernel_first == [jax.default_backend() == "cpu" and 2 <= rows <= KERNEL_FIRST_MAX_ROWS]


REFERENCES = ("parameter", "get-tuple-element", "bitcast", "tuple")  # HLO ops that name a buffer, copying nothing


def _weight_shaped_ops(params, cfg) -> dict[str, int]:
    """The compiled greedy `generate_ar` program's ops whose output has the shape of one layer's weight matrix
    (with or without a leading axis of 1) and that compute or copy (not REFERENCES): per-layer slices or copies
    of the weights, counted by op kind."""
    import collections
    import re

    from specjax.decode import _generate_ar, eos_table
    from specjax.sampling import Sampling

    matrices = {tuple(x.shape[1:]) for x in jax.tree.leaves(stack_layers(params)["layers"]) if x.ndim >= 3}
    tokens, lengths = pad_prompts([[1, 2, 3], [4, 5]], 8)
    hlo = _generate_ar.lower(params, cfg, tokens, lengths, init_cache(cfg, 2, 24, jnp.float32), None, 16,
                             eos_table(()), Sampling(), 0).compile().as_text()
    ops = collections.Counter()
    for line in hlo.splitlines():
        if m := re.search(r"= (?:f32|bf16)\[([\d,]*)\]\{[^}]*\} ([a-z-]+)\(", line):
            shape = tuple(int(d) for d in m[1].split(",") if d)
            if (shape in matrices or (shape[:1] == (1,) and shape[1:] in matrices)) and m[2] not in REFERENCES:
                ops[m[2]] += 1
    return dict(ops)


def test_the_unstacked_program_copies_no_layer_weight_and_the_scanned_one_does():
    """Why a GPU serves unstacked (`NamedModel.serving`): in the compiled AR program of a scanned stack, XLA slices
    each layer's weight matrices out of the stacked arrays (dynamic-slice, and fusions that copy them) -- on a
    CPU this was the decode loop's largest cost, and an 8B layer is ~450 MB of such copies per step on a GPU.
    The unstacked program reads every weight where it lies: no op outputs a weight matrix. The HLO is XLA:CPU's
    (the same program is what a GPU compiles from; its fusion decisions differ, the slices of a scan do not)."""
    from specjax.models.llama import LlamaConfig
    from specjax.models.model import init_params

    # sizes no activation of this batch of 2 has, so a weight-shaped output is a weight
    cfg = LlamaConfig(vocab_size=72, hidden_size=56, num_layers=5, num_heads=4, num_kv_heads=2, head_dim=14,
                      intermediate_size=88)
    params = init_params(cfg, jax.random.key(0), jnp.float32)
    assert _weight_shaped_ops(with_layout(params, "unstacked"), cfg) == {}
    scanned = _weight_shaped_ops(with_layout(params, "stacked"), cfg)
    assert scanned.get("dynamic-slice", 0) >= 5, scanned  # at least one per weight matrix of a layer


def _compiled_loop(drafter, dparams, cfg, params, prompt_width: int = 8, new_tokens: int = 12) -> str:
    """XLA's compiled greedy `generate` program of `drafter` for two prompts padded to `prompt_width`, as text."""
    tokens, lengths = pad_prompts([[1, 2, 3], [4, 5]], prompt_width)
    return jax.jit(lambda p, d, t, n: generate(p, cfg, drafter, d, t, n, new_tokens, eos_ids=()).tokens).lower(
        params, dparams, tokens, lengths).compile().as_text()


def _copies_by_place(hlo: str, shape: str, min_slots: int) -> dict[str, int]:
    """Copies in compiled `hlo` of an array matching `shape` (a regex whose group 1 is the slot count) with at least
    `min_slots` slots, by where they run: "entry" (once per call), "branch" (inside a conditional's branch: once per
    round, or per level of a round), "fusion" (inside a fused computation: an elementwise copy, no buffer of its
    own) or "round" (the loop body and the rest)."""
    import re

    branches = {name for group in re.findall(r"branch_computations=\{([^}]*)\}", hlo)
                for name in re.findall(r"%?([\w.\-]+)", group)}
    counts, where = {"entry": 0, "branch": 0, "fusion": 0, "round": 0}, None
    for line in hlo.splitlines():
        if line and not line.startswith(" ") and "{" in line:
            name = line.split()[1 if line.startswith("ENTRY") else 0].lstrip("%")
            where = ("entry" if line.startswith("ENTRY") else "branch" if name in branches
                     else "fusion" if "fused" in name or "wrapped" in name else "round")
        found = re.search(r"= " + shape + r"\]\S* copy\(", line)
        if found and int(found.group(1)) >= min_slots:
            counts[where] += 1
    return counts


def _cache_copies_in_loop(drafter, dparams, cfg, params, *cache_cfgs) -> list[dict[str, int]]:
    """`_copies_by_place` of a whole K or V cache array of each of `cache_cfgs`' shape (default: the target's) in the
    compiled greedy `generate` loop of `drafter`. A whole cache holds at least prompt + new tokens (8 + 12) slots;
    a level's pending rows, of the same rank, hold fewer."""
    import re

    hlo = _compiled_loop(drafter, dparams, cfg, params)
    return [_copies_by_place(hlo, re.escape(f"f32[{c.num_layers},2,{c.num_kv_heads},") + r"(\d+)," + str(c.head_dim),
                             8 + 12) for c in cache_cfgs or (cfg,)]


def test_a_loop_that_verifies_at_several_widths_copies_no_cache_in_its_rounds():
    """DynaTree verifies at the smallest of several widths (a `lax.switch`), and forwards each level of its draft
    at the smallest of several widths (another). When a branch wrote a cache, XLA copied that whole cache in every
    branch: the target's K and V in the verify's branches and again in the loop body (four copies a round,
    8 MB each on SmolLM2), the draft LM's at every level. The branches now hold the block's rows apart and one
    write follows each switch (`LayerKV.deferred`, `cache.write_rows`, `level_tree.DeferredLevelFn`): no copy of
    the target's cache in a round, as in the single-width loop of a chain, and none of the draft's in a branch.
    Nor in the loop body: the draft LM's catch-up forward is committed where it was written (`cache.advance`);
    `commit`'s gather and write-back had XLA copy the draft cache's K and V twice a round, chain and DynaTree alike."""
    from specjax.drafters.chain import ChainDrafter
    from specjax.drafters.dynatree import DynaTreeDrafter
    from specjax.models.llama import LlamaConfig
    from specjax.testing import random_params

    cfg = LlamaConfig(vocab_size=72, hidden_size=32, num_layers=3, num_heads=4, num_kv_heads=2, head_dim=16,
                      intermediate_size=64)
    draft = LlamaConfig(vocab_size=72, hidden_size=16, num_layers=1, num_heads=2, num_kv_heads=1, head_dim=8,
                        intermediate_size=32)
    params, dparams = random_params(cfg, 0), random_params(draft, 1)
    multi = DynaTreeDrafter(draft, phase=3, n_max=16, d_max=4, d0=3)
    assert len(multi.verify_widths) > 1
    for drafter in (multi, ChainDrafter(draft, 3)):
        target, drafted = _cache_copies_in_loop(drafter, dparams, cfg, params, cfg, draft)
        assert sum(target.values()) - target["entry"] + sum(drafted.values()) - drafted["entry"] == 0, (
            drafter, target, drafted)


@pytest.mark.parametrize("spec", ["ddtree-8", "eagle3"])
def test_a_drafters_context_rows_are_committed_in_place_without_a_copy_in_the_rounds(spec):
    """DFlash's context rows (DDTree drafts with DFlash) and EAGLE-3's catch-up forward are written at region offset 0
    and committed by `cache.advance`, which moves only `lengths`. `commit`'s gather and write-back of the same
    slots (a move onto themselves) had XLA copy the drafter's whole K and V cache twice a round, apart from the
    forward's attention read: on the zoo pair with prompts padded to 16, four copies a round of DFlash's
    [2,2,4,72,48] or EAGLE-3's [1,2,4,121,48] cache arrays (221 / 186 KB; a 5-layer bfloat16 drafter with 8 KV
    heads of 128 has 335 MB per array at 32k slots: 1.3 GB copied a round). Now no cache array (any [L,B,K,S,D]
    with S >= prompt + new tokens: the target's or the drafter's) is copied outside the entry computation; the
    rows of a round ([..,16,48]) may be."""
    from specjax import testing

    zoo_target = testing.zoo_target()
    drafter, dparams = testing.build(spec, zoo_target)
    hlo = _compiled_loop(drafter, dparams, zoo_target.cfg, zoo_target.params, prompt_width=16, new_tokens=24)
    copies = _copies_by_place(hlo, r"f32\[\d+,2,\d+,(\d+),\d+", 16 + 24)
    assert copies["branch"] == copies["round"] == 0, (spec, copies)
