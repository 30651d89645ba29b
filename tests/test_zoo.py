"""The committed zoo models (specjax/zoo): loading, HF parity, tokenizer, quality floors.

No network: the held-out texts (tests/zoo_prompts.py) are hard-coded copies of Wikipedia
openings whose titles `split_of(title, "wiki")` puts in the *test* split (checked here), so
nothing the models were trained on is used to judge them. Thresholds were set from measured
values with margin (see specjax/zoo/TRAINING.md for the measurements).
"""

from __future__ import annotations

import json
import math
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax import zoo
from specjax.data.prompts import split_of
from specjax.models import causal_mask, forward, init_cache, load_checkpoint, pad_prompts
from tests.zoo_prompts import HELDOUT, PROMPTS

TARGET_MAX_LOSS = 6.0  # nats/token on HELDOUT: measured 5.20; log(8192) = 9.01, add-one unigram 7.21
MIN_MEAN_ACCEPTED = 2.0  # tokens per round, ChainDrafter(draft_cfg, 4), greedy, 32 tokens: measured 2.57


@pytest.fixture(scope="module")
def models():
    return {name: zoo.load(name) for name in zoo.NAMES}


def _ours(cfg, params, ids):
    tokens = jnp.asarray([ids], jnp.int32)
    t = tokens.shape[1]
    logits, _ = forward(params, cfg, tokens, jnp.arange(t, dtype=jnp.int32)[None], causal_mask(1, t),
                        init_cache(cfg, 1, t, jnp.float32))
    return np.asarray(logits[0])


def test_heldout_texts_are_in_the_test_split():
    assert all(split_of(title, "wiki") == "test" for title, _ in HELDOUT + PROMPTS)


def test_files_and_sizes():
    total = 0
    for name in zoo.NAMES:
        d = zoo.path(name)
        assert {"config.json", "model.safetensors", "tokenizer.json"} <= {p.name for p in d.iterdir()}
        total += sum(p.stat().st_size for p in d.iterdir())
    assert total <= 40 * 2**20


@pytest.mark.parametrize("name", zoo.NAMES)
def test_loads_and_matches_transformers(models, name):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg, params = load_checkpoint(zoo.path(name), jnp.float32)
    assert jax.tree.leaves(params)[0].dtype == jnp.float32
    assert cfg.use_parallel_residual and cfg.rotary_dim == cfg.head_dim // 4 and not cfg.tie_word_embeddings
    hf = transformers.GPTNeoXForCausalLM.from_pretrained(zoo.path(name), dtype=torch.float32).eval()
    tok = models[name][2]
    ids = zoo.encode(tok, HELDOUT[0][1])
    with torch.no_grad():
        ref = hf(torch.tensor([ids])).logits[0].float().numpy()
    ours = _ours(cfg, params, ids)
    diff = float(np.abs(ours - ref).max())
    print(f"{name}: max |logits ours - transformers| = {diff:.2e} over {len(ids)} tokens")
    assert diff <= 1e-4


def test_tokenizer_roundtrip_and_shared(models):
    tok_t, tok_d = models["tiny-neox-target"][2], models["tiny-neox-draft"][2]
    assert tok_t.to_str() == tok_d.to_str()
    assert tok_t.token_to_id("<|endoftext|>") == zoo.EOS_ID == 0
    assert tok_t.get_vocab_size() == 8192
    for cfg, _, _ in models.values():
        assert cfg.vocab_size == tok_t.get_vocab_size() and cfg.eos_token_ids == (0,)
    samples = [t for _, t in HELDOUT] + ["def f(x):\n    return x ** 2  # ünïcödé — 中文 🙂\n\n\tUser: hi!"]
    for s in samples:
        ids = tok_t.encode(s).ids
        assert tok_t.decode(ids) == s
    wiki = HELDOUT[0][1]
    assert len(tok_t.encode(wiki).ids) < len(wiki) / 3  # real merges, not bytes


def test_target_heldout_loss(models):
    cfg, params, tok = models["tiny-neox-target"]
    nll = []
    for _, text in HELDOUT:
        ids = zoo.encode(tok, text)
        logp = jax.nn.log_softmax(_ours(cfg, params, ids)[:-1], axis=-1)
        nll.extend(-np.asarray(logp)[np.arange(len(ids) - 1), ids[1:]])
    loss = float(np.mean(nll))
    print(f"target held-out loss {loss:.3f} nats/token (ppl {math.exp(loss):.1f}); log(V) = {math.log(8192):.2f}")
    assert loss < TARGET_MAX_LOSS


def test_chain_drafting_accepts(models):
    from specjax.decode import generate, generate_ar
    from specjax.drafters.chain import ChainDrafter

    tcfg, tparams, tok = models["tiny-neox-target"]
    dcfg, dparams, _ = models["tiny-neox-draft"]
    tokens, lengths = pad_prompts([zoo.encode(tok, p) for _, p in PROMPTS])
    out = generate(tparams, tcfg, ChainDrafter(dcfg, 4), dparams, tokens, lengths, 32, eos_ids=())
    ref = generate_ar(tparams, tcfg, tokens, lengths, 32, eos_ids=())
    np.testing.assert_array_equal(np.asarray(out.tokens), np.asarray(ref.tokens))
    mal = out.stats.mean_accepted_length()
    print(f"mean accepted length (K=4) per prompt {np.round(mal, 2).tolist()}, mean {mal.mean():.3f}")
    assert mal.mean() > MIN_MEAN_ACCEPTED


SMOLLM2_DATA = pathlib.Path(zoo.ZOO_DIR) / "data" / "smollm2-135m-instruct" / "manifest.json"


@pytest.mark.parametrize("name", [d for d in zoo.DRAFTERS + zoo.DRAFT_LMS if d.startswith("smollm2-135m-")])
def test_smollm2_drafters_are_small_and_say_how_they_were_made(name):
    """Each committed SmolLM2 drafter is at most 25 MB, loads as the config its recipe.json records, was
    trained for the target the committed data was generated by, with the params count the recipe states
    (draft vocabulary ids aside), and carries a τ measured by decoding held-out prompts."""
    from specjax.models.draft_vocab import split_draft_vocab

    directory = zoo.path(name)
    assert (directory / "model.safetensors").stat().st_size <= 25 * 2**20
    recipe = json.loads((directory / "recipe.json").read_text())
    cfg, params = zoo.load_drafter(name)
    assert cfg.to_hf() == recipe["drafter"]
    target = json.loads(SMOLLM2_DATA.read_text())["target"]
    assert recipe["target"] == target
    weights, ids = split_draft_vocab(params)
    assert sum(int(np.prod(x.shape)) for x in jax.tree.leaves(weights)) == recipe["params"]
    assert ids is None or len(ids) == recipe["draft_vocab"]["k"]
    tau = recipe["measured_tau"]
    assert tau["prompts"] >= 8 and tau["temperature"] == 0 and tau["tau_mean"] > 1.0
    assert tau["tau_mean"] == pytest.approx(np.mean(tau["tau_per_prompt"]), abs=1e-3)
