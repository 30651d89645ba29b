"""`specjax.bench.versus_ar`: one prompt, AR against a speculative method, timed in one run and classified
against AR (what `specjax generate` prints and exits on), on the embedded zoo pair.

The reference is independent of the module: AR's tokens from `generate_ar` called here, and the method's
from `generate` called here; the verdict must follow the tokens (identical when they are equal, MISMATCH
when one token is planted wrong where AR's margin is wide), and `specjax generate` must exit 1 on it."""

import numpy as np
import pytest

from specjax.bench import versus_ar as versus_ar_module
from specjax.bench.versus_ar import VersusAR, versus_ar
from specjax.cli import generate as cli_generate
from specjax.cli.main import main
from specjax.decode import generate, generate_ar
from specjax.drafters.registry import method
from specjax.models import pad_prompts
from specjax.pipeline import load_pair
from specjax.sampling import Sampling

PROMPT, NEW = "The guitar is a stringed musical instrument", 8


@pytest.fixture(scope="module")
def zoo():
    pair = load_pair("zoo", ("draft",))
    return pair, method("chain2", pair.cfg, draft=pair.draft, target_params=pair.params), pair.encode(PROMPT)


def test_greedy_chain_is_identical_to_ar_and_timed_against_it(zoo):
    pair, m, ids = zoo
    result = versus_ar(pair, m, ids, max_new_tokens=NEW, timed_runs=1)
    tokens, lengths = pad_prompts([ids])
    ar = generate_ar(pair.params, pair.cfg, tokens, lengths, NEW)
    sp = generate(pair.params, pair.cfg, m.drafter, m.params, tokens, lengths, NEW)
    np.testing.assert_array_equal(np.asarray(result.ar.tokens), np.asarray(ar.tokens))
    np.testing.assert_array_equal(np.asarray(result.speculative.tokens), np.asarray(sp.tokens))
    assert result.agreement.kind == "identical" and result.lossless
    summary = result.summary()
    assert summary["method"] == "chain2" and summary["sampling"] == "greedy"
    assert summary["ar"]["text"] == pair.decode(np.asarray(ar.tokens[0, : int(ar.num_tokens[0])]).tolist())
    spec = summary["speculative"]
    assert spec["speedup"] == pytest.approx(result.ar_seconds / result.speculative_seconds)
    assert spec["tokens_per_s"] == pytest.approx(spec["tokens"] / spec["seconds"]) and spec["vs_ar"] == "identical"
    assert spec["rounds"] == int(sp.stats.num_rounds[0])


def test_a_planted_wrong_token_is_a_mismatch_and_generate_exits_1(zoo, monkeypatch, capsys):
    """The method's 3rd token replaced by another: AR's top-2 margin there is far above the near-tie
    threshold, so the verdict is MISMATCH at generated token 2, `lossless` is False, and `specjax
    generate` (which reads the verdict from this module) exits 1."""
    pair, m, ids = zoo
    real = versus_ar_module.generate

    def planted(*args, **kw):
        out = real(*args, **kw)
        return out.replace(tokens=out.tokens.at[0, 2].set((out.tokens[0, 2] + 1) % pair.cfg.vocab_size))

    monkeypatch.setattr(versus_ar_module, "generate", planted)
    monkeypatch.setattr(cli_generate, "TIMED_RUNS", 1)
    result = versus_ar(pair, m, ids, max_new_tokens=NEW, timed_runs=1)
    assert result.agreement.kind == "MISMATCH" and result.agreement.position == 2 and not result.lossless
    assert result.agreement.margin >= result.agreement.eps
    assert main(["generate", "--method", "chain2", "--prompt", PROMPT, "--max-new-tokens", str(NEW), "--json"]) == 1
    assert '"vs_ar": "MISMATCH at generated token 2' in capsys.readouterr().out


def test_sampled_runs_and_ar_itself_are_not_classified(zoo):
    pair, m, ids = zoo
    sampled = versus_ar(pair, m, ids, max_new_tokens=4, sampling=Sampling(0.8), timed_runs=1)
    assert sampled.agreement is None and sampled.lossless and sampled.summary()["sampling"] == "T=0.8"
    ar = versus_ar(pair, method("ar", pair.cfg), ids, max_new_tokens=4, timed_runs=1)
    assert isinstance(ar, VersusAR) and ar.speculative is None and "speculative" not in ar.summary()
    with pytest.raises(ValueError, match="timed_runs must be an integer >= 1, got 0"):
        versus_ar(pair, m, ids, max_new_tokens=4, timed_runs=0)
