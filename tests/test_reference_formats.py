"""Checkpoints in a reference implementation's own released layout (issue 38): DFlash.

The reference layout (z-lab/dflash `DFlashDraftModel`, a transformers `Qwen3PreTrainedModel`):
config.json is a Qwen3 config (model_type "qwen3") with `architectures` ["DFlashDraftModel"],
`auto_map`, top-level `block_size` and `num_target_layers`, and a nested `dflash_config`
{target_layer_ids, mask_token_id}. Its state dict, from the module structure (`fc` Linear
n*E -> E without bias, `hidden_norm`, `norm`, and per layer `input_layernorm`,
`post_attention_layernorm`, `self_attn.{q,k,v,o}_proj` without biases, `self_attn.{q,k}_norm`
over head_dim, `mlp.{gate,up,down}_proj`; the rotary inverse frequencies are a non-persistent
buffer), is the key list `reference_keys` below; torch Linear weights are [out, in].
"""

import dataclasses
import json

import jax
import numpy as np
import pytest

from specjax.decode import generate, generate_ar
from specjax.drafters.dflash import DFlashDrafter
from specjax.models import (CheckpointError, LlamaConfig, UnsupportedConfigError, init_params, load_checkpoint,
                            pad_prompts, save_checkpoint)
from specjax.models.dflash import DFlashConfig
from specjax.models.loading import read_safetensors, write_safetensors
from tests.tiny_models import perturbed

E, HEADS, KV, D, FFN, VOCAB, N_DRAFT = 32, 4, 2, 8, 64, 48, 2
TARGET = LlamaConfig(vocab_size=VOCAB, hidden_size=E, num_layers=4, num_heads=HEADS, num_kv_heads=KV, head_dim=D,
                     intermediate_size=FFN, qk_norm=True, flavor="qwen3", rope_theta=1e4)
IDS = [0, 2]  # never the target's last layer (the reference reads that one after the final norm)


def reference_keys(num_layers: int) -> set[str]:
    """The reference DFlashDraftModel's state-dict keys (module structure in the module docstring)."""
    per_layer = ["input_layernorm.weight", "post_attention_layernorm.weight", "self_attn.q_proj.weight",
                 "self_attn.k_proj.weight", "self_attn.v_proj.weight", "self_attn.o_proj.weight",
                 "self_attn.q_norm.weight", "self_attn.k_norm.weight", "mlp.gate_proj.weight",
                 "mlp.up_proj.weight", "mlp.down_proj.weight"]
    return {"fc.weight", "hidden_norm.weight", "norm.weight"} | {
        f"layers.{i}.{k}" for i in range(num_layers) for k in per_layer}


REFERENCE_CONFIG_KEYS = {
    "architectures", "auto_map", "model_type", "block_size", "num_target_layers", "dflash_config", "vocab_size",
    "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
    "head_dim", "hidden_act", "rms_norm_eps", "rope_theta", "rope_scaling", "attention_bias", "attention_dropout",
    "tie_word_embeddings", "use_sliding_window", "sliding_window", "max_window_layers", "layer_types",
    "torch_dtype",
}


def reference_config(**changes) -> dict:
    """A reference-layout config.json as the released drafters write it (Qwen3 keys + DFlash keys)."""
    hf = {"architectures": ["DFlashDraftModel"], "auto_map": {"AutoModel": "dflash.DFlashDraftModel"},
          "model_type": "qwen3", "block_size": 4, "num_target_layers": TARGET.num_layers,
          "dflash_config": {"mask_token_id": VOCAB - 1, "target_layer_ids": IDS}, "vocab_size": VOCAB,
          "hidden_size": E, "intermediate_size": FFN, "num_hidden_layers": N_DRAFT, "num_attention_heads": HEADS,
          "num_key_value_heads": KV, "head_dim": D, "hidden_act": "silu", "rms_norm_eps": 1e-6,
          "rope_theta": 1e4, "rope_scaling": None, "attention_bias": False, "attention_dropout": 0.0,
          "tie_word_embeddings": False, "use_sliding_window": False, "sliding_window": None,
          "max_window_layers": N_DRAFT, "layer_types": ["full_attention"] * N_DRAFT, "bos_token_id": 1,
          "eos_token_id": 2, "initializer_range": 0.02, "max_position_embeddings": 4096, "use_cache": True,
          "torch_dtype": "bfloat16", "transformers_version": "4.57.1"}
    hf.update(changes)
    return hf


def reference_tensors(seed=0) -> dict[str, np.ndarray]:
    """Random weights under the reference's names and torch shapes ([out, in] for Linear), float16."""
    rng = np.random.default_rng(seed)
    shapes = {"fc.weight": (E, len(IDS) * E), "hidden_norm.weight": (E,), "norm.weight": (E,)}
    for i in range(N_DRAFT):
        p = f"layers.{i}."
        shapes.update({p + "input_layernorm.weight": (E,), p + "post_attention_layernorm.weight": (E,),
                       p + "self_attn.q_proj.weight": (HEADS * D, E), p + "self_attn.k_proj.weight": (KV * D, E),
                       p + "self_attn.v_proj.weight": (KV * D, E), p + "self_attn.o_proj.weight": (E, HEADS * D),
                       p + "self_attn.q_norm.weight": (D,), p + "self_attn.k_norm.weight": (D,),
                       p + "mlp.gate_proj.weight": (FFN, E), p + "mlp.up_proj.weight": (FFN, E),
                       p + "mlp.down_proj.weight": (E, FFN)})
    assert set(shapes) == reference_keys(N_DRAFT)
    return {k: (rng.normal(size=s) * 0.3 + (1.0 if len(s) == 1 else 0.0)).astype(np.float16)
            for k, s in shapes.items()}


def write_reference(directory, hf=None, tensors=None):
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(reference_config() if hf is None else hf))
    write_safetensors(directory / "model.safetensors", reference_tensors() if tensors is None else tensors)
    return directory


def expected_params(t: dict[str, np.ndarray]) -> dict:
    """The specjax params the reference tensors must become: Linear [out, in] -> kernel [in, out]; q/k/v
    [n*D, E] -> [E, n, D]; o [E, H*D] -> [H, D, E]; norms unchanged; layers stacked on axis 0."""
    f = lambda a: np.asarray(a, np.float32)
    heads_in = lambda a, n: f(a).reshape(n, D, E).transpose(2, 0, 1)

    def layer(i):
        p = lambda k: t[f"layers.{i}.{k}"]
        return {"input_layernorm": {"weight": f(p("input_layernorm.weight"))},
                "post_attention_layernorm": {"weight": f(p("post_attention_layernorm.weight"))},
                "self_attn": {"q": heads_in(p("self_attn.q_proj.weight"), HEADS),
                              "k": heads_in(p("self_attn.k_proj.weight"), KV),
                              "v": heads_in(p("self_attn.v_proj.weight"), KV),
                              "o": f(p("self_attn.o_proj.weight")).reshape(E, HEADS, D).transpose(1, 2, 0),
                              "q_norm": {"weight": f(p("self_attn.q_norm.weight"))},
                              "k_norm": {"weight": f(p("self_attn.k_norm.weight"))}},
                "mlp": {name: {"kernel": f(p(f"mlp.{name}.weight")).T} for name in ("gate_proj", "up_proj", "down_proj")}}

    layers = [layer(i) for i in range(N_DRAFT)]
    return {"fc": {"kernel": f(t["fc.weight"]).T}, "hidden_norm": {"weight": f(t["hidden_norm.weight"])},
            "norm": {"weight": f(t["norm.weight"])},
            "layers": jax.tree.map(lambda *xs: np.stack(xs), *layers)}


def assert_trees_equal(a, b):
    assert jax.tree.structure(a) == jax.tree.structure(b)
    jax.tree.map(lambda x, y: np.testing.assert_array_equal(np.asarray(x), np.asarray(y)), a, b)


def test_reference_dflash_layout_loads_every_tensor_where_it_belongs(tmp_path):
    tensors = reference_tensors()
    cfg, params = load_checkpoint(write_reference(tmp_path / "ref", tensors=tensors))
    assert cfg == DFlashConfig(vocab_size=VOCAB, hidden_size=E, num_layers=N_DRAFT, num_heads=HEADS, num_kv_heads=KV,
                               head_dim=D, intermediate_size=FFN, target_layer_ids=tuple(IDS), target_num_layers=4,
                               target_model_type=None, block_size=4, mask_token_id=VOCAB - 1, rope_theta=1e4,
                               rms_norm_eps=1e-6)
    assert_trees_equal(params, expected_params(tensors))
    cfg.check_target(TARGET)  # the target's model type is not recorded: any type passes that check
    # newer reference configs may carry block_size inside dflash_config and legacy rotary buffers
    hf = reference_config(dflash_config={"mask_token_id": 3, "target_layer_ids": IDS, "block_size": 6})
    del hf["block_size"]
    with_buffer = {**tensors, "rotary_emb.inv_freq": np.ones(D // 2, np.float32)}
    cfg2, params2 = load_checkpoint(write_reference(tmp_path / "ref2", hf, with_buffer))
    assert (cfg2.block_size, cfg2.mask_token_id) == (6, 3)
    assert_trees_equal(params2, params)


def test_specjax_saves_exactly_the_reference_layout_and_loads_it_back(tmp_path):
    cfg, params = load_checkpoint(write_reference(tmp_path / "ref"))
    out = save_checkpoint(tmp_path / "out", cfg, params, dtype=np.float16, layout="reference")
    tensors = read_safetensors(out / "model.safetensors")
    assert set(tensors) == reference_keys(N_DRAFT)
    assert set(tensors) == set(read_safetensors(tmp_path / "ref" / "model.safetensors"))
    assert all(a.dtype == np.float16 for a in tensors.values())
    hf = json.loads((out / "config.json").read_text())
    assert set(hf) == REFERENCE_CONFIG_KEYS
    assert hf["model_type"] == "qwen3" and hf["architectures"] == ["DFlashDraftModel"]
    assert hf["dflash_config"] == {"mask_token_id": VOCAB - 1, "target_layer_ids": IDS}
    assert (hf["block_size"], hf["num_target_layers"], hf["torch_dtype"]) == (4, 4, "float16")
    cfg2, params2 = load_checkpoint(out)
    assert cfg2 == cfg
    assert_trees_equal(params2, params)
    # a drafter built by specjax (target type recorded) saves to the same layout; only the type is lost
    mine = DFlashConfig.for_target(TARGET, num_layers=N_DRAFT, target_layer_ids=IDS, block_size=4, mask_token_id=5)
    mparams = init_params(mine, jax.random.key(0))
    cfg3, params3 = load_checkpoint(save_checkpoint(tmp_path / "mine", mine, mparams, layout="reference"))
    assert cfg3 == dataclasses.replace(mine, target_model_type=None)
    assert_trees_equal(params3, mparams)


def test_reference_layout_errors_name_the_problem(tmp_path):
    for drop, name in ((("dflash_config", "mask_token_id"), "dflash_config.mask_token_id"),
                       (("dflash_config", "target_layer_ids"), "dflash_config.target_layer_ids"),
                       (("num_target_layers",), "num_target_layers"), (("hidden_size",), "hidden_size")):
        hf = reference_config()
        hf["dflash_config"] = dict(hf["dflash_config"])
        (hf if len(drop) == 1 else hf[drop[0]]).pop(drop[-1])
        with pytest.raises(CheckpointError, match=rf"missing required key\(s\) \['{name}'\]"):
            load_checkpoint(write_reference(tmp_path / name, hf))
    unsupported = {
        "dflash2": (reference_config(architectures=["DFlash2DraftModel"]), "DFlash2DraftModel"),
        "conv": (reference_config(dflash_config={"mask_token_id": 1, "target_layer_ids": IDS, "conv_kernel_size": 2}),
                 "conv_kernel_size"),
        "causal": (reference_config(is_causal=True), "is_causal"),
        "sliding": (reference_config(use_sliding_window=True, sliding_window=8), "sliding"),
        "last": (reference_config(dflash_config={"mask_token_id": 1, "target_layer_ids": [0, 3]}), "last layer 3"),
        "bias": (reference_config(attention_bias=True), "biases"),
    }
    for name, (hf, match) in unsupported.items():
        with pytest.raises(UnsupportedConfigError, match=match):
            load_checkpoint(write_reference(tmp_path / name, hf))
    tensors = reference_tensors()
    tensors["embed_tokens.weight"] = np.zeros((VOCAB, E), np.float16)
    del tensors["layers.1.self_attn.k_norm.weight"]
    with pytest.raises(CheckpointError, match=r"missing tensors: \['layers.1.self_attn.k_norm.weight'\].*embed_tokens"):
        load_checkpoint(write_reference(tmp_path / "keys", tensors=tensors))
    cfg, params = load_checkpoint(write_reference(tmp_path / "ok"))
    with pytest.raises(ValueError, match="no draft vocabulary"):
        save_checkpoint(tmp_path / "save_dv", cfg, {**params, "draft_vocab": {"ids": np.arange(4, dtype=np.int32)}},
                        layout="reference")
    with pytest.raises(ValueError, match="last layer"):
        save_checkpoint(tmp_path / "save_last", dataclasses.replace(cfg, target_layer_ids=(0, 3)),
                        params, layout="reference")
    with pytest.raises(ValueError, match="has none"):
        save_checkpoint(tmp_path / "save_t", TARGET, init_params(TARGET, jax.random.key(0)), layout="reference")
    assert not any((tmp_path / d).exists() for d in ("save_dv", "save_last", "save_t"))


def test_reference_loaded_drafter_decodes_losslessly(tmp_path):
    cfg, dparams = load_checkpoint(write_reference(tmp_path / "ref"))
    tparams = perturbed(init_params(TARGET, jax.random.key(1)), 2, 0.3)
    tokens, lengths = pad_prompts([[1, 5, 9, 2], [7, 3]], 8)
    ar = generate_ar(tparams, TARGET, tokens, lengths, 12, eos_ids=())
    spec = generate(tparams, TARGET, DFlashDrafter(cfg, TARGET), dparams, tokens, lengths, 12, eos_ids=())
    np.testing.assert_array_equal(np.asarray(spec.tokens), np.asarray(ar.tokens))
