"""Checkpoints in a reference implementation's own released layout (issue 38): DFlash, Domino, EAGLE-3.

Each layout is built here from its documented key set with random tiny weights, loaded, and
compared with an independent numpy / torch implementation written in this file; decoding with
it is lossless; specjax-saved drafters write exactly the reference's keys, shapes and dtypes.

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
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from specjax.decode import generate, generate_ar
from specjax.models.draft_vocab import EXCLUDED_LOGIT, with_draft_vocab
from specjax.drafters import dflash as DF
from specjax.drafters import domino as DO
from specjax.drafters import eagle3 as E3
from specjax.drafters.dflash import DFlashDrafter
from specjax.drafters.protocol import PromptContext
from specjax.models import (CheckpointError, LlamaConfig, UnsupportedConfigError, init_params, load_checkpoint,
                            pad_prompts, save_checkpoint)
from specjax.models import dflash_net as DN
from specjax.models import domino_net as DON
from specjax.models import eagle3_net as E3N
from specjax.models.dflash import DFlashConfig
from specjax.models.domino import DominoConfig
from specjax.models.eagle3 import Eagle3Config
from specjax.models.loading import ReferenceLayoutWarning, read_safetensors, write_safetensors
from specjax.models.model import embed_tokens
from specjax.testing import random_params

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
    # without target_layer_ids, z-lab's DFlashDraftModel builds them: round(1 + i (L - 4) / (N_d - 1)) -> [1, 1]
    hf = reference_config(dflash_config={"mask_token_id": 3})
    assert load_checkpoint(write_reference(tmp_path / "noids", hf))[0].target_layer_ids == (1, 1)
    with pytest.warns(ReferenceLayoutWarning, match="no draft vocabulary"):  # the layout has none: left out
        with_ids = {**params, "draft_vocab": {"ids": np.arange(4, dtype=np.int32)}}
        out = save_checkpoint(tmp_path / "save_dv", cfg, with_ids, layout="reference")
    assert set(read_safetensors(out / "model.safetensors")) == reference_keys(N_DRAFT)
    assert_trees_equal(load_checkpoint(out)[1], params)
    with pytest.raises(ValueError, match="last layer"):  # a tap of the last layer must be read after the norm
        save_checkpoint(tmp_path / "save_last", dataclasses.replace(cfg, target_layer_ids=(0, 3), norm_last_layer=False),
                        params, layout="reference")
    with pytest.raises(ValueError, match="has none"):
        save_checkpoint(tmp_path / "save_t", TARGET, init_params(TARGET, jax.random.key(0)), layout="reference")
    assert not any((tmp_path / d).exists() for d in ("save_last", "save_t"))


def test_reference_loaded_drafter_decodes_losslessly(tmp_path):
    cfg, dparams = load_checkpoint(write_reference(tmp_path / "ref"))
    tparams = random_params(TARGET, 1, 0.3)
    tokens, lengths = pad_prompts([[1, 5, 9, 2], [7, 3]], 8)
    ar = generate_ar(tparams, TARGET, tokens, lengths, 12, eos_ids=())
    spec = generate(tparams, TARGET, DFlashDrafter(cfg, TARGET), dparams, tokens, lengths, 12, eos_ids=())
    np.testing.assert_array_equal(np.asarray(spec.tokens), np.asarray(ar.tokens))


# ============================================================================ DFlash: a tap of the target's last layer


def np_rms(x, w, eps=1e-6):
    x = np.asarray(x, np.float64)
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * np.asarray(w, np.float64)


def test_reference_dflash_last_layer_tap_reads_the_final_norm_in_decoding_and_training(tmp_path):
    """The reference reads HF hidden_states[-1] (after the target's final norm) for the target's last layer:
    the loaded config records it (norm_last_layer), the drafter's features equal a numpy final norm of that
    tap, decoding and the training view both use them, and greedy decoding stays lossless."""
    hf = reference_config(dflash_config={"mask_token_id": VOCAB - 1, "target_layer_ids": [0, 3]})
    cfg, dparams = load_checkpoint(write_reference(tmp_path / "ref", hf))
    assert cfg.norm_last_layer and cfg.target_layer_ids == (0, 3)
    tparams = random_params(TARGET, 1, 0.3)
    touter = DN.target_outer(tparams)
    feats = jax.random.normal(jax.random.key(2), (2, 5, 2, E))
    got = np.asarray(DN.drafter_features(cfg, touter, TARGET, feats))
    np.testing.assert_array_equal(got[:, :, 0], np.asarray(feats[:, :, 0]))  # other taps: the raw residual
    np.testing.assert_allclose(got[:, :, 1], np_rms(feats[:, :, 1], tparams["final_norm"]["weight"],
                                                    TARGET.rms_norm_eps), rtol=1e-5, atol=1e-5)
    raw = dataclasses.replace(cfg, norm_last_layer=False)  # the same drafter fed the normed features by hand
    tokens = jnp.asarray([[1, 5, 9, 2, 7]] * 2)
    anchors, valid = jnp.asarray([[1, 2]] * 2), jnp.ones((2, 2), bool)
    np.testing.assert_allclose(
        np.asarray(DN.anchored_hidden(dparams, cfg, touter, TARGET, feats, tokens, anchors, valid)),
        np.asarray(DN.anchored_hidden(dparams, raw, touter, TARGET, jnp.asarray(got), tokens, anchors, valid)),
        rtol=1e-5, atol=1e-5)
    ctx = PromptContext(features=feats, target_params=touter)
    lengths = jnp.asarray([5, 3])
    a = DF.DFlashDrafter(cfg, TARGET).init(dparams, tokens, lengths, 4, ctx)
    b = DF.DFlashDrafter(raw, TARGET).init(dparams, tokens, lengths, 4, PromptContext(jnp.asarray(got), touter))
    np.testing.assert_allclose(np.asarray(a.cache.k), np.asarray(b.cache.k), rtol=1e-5, atol=1e-5)
    prompts, plen = pad_prompts([[1, 5, 9, 2], [7, 3]], 8)
    ar = generate_ar(tparams, TARGET, prompts, plen, 12, eos_ids=())
    spec = generate(tparams, TARGET, DFlashDrafter(cfg, TARGET), dparams, prompts, plen, 12, eos_ids=())
    np.testing.assert_array_equal(np.asarray(spec.tokens), np.asarray(ar.tokens))
    out = save_checkpoint(tmp_path / "out", cfg, dparams, layout="reference")
    assert json.loads((out / "config.json").read_text())["dflash_config"]["target_layer_ids"] == [0, 3]
    assert load_checkpoint(out)[0] == cfg


# ============================================================================ Domino (SpecForge DominoDraftModel)

GRU, RANK = 6, 5
DOMINO_HEAD_SHAPES = {"prefix_gru.weight_ih_l0": (3 * GRU, E), "prefix_gru.weight_hh_l0": (3 * GRU, GRU),
                      "embed_proj.0.weight": (RANK, E + GRU), "embed_proj.2.weight": (VOCAB, RANK)}


def domino_reference_config(**dc) -> dict:
    """SpecForge's Domino config.json: DFlash's reference layout, the head's entries in dflash_config."""
    entries = {"mask_token_id": VOCAB - 1, "target_layer_ids": IDS, "projector_type": "domino", "emb_dim": RANK,
               "gru_hidden_dim": GRU, "shift_label": True, "pure_draft_prefix_len": 1, **dc}
    return reference_config(architectures=["DominoDraftModel"], dflash_config=entries)


def domino_reference_tensors(seed=1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    head = {k: (rng.normal(size=s) * 0.4).astype(np.float16) for k, s in DOMINO_HEAD_SHAPES.items()}
    return {**reference_tensors(seed), **head}


def torch_domino_correction(t: dict, emb: np.ndarray, rows: np.ndarray, prefix: int) -> np.ndarray:
    """The reference head written with torch modules: a bias-free nn.GRU over the drafts' input embeddings
    (root, y_1, ...), then Linear -> SiLU -> Linear on [row ; GRU state]; drafts 1..prefix get none."""
    torch = pytest.importorskip("torch")
    gru = torch.nn.GRU(E, GRU, num_layers=1, batch_first=True, bias=False).double()
    proj = torch.nn.Sequential(torch.nn.Linear(E + GRU, RANK, bias=False), torch.nn.SiLU(),
                               torch.nn.Linear(RANK, VOCAB, bias=False)).double()
    sd = lambda k: torch.tensor(np.asarray(t[k], np.float64))  # noqa: E731
    gru.load_state_dict({"weight_ih_l0": sd("prefix_gru.weight_ih_l0"), "weight_hh_l0": sd("prefix_gru.weight_hh_l0")})
    proj.load_state_dict({"0.weight": sd("embed_proj.0.weight"), "2.weight": sd("embed_proj.2.weight")})
    with torch.no_grad():
        states = gru(torch.tensor(emb, dtype=torch.float64))[0]
        out = proj(torch.cat([torch.tensor(rows, dtype=torch.float64), states], dim=-1)).numpy()
    out[:, :prefix] = 0.0
    return out


def test_reference_domino_layout_loads_matches_torch_and_decodes_losslessly(tmp_path):
    tensors = domino_reference_tensors()
    cfg, params = load_checkpoint(write_reference(tmp_path / "ref", domino_reference_config(), tensors))
    assert isinstance(cfg, DominoConfig)
    assert (cfg.gru_hidden, cfg.head_rank, cfg.shift_label, cfg.pure_prefix_len) == (GRU, RANK, True, 1)
    backbone = {k: v for k, v in params.items() if k != "head"}
    assert_trees_equal(backbone, expected_params(tensors))  # the backbone is DFlash's, tensor for tensor
    tparams = random_params(TARGET, 1, 0.3)
    touter = DN.target_outer(tparams)
    k = cfg.num_draft_positions
    rows = jax.random.normal(jax.random.key(3), (2, k, E))
    inputs = jax.random.randint(jax.random.key(4), (2, k), 0, VOCAB)
    got = DON.teacher_forced_logits(cfg, params, touter, TARGET, rows, jnp.zeros((2, k, VOCAB)), inputs)
    emb = np.asarray(embed_tokens(touter, TARGET, inputs), np.float64)
    want = torch_domino_correction(tensors, emb, np.asarray(rows, np.float64), cfg.pure_prefix_len)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-4)
    drafter = DO.DominoDrafter(cfg, TARGET)
    assert drafter.budget == cfg.block_size - 1  # the reference drafts block_size - 1 tokens, shifted labels or not
    prompts, plen = pad_prompts([[1, 5, 9, 2], [7, 3]], 8)
    ar = generate_ar(tparams, TARGET, prompts, plen, 12, eos_ids=())
    for d in (drafter, DO.DominoDrafter(cfg, TARGET, num_drafts=cfg.block_size)):
        spec = generate(tparams, TARGET, d, params, prompts, plen, 12, eos_ids=())
        np.testing.assert_array_equal(np.asarray(spec.tokens), np.asarray(ar.tokens))
    with pytest.raises(ValueError, match="num_drafts"):
        DO.DominoDrafter(cfg, TARGET, num_drafts=cfg.block_size + 1)


def test_specjax_saves_exactly_the_domino_reference_layout(tmp_path):
    mine = DominoConfig.for_target(TARGET, num_layers=N_DRAFT, target_layer_ids=IDS, block_size=4, mask_token_id=5,
                                   gru_hidden=GRU, head_rank=RANK, shift_label=False, pure_prefix_len=0)
    params = init_params(mine, jax.random.key(0))
    out = save_checkpoint(tmp_path / "out", mine, params, dtype=np.float16, layout="reference")
    tensors = read_safetensors(out / "model.safetensors")
    assert set(tensors) == reference_keys(N_DRAFT) | set(DOMINO_HEAD_SHAPES)
    assert {k: tensors[k].shape for k in DOMINO_HEAD_SHAPES} == DOMINO_HEAD_SHAPES
    assert all(a.dtype == np.float16 for a in tensors.values())
    hf = json.loads((out / "config.json").read_text())
    assert set(hf) == REFERENCE_CONFIG_KEYS and hf["architectures"] == ["DominoDraftModel"]
    assert hf["dflash_config"] == {"mask_token_id": 5, "target_layer_ids": IDS, "projector_type": "domino",
                                   "emb_dim": RANK, "gru_hidden_dim": GRU, "shift_label": False,
                                   "pure_draft_prefix_len": 0}
    cfg2, params2 = load_checkpoint(out)
    assert cfg2 == dataclasses.replace(mine, target_model_type=None)
    assert_trees_equal(params2, jax.tree.map(lambda x: np.asarray(np.asarray(x, np.float16), np.float32), params))
    bad = domino_reference_tensors()
    del bad["prefix_gru.weight_hh_l0"]
    with pytest.raises(CheckpointError, match=r"missing tensors: \['prefix_gru.weight_hh_l0'\]"):
        load_checkpoint(write_reference(tmp_path / "bad", domino_reference_config(), bad))
    with pytest.raises(CheckpointError, match="dflash_config.emb_dim"):
        hf = domino_reference_config()
        del hf["dflash_config"]["emb_dim"]
        load_checkpoint(write_reference(tmp_path / "noemb", hf, domino_reference_tensors()))


# ============================================================================ EAGLE-3 (SpecForge / EAGLE LlamaForCausalLMEagle3)

T8 = dataclasses.replace(TARGET, num_layers=8, qk_norm=False, flavor="llama")  # taps (1, 3, 4): the reference's default
EAGLE_IDS, K_DRAFT = [1, 3, 4], 20
EAGLE_REFERENCE_KEYS = {"fc.weight", "norm.weight", "lm_head.weight", "d2t", "t2d"} | {
    f"midlayer.{k}" for k in ("hidden_norm.weight", "input_layernorm.weight", "post_attention_layernorm.weight",
                              "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
                              "self_attn.o_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight",
                              "mlp.down_proj.weight")}


def eagle_reference_config(**changes) -> dict:
    """An EAGLE-3 config.json as SpecForge writes it; no rope_theta or head_dim (the reference's defaults)."""
    hf = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "vocab_size": VOCAB,
          "draft_vocab_size": K_DRAFT, "hidden_size": E, "intermediate_size": FFN, "num_hidden_layers": 1,
          "num_attention_heads": HEADS, "num_key_value_heads": KV, "hidden_act": "silu", "rms_norm_eps": 1e-6,
          "max_position_embeddings": 2048, "attention_bias": False, "attention_dropout": 0.0, "mlp_bias": False,
          "pretraining_tp": 1, "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 2,
          "pad_token_id": 0, "initializer_range": 0.02, "use_cache": True, "torch_dtype": "bfloat16",
          "transformers_version": "4.51.0",
          "eagle_config": {"eagle_aux_hidden_state_layer_ids": EAGLE_IDS, "use_aux_hidden_state": True}}
    hf.update(changes)
    return hf


def eagle_reference_tensors(seed=2, ids=None) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    ids = np.sort(rng.choice(VOCAB, K_DRAFT, replace=False)) if ids is None else np.asarray(ids)
    m = "midlayer."
    shapes = {"fc.weight": (E, 3 * E), "norm.weight": (E,), "lm_head.weight": (K_DRAFT, E),
              m + "hidden_norm.weight": (E,), m + "input_layernorm.weight": (E,),
              m + "post_attention_layernorm.weight": (E,), m + "self_attn.q_proj.weight": (HEADS * D, 2 * E),
              m + "self_attn.k_proj.weight": (KV * D, 2 * E), m + "self_attn.v_proj.weight": (KV * D, 2 * E),
              m + "self_attn.o_proj.weight": (E, HEADS * D), m + "mlp.gate_proj.weight": (FFN, E),
              m + "mlp.up_proj.weight": (FFN, E), m + "mlp.down_proj.weight": (E, FFN)}
    t = {k: (rng.normal(size=s) * 0.3 + (1.0 if len(s) == 1 else 0.0)).astype(np.float32) for k, s in shapes.items()}
    t2d = np.zeros(VOCAB, bool)
    t2d[ids] = True
    t.update(d2t=(ids - np.arange(K_DRAFT)).astype(np.int64), t2d=t2d,
             **{"embed_tokens.weight": rng.normal(size=(VOCAB, E)).astype(np.float32)})  # the target's: not read
    assert set(t) == EAGLE_REFERENCE_KEYS | {"embed_tokens.weight"}
    return t


def numpy_eagle3(t: dict, feats: np.ndarray, emb: np.ndarray, theta: float = 10000.0) -> np.ndarray:
    """The reference's first drafting step over S rows, in float64 numpy: g = fc(f); x = [in_norm(emb) ;
    hidden_norm(g)]; causal GQA attention with rotary (base theta, rotate-half) at positions 0..S-1;
    h = g + o(attn); out = h + mlp(post_norm(h)); logits [S, K] = lm_head(norm(out))."""
    w = {k: np.asarray(v, np.float64) for k, v in t.items() if k not in ("d2t", "t2d")}
    m = lambda k: w["midlayer." + k]  # noqa: E731
    s = feats.shape[0]
    g = feats.reshape(s, -1) @ w["fc.weight"].T
    x = np.concatenate([np_rms(emb, m("input_layernorm.weight")), np_rms(g, m("hidden_norm.weight"))], -1)
    q = (x @ m("self_attn.q_proj.weight").T).reshape(s, HEADS, D)
    k = (x @ m("self_attn.k_proj.weight").T).reshape(s, KV, D)
    v = (x @ m("self_attn.v_proj.weight").T).reshape(s, KV, D)
    ang = np.arange(s)[:, None] * theta ** (-np.arange(0, D, 2) / D)[None]  # [S, D/2]
    cos, sin = np.concatenate([np.cos(ang)] * 2, -1)[:, None], np.concatenate([np.sin(ang)] * 2, -1)[:, None]
    rot = lambda a: a * cos + np.concatenate([-a[..., D // 2:], a[..., : D // 2]], -1) * sin  # noqa: E731
    q, k = rot(q), np.repeat(rot(k), HEADS // KV, axis=1)
    v = np.repeat(v, HEADS // KV, axis=1)
    att = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(D) + np.where(np.tril(np.ones((s, s))), 0, -np.inf)
    att = np.exp(att - att.max(-1, keepdims=True))
    o = np.einsum("hqk,khd->qhd", att / att.sum(-1, keepdims=True), v).reshape(s, -1) @ m("self_attn.o_proj.weight").T
    h = g + o
    u = np_rms(h, m("post_attention_layernorm.weight"))
    silu = lambda a: a / (1 + np.exp(-a))  # noqa: E731
    out = h + (silu(u @ m("mlp.gate_proj.weight").T) * (u @ m("mlp.up_proj.weight").T)) @ m("mlp.down_proj.weight").T
    return np_rms(out, w["norm.weight"]) @ w["lm_head.weight"].T


def test_reference_eagle3_layout_loads_and_matches_numpy(tmp_path):
    tensors = eagle_reference_tensors()
    cfg, params = load_checkpoint(write_reference(tmp_path / "ref", eagle_reference_config(), tensors))
    assert cfg == Eagle3Config(vocab_size=VOCAB, hidden_size=E, num_heads=HEADS, num_kv_heads=KV, head_dim=D,
                               intermediate_size=FFN, target_layer_ids=tuple(EAGLE_IDS), target_num_layers=None,
                               target_model_type=None, rope_theta=10000.0, draft_vocab_size=K_DRAFT)
    ids = np.flatnonzero(tensors["t2d"])
    np.testing.assert_array_equal(np.asarray(params["draft_vocab"]["ids"]), ids)
    cfg.check_target(T8)
    tparams = random_params(T8, 1, 0.3)
    touter = DN.target_outer(tparams)
    s = 6
    feats = jax.random.normal(jax.random.key(3), (1, s, 3, E))
    tokens = jax.random.randint(jax.random.key(4), (1, s), 0, VOCAB)
    hidden = E3N.unrolled_hidden(params, cfg, touter, T8, feats, tokens, 1)[0]  # row t reads token x_{t+1}
    got = np.asarray(E3N.logits_of(params, cfg, touter, T8, hidden))[0]  # [S, V]
    nxt = np.concatenate([np.asarray(tokens[0, 1:]), [0]])
    emb = np.asarray(embed_tokens(touter, T8, jnp.asarray(nxt)), np.float64)
    want = numpy_eagle3(tensors, np.asarray(feats[0], np.float64), emb)
    np.testing.assert_allclose(got[:, ids], want, rtol=1e-4, atol=1e-4)
    assert np.all(np.delete(got, ids, axis=1) == EXCLUDED_LOGIT)  # outside the draft vocabulary: never drafted


def test_reference_eagle3_decodes_losslessly_and_saves_back_strictly(tmp_path):
    tensors = eagle_reference_tensors(ids=np.arange(K_DRAFT))  # the ids cover the tiny target's greedy tokens
    cfg, params = load_checkpoint(write_reference(tmp_path / "ref", eagle_reference_config(), tensors))
    tparams = random_params(T8, 1, 0.3)
    prompts, plen = pad_prompts([[1, 5, 9, 2], [7, 3]], 8)
    ar = generate_ar(tparams, T8, prompts, plen, 10, eos_ids=())
    spec = generate(tparams, T8, E3.eagle3_drafter(cfg, T8, top_k=4, depth=3, total=8), params, prompts, plen, 10,
                    eos_ids=())
    np.testing.assert_array_equal(np.asarray(spec.tokens), np.asarray(ar.tokens))
    out = save_checkpoint(tmp_path / "out", cfg, params, layout="reference")
    saved = read_safetensors(out / "model.safetensors")
    assert set(saved) == EAGLE_REFERENCE_KEYS  # SpecForge's saved set: the embedding comes from the target
    for k in EAGLE_REFERENCE_KEYS:
        assert saved[k].shape == tensors[k].shape and saved[k].dtype == tensors[k].dtype, k
        np.testing.assert_array_equal(saved[k], tensors[k])
    hf = json.loads((out / "config.json").read_text())
    assert hf["architectures"] == ["LlamaForCausalLMEagle3"] and hf["draft_vocab_size"] == K_DRAFT
    assert hf["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == EAGLE_IDS
    assert load_checkpoint(out)[0] == cfg


def test_specjax_eagle3_own_head_saves_to_the_reference_layout(tmp_path):
    """A target-head drafter (the zoo's form) converts to the paper's own head with the same logits, saves
    to the reference layout exactly, and its specjax layout records the mode and the taps."""
    old = Eagle3Config.for_target(T8)
    assert old.target_layer_ids == tuple(EAGLE_IDS) and not old.own_head
    tparams = init_params(T8, jax.random.key(1))
    ids = np.arange(0, VOCAB, 2)
    params = with_draft_vocab(init_params(old, jax.random.key(5)), ids)
    with pytest.raises(ValueError, match="with_own_head"):
        save_checkpoint(tmp_path / "old", old, params, layout="reference")
    cfg, own = E3N.with_own_head(params, old, tparams, T8)
    assert cfg.draft_vocab_size == ids.size
    hidden = jax.random.normal(jax.random.key(6), (2, 3, E))
    touter = DN.target_outer(tparams)
    np.testing.assert_allclose(np.asarray(E3N.logits_of(own, cfg, touter, T8, hidden)),
                               np.asarray(E3N.logits_of(params, old, touter, T8, hidden)), rtol=1e-5, atol=1e-5)
    out = save_checkpoint(tmp_path / "out", cfg, own, dtype=ml_dtypes.bfloat16, layout="reference")
    saved = read_safetensors(out / "model.safetensors")
    assert set(saved) == EAGLE_REFERENCE_KEYS
    assert saved["lm_head.weight"].shape == (ids.size, E) and saved["fc.weight"].shape == (E, 3 * E)
    assert (saved["d2t"].dtype, saved["t2d"].dtype, saved["fc.weight"].dtype) == (np.int64, np.bool_,
                                                                                  ml_dtypes.bfloat16)
    np.testing.assert_array_equal(np.arange(ids.size) + saved["d2t"], ids)
    spec_dir = save_checkpoint(tmp_path / "spec", cfg, own)
    hf = json.loads((spec_dir / "config.json").read_text())
    assert hf["own_lm_head"] and hf["draft_vocab_size"] == ids.size and hf["target_layer_ids"] == EAGLE_IDS
    cfg2, own2 = load_checkpoint(spec_dir)
    assert cfg2 == cfg
    assert_trees_equal(own2, own)


def test_reference_eagle3_without_taps_takes_them_from_the_target(tmp_path):
    """EAGLE's own form (architectures ["LlamaForCausalLM"], no eagle_config, the target's embedding stored):
    the taps are the target's layers 1, L // 2 - 1, L - 4, given the target; without it the error says so."""
    hf = {k: v for k, v in eagle_reference_config(architectures=["LlamaForCausalLM"]).items() if k != "eagle_config"}
    d = write_reference(tmp_path / "eagle", hf, eagle_reference_tensors())
    with pytest.raises(UnsupportedConfigError, match=r"eagle_aux_hidden_state_layer_ids.*target_cfg=TARGET_CFG"):
        load_checkpoint(d)
    cfg, params = load_checkpoint(d, target_cfg=T8)
    want_cfg, want = load_checkpoint(write_reference(tmp_path / "ref", eagle_reference_config(),
                                                     eagle_reference_tensors()))
    assert cfg == want_cfg and cfg.target_layer_ids == tuple(EAGLE_IDS)  # T8: 8 layers -> (1, 3, 4)
    assert_trees_equal(params, want)
    with pytest.raises(ValueError, match="layer ids"):  # checked against the target it is loaded for
        load_checkpoint(write_reference(tmp_path / "ref2", eagle_reference_config(), eagle_reference_tensors()),
                        target_cfg=dataclasses.replace(T8, num_layers=4))


def test_reference_eagle3_errors_name_the_problem(tmp_path):
    with pytest.raises(CheckpointError, match=r"missing required key\(s\) \['draft_vocab_size', 'intermediate_size'\]"):
        hf = eagle_reference_config()
        del hf["intermediate_size"], hf["draft_vocab_size"]
        hf["architectures"] = ["LlamaForCausalLMEagle3"]  # recognised by its architecture without draft_vocab_size
        load_checkpoint(write_reference(tmp_path / "nokey", hf, eagle_reference_tensors()))
    with pytest.raises(UnsupportedConfigError, match="rope_scaling"):
        load_checkpoint(write_reference(tmp_path / "rope", eagle_reference_config(
            rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                          "original_max_position_embeddings": 64}), eagle_reference_tensors()))
    t = eagle_reference_tensors()
    t["t2d"] = np.roll(t["t2d"], 1)
    with pytest.raises(CheckpointError, match="'d2t' and 't2d' disagree"):
        load_checkpoint(write_reference(tmp_path / "maps", eagle_reference_config(), t))
    t = eagle_reference_tensors()
    del t["d2t"], t["midlayer.hidden_norm.weight"]
    with pytest.raises(CheckpointError, match=r"missing tensors: .*'d2t'.*midlayer.hidden_norm.weight"):
        load_checkpoint(write_reference(tmp_path / "keys", eagle_reference_config(), t))
