"""The early-exit draft LM (`specjax.models.model.early_exit`, `--draft early-exit:K`): the target's first
K layers under its own final norm and LM head, checked against the target's own tapped layer output, and
lossless as the draft of a chain on the embedded pair."""

from __future__ import annotations

import numpy as np
import pytest

from specjax import zoo
from specjax.cli.main import main as cli_main
from specjax.models import init_cache, pad_prompts, prefill
from specjax.models.model import early_exit, final_norm, layer_features, project_to_vocab, unstack_layers
from specjax.pipeline import Pipeline, check_source


def test_the_early_exit_is_the_targets_layer_k_output_under_its_final_norm_and_head():
    """Logits of the K-layer model at every prompt position = project(final_norm(output of layer K - 1)),
    the latter from `layer_features` (the feature-cache path) over the whole target: the same arrays, so
    equal to float32 rounding (rtol 1e-5: two programs, the same products); the unstacked layout too."""
    cfg, params, _ = zoo.load("tiny-neox-target")
    tokens, lengths = pad_prompts([[5, 17, 40, 3, 99, 12, 7], [8, 21, 64, 2, 15, 30, 11]])
    for k in (1, cfg.num_layers - 1):
        want = project_to_vocab(params, cfg, final_norm(params, cfg, layer_features(params, cfg, tokens, (k - 1,))[:, :, 0]))
        for source in (params, unstack_layers(params)):
            dcfg, dparams = early_exit(cfg, source, k)
            assert dcfg.num_layers == k
            logits, _, _ = prefill(dparams, dcfg, tokens, lengths, init_cache(dcfg, 2, 16))
            np.testing.assert_allclose(np.asarray(logits), np.asarray(want), rtol=1e-5, atol=1e-5)


def test_an_early_exit_draft_is_lossless_and_refused_outside_its_range(capsys):
    """chain3 drafted by the zoo target's first layer: output identical to AR (greedy); K = 0, K = L and a
    malformed spec are refused before loading, naming the range or the form."""
    pipe = Pipeline.load("zoo", method="chain3", draft="early-exit:1")
    ar = Pipeline.load("zoo", method="ar")
    prompt = "The river flows through the"
    assert pipe.generate(prompt, 24)[0].token_ids == ar.generate(prompt, 24)[0].token_ids
    cfg, params, _ = zoo.load("tiny-neox-target")
    for k in (0, cfg.num_layers, True):
        with pytest.raises(ValueError, match="an early-exit draft keeps 1 to"):
            early_exit(cfg, params, k)
    with pytest.raises(ValueError, match="early-exit:K"):
        check_source("zoo", draft="early-exit:two")
    assert cli_main(["generate", "--model", "smollm2-135m", "--draft", "early-exit:x", "--method", "chain4"]) == 2
    assert "early-exit:K" in capsys.readouterr().err
