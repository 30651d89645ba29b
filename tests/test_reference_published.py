"""Reference layouts as documented and as published (issue 52 item 5).

1. Every zoo drafter saves to its reference layout and loads back to the same function, or is refused
   with the documented one-line fix (which is then applied and works), or -- the tiny DFlash / Domino
   drafters, which read the target's last layer raw -- refused because no exact conversion exists
   (demonstrated here: inputs the reference cannot tell apart, the drafter can). The drafters' logits are
   compared on a few tokens through a stand-in for the target's shared embedding / LM head (the tiny
   target itself where a conversion needs its head; the SmolLM2 target is not loaded).
2. The authors' published config.json files (copies in tests/data/reference_configs/, sources in its
   README) load, with what their reference code reads from them.

The layouts themselves (keys, shapes, numerics against independent implementations) are
tests/test_reference_formats.py's.
"""

import dataclasses
import functools
import json
import pathlib
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax import zoo
from specjax.models import (LlamaConfig, UnsupportedConfigError, load_checkpoint, load_config,
                            save_checkpoint)
from specjax.models import dflash_net as DN
from specjax.models import domino_net as DON
from specjax.models import eagle3_net as E3N
from specjax.models.dflash import DFlashConfig
from specjax.models.domino import DominoConfig
from specjax.models.draft_vocab import draft_vocab_ids, vocab_logits, with_draft_vocab
from specjax.models.eagle3 import Eagle3Config, reference_target_layer_ids
from specjax.models.loading import ReferenceLayoutWarning
from specjax.models.model import final_norm, outer_params

CONFIGS = pathlib.Path(__file__).parent / "data" / "reference_configs"

# What each zoo drafter does on layout="reference" (docs/checkpoints.md, "The zoo's drafters").
ZOO = {
    "tiny-neox-dflash": "refused: no exact conversion",
    "tiny-neox-domino": "refused: no exact conversion",
    "tiny-neox-eagle3": "with_own_head, then exact",
    "smollm2-135m-dflash": "draft vocabulary dropped",
    "smollm2-135m-domino": "draft vocabulary dropped",
    "smollm2-135m-eagle3": "exact, d2t / t2d",
}


def test_every_zoo_drafter_is_covered():
    assert set(ZOO) == set(zoo.DRAFTERS)


# ============================================================================ the drafters' logits


def stand_in_target(cfg) -> tuple[dict, LlamaConfig]:
    """(outer params, config) of a target with the drafter's width, vocabulary and layer count: the shared
    embedding (tied: also the LM head) a drafter's logits go through, random; its layers are never built."""
    tcfg = LlamaConfig(vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size, num_layers=cfg.target_num_layers,
                       num_heads=cfg.num_heads, num_kv_heads=cfg.num_kv_heads, head_dim=cfg.head_dim,
                       intermediate_size=cfg.intermediate_size, rope_theta=cfg.rope_theta,
                       rms_norm_eps=cfg.rms_norm_eps, tie_word_embeddings=True)
    return _stand_in_outer(cfg.vocab_size, cfg.hidden_size), tcfg


@functools.lru_cache(maxsize=1)
def _stand_in_outer(vocab: int, hidden: int) -> dict:
    emb = np.random.default_rng(7).standard_normal((vocab, hidden), np.float32) * 0.05
    return {"embed": {"embedding": jnp.asarray(emb)}, "final_norm": {"weight": jnp.ones(hidden)}}


def tiny_target():
    tcfg, tparams, _ = zoo.load("tiny-neox-target")
    return outer_params(tparams), tcfg, tparams


def drafter_logits(cfg, params, touter, tcfg) -> np.ndarray:
    """f32[..., V] logits of the drafter on a few tokens: every block position of 2 anchored DFlash / Domino
    blocks (Domino: its final, corrected logits, the GRU fed the block's tokens), or 2 unrolled EAGLE-3 steps
    over 6 rows. Features and tokens are fixed random draws (a function of the shapes only)."""
    s, n = 6, cfg.num_features
    feats = jax.random.normal(jax.random.key(1), (1, s, n, cfg.hidden_size))
    tokens = jax.random.randint(jax.random.key(2), (1, s), 0, cfg.vocab_size)
    if isinstance(cfg, Eagle3Config):
        hidden = E3N.unrolled_hidden(params, cfg, touter, tcfg, feats, tokens, 2)
        return np.asarray(E3N.logits_of(params, cfg, touter, tcfg, hidden))
    anchors, valid = jnp.array([[1, 3]]), jnp.array([[True, True]])
    hidden = DN.anchored_hidden(params, cfg, touter, tcfg, feats, tokens, anchors, valid)  # [1, 2, bs, E]
    ids = draft_vocab_ids(params)
    if not isinstance(cfg, DominoConfig):
        return np.asarray(vocab_logits(touter, tcfg, hidden[..., 1:, :], ids))
    rows = DON.draft_rows(cfg, hidden)
    k = rows.shape[-2]
    inputs = jnp.take(tokens[0], jnp.minimum(anchors[..., None] + jnp.arange(k), s - 1))  # [1, 2, K]
    return np.asarray(DON.teacher_forced_logits(cfg, params, touter, tcfg, rows, vocab_logits(touter, tcfg, rows, ids),
                                                inputs))


def round_trip(tmp_path, name, cfg, params):
    """Save to the reference layout in float16 (the zoo's dtype: exact) and load back."""
    return load_checkpoint(save_checkpoint(tmp_path / name, cfg, params, dtype=np.float16, layout="reference"))


# ============================================================================ 1. the zoo's drafters


@pytest.mark.parametrize("name", ["smollm2-135m-dflash", "smollm2-135m-domino"])
def test_zoo_dflash_family_with_a_draft_vocabulary_saves_without_it_and_restores_exactly(tmp_path, name):
    """The reference layout has no draft vocabulary (the reference drafts over the target's whole head): the
    ids are dropped with a warning naming the fix, the loaded drafter has the original's logits on those
    ids, and `with_draft_vocab(params, ids)` gives back the original drafter exactly."""
    cfg, params = zoo.load_drafter(name)
    ids = np.asarray(draft_vocab_ids(params))
    assert ids.size == 8192 and ZOO[name] == "draft vocabulary dropped"
    with pytest.warns(ReferenceLayoutWarning, match=r"specjax\.models\.draft_vocab\.with_draft_vocab"):
        cfg2, params2 = round_trip(tmp_path, name, cfg, params)
    assert cfg2 == dataclasses.replace(cfg, target_model_type=None) and draft_vocab_ids(params2) is None
    touter, tcfg = stand_in_target(cfg)
    want = drafter_logits(cfg, params, touter, tcfg)
    full = drafter_logits(cfg2, params2, touter, tcfg)
    np.testing.assert_allclose(full[..., ids], want[..., ids], rtol=1e-5, atol=1e-5)
    got = drafter_logits(cfg2, with_draft_vocab(params2, ids, cfg2.vocab_size), touter, tcfg)
    np.testing.assert_array_equal(got, want)


def test_zoo_smollm2_eagle3_saves_its_draft_vocabulary_as_d2t_t2d_exactly(tmp_path):
    cfg, params = zoo.load_drafter("smollm2-135m-eagle3")
    cfg2, params2 = round_trip(tmp_path, "e3", cfg, params)
    saved = json.loads((tmp_path / "e3" / "config.json").read_text())
    assert saved["draft_vocab_size"] == 8192
    assert saved["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 14, 26]
    assert cfg2 == dataclasses.replace(cfg, target_num_layers=None, target_model_type=None)
    jax.tree.map(lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)), params2, params)
    touter, tcfg = stand_in_target(cfg)
    want = drafter_logits(cfg, params, touter, tcfg)
    np.testing.assert_array_equal(drafter_logits(cfg2, params2, touter, tcfg), want)


def test_zoo_tiny_eagle3_converts_with_its_documented_fix_and_then_round_trips(tmp_path):
    """It projects with the target's head; the error names the converter, which exists, and the converted
    drafter's proposals equal the original's before and after the round trip."""
    cfg, params = zoo.load_drafter("tiny-neox-eagle3")
    with pytest.raises(ValueError, match=r"specjax\.models\.eagle3_net\.with_own_head\(params, cfg, target_params"):
        save_checkpoint(tmp_path / "refused", cfg, params, layout="reference")
    assert not (tmp_path / "refused").exists()
    touter, tcfg, tparams = tiny_target()
    own_cfg, own = E3N.with_own_head(params, cfg, tparams, tcfg)  # the one-line fix
    cfg2, params2 = round_trip(tmp_path, "e3", own_cfg, own)
    assert cfg2 == dataclasses.replace(own_cfg, target_num_layers=None, target_model_type=None)
    want = drafter_logits(cfg, params, touter, tcfg)
    got = drafter_logits(cfg2, params2, touter, tcfg)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(got.argmax(-1), want.argmax(-1))


@pytest.mark.parametrize("name", ["tiny-neox-dflash", "tiny-neox-domino"])
def test_zoo_drafter_reading_the_last_layer_raw_is_refused_because_no_exact_conversion_exists(tmp_path, name):
    """The reference reads the target's last layer only after its final norm. Two residuals r and 2 r + 3
    have the same normed tap (GPT-NeoX's LayerNorm removes the scale and the mean), but this drafter's
    context differs between them, so no function of the normed tap -- no change of weights -- reproduces
    it; the error says so and names the nearest correct path."""
    cfg, params = zoo.load_drafter(name)
    last = cfg.target_num_layers - 1
    assert cfg.target_layer_ids[-1] == last and not cfg.norm_last_layer
    with pytest.raises(ValueError, match=r"No exact conversion exists.*--target-layers 1,2"):
        save_checkpoint(tmp_path / "refused", cfg, params, layout="reference")
    assert not (tmp_path / "refused").exists()
    touter, tcfg, _ = tiny_target()
    r = jax.random.normal(jax.random.key(3), (1, 4, cfg.hidden_size))
    other = jax.random.normal(jax.random.key(4), (1, 4, cfg.hidden_size))
    seen = [np.asarray(final_norm(touter, tcfg, x)) for x in (r, 2 * r + 3)]
    np.testing.assert_allclose(seen[0], seen[1], rtol=1e-4, atol=1e-4)  # the reference cannot tell them apart
    ctx = [np.asarray(DN.outer_module(params, cfg).context(jnp.stack([other, x], axis=2))) for x in (r, 2 * r + 3)]
    assert np.abs(ctx[0] - ctx[1]).max() > 0.1  # the drafter can


# ============================================================================ 2. the published configs


def published(tmp_path, name: str) -> pathlib.Path:
    """A checkpoint directory holding the published config.json `name` (config only: no weights)."""
    d = tmp_path / pathlib.Path(name).stem
    d.mkdir()
    shutil.copy(CONFIGS / name, d / "config.json")
    return d


def target_for(vocab: int, hidden: int, num_layers: int) -> LlamaConfig:
    """A target config (never built) of this vocabulary, width and layer count."""
    return LlamaConfig(vocab_size=vocab, hidden_size=hidden, num_layers=num_layers, num_heads=32, num_kv_heads=8,
                       head_dim=hidden // 32, intermediate_size=4 * hidden)


def test_specforge_domino_template_with_a_top_level_emb_dim_loads(tmp_path):
    """SpecForge's configs/qwen3-8b-domino.json has `emb_dim` at the top level and in dflash_config; its model
    reads the nested one (the head's rank)."""
    hf = json.loads((CONFIGS / "specforge/qwen3-8b-domino.json").read_text())
    assert hf["emb_dim"] == hf["dflash_config"]["emb_dim"] == 256
    cfg = load_config(published(tmp_path, "specforge/qwen3-8b-domino.json"))
    assert isinstance(cfg, DominoConfig)
    assert (cfg.head_rank, cfg.gru_hidden, cfg.shift_label, cfg.pure_prefix_len) == (256, 1024, True, 1)
    assert cfg.target_layer_ids == (1, 9, 17, 25, 33)
    assert (cfg.target_num_layers, cfg.num_layers, cfg.block_size) == (36, 5, 16)
    hf["emb_dim"] = 7  # the reference ignores the top-level copy, whatever it says
    assert DominoConfig.from_reference(hf) == cfg
    assert DominoConfig.from_reference(cfg.to_reference()) == cfg


def test_specforge_and_zlab_dflash_configs_load(tmp_path):
    cfg = load_config(published(tmp_path, "specforge/qwen3-8b-dflash.json"))
    assert type(cfg) is DFlashConfig and cfg.target_layer_ids == (1, 9, 17, 25, 33) and cfg.mask_token_id == 151669
    hf = json.loads((CONFIGS / "specforge/qwen3-8b-dflash.json").read_text())
    del hf["dflash_config"]["target_layer_ids"]  # z-lab's DFlashDraftModel then builds them from the layer counts
    assert DFlashConfig.from_reference(hf).target_layer_ids == (1, 9, 17, 25, 33)


@pytest.mark.parametrize("name, layers, taps", [
    ("specforge/llama3-8B-eagle3.json", 32, (1, 15, 28)),
    ("specforge/qwen3-8b-eagle3.json", 36, (1, 17, 32)),
    ("specforge/qwq-32B-eagle3.json", 64, (1, 31, 60)),
    ("eagle/traineagle3-config.json", 32, (1, 15, 28)),
])
def test_eagle3_configs_without_taps_take_them_from_the_target(tmp_path, name, layers, taps):
    """Without eagle_config both references tap the target's layers 1, L // 2 - 1, L - 4 (outputs):
    `load_config(DIR, target_cfg=)` does the same; without a target the error names that call."""
    d = published(tmp_path, name)
    with pytest.raises(UnsupportedConfigError, match=r"target_cfg=TARGET_CFG"):
        load_config(d)
    hf = json.loads((d / "config.json").read_text())
    cfg = load_config(d, target_cfg=target_for(hf["vocab_size"], hf["hidden_size"], layers))
    assert cfg.target_layer_ids == taps == reference_target_layer_ids(layers)
    assert cfg.draft_vocab_size == hf["draft_vocab_size"] and cfg.head_dim == hf.get("head_dim", 128)
    assert cfg.rope_theta == hf.get("rope_theta", 10000.0) and cfg.target_num_layers is None
    with pytest.raises(ValueError, match="hidden size"):  # checked against the target it is loaded for
        load_config(d, target_cfg=target_for(hf["vocab_size"], 64, layers))


def test_eagle3_configs_with_taps_and_the_refused_variant(tmp_path):
    cfg = load_config(published(tmp_path, "specforge/deepseek-v3-671b-eagle3.json"))
    assert cfg.target_layer_ids == (1, 29, 57) and cfg.draft_vocab_size == 32000
    with pytest.raises(UnsupportedConfigError, match=r"\['fc_norm'\].*RMSNorm per tapped layer"):
        load_config(published(tmp_path, "specforge/qwen3-30B-A3B-eagle3.1.json"))
    with pytest.raises(ValueError, match=r"target_cfg is for a drafter"):
        load_config(zoo.path("tiny-neox-target"), target_cfg=target_for(8192, 192, 4))
