"""Training a draft LM (`specjax.train.draft_lm`, `python -m specjax.train draft-lm`): the loss against a
slow numpy version over the model's own inference forward, the embedding's principal-direction init against
numpy's SVD, and a short training run on the tiny target's answers whose export decodes identically to AR
(with and without a draft vocabulary) and accepts more than the untrained draft."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax.decode import generate, generate_ar
from specjax.drafters.chain import ChainDrafter
from specjax.models import init_cache, init_params, load_checkpoint, pad_prompts
from specjax.models import draft_vocab as DV
from specjax.models.dflash_net import target_outer
from specjax.models.model import causal_mask, forward
from specjax.testing import random_params
from specjax.train.dflash import make_dataset
from specjax.train.draft_lm import CHAIN, next_token_loss, pca_embedding
from specjax.train.loop import TrainSet, export, train
from specjax.train.run import TRAINERS
from specjax.train.vocab import tables_of_ids
from tests.train_fixtures import TARGET, TARGET_PARAMS

KIND = TRAINERS["draft-lm"]
DRAFT = KIND.build_config(KIND.arch(hidden_size=16, num_layers=1, num_heads=2, num_kv_heads=1, intermediate_size=32), TARGET)


def _reference(params, cfg, tokens, mask, ids):
    """(loss, acc, tau) by loops over numpy logits of the model's inference `forward`."""
    b, s = tokens.shape
    logits, _ = forward(params, cfg, jnp.asarray(tokens), jnp.broadcast_to(jnp.arange(s), (b, s)),
                        causal_mask(b, s), init_cache(cfg, b, s))
    logits = np.asarray(logits, np.float64)
    cols = np.arange(cfg.vocab_size) if ids is None else np.asarray(ids)
    nll, correct, wanted = [], np.zeros((b, s), bool), np.zeros((b, s), bool)
    for i in range(b):
        for t in range(s - 1):
            if not mask[i, t + 1]:
                continue
            wanted[i, t] = True
            z = logits[i, t, cols]
            logp = z - np.log(np.exp(z - z.max()).sum()) - z.max()
            hit = np.flatnonzero(cols == tokens[i, t + 1])
            if hit.size:  # a label outside the draft vocabulary leaves the loss and is a miss
                nll.append(-logp[hit[0]])
                correct[i, t] = int(np.argmax(z)) == hit[0]
    runs = []
    for i, t in zip(*np.nonzero(wanted)):
        run = 0
        while run < CHAIN and t + run < s - 1 and correct[i, t + run]:
            run += 1
        runs.append(1 + run)
    return np.mean(nll), correct.sum() / wanted.sum(), np.mean(runs)


@pytest.mark.parametrize("ids", [None, [0, 2, 3, 5, 7, 11, 13, 17]], ids=["full", "draft-vocab"])
def test_next_token_loss_matches_a_numpy_reference(ids):
    params = random_params(DRAFT, 1, 0.8)
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, TARGET.vocab_size, (3, 12)).astype(np.int32)
    mask = np.zeros(tokens.shape, bool)
    mask[0, 3:], mask[1, 5:9], mask[2, 1:] = True, True, True
    vocab = None if ids is None else tables_of_ids(ids, TARGET.vocab_size)
    loss, metrics = next_token_loss(params, DRAFT, jnp.asarray(tokens), jnp.asarray(mask), vocab)
    want_loss, want_acc, want_tau = _reference(params, DRAFT, tokens, mask, ids)
    np.testing.assert_allclose(float(loss), want_loss, rtol=1e-5)
    np.testing.assert_allclose(float(metrics["acc"][0]), want_acc, rtol=1e-6)
    np.testing.assert_allclose(float(metrics["tau"]), want_tau, rtol=1e-6)


def test_the_embedding_init_is_the_top_principal_subspace():
    """pca_embedding keeps the rows' Gram matrix as well as any rank-E projection can (Eckart-Young): it equals
    U_E S_E from numpy's SVD up to each column's sign."""
    x = np.random.default_rng(0).normal(size=(40, 12)) * np.linspace(3, 0.1, 12)
    got = pca_embedding(x, 5)
    u, sv, _ = np.linalg.svd(x, full_matrices=False)
    want = u[:, :5] * sv[:5]
    np.testing.assert_allclose(np.abs(got), np.abs(want), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got.T @ got, np.diag(sv[:5] ** 2), rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="no 13 principal directions"):
        pca_embedding(x, 13)


def test_bad_shapes_name_the_flag():
    for arch, says in ((dict(hidden_size=15, num_heads=2), "--hidden-size 15 is not a multiple of --num-heads 2"),
                       (dict(hidden_size=18, num_heads=2), "head_dim .* must be even"),
                       (dict(num_heads=3, num_kv_heads=2), "--num-heads 3 is not a multiple of --num-kv-heads 2")):
        with pytest.raises(ValueError, match=says):
            KIND.build_config(KIND.arch(**arch), TARGET)


def test_a_trained_draft_lm_decodes_identically_to_ar_and_accepts_more_than_untrained(tmp_path):
    """The tiny target's greedy answers to 96 random prompts (16 held out), a draft vocabulary of 16 of its 24
    ids (the full vocabulary's loss is `next_token_loss`'s other case above): the trained draft's greedy chain
    accepts more on the held-out prompts than an untrained one, and both decode exactly as AR."""
    k = 16
    rng = np.random.default_rng(5)
    prompts = [rng.integers(1, 23, rng.integers(2, 6)).tolist() for _ in range(96)]
    d = make_dataset((TARGET, TARGET_PARAMS), prompts, seq_len=20, max_new_tokens=14, batch_size=48,
                     sampled_fraction=0.0, progress=False)
    ts = TrainSet.from_dense((TARGET, TARGET_PARAMS), d["tokens"], d["loss_mask"], KIND.layers(DRAFT, TARGET),
                             valid_rows=16)
    assert ts.features is None and "features" not in ts.batch(np.arange(2))
    counts = ts.response_token_counts(TARGET.vocab_size)
    vocab = tables_of_ids(DV.frequent_ids(counts, k, TARGET.eos_token_ids), TARGET.vocab_size)
    touter = target_outer(TARGET_PARAMS)
    tc = KIND.train_config(steps=150, batch_size=16, lr=1e-2, log_every=50, ckpt_every=150)
    params, log = train((TARGET, touter), DRAFT, ts, tc, tmp_path / "run", step_factory=KIND.make_step, vocab=vocab,
                        init=KIND.init(touter, TARGET, vocab), progress=False)
    assert log[-1]["train_loss"] < log[0]["train_loss"] and log[-1]["valid_loss"] < log[0]["valid_loss"], log
    cfg, loaded = load_checkpoint(export(tmp_path / "export", DRAFT, params, {}, vocab.ids))
    assert cfg == DRAFT and DV.draft_vocab_ids(loaded).tolist() == np.asarray(vocab.ids).tolist()
    rows = np.arange(ts.num_train, len(ts.shards))
    prompts = [ts.shards.tokens[ts.shards.offsets[i]:ts.shards.offsets[i] + ts.shards.prompt_lengths[i]].tolist()
               for i in rows]
    tokens, lengths = pad_prompts(prompts)
    ar = generate_ar(TARGET_PARAMS, TARGET, tokens, lengths, 16, eos_ids=())
    taus = []
    for dparams in (init_params(DRAFT, jax.random.key(0)), loaded):
        spec = generate(TARGET_PARAMS, TARGET, ChainDrafter(DRAFT, CHAIN), dparams, tokens, lengths, 16, eos_ids=())
        np.testing.assert_array_equal(np.asarray(spec.tokens), np.asarray(ar.tokens))
        taus.append(float(np.mean(spec.stats.mean_accepted_length())))
    print(f"chain of {CHAIN}: tau untrained {taus[0]:.3f}, trained {taus[1]:.3f}")
    assert taus[1] > taus[0] + 0.3, taus
