"""The text-level pipeline (issue 37 item 2): strings in, strings and per-row stats out, any method.

On the embedded pair: greedy text equals AR's for a speculative method, stop strings cut the
text, streaming per round (`specjax.streaming`) hands over exactly the committed tokens, and a
method the model cannot run is refused before a weight loads.
"""

from __future__ import annotations

import shutil

import jax
import numpy as np
import pytest

from specjax import Pipeline, method, zoo
from specjax.decode import generate, generate_ar
from specjax.inputs import pad_prompts
from specjax.pipeline import check_source, default_method, load_pair

PROMPTS = ["The river flows through the", "The city of Paris is"]


@pytest.fixture(scope="module")
def chain():
    return Pipeline.load("zoo", method="chain3")


def test_greedy_text_equals_ar_and_stats_per_row(chain):
    out = chain.generate(PROMPTS, max_new_tokens=12)
    ar = Pipeline(chain.pair, method("ar", chain.pair.cfg)).generate(PROMPTS, max_new_tokens=12)
    assert [o.text for o in out] == [a.text for a in ar]
    assert all(o.num_tokens == 12 and o.finish == "length" and o.tau >= 1 and o.rounds >= 1 for o in out)
    assert all(a.tau == 1.0 for a in ar)


def test_stop_strings_and_streaming_per_round(chain):
    full = chain.generate(PROMPTS[0], max_new_tokens=12)[0]
    stop = full.text.split()[1]
    cut = chain.generate(PROMPTS[0], max_new_tokens=12, stop=[stop])[0]
    assert cut.finish == "stop" and cut.text == full.text[: full.text.index(stop)]
    seen = []
    streamed = chain.generate(PROMPTS, max_new_tokens=12, callback=lambda i, texts: seen.append((i, texts)))
    assert [s.text for s in streamed] == [o.text for o in chain.generate(PROMPTS, max_new_tokens=12)]
    # round 0 is the prefill's token, then one call per verification round of the longest row
    assert [i for i, _ in seen] == list(range(max(s.rounds for s in streamed) + 1))
    assert all(len(t) == 2 for _, t in seen) and seen[-1][1] == [s.text for s in streamed]
    assert all(new.startswith(old) for (_, a), (_, b) in zip(seen, seen[1:]) for old, new in zip(a, b))


@pytest.mark.parametrize("name", ["ar", "ddtree-8"])
def test_on_round_hands_over_exactly_each_rounds_committed_tokens(name):
    """`on_round` receives, per row, the tokens committed since the previous call: joined they are the
    row's output, one call per round after the prefill's (rows that finished get nothing), greedy
    output unchanged by streaming; a traced call cannot stream."""
    pair = load_pair("zoo", ("dflash",))
    m = method(name, pair.cfg, **pair.readers)
    tokens, lengths = pad_prompts([pair.encode(p) for p in PROMPTS])
    calls = []
    run = ((lambda toks=tokens, **kw: generate_ar(pair.params, pair.cfg, toks, lengths, 20, **kw)) if m.is_ar else
           (lambda toks=tokens, **kw: generate(pair.params, pair.cfg, m.drafter, m.params, toks, lengths, 20, **kw)))
    out = run(on_round=lambda new: calls.append([t.tolist() for t in new]))
    plain = run()
    np.testing.assert_array_equal(out.tokens, plain.tokens)
    counts = np.asarray(out.num_tokens)
    for b in range(len(PROMPTS)):
        assert sum((c[b] for c in calls), []) == np.asarray(out.tokens)[b, :counts[b]].tolist()
    steps = counts.max() if m.is_ar else np.asarray(out.stats.num_rounds).max() + 1
    assert len(calls) == steps and all(len(c[b]) == 1 for c in calls[:1] for b in range(len(PROMPTS)))
    with pytest.raises(ValueError, match="on_round streams to the host"):
        jax.jit(lambda t: run(t, on_round=print).tokens)(tokens)


def test_sampling_and_bad_calls(chain):
    a = chain.generate(PROMPTS, max_new_tokens=6, temperature=0.8, top_k=20, top_p=0.9, key=1)
    b = chain.generate(PROMPTS, max_new_tokens=6, temperature=0.8, top_k=20, top_p=0.9, key=1)
    assert [x.text for x in a] == [y.text for y in b]
    with pytest.raises(ValueError, match="non-empty string"):
        chain.generate([""], max_new_tokens=4)
    with pytest.raises(ValueError, match="max_new_tokens must be >= 1"):
        chain.generate(PROMPTS, max_new_tokens=0)
    with pytest.raises(ValueError, match="has no chat template"):
        chain.generate(PROMPTS, max_new_tokens=4, chat=True)


def test_a_method_the_model_cannot_run_is_refused_before_loading(tmp_path):
    assert default_method(check_source("zoo")) == "ddtree-8"
    bare = tmp_path / "no-draft"  # a checkpoint without a draft LM (and without weights: nothing is loaded)
    bare.mkdir()
    for name in ("config.json", "tokenizer.json"):
        shutil.copy(zoo.path("tiny-neox-target") / name, bare / name)
    with pytest.raises(ValueError, match="method 'eagle2' needs a draft LM"):
        Pipeline.load(str(bare), method="eagle2")  # refused from the names alone, before any weight loads
    with pytest.raises(ValueError, match="no such directory"):
        Pipeline.load(str(tmp_path / "nowhere"))


def test_a_learning_drafters_table_carries_over_between_calls_until_reset():
    """`Pipeline` hands a `CarriesOver` drafter's table from one `generate` to the next (hot start): on the
    same text the second call accepts at least as much per round as the cold first one, the text stays AR's,
    `reset()` brings the cold table back (the first call's rounds exactly), and carry_over=False never
    keeps it."""
    pipe = Pipeline.load("zoo", method="ddtree-8:ret=4")
    prompt = "The river flows through the old town and the river"
    cold = pipe.generate(prompt, max_new_tokens=48)[0]
    warm = pipe.generate(prompt, max_new_tokens=48)[0]
    assert warm.token_ids == cold.token_ids
    assert warm.tau >= cold.tau and warm.rounds <= cold.rounds
    learned = np.asarray(pipe.method.params.table)
    pipe.reset()
    assert not np.array_equal(np.asarray(pipe.method.params.table), learned)
    again = pipe.generate(prompt, max_new_tokens=48)[0]
    assert (again.rounds, again.token_ids) == (cold.rounds, cold.token_ids)
    fresh = Pipeline(pipe.pair, pipe.method, carry_over=False)
    fresh.reset()
    first, second = (fresh.generate(prompt, max_new_tokens=48)[0] for _ in range(2))
    assert first.rounds == second.rounds == cold.rounds


def test_an_unknown_model_name_lists_the_names_and_the_closest_one():
    with pytest.raises(ValueError, match=r"unknown model 'smollm2': give one of zoo, smollm2-135m .*did you mean "
                                         r"'smollm2-135m'\?"):
        Pipeline.load("smollm2")
    with pytest.raises(ValueError, match="no such directory"):  # a path stays a path
        Pipeline.load("./smollm2")
