"""A reduced draft vocabulary (specjax.models.draft_vocab): choosing the ids, EAGLE-3's maps, the K-column
projection, the ids in params and checkpoints, and losslessness of the four drafters built on it.

References: brute-force numpy for the ids and maps, `project_to_vocab` for the columns, plain
greedy decoding (`generate_ar`) with a draft vocabulary that excludes tokens AR emits, and the
enumerated target law at T = 1 (G-test) with a broken control that reports the unrestricted law.
"""

import dataclasses
import functools
import zlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specjax import zoo
from specjax.models import draft_vocab as DV
from specjax.decode import generate, generate_ar
from specjax.drafters.chain import ChainDrafter
from specjax.drafters.ddtree import DDTreeDrafter
from specjax.drafters.draft_lm import draft_forward
from specjax.drafters.dflash import DFlashDrafter
from specjax.drafters.domino import DominoDrafter
from specjax.drafters.dynatree import DynaTreeDrafter
from specjax.drafters.eagle3 import eagle3_drafter
from specjax.drafters.protocol import PromptContext
from specjax.models import (CheckpointError, GPTNeoXConfig, LlamaConfig, init_cache, init_params, load_checkpoint,
                            pad_prompts, prefill_tapped, save_checkpoint)
from specjax.models.dflash import DFlashConfig
from specjax.models.dflash_net import target_outer
from specjax.models.domino import DominoConfig
from specjax.models.domino_net import rollout, teacher_forced_logits
from specjax.models.eagle3 import Eagle3Config
from specjax.models.eagle3_net import logits_of
from specjax.models.loading import DRAFT_VOCAB_TENSOR, read_safetensors, write_safetensors
from specjax.models.model import forward, project_to_vocab
from specjax.sampling import Sampling
from specjax.testing import random_params
from specjax.tree import chain_tree
from tests.fixtures import PROMPT, TARGET, TARGET_PARAMS, VOCAB, assert_lossless, exact_law, g_test

# ============================================================================ choosing the ids, EAGLE-3's maps


def brute_force_frequent(counts, k, always):
    """Take `always`, then ids by (count descending, id ascending) until k; sorted."""
    chosen = set(always)
    for t in sorted(range(len(counts)), key=lambda t: (-counts[t], t)):
        if len(chosen) == k:
            break
        chosen.add(t)
    return sorted(chosen)


@settings(max_examples=60)
@given(data=st.data(), counts=st.lists(st.integers(0, 4), min_size=1, max_size=30), floats=st.booleans())
def test_frequent_ids_match_brute_force(data, counts, floats):
    v = len(counts)
    always = data.draw(st.lists(st.integers(0, v - 1), max_size=3))
    k = data.draw(st.integers(max(1, len(set(always))), v))
    arr = np.asarray(counts, np.float32 if floats else np.int64)
    got = DV.frequent_ids(arr, k, always)
    assert got.dtype == np.int32 and got.shape == (k,)
    assert got.tolist() == brute_force_frequent(counts, k, always)


def test_frequent_ids_reject_bad_inputs():
    counts = np.asarray([3, 1, 2])
    for k in (0, 4, 1.5, True):
        with pytest.raises(ValueError, match=r"k \(draft vocabulary size\) must be an int in \[1, 3\]"):
            DV.frequent_ids(counts, k)
    with pytest.raises(ValueError, match="non-empty 1-D"):
        DV.frequent_ids(counts[None], 1)
    with pytest.raises(ValueError, match="non-negative"):
        DV.frequent_ids(np.asarray([1, -1]), 1)
    with pytest.raises(ValueError, match=r"`always` ids must lie in \[0, 3\)"):
        DV.frequent_ids(counts, 2, always=(3,))
    with pytest.raises(ValueError, match="more than k = 1"):
        DV.frequent_ids(counts, 1, always=(0, 2))
    assert DV.frequent_ids(counts, 1, always=(1,)).tolist() == [1]  # `always` beats the counts


@settings(max_examples=40)
@given(members=st.lists(st.booleans(), min_size=1, max_size=40).filter(any))
def test_eagle3_maps_against_numpy_and_round_trip(members):
    ids = np.flatnonzero(members)
    d2t, t2d = DV.eagle3_maps(ids, len(members))
    assert d2t.dtype == np.int64 and t2d.dtype == np.bool_ and t2d.shape == (len(members),)
    np.testing.assert_array_equal(np.arange(len(ids)) + d2t, ids)  # target id = k + d2t[k]
    np.testing.assert_array_equal(t2d, np.asarray(members))
    back = DV.ids_from_d2t(d2t, len(members))
    assert back.dtype == np.int32 and back.tolist() == ids.tolist()


def test_ids_are_checked_where_they_enter():
    with pytest.raises(ValueError, match="sorted ascending without repeats"):
        DV.eagle3_maps([2, 1], 4)
    with pytest.raises(ValueError, match="sorted ascending without repeats"):
        DV.ids_from_d2t(np.asarray([0, -1]))  # ids 0, 0
    with pytest.raises(ValueError, match=r"must lie in \[0, 4\)"):
        DV.with_draft_vocab({}, [1, 4], vocab_size=4)
    with pytest.raises(ValueError, match="non-empty 1-D integer"):
        DV.with_draft_vocab({}, [0.0, 1.0])


# ============================================================================ the K-column projection


HEADS = {  # (target config, params dtype): untied embed_out, tied embedding, a bf16 untied lm_head
    "neox-untied": (GPTNeoXConfig(vocab_size=40, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64,
                                  rotary_dim=4), jnp.float32),
    "llama-tied": (LlamaConfig(vocab_size=48, hidden_size=32, num_layers=1, num_heads=4, num_kv_heads=2, head_dim=8,
                               intermediate_size=64, tie_word_embeddings=True), jnp.float32),
    "llama-bf16": (LlamaConfig(vocab_size=48, hidden_size=32, num_layers=1, num_heads=4, num_kv_heads=2, head_dim=8,
                               intermediate_size=64), jnp.bfloat16),
}


@pytest.mark.parametrize("name", sorted(HEADS))
def test_vocab_logits_are_project_to_vocab_on_the_draft_columns(name):
    cfg, dtype = HEADS[name]
    params = init_params(cfg, jax.random.key(0), dtype)
    assert ("head" in params) != cfg.tie_word_embeddings
    hidden = jax.random.normal(jax.random.key(1), (2, 3, cfg.hidden_size)).astype(dtype)
    ids = DV.frequent_ids(np.arange(cfg.vocab_size) % 7, 11, always=(0,))
    full = np.asarray(project_to_vocab(params, cfg, hidden))
    got = np.asarray(jax.jit(DV.vocab_logits, static_argnums=1)(params, cfg, hidden, jnp.asarray(ids)))
    assert got.dtype == np.float32 and got.shape == full.shape
    np.testing.assert_allclose(got[..., ids], full[..., ids], rtol=1e-6, atol=1e-6)
    out = np.setdiff1d(np.arange(cfg.vocab_size), ids)
    assert np.all(got[..., out] == DV.EXCLUDED_LOGIT)
    logp = jax.nn.log_softmax(got, axis=-1)  # zero mass outside, finite everywhere (no NaN from 0 * logit)
    assert np.all(np.isfinite(logp)) and float(jnp.exp(logp)[..., out].max()) == 0.0
    np.testing.assert_array_equal(np.asarray(DV.vocab_logits(params, cfg, hidden, None)), full)
    head = DV.draft_head(params, cfg, jnp.asarray(ids))  # gathered once, as the drafters' init does
    assert head.shape == (cfg.hidden_size, len(ids)) and head.dtype == dtype
    np.testing.assert_array_equal(np.asarray(DV.vocab_logits(params, cfg, hidden, jnp.asarray(ids), head)), got)


def drafter_configs(target, block_size=3):
    """A DFlash, Domino and EAGLE-3 config for a 2-layer `target` (tiny, one layer)."""
    kw = dict(num_layers=1, target_layer_ids=(0,), block_size=block_size, mask_token_id=0)
    return {"dflash": DFlashConfig.for_target(target, **kw),
            "domino": DominoConfig.for_target(target, **kw, gru_hidden=8, head_rank=4),
            "eagle3": Eagle3Config.for_target(target, target_layer_ids=(0, 1))}


def test_drafting_logits_with_ids_are_the_full_ones_on_the_draft_columns():
    """DFlash's block logits, Domino's corrected rollout logits (forced tokens) and EAGLE-3's
    logits_of with a draft vocabulary == the same drafter's full-vocabulary logits on its columns,
    EXCLUDED_LOGIT elsewhere (the same state, weights and inputs)."""
    target = HEADS["neox-untied"][0]
    cfgs = drafter_configs(target, block_size=5)
    tparams = random_params(target, 0, 0.3)
    touter = target_outer(tparams)
    ids = jnp.asarray(DV.frequent_ids(np.arange(target.vocab_size) % 5, 13))
    tokens, lengths = pad_prompts([[1, 2, 3, 4, 5], [6, 7]])
    feats = prefill_tapped(tparams, target, tokens, lengths, init_cache(target, 2, 5), (0,))[3]
    root = jnp.asarray([8, 9], jnp.int32)
    got = {}
    for kind in ("dflash", "domino"):
        cfg = cfgs[kind]
        dparams = random_params(cfg, 2, 0.3)
        drafter = (DFlashDrafter if kind == "dflash" else DominoDrafter)(cfg, target)
        for restricted in (False, True):
            params = DV.with_draft_vocab(dparams, ids) if restricted else dparams
            st_ = drafter.init(params, tokens, lengths, 8, PromptContext(features=feats, target_params=touter))
            assert (st_.draft_head is None) != restricted  # the K head columns, gathered once
            if kind == "dflash":
                got[kind, restricted] = drafter.block_logits(st_, root)[0]
                continue
            rows, base, st_ = drafter.base_logits(st_, root)
            forced = jax.random.randint(jax.random.key(4), (2, cfg.num_draft_positions), 0, target.vocab_size)
            pick = lambda logits, i, key, forced=forced: forced[:, i]  # noqa: E731
            keys = jax.random.split(jax.random.key(5), cfg.num_draft_positions)
            got[kind, restricted] = rollout(cfg, st_.params, touter, target, rows, base, root, pick, keys)[1]
    ecfg = cfgs["eagle3"]
    eparams = random_params(ecfg, 6, 0.3)
    hidden = jax.random.normal(jax.random.key(8), (2, 3, target.hidden_size))
    for restricted in (False, True):
        params = DV.with_draft_vocab(eparams, ids) if restricted else eparams
        got["eagle3", restricted] = logits_of(params, ecfg, touter, target, hidden)
    out = np.setdiff1d(np.arange(target.vocab_size), np.asarray(ids))
    for kind in ("dflash", "domino", "eagle3"):
        full, part = np.asarray(got[kind, False]), np.asarray(got[kind, True])
        np.testing.assert_allclose(part[..., ids], full[..., ids], rtol=1e-5, atol=1e-5, err_msg=kind)
        assert np.all(part[..., out] == DV.EXCLUDED_LOGIT), kind


# ============================================================================ params and checkpoints


def test_params_helpers_split_and_join():
    params = {"fc": {"kernel": jnp.ones((2, 2), jnp.bfloat16)}}
    trainable, ids = DV.split_draft_vocab(params)
    assert DV.draft_vocab_ids(params) is None and ids is None and trainable.keys() == params.keys()
    with_ids = DV.with_draft_vocab(params, np.asarray([1, 5]), vocab_size=6)
    assert "draft_vocab" not in params  # a copy
    assert DV.draft_vocab_ids(with_ids).dtype == jnp.int32 and DV.weights_dtype(with_ids) == jnp.bfloat16
    trainable, ids = DV.split_draft_vocab(with_ids)
    assert trainable.keys() == params.keys() and ids.tolist() == [1, 5]
    assert DV.join_draft_vocab(trainable, ids)["draft_vocab"]["ids"] is ids
    assert DV.join_draft_vocab(trainable, None) is trainable


@pytest.mark.parametrize("kind", ["dflash", "domino", "eagle3"])
def test_checkpoints_round_trip_the_ids(kind, tmp_path):
    cfg = drafter_configs(TARGET)[kind]
    plain = init_params(cfg, jax.random.key(3))
    params = DV.with_draft_vocab(plain, [0, 2], vocab_size=VOCAB)
    save_checkpoint(tmp_path / "d", cfg, params, dtype=np.float16)  # the ids stay int32 whatever the dtype
    tensors = read_safetensors(tmp_path / "d" / "model.safetensors")
    assert tensors[DRAFT_VOCAB_TENSOR].dtype == np.int32
    cfg2, loaded = load_checkpoint(tmp_path / "d")
    assert cfg2 == cfg and DV.draft_vocab_ids(loaded).tolist() == [0, 2]
    assert DV.draft_vocab_ids(loaded).dtype == jnp.int32 and DV.weights_dtype(loaded) == jnp.float32
    save_checkpoint(tmp_path / "plain", cfg, plain)  # without: the full vocabulary, as before
    assert DV.draft_vocab_ids(load_checkpoint(tmp_path / "plain")[1]) is None
    bad = dict(tensors, **{DRAFT_VOCAB_TENSOR: np.asarray([2, 0], np.int32)})
    write_safetensors(tmp_path / "d" / "model.safetensors", bad)
    with pytest.raises(CheckpointError, match="sorted ascending"):
        load_checkpoint(tmp_path / "d")


@pytest.mark.parametrize("cfg", [TARGET, LlamaConfig(vocab_size=VOCAB, hidden_size=16, num_layers=2, num_heads=2,
                                                     num_kv_heads=1, head_dim=8, intermediate_size=32,
                                                     tie_word_embeddings=True)], ids=["neox", "llama-tied"])
def test_a_draft_lm_saves_loads_and_drafts_over_its_draft_vocabulary(tmp_path, cfg):
    """A causal LM drafting with its own head (`python -m specjax.train draft-lm --draft-vocab K`) keeps its
    ids through a checkpoint; `draft_forward` equals the full forward on those K columns (rtol 1e-5: the
    same contraction over fewer columns) and is EXCLUDED_LOGIT elsewhere; used as a target (plain
    `forward`) the ids change nothing."""
    params = random_params(cfg, 0, 0.5)
    ids = [0, 2, 3]
    save_checkpoint(tmp_path / "d", cfg, DV.with_draft_vocab(params, ids, VOCAB))
    cfg2, loaded = load_checkpoint(tmp_path / "d")
    assert cfg2 == cfg and DV.draft_vocab_ids(loaded).tolist() == ids
    tokens = jnp.asarray([[1, 2, 3, 0]], jnp.int32)
    positions = jnp.arange(4, dtype=jnp.int32)[None]
    mask = jnp.tril(jnp.ones((4, 4), bool))[None]
    full, _ = forward(params, cfg, tokens, positions, mask, init_cache(cfg, 1, 8))
    restricted, _ = draft_forward(loaded, cfg, tokens, positions, mask, init_cache(cfg, 1, 8))
    as_target, _ = forward(loaded, cfg, tokens, positions, mask, init_cache(cfg, 1, 8))
    np.testing.assert_allclose(np.asarray(restricted)[..., ids], np.asarray(full)[..., ids], rtol=1e-5, atol=1e-6)
    others = np.setdiff1d(np.arange(VOCAB), ids)
    assert np.all(np.asarray(restricted)[..., others] == DV.EXCLUDED_LOGIT)
    np.testing.assert_allclose(np.asarray(as_target), np.asarray(full), rtol=1e-5, atol=1e-6)


# ============================================================================ greedy losslessness (the zoo pair)


@dataclasses.dataclass(frozen=True)
class CountExcluded:
    """Wraps a drafter (anything `generate` asks it is its own) and counts, per row, the valid nodes
    it proposed whose token is in `excluded`: state (inner state, int32[B] count)."""

    inner: object
    excluded: tuple[int, ...]

    def __getattr__(self, name):
        if name in ("inner", "excluded"):
            raise AttributeError(name)
        return getattr(self.inner, name)

    def init(self, params, tokens, prompt_lengths, max_new_tokens, context=None):
        inner = self.inner.init(params, tokens, prompt_lengths, max_new_tokens, context)
        return inner, jnp.zeros(tokens.shape[:1], jnp.int32)

    def propose(self, state, root, active, key, sampling):
        tree, probs, inner = self.inner.propose(state[0], root, active, key, sampling)
        bad = tree.valid & jnp.isin(tree.tokens, jnp.asarray(self.excluded, jnp.int32))
        return tree, probs, (inner, state[1] + bad.sum(-1).astype(jnp.int32))

    def observe(self, state, verified):
        return self.inner.observe(state[0], verified), state[1]


ZOO_TEXTS = ("The guitar is a stringed musical instrument that is usually fretted",
             "In the early years of the city, the river")
ZOO_NEW = 32


@functools.lru_cache(maxsize=1)
def zoo_setting():
    """The zoo pair, two prompts, AR's output and a draft vocabulary of the K most frequent tokens of
    that output (K = half its distinct tokens, EOS always): AR emits tokens the drafters cannot."""
    tcfg, tparams, tok = zoo.load("tiny-neox-target")
    prompts = [zoo.encode(tok, t) for t in ZOO_TEXTS]
    tokens, lengths = pad_prompts(prompts)
    ar = generate_ar(tparams, tcfg, tokens, lengths, ZOO_NEW, eos_ids=())
    emitted = np.asarray(ar.tokens).ravel()
    distinct = np.unique(emitted)
    ids = DV.frequent_ids(np.bincount(emitted, minlength=tcfg.vocab_size), len(distinct) // 2, always=(zoo.EOS_ID,))
    excluded = tuple(int(t) for t in np.setdiff1d(distinct, ids))
    return tcfg, tparams, prompts, tokens, lengths, ar, ids, excluded


def zoo_drafter(kind, tcfg):
    """(drafter, params) of the zoo's DFlash (chain or under DDTree), Domino, EAGLE-3 (tree), or its draft LM
    (a chain of 4, or DynaTree)."""
    if kind in ("chain", "dynatree"):
        cfg, params, _ = zoo.load("tiny-neox-draft")
        return (ChainDrafter(cfg, 4) if kind == "chain" else DynaTreeDrafter(cfg, d0=3, d_max=5, n_max=16)), params
    name = {"dflash": "tiny-neox-dflash", "ddtree": "tiny-neox-dflash", "domino": "tiny-neox-domino",
            "eagle3": "tiny-neox-eagle3"}[kind]
    cfg, params = zoo.load_drafter(name)
    make = {"dflash": lambda: DFlashDrafter(cfg, tcfg), "ddtree": lambda: DDTreeDrafter(DFlashDrafter(cfg, tcfg), 16),
            "domino": lambda: DominoDrafter(cfg, tcfg), "eagle3": lambda: eagle3_drafter(cfg, tcfg, 4, 4, 16)}[kind]
    return make(), params


@pytest.mark.parametrize("kind", ["dflash", "ddtree", "domino", "eagle3", "chain", "dynatree"])
def test_greedy_lossless_and_never_proposes_an_excluded_token(kind):
    tcfg, tparams, prompts, tokens, lengths, ar, ids, excluded = zoo_setting()
    assert excluded, "the draft vocabulary must exclude tokens AR emits"
    drafter, dparams = zoo_drafter(kind, tcfg)
    spec = generate(tparams, tcfg, CountExcluded(drafter, excluded), DV.with_draft_vocab(dparams, ids, tcfg.vocab_size),
                    tokens, lengths, ZOO_NEW, eos_ids=())
    assert_lossless(tparams, tcfg, prompts, ar, spec)
    accepted, proposed = np.asarray(spec.stats.accepted), np.asarray(spec.stats.proposed)
    print(f"{kind}: K = {len(ids)}, {len(excluded)} emitted tokens excluded, proposed {proposed[proposed > 0].sum()}, "
          f"accepted {accepted[accepted > 0].sum()}, tau {spec.stats.mean_accepted_length().round(2).tolist()}")
    assert np.all(np.asarray(spec.draft_state[1]) == 0), "the drafter proposed a token outside its draft vocabulary"
    assert accepted.max() > 0, "nothing was accepted: the test would not exercise the restricted drafter"


def test_the_excluded_counter_sees_proposals_without_a_draft_vocabulary():
    """Control: the same zoo DFlash drafter on the full vocabulary does propose the excluded tokens."""
    tcfg, tparams, _, tokens, lengths, _, _, excluded = zoo_setting()
    drafter, dparams = zoo_drafter("dflash", tcfg)
    spec = generate(tparams, tcfg, CountExcluded(drafter, excluded), dparams, tokens, lengths, ZOO_NEW, eos_ids=())
    assert np.asarray(spec.draft_state[1]).sum() > 0


# ============================================================================ sampling law (Domino, T = 1)


SAMPLES = 20_000
DOMINO = drafter_configs(TARGET)["domino"]
DOMINO_PARAMS = DV.with_draft_vocab(random_params(DOMINO, 7, 0.6), [0, 2], VOCAB)


@dataclasses.dataclass(frozen=True)
class UnrestrictedLawDomino(DominoDrafter):
    """Broken on purpose: drafts from the draft vocabulary, but tells chain rejection the law of the
    same drafter over the full vocabulary (the prefix's teacher-forced logits without the ids)."""

    def propose(self, state, root, active, key, sampling):
        rows, base, state = self.base_logits(state, root, active)
        tokens, _ = self.rollout_from(state, rows, base, root, key, sampling)
        full, _ = DV.split_draft_vocab(state.params)
        inputs = jnp.concatenate([root[:, None], tokens[:, :-1]], axis=1)
        logits = teacher_forced_logits(self.cfg, full, state.target_params, self.target_cfg, rows,
                                       project_to_vocab(state.target_params, self.target_cfg, rows), inputs)
        return chain_tree(tokens, jnp.where(active, self.budget, 0)), jnp.exp(sampling.log_probs(logits)), state


@pytest.mark.parametrize("broken", [False, True], ids=["rejection", "broken-unrestricted-q"])
def test_domino_with_a_draft_vocabulary_samples_the_target_law(broken):
    """The draft vocabulary {0, 2} excludes the prompt's tokens 1 and 3, which the target samples
    often; chain rejection with the restricted law each draft was drawn from keeps the target's
    law of 5 tokens (G-test), reporting the unrestricted law must fail it."""
    drafter = (UnrestrictedLawDomino if broken else DominoDrafter)(DOMINO, TARGET)
    sampling = Sampling(1.0)
    tokens, lengths = pad_prompts([PROMPT] * SAMPLES)
    counter = CountExcluded(drafter, (1, 3))
    out = generate(TARGET_PARAMS, TARGET, counter, DOMINO_PARAMS, tokens, lengths, 5, sampling=sampling,
                   key=jax.random.key(zlib.crc32(b"draft-vocab" + bytes([broken]))), eos_ids=())
    flat = np.ravel_multi_index(np.asarray(out.tokens).T, (VOCAB,) * 5)
    p_value, dof = g_test(np.bincount(flat, minlength=VOCAB**5), exact_law(sampling))
    tau = float(np.mean(out.stats.mean_accepted_length()))
    print(f"Domino, draft vocabulary {{0, 2}}, {'broken' if broken else 'rejection'}: G-test dof {dof}, "
          f"p = {p_value:.3g}, tau {tau:.3f}")
    assert np.all(np.asarray(out.draft_state[1]) == 0)
    assert np.isin(np.asarray(out.tokens), (1, 3)).mean() > 0.2  # the target emits the excluded tokens
    assert tau > 1.05, "the draft was never accepted: the test would not exercise acceptance"
    if broken:
        assert p_value < 1e-6, f"the G-test failed to detect the unrestricted draft law (p={p_value:.2e})"
    else:
        assert p_value > 1e-3, f"samples with a draft vocabulary do not follow the target law (p={p_value:.2e})"
