"""Checkpoint loading/saving: strict key maps, clear errors on bad input, round trips."""

import copy
import json
import shutil

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
import torch
import transformers

from specjax import zoo
from specjax.models import (
    CheckpointError, UnsupportedConfigError, config_from_hf, init_cache, load_checkpoint, pad_prompts, prefill,
    save_checkpoint,
)
from specjax.models import dflash, domino, eagle3, gpt_neox, llama
from specjax.models.families import FAMILIES, MODEL_TYPES, register
from specjax.models.loading import read_safetensors, write_safetensors
from specjax.sharding import param_specs
from tests.tiny_models import LLAMA3_ROPE, hf_logits


@pytest.fixture
def neox_dir(hf_checkpoint, tmp_path):
    """A private, editable copy of a tiny GPT-NeoX checkpoint."""
    _, directory = hf_checkpoint("neox_parallel")
    copy = tmp_path / "ckpt"
    shutil.copytree(directory, copy)
    return copy


def edit_config(directory, **changes):
    path = directory / "config.json"
    cfg = json.loads(path.read_text())
    cfg.update(changes)
    path.write_text(json.dumps(cfg))


def edit_tensors(directory, fn):
    path = directory / "model.safetensors"
    tensors = {k: np.array(v) for k, v in read_safetensors(path).items()}
    fn(tensors)
    write_safetensors(path, tensors)


@pytest.mark.parametrize(
    "changes, field",
    [
        (dict(rope_scaling={"rope_type": "linear", "factor": 2.0}), "rope_scaling"),
        (dict(rope_parameters={"rope_type": "dynamic", "rope_theta": 1e4, "factor": 2.0}), "rope_type"),
        (dict(use_alibi=True), "use_alibi"),
        (dict(hidden_act="swish_glu_v9"), "hidden_act"),
        (dict(model_type="falcon"), "model_type"),
    ],
)
def test_unsupported_config_raises_naming_the_field(neox_dir, changes, field):
    edit_config(neox_dir, **changes)
    with pytest.raises(UnsupportedConfigError, match=field):
        load_checkpoint(neox_dir)


def test_sliding_window_raises():
    hf = transformers.Qwen2Config(hidden_size=32, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=2,
                                  intermediate_size=64, vocab_size=50).to_dict()
    config_from_hf(hf)  # the default (no sliding window) is fine
    hf.update(use_sliding_window=True, sliding_window=16)
    with pytest.raises(UnsupportedConfigError, match="use_sliding_window"):
        config_from_hf(hf)


def test_missing_tensor_raises(neox_dir):
    edit_tensors(neox_dir, lambda t: t.pop("gpt_neox.layers.1.mlp.dense_4h_to_h.bias"))
    with pytest.raises(CheckpointError, match=r"missing tensors: \['gpt_neox.layers.1.mlp.dense_4h_to_h.bias'\]"):
        load_checkpoint(neox_dir)


def test_extra_tensor_raises(neox_dir):
    edit_tensors(neox_dir, lambda t: t.update({"gpt_neox.layers.0.attention.lora_A.weight": np.zeros((2, 2), np.float32)}))
    with pytest.raises(CheckpointError, match="unexpected tensors.*lora_A"):
        load_checkpoint(neox_dir)


def test_known_buffers_are_ignored(neox_dir):
    edit_tensors(neox_dir, lambda t: t.update({"gpt_neox.layers.0.attention.rotary_emb.inv_freq": np.ones(2, np.float32)}))
    load_checkpoint(neox_dir)


def test_wrong_shape_raises(neox_dir):
    def shrink(t):
        t["gpt_neox.layers.0.attention.query_key_value.weight"] = t["gpt_neox.layers.0.attention.query_key_value.weight"][:-3]

    edit_tensors(neox_dir, shrink)
    with pytest.raises(CheckpointError, match=r"query_key_value.weight: checkpoint \(93, 32\) vs expected \(96, 32\)"):
        load_checkpoint(neox_dir)


def test_duplicate_tensor_across_shards_raises(neox_dir):
    tensors = read_safetensors(neox_dir / "model.safetensors")
    names = sorted(tensors)
    half = len(names) // 2
    write_safetensors(neox_dir / "a.safetensors", {k: tensors[k] for k in names[:half]})
    write_safetensors(neox_dir / "b.safetensors", {k: tensors[k] for k in names[half - 1:]})  # names[half-1] twice
    index = {"weight_map": {**{k: "a.safetensors" for k in names[:half]}, **{k: "b.safetensors" for k in names[half:]}}}
    (neox_dir / "model.safetensors.index.json").write_text(json.dumps(index))
    (neox_dir / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match=f"duplicate tensor '{names[half - 1]}'"):
        load_checkpoint(neox_dir)


def test_sharded_checkpoint_loads(hf_checkpoint, tmp_path):
    model, _ = hf_checkpoint("qwen3_gqa_untied")
    model.save_pretrained(tmp_path, max_shard_size="20KB")
    assert (tmp_path / "model.safetensors.index.json").exists()
    cfg, params = load_checkpoint(tmp_path)
    tokens, lengths = pad_prompts([[1, 2, 3, 4]])
    logits, _, _ = prefill(params, cfg, tokens, lengths, init_cache(cfg, 1, 8))
    np.testing.assert_allclose(np.asarray(logits[0]), hf_logits(model, [1, 2, 3, 4]), atol=1e-4, rtol=0)


def test_pickled_checkpoint_needs_opt_in(hf_checkpoint, tmp_path):
    model, _ = hf_checkpoint("llama_tied")
    model.config.save_pretrained(tmp_path)
    torch.save(model.state_dict(), tmp_path / "pytorch_model.bin")
    with pytest.raises(CheckpointError, match="pickle"):
        load_checkpoint(tmp_path)
    cfg, params = load_checkpoint(tmp_path, allow_pickle=True)
    tokens, lengths = pad_prompts([[5, 6, 7]])
    logits, _, _ = prefill(params, cfg, tokens, lengths, init_cache(cfg, 1, 4))
    np.testing.assert_allclose(np.asarray(logits[0]), hf_logits(model, [5, 6, 7]), atol=1e-4, rtol=0)


def test_prompt_longer_than_cache_raises(hf_checkpoint):
    _, directory = hf_checkpoint("neox_parallel")
    cfg, params = load_checkpoint(directory)
    tokens, lengths = pad_prompts([[1] * 12])
    with pytest.raises(ValueError, match="does not fit in the KV cache: needs 12 slots"):
        prefill(params, cfg, tokens, lengths, init_cache(cfg, 1, 10))


@pytest.mark.parametrize("variant", ["neox_sequential", "qwen3_gqa_tied", "qwen3_gqa_untied", "qwen2_bias", "llama_tied",
                                     "llama3_rope_untied"])
def test_save_load_round_trip_and_transformers_reads_it(variant, hf_checkpoint, tmp_path):
    model, directory = hf_checkpoint(variant)
    cfg, params = load_checkpoint(directory)
    save_checkpoint(tmp_path, cfg, params)
    cfg2, params2 = load_checkpoint(tmp_path)
    assert cfg2 == cfg
    jax.tree.map(lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)), params, params2)

    reloaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32).eval()
    assert type(reloaded) is type(model)
    prompt = [9, 8, 7, 6, 5, 4]
    np.testing.assert_allclose(hf_logits(reloaded, prompt), hf_logits(model, prompt), atol=1e-5, rtol=0)


def test_bfloat16_round_trip(hf_checkpoint, tmp_path):
    _, directory = hf_checkpoint("qwen2_bias")
    cfg, params = load_checkpoint(directory, dtype=jnp.bfloat16)
    save_checkpoint(tmp_path, cfg, params)
    assert json.loads((tmp_path / "config.json").read_text())["torch_dtype"] == "bfloat16"
    _, params2 = load_checkpoint(tmp_path, dtype=jnp.bfloat16)
    jax.tree.map(lambda a, b: np.testing.assert_array_equal(np.asarray(a, np.float32), np.asarray(b, np.float32)), params, params2)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16], ids=["fp32", "fp16", "bf16"])
def test_32_and_16_bit_checkpoints_load(dtype, hf_checkpoint, tmp_path):
    """Saved in fp32 / fp16 / bf16 (the safetensors package, numpy arrays), read back in that dtype and
    loaded as the params cast to it."""
    _, directory = hf_checkpoint("llama_tied")
    cfg, params = load_checkpoint(directory)
    save_checkpoint(tmp_path, cfg, params, dtype=dtype)
    assert {t.dtype for t in read_safetensors(tmp_path / "model.safetensors").values()} == {np.dtype(dtype)}
    _, params2 = load_checkpoint(tmp_path)
    jax.tree.map(lambda a, b: np.testing.assert_array_equal(np.asarray(a).astype(dtype).astype(np.float32),
                                                            np.asarray(b)), params, params2)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_16_bit_checkpoints_written_by_transformers_load(dtype, hf_checkpoint, tmp_path):
    """A checkpoint torch's safetensors writer stored in fp16 / bf16 loads as the fp32 one cast to it."""
    model, directory = hf_checkpoint("qwen2_bias")
    copy.deepcopy(model).to(getattr(torch, dtype)).save_pretrained(tmp_path)
    _, params = load_checkpoint(directory, dtype=jnp.dtype(dtype))
    _, params16 = load_checkpoint(tmp_path, dtype=jnp.dtype(dtype))
    jax.tree.map(lambda a, b: np.testing.assert_array_equal(np.asarray(a, np.float32), np.asarray(b, np.float32)),
                 params, params16)


@pytest.mark.parametrize("variant", ["llama_tied", "llama3_rope_untied"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_16_bit_llama_checkpoints_match_transformers_in_float32(dtype, variant, hf_checkpoint, tmp_path):
    """A tied and an untied (llama3-rope) Llama saved by transformers in fp16 / bf16, loaded upcast to
    float32, give transformers' float32 logits of the same upcast weights."""
    model, _ = hf_checkpoint(variant)
    copy.deepcopy(model).to(getattr(torch, dtype)).save_pretrained(tmp_path)
    assert {t.dtype for t in read_safetensors(tmp_path / "model.safetensors").values()} == {np.dtype(getattr(ml_dtypes, dtype, dtype))}
    reference = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32).eval()
    cfg, params = load_checkpoint(tmp_path)
    prompt = [int(t) for t in np.random.default_rng(1).integers(0, cfg.vocab_size, 24)]
    tokens, lengths = pad_prompts([prompt])
    logits, _, _ = prefill(params, cfg, tokens, lengths, init_cache(cfg, 1, len(prompt)))
    np.testing.assert_allclose(np.asarray(logits[0]), hf_logits(reference, prompt), atol=1e-4, rtol=0)


@pytest.fixture
def llama3_dir(hf_checkpoint, tmp_path):
    """A private, editable copy of the tiny untied Llama with llama3 rope scaling."""
    _, directory = hf_checkpoint("llama3_rope_untied")
    return shutil.copytree(directory, tmp_path / "ckpt")


def set_rope(directory, field, value):
    """Rewrite the config's rope settings as `field` (`rope_parameters` or legacy `rope_scaling`) = value."""
    path = directory / "config.json"
    cfg = json.loads(path.read_text())
    cfg.pop("rope_parameters", None)
    cfg.pop("rope_scaling", None)
    cfg.update({field: value, "rope_theta": 10000.0} if field == "rope_scaling" else {field: value})
    path.write_text(json.dumps(cfg))


def test_llama3_rope_in_the_legacy_rope_scaling_field_loads_the_same(llama3_dir):
    """Llama 3.1's hub config.json (transformers 4 format: `rope_scaling` + `rope_theta`) parses like
    transformers 5's `rope_parameters`."""
    cfg, _ = load_checkpoint(llama3_dir)
    set_rope(llama3_dir, "rope_scaling", LLAMA3_ROPE)
    cfg_legacy, _ = load_checkpoint(llama3_dir)
    assert cfg_legacy == cfg and cfg.rope_scaling.factor == 8.0


@pytest.mark.parametrize("field", ["rope_parameters", "rope_scaling"])
@pytest.mark.parametrize("rope", [dict(rope_type="linear", factor=2.0), dict(type="dynamic", factor=2.0),
                                  dict(rope_type="yarn", factor=4.0, original_max_position_embeddings=16),
                                  dict(rope_type="longrope", short_factor=[1.0] * 4, long_factor=[2.0] * 4)],
                         ids=["linear", "dynamic", "yarn", "longrope"])
def test_llama_rope_scaling_other_than_llama3_raises_naming_the_type(field, rope, llama3_dir):
    set_rope(llama3_dir, field, dict(rope, rope_theta=10000.0) if field == "rope_parameters" else rope)
    kind = rope.get("rope_type", rope.get("type"))
    with pytest.raises(UnsupportedConfigError, match=f"{field}.*'{kind}' is not supported.*'llama3'"):
        load_checkpoint(llama3_dir)


@pytest.mark.parametrize("change, match", [
    (dict(high_freq_factor=None), r"missing \['high_freq_factor'\]"),
    (dict(high_freq_factor=0.5), "low_freq_factor < high_freq_factor"),
    (dict(beta_fast=32.0), r"unsupported keys \['beta_fast'\] for rope type 'llama3'"),
])
def test_bad_llama3_rope_scaling_raises(change, match, llama3_dir):
    rope = {k: v for k, v in {**LLAMA3_ROPE, **change}.items() if v is not None}
    set_rope(llama3_dir, "rope_scaling", rope)
    with pytest.raises(UnsupportedConfigError, match=match):
        load_checkpoint(llama3_dir)


def test_tied_checkpoint_with_an_lm_head_loads_only_if_it_equals_the_embedding(hf_checkpoint, tmp_path):
    _, directory = hf_checkpoint("llama_tied")
    directory = shutil.copytree(directory, tmp_path / "ckpt")
    _, params = load_checkpoint(directory)
    edit_tensors(directory, lambda t: t.update({"lm_head.weight": t["model.embed_tokens.weight"].copy()}))
    _, params2 = load_checkpoint(directory)  # an exporter's redundant copy of the tied matrix
    jax.tree.map(lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)), params, params2)
    edit_tensors(directory, lambda t: t.update({"lm_head.weight": t["lm_head.weight"] + 1}))
    with pytest.raises(CheckpointError, match="config ties embeddings but the checkpoint has a different 'lm_head.weight'"):
        load_checkpoint(directory)


def test_untied_checkpoint_without_an_lm_head_raises(llama3_dir):
    edit_tensors(llama3_dir, lambda t: t.pop("lm_head.weight"))
    with pytest.raises(CheckpointError, match=r"missing tensors: \['lm_head.weight \(config.json has tie_word_embeddings false"):
        load_checkpoint(llama3_dir)


def test_each_family_registers_itself_where_it_is_defined():
    """Every architecture module registers its config class, the HF model types it reads and (targets
    only) its layer sharding rules; `family`, `config_from_hf` and the sharding rules read that
    registry; a config class or model type is never taken twice."""
    modules = (gpt_neox, llama, dflash, domino, eagle3)
    assert {f.module for f in FAMILIES.values()} == set(modules)
    for module in modules:
        assert FAMILIES[module.FAMILY.config] is module.FAMILY
    assert {t: c.__name__ for t, c in MODEL_TYPES.items()} == {
        "gpt_neox": "GPTNeoXConfig", "llama": "LlamaConfig", "qwen2": "LlamaConfig", "qwen3": "LlamaConfig",
        "dflash": "DFlashConfig", "domino": "DominoConfig", "eagle3": "Eagle3Config"}
    assert [m.__name__.rsplit(".", 1)[1] for m in modules if m.FAMILY.layer_sharding] == ["gpt_neox", "llama"]
    with pytest.raises(ValueError, match="LlamaConfig is already registered by specjax.models.llama"):
        register(gpt_neox, llama.LlamaConfig)
    with pytest.raises(ValueError, match=r"model_type\(s\) \['qwen2'\] are already registered"):
        register(gpt_neox, gpt_neox.GPTNeoXConfig, ("gpt_neox", "qwen2"))
    assert MODEL_TYPES["qwen2"] is llama.LlamaConfig and FAMILIES[gpt_neox.GPTNeoXConfig] is gpt_neox.FAMILY
    with pytest.raises(TypeError, match="no sharding rules for DFlashConfig"):
        param_specs({"layers": {}}, zoo.load_drafter("tiny-neox-dflash")[0], None)
