"""The text-level pipeline (issue 37 item 2): strings in, strings and per-row stats out, any method.

On the embedded pair: greedy text equals AR's for a speculative method, stop strings cut the
text, streaming in chunks gives the same text, and a method the model cannot run is refused
before a weight loads.
"""

from __future__ import annotations

import pytest

from specjax import Pipeline, method
from specjax.pipeline import check_source, default_method

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


def test_stop_strings_and_streaming_in_chunks(chain):
    full = chain.generate(PROMPTS[0], max_new_tokens=12)[0]
    stop = full.text.split()[1]
    cut = chain.generate(PROMPTS[0], max_new_tokens=12, stop=[stop])[0]
    assert cut.finish == "stop" and cut.text == full.text[: full.text.index(stop)]
    seen = []
    streamed = chain.generate(PROMPTS, max_new_tokens=12, callback=lambda i, texts: seen.append(texts), chunk_tokens=5)
    assert [s.text for s in streamed] == [o.text for o in chain.generate(PROMPTS, max_new_tokens=12)]
    assert len(seen) == 3 and all(len(t) == 2 for t in seen) and seen[-1] == [s.text for s in streamed]


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
    with pytest.raises(ValueError, match="method 'domino' needs a Domino drafter"):
        Pipeline.load("smollm2-135m", method="domino")  # nothing fetched: refused from the names alone
    with pytest.raises(ValueError, match="no such directory"):
        Pipeline.load(str(tmp_path / "nowhere"))
