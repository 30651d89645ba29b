"""The checks of `specjax.sharding` on 4 emulated CPU devices: `python tests/sharding_checks.py [GROUP ...]`.

XLA fixes the device count when JAX starts, so `tests/test_sharding.py` runs the groups its
selected tests need in one fresh process with XLA_FLAGS=--xla_force_host_platform_device_count=4
and JAX_PLATFORMS=cpu (no group: all of them). Each group prints "=== <group>" first and
"OK <group>" at the end, or the traceback of its failed check; the exit status is non-zero
if any group failed.

Groups:
  layout   mesh construction and its named errors; the intended PartitionSpec of every
           param leaf of tiny GPT-NeoX / Qwen3 / biased tied Llama configs; placed shards;
           the compiled sharded `generate_ar` never all-gathers a weight or a cache
  ar       `generate_ar` on (data=2, model=2) and (data=1, model=4) meshes = one device,
           token for token, both architectures; the cache allocated in its shards; a
           second call compiles and transfers nothing; sampling with the same key too
  dflash   `generate` with DDTree over DFlash (GPT-NeoX target) and a draft-LM chain
           (Qwen3 target) on (2, 2) = one device; batch of 4 ragged prompts
  eagle3   `generate` with the EAGLE-3 dynamic tree (Qwen3 target)
  graft    `generate` with Graft over the EAGLE-3 stepper and its successor table (GPT-NeoX)
  train    `specjax.train.loop.train` of a DFlash drafter (draft vocabulary of 24 ids) on (data=2, model=2)
           and an EAGLE-3 drafter on (data=4, model=1): losses and updated params = one device

The tiny models are random (numpy normal(0, 0.3) weights, norms 1 + noise) from
`param_shapes`, so no JAX program is compiled to build them.
"""

from __future__ import annotations

import re
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

from specjax import sharding as S
from specjax.decode import _generate, _generate_ar, eos_table, generate, generate_ar
from specjax.models import GPTNeoXConfig, LlamaConfig, pad_prompts, param_shapes
from specjax.models.dflash import DFlashConfig
from specjax.models.eagle3 import Eagle3Config
from tests.child_groups import run_groups_main

NEOX = GPTNeoXConfig(vocab_size=40, hidden_size=32, num_layers=3, num_heads=4, intermediate_size=64, rotary_dim=4)
# GQA with every head count divisible by 4 devices: 8 query heads, 4 KV heads.
QWEN = LlamaConfig(vocab_size=48, hidden_size=32, num_layers=3, num_heads=8, num_kv_heads=4, head_dim=8,
                   intermediate_size=64, qk_norm=True, flavor="qwen3")
LLAMA_BIASED_TIED = LlamaConfig(vocab_size=48, hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=8,
                                intermediate_size=64, qkv_bias=True, o_bias=True, mlp_bias=True,
                                tie_word_embeddings=True)
PROMPTS = [[1, 2, 3], [4, 5, 6, 7, 8, 9, 1, 2], [9], [10, 11, 12, 13, 10, 11]]  # ragged, B = 4
PROMPT_WIDTH, MAX_NEW = 8, 12
EOS = (2,)

M = "model"
# The intended spec of every leaf (the leading None of a layer leaf is the stacked [L] axis).
OUTER_SPECS = {"embed/embedding": P(M, None), "head/kernel": P(None, M)}
NEOX_LAYER_SPECS = {
    "attention/qkv": P(None, None, None, M, None), "attention/qkv_bias": P(None, None, M, None),
    "attention/dense": P(None, M, None, None), "attention/dense_bias": P(None, None),
    "mlp/dense_h_to_4h/kernel": P(None, None, M), "mlp/dense_h_to_4h/bias": P(None, M),
    "mlp/dense_4h_to_h/kernel": P(None, M, None), "mlp/dense_4h_to_h/bias": P(None, None),
    **{f"{n}/{w}": P(None, None) for n in ("input_layernorm", "post_attention_layernorm") for w in ("scale", "bias")},
}
LLAMA_LAYER_SPECS = {
    "self_attn/q": P(None, None, M, None), "self_attn/k": P(None, None, M, None),
    "self_attn/v": P(None, None, M, None), "self_attn/o": P(None, M, None, None),
    "self_attn/q_bias": P(None, M, None), "self_attn/k_bias": P(None, M, None), "self_attn/v_bias": P(None, M, None),
    "self_attn/o_bias": P(None, None),
    "self_attn/q_norm/weight": P(None, None), "self_attn/k_norm/weight": P(None, None),
    "mlp/gate_proj/kernel": P(None, None, M), "mlp/up_proj/kernel": P(None, None, M),
    "mlp/down_proj/kernel": P(None, M, None), "mlp/gate_proj/bias": P(None, M), "mlp/up_proj/bias": P(None, M),
    "mlp/down_proj/bias": P(None, None),
    **{f"{n}/weight": P(None, None) for n in ("input_layernorm", "post_attention_layernorm")},
}


def random_params(cfg, seed: int, sigma: float = 0.3) -> dict:
    """Random params of `cfg` on the default device (one device): normal(0, sigma), norm weights 1 + that."""
    rng = np.random.default_rng(seed)

    def leaf(path, shape):
        base = 1.0 if getattr(path[-1], "key", None) in ("scale", "weight") else 0.0
        return jnp.asarray(base + sigma * rng.standard_normal(shape.shape), shape.dtype)

    return jax.tree_util.tree_map_with_path(leaf, param_shapes(cfg))


def flat(tree) -> dict[str, object]:
    return {"/".join(str(k.key) for k in path): x for path, x in jax.tree_util.tree_flatten_with_path(tree)[0]}


def raises(error, match: str, fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
    except error as e:
        assert match in str(e), f"{error.__name__} without {match!r}: {e}"
        return
    raise AssertionError(f"{fn.__name__} did not raise {error.__name__} ({match})")


def has_spec(x: jax.Array, spec: P) -> bool:
    """x is placed on its mesh as `spec` says (trailing replicated axes may be left out)."""
    return x.sharding.is_equivalent_to(NamedSharding(x.sharding.mesh, spec), x.ndim)


def one_device(x) -> bool:
    return len(x.sharding.device_set) == 1


def assert_same_output(ref, out, mesh, what: str):
    """Sharded output = one-device output, token for token; it ran on every device of the mesh."""
    assert one_device(ref.tokens), f"{what}: the reference did not run on one device"
    assert S.is_sharded_over(out.tokens, mesh) and has_spec(out.tokens, P("data")), out.tokens.sharding
    np.testing.assert_array_equal(np.asarray(out.tokens), np.asarray(ref.tokens), err_msg=what)
    np.testing.assert_array_equal(np.asarray(out.num_tokens), np.asarray(ref.num_tokens), err_msg=what)
    rows = {shard.data.shape[1] for shard in out.cache.k.addressable_shards}  # k [L, B, K, S, D]
    assert rows == {len(PROMPTS) // mesh.shape["data"]}, f"{what}: target cache {out.cache.k.sharding}"
    print(f"{what}: identical, {np.asarray(out.num_tokens).tolist()} tokens per row", flush=True)
    print("  tokens:", np.asarray(out.tokens).tolist(), flush=True)


def assert_second_call_compiles_and_transfers_nothing(jitted, call, mesh):
    """`call(tokens, lengths)` on new prompts of the same shape, placed beforehand: no new
    compile of `jitted`, no implicit host <-> device transfer (the prompt checks' explicit
    `device_get` is allowed)."""
    compiled = jitted._cache_size()
    tokens, lengths = S.shard_batch(*pad_prompts([p[::-1] for p in PROMPTS], PROMPT_WIDTH), mesh)
    with jax.transfer_guard("disallow"):
        call(tokens, lengths).tokens.block_until_ready()
    assert jitted._cache_size() == compiled, "a second sharded call compiled again"


# ============================================================================ groups


def check_layout():
    # (a) the mesh and its named errors
    mesh = S.make_mesh(data=2, model=2)
    assert dict(mesh.shape) == {"data": 2, "model": 2} and mesh.devices.size == 4
    assert all(t == jax.sharding.AxisType.Auto for t in mesh.axis_types)
    assert dict(S.make_mesh(data=4).shape) == {"data": 4, "model": 1}
    assert dict(S.make_mesh(1, 4).shape) == {"data": 1, "model": 4}
    assert dict(S.make_mesh(1, 2, devices=jax.devices()[:2]).shape) == {"data": 1, "model": 2}
    raises(ValueError, "needs 8 devices, there are 4", S.make_mesh, 2, 4)
    raises(ValueError, "needs 3 devices", S.make_mesh, 3, 1)
    raises(ValueError, "data=3 does not divide the 4 devices", S.make_mesh, 3)
    raises(ValueError, "must be >= 1", S.make_mesh, 0, 4)
    wide = S.make_mesh(1, 4)
    raises(ValueError, "num_kv_heads=2", S.param_specs, param_shapes(LLAMA_BIASED_TIED), LLAMA_BIASED_TIED, wide)
    odd_vocab = GPTNeoXConfig(vocab_size=30, hidden_size=32, num_layers=1, num_heads=4, intermediate_size=48,
                              rotary_dim=4)
    raises(ValueError, "vocab_size=30", S.param_specs, param_shapes(odd_vocab), odd_vocab, wide)
    raises(ValueError, "intermediate_size=66", S.check_divisible,
           GPTNeoXConfig(vocab_size=32, hidden_size=32, num_layers=1, num_heads=4, intermediate_size=66,
                         rotary_dim=4), 4)
    shapes = param_shapes(NEOX)
    raises(ValueError, "no sharding rule for param layers/attention/lora",
           S.param_specs, {**shapes, "layers": {**shapes["layers"], "attention": {
               **shapes["layers"]["attention"], "lora": jax.ShapeDtypeStruct((3, 32, 4), jnp.float32)}}}, NEOX, mesh)
    raises(ValueError, "no sharding rule for param lm_bias",
           S.param_specs, {**shapes, "lm_bias": jax.ShapeDtypeStruct((40,), jnp.float32)}, NEOX, mesh)
    raises(ValueError, "has shape (32, 3, 4, 8)", S.param_specs, {**shapes, "layers": {
        **shapes["layers"], "attention": {**shapes["layers"]["attention"],
                                          "qkv": jax.ShapeDtypeStruct((32, 3, 4, 8), jnp.float32)}}}, NEOX, mesh)
    raises(TypeError, "no sharding rules for DFlashConfig", S.param_specs, {},
           DFlashConfig.for_target(NEOX, num_layers=1, target_layer_ids=(1,), block_size=3), mesh)
    tokens, lengths = pad_prompts(PROMPTS[:3], PROMPT_WIDTH)
    raises(ValueError, "batch (3 rows) must be divisible by the data axis (2 devices)", S.shard_batch, tokens,
           lengths, mesh)

    # (b) every leaf gets its intended spec, on (2, 2) and (1, 4) meshes
    for cfg, layer_specs in ((NEOX, NEOX_LAYER_SPECS), (QWEN, LLAMA_LAYER_SPECS),
                             (LLAMA_BIASED_TIED, LLAMA_LAYER_SPECS)):
        norms = {"final_norm/" + w: P(None) for w in (("scale", "bias") if cfg is NEOX else ("weight",))}
        for m in (mesh, wide):
            if cfg is LLAMA_BIASED_TIED and m is wide:
                continue  # 2 KV heads: refused on 4 (checked above)
            got = flat(S.param_specs(param_shapes(cfg), cfg, m))
            want = {**{k: v for k, v in OUTER_SPECS.items() if k in got}, **norms,
                    **{"layers/" + k: v for k, v in layer_specs.items() if "layers/" + k in got}}
            assert got == want, (type(cfg).__name__, {k: (got.get(k), want.get(k)) for k in got.keys() | want.keys()
                                                      if got.get(k) != want.get(k)})
            assert ("head/kernel" in got) != cfg.tie_word_embeddings
        print(f"{cfg.model_type}: {len(got)} leaves, every spec as intended", flush=True)

    # placed leaves: NamedSharding with the spec, shards of the intended shape, values unchanged
    params = random_params(QWEN, 0)
    placed = S.shard_params(params, QWEN, mesh)
    for name, x in flat(placed).items():
        assert x.sharding.mesh == mesh and S.is_sharded_over(x, mesh), name
    q = placed["layers"]["self_attn"]["q"]  # [L, E, H, D]: H = 8 over 2 model devices
    assert has_spec(q, P(None, None, M, None))
    assert {s.data.shape for s in q.addressable_shards} == {(3, 32, 4, 8)}
    assert {s.data.shape for s in placed["embed"]["embedding"].addressable_shards} == {(24, 32)}
    np.testing.assert_array_equal(np.asarray(q), np.asarray(params["layers"]["self_attn"]["q"]))
    tokens, lengths = S.shard_batch(*pad_prompts(PROMPTS, PROMPT_WIDTH), mesh)
    assert has_spec(tokens, P("data", None)) and has_spec(lengths, P("data"))
    assert {s.data.shape for s in tokens.addressable_shards} == {(2, PROMPT_WIDTH)}
    replicated = S.replicate({"w": params["embed"]["embedding"], "none": None}, mesh)
    assert replicated["none"] is None and has_spec(replicated["w"], P())
    assert S.mesh_of(params) is None and S.mesh_of(placed) == mesh and S.mesh_of(params, tokens) == mesh
    # generate_ar's cache is allocated in its shards: [L, B, K, S, D] = [3, 4, 4, 16, 8] -> [3, 2, 2, 16, 8] each
    cache = S.init_cache_on(mesh, QWEN, 4, 16, np.float32)
    assert has_spec(cache.k, P(None, "data", M, None, None)) and has_spec(cache.lengths, P("data"))
    assert {s.data.shape for s in cache.v.addressable_shards} == {(3, 2, 2, 16, 8)}
    odd = S.init_cache_on(mesh, QWEN, 3, 16, np.float32)  # 3 rows: the batch stays whole, the heads split
    assert has_spec(odd.k, P(None, None, M, None, None)) and not np.asarray(odd.k).any()
    assert one_device(S.init_cache_on(None, QWEN, 4, 16, np.float32).k)


def check_generate_ar():
    """(c) greedy generate_ar, sharded = one device, for both architectures and both mesh shapes."""
    tokens, lengths = pad_prompts(PROMPTS, PROMPT_WIDTH)
    for cfg in (NEOX, QWEN):
        params = random_params(cfg, 1)
        ref = generate_ar(params, cfg, tokens, lengths, MAX_NEW, eos_ids=EOS)
        for data, model in ((2, 2), (1, 4)):
            mesh = S.make_mesh(data, model)
            sharded = S.shard_params(params, cfg, mesh)
            out = generate_ar(sharded, cfg, *S.shard_batch(tokens, lengths, mesh), MAX_NEW, eos_ids=EOS)
            assert_same_output(ref, out, mesh, f"generate_ar {cfg.model_type} data={data} model={model}")
            assert has_spec(out.cache.k, P(None, "data", M, None, None)), out.cache.k.sharding
            assert_second_call_compiles_and_transfers_nothing(
                _generate_ar, lambda t, n: generate_ar(sharded, cfg, t, n, MAX_NEW, eos_ids=EOS), mesh)


def check_no_weight_or_cache_is_gathered():
    """Tensor parallelism is real: the compiled sharded `generate_ar` all-reduces activations
    and never all-gathers a parameter (whole or one layer's slice) or a KV cache (whole or
    one layer's): output equality alone would not notice XLA gathering the weights."""
    from specjax.sampling import Sampling

    mesh = S.make_mesh(2, 2)
    params = S.shard_params(random_params(QWEN, 1), QWEN, mesh)
    tokens, lengths = S.shard_batch(*pad_prompts(PROMPTS, PROMPT_WIDTH), mesh)
    cache = S.init_cache_on(mesh, QWEN, len(PROMPTS), PROMPT_WIDTH + MAX_NEW, np.float32)
    lowered = _generate_ar.lower(params, QWEN, tokens, lengths, cache, None, MAX_NEW, eos_table(EOS, mesh), Sampling(), 0)
    hlo = lowered.compile().as_text()
    gathered = set()
    for line in hlo.splitlines():
        if m := re.search(r"= (.+?) all-gather(?:-start)?\(", line):
            gathered |= {tuple(int(d) for d in dims.split(",") if d) for dims in re.findall(r"\[([\d,]*)\]", m[1])}
    split = [x for x in jax.tree.leaves(params) if not x.sharding.is_fully_replicated]
    big = {x.shape for x in split} | {x.shape[1:] for x in split if x.ndim > 2}  # whole, or one layer of [L, ...]
    big |= {cache.k.shape, cache.k.shape[1:]}
    assert gathered and not gathered & big, f"all-gathered: {sorted(gathered & big)}"
    assert " all-reduce(" in hlo or " all-reduce-start(" in hlo
    print(f"compiled generate_ar: all-reduces, and all-gathers only of {sorted(gathered)}", flush=True)


def check_sampled_generate_ar():
    """Sampling (T = 1) with the same key draws the same tokens on a mesh as on one device:
    the random bits do not depend on the sharding (`jax_threefry_partitionable`)."""
    from specjax.sampling import Sampling

    tokens, lengths = pad_prompts(PROMPTS, PROMPT_WIDTH)
    mesh, params, key = S.make_mesh(2, 2), random_params(QWEN, 1), jax.random.key(3)
    ref = generate_ar(params, QWEN, tokens, lengths, MAX_NEW, eos_ids=EOS, sampling=Sampling(1.0), key=key)
    out = generate_ar(S.shard_params(params, QWEN, mesh), QWEN, *S.shard_batch(tokens, lengths, mesh), MAX_NEW,
                      eos_ids=EOS, sampling=Sampling(1.0), key=key)
    assert_same_output(ref, out, mesh, "sampled generate_ar qwen3 data=2 model=2 (same key)")


def check_generate(make):
    """(d) greedy generate with each drafter `make()` returns, on (data=2, model=2) = one device."""
    mesh = S.make_mesh(2, 2)
    tokens, lengths = pad_prompts(PROMPTS, PROMPT_WIDTH)
    for name, target, drafter, draft_params in make():
        params = random_params(target, 2)
        ref = generate(params, target, drafter, draft_params, tokens, lengths, MAX_NEW, eos_ids=EOS)
        out = generate(S.shard_params(params, target, mesh), target, drafter, S.replicate(draft_params, mesh),
                       *S.shard_batch(tokens, lengths, mesh), MAX_NEW, eos_ids=EOS)
        assert_same_output(ref, out, mesh, f"generate {name} ({target.model_type})")
        sharded, replicated = S.shard_params(params, target, mesh), S.replicate(draft_params, mesh)
        assert_second_call_compiles_and_transfers_nothing(
            _generate, lambda t, n: generate(sharded, target, drafter, replicated, t, n, MAX_NEW, eos_ids=EOS), mesh)
        assert all(S.is_sharded_over(x, mesh) for x in jax.tree.leaves(out.draft_state)), name
        print(f"  rounds per row: one device {np.asarray(ref.stats.num_rounds).tolist()}, "
              f"4 devices {np.asarray(out.stats.num_rounds).tolist()}", flush=True)


def dflash_drafters():
    from specjax.drafters.chain import ChainDrafter
    from specjax.drafters.ddtree import DDTreeDrafter
    from specjax.drafters.dflash import DFlashDrafter

    dflash = DFlashConfig.for_target(NEOX, num_layers=2, target_layer_ids=(0, 2), block_size=5,
                                     mask_token_id=NEOX.vocab_size - 1)
    yield "DDTree(DFlash)", NEOX, DDTreeDrafter(DFlashDrafter(dflash, NEOX), 8), random_params(dflash, 3)
    draft_lm = LlamaConfig(vocab_size=48, hidden_size=16, num_layers=1, num_heads=2, num_kv_heads=1, head_dim=8,
                           intermediate_size=32, tie_word_embeddings=True)
    yield "draft-LM chain", QWEN, ChainDrafter(draft_lm, num_tokens=3), random_params(draft_lm, 4)


def eagle3_drafters():
    from specjax.drafters.eagle3 import eagle3_drafter

    eagle = Eagle3Config.for_target(QWEN, target_layer_ids=(0, 1, 2))
    yield "EAGLE-3 dynamic tree", QWEN, eagle3_drafter(eagle, QWEN, top_k=2, depth=3, total=7), random_params(eagle, 5)


def graft_drafters():
    from specjax.drafters.eagle3 import Eagle3Stepper
    from specjax.drafters.graft import GraftDrafter, graft_params

    eagle = Eagle3Config.for_target(NEOX, target_layer_ids=(0, 1, 2))
    graft = GraftDrafter(Eagle3Stepper(eagle, NEOX), top_k=3, depth=3, total=12, width=3, checkpoints=(0, 1),
                         stage_draft=(3, 6), templates=((3, 3, 2, 1), (2, 2, 1, 1)))
    yield "Graft(EAGLE-3)", NEOX, graft, graft_params(random_params(eagle, 6), NEOX.vocab_size, 3, (0.3, 0.5))


def check_train():
    """The training loop on a mesh = on one device: 3 steps, every logged loss and every param leaf."""
    import tempfile

    from specjax.models.dflash_net import target_outer
    from specjax.train import dflash as TD, eagle3 as TE
    from specjax.train.loop import TrainSet, train
    from specjax.train.vocab import vocab_tables

    params = random_params(NEOX, 7)
    rng = np.random.default_rng(0)
    tokens = rng.integers(1, NEOX.vocab_size, (24, 16)).astype(np.int32)
    mask = np.zeros((24, 16), bool)
    mask[:, 4:] = True
    dflash = DFlashConfig.for_target(NEOX, num_layers=1, target_layer_ids=(0, 2), block_size=4,
                                     mask_token_id=NEOX.vocab_size - 1)
    eagle = Eagle3Config.for_target(NEOX, target_layer_ids=(0, 1, 2))
    cases = [("DFlash, 24-token draft vocabulary", dflash, TD.DFlashTrainConfig(steps=3, batch_size=8, anchors=4,
                                                                               log_every=3), TD.make_step,
              dflash.target_layer_ids, True, (2, 2)),
             ("EAGLE-3", eagle, TE.Eagle3TrainConfig(steps=3, batch_size=8, ttt_steps=2, log_every=3), TE.make_step,
              TE.feature_layers(eagle, NEOX), False, (4, 1))]
    for name, dcfg, tc, make_step, layers, reduced, shape in cases:
        ts = TrainSet.from_dense((NEOX, params), tokens, mask, layers, valid_rows=8)
        vocab = vocab_tables(ts.response_token_counts(NEOX.vocab_size), 24) if reduced else None
        outs = {}
        for mesh_shape in (None, shape):
            mesh = None if mesh_shape is None else S.make_mesh(*mesh_shape)
            with tempfile.TemporaryDirectory() as d:
                outs[mesh_shape] = train((NEOX, target_outer(params)), dcfg, ts, tc, d, step_factory=make_step,
                                         vocab=vocab, mesh=mesh, progress=False)
        ref_params, ref_log = outs[None]
        got_params, got_log = outs[shape]
        np.testing.assert_allclose([r["train_loss"] for r in got_log], [r["train_loss"] for r in ref_log],
                                   rtol=1e-5)
        np.testing.assert_allclose(got_log[-1]["valid_loss"], ref_log[-1]["valid_loss"], rtol=1e-5)
        jax.tree.map(lambda x, y: np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-4, atol=1e-5),
                     got_params, ref_params)
        print(f"train {name} mesh {shape}: equal to one device (loss {got_log[-1]['train_loss']:.5f})", flush=True)


GROUPS = {
    "layout": lambda: (check_layout(), check_no_weight_or_cache_is_gathered()),
    "ar": lambda: (check_generate_ar(), check_sampled_generate_ar()),
    "dflash": lambda: check_generate(dflash_drafters),
    "eagle3": lambda: check_generate(eagle3_drafters),
    "graft": lambda: check_generate(graft_drafters),
    "train": check_train,
}

if __name__ == "__main__":
    if len(jax.devices()) != 4:
        sys.exit(f"needs 4 devices (XLA_FLAGS=--xla_force_host_platform_device_count=4), JAX sees {jax.devices()}")
    run_groups_main(GROUPS)  # one interpreter for the groups asked for: one JAX start-up, shared programs
