"""`Pipeline.generate` in interactive use (issue 52 item 4): no recompiles, and one stop string.

The prompts are padded to a bucketed width and the program is sized for a bucketed number of new
tokens, stopped at the call's own max_new_tokens: a second call with another prompt length in the
same bucket and fewer new tokens compiles nothing new (before, each new width or max_new_tokens
recompiled the loop, ~6 s on the embedded pair), and its output is that of a direct, unpadded
`specjax.decode.generate` call. `stop="the world"` is one stop string, not its characters.
"""

from __future__ import annotations

import numpy as np
import pytest

from specjax import Pipeline
from specjax.bench.timing import compile_totals
from specjax.data import compile_cache
from specjax.decode import _generate, generate
from specjax.inputs import pad_prompts
from specjax.pipeline import SIZE_BUCKET_FLOOR, _bucket

# 6, 13 and 4 tokens with the zoo's separator: all in the first width bucket (32).
SHORT, LONG, OTHER = "The river flows through the", "The city of Paris is a large city in the north of", "The old town"


@pytest.fixture(scope="module")
def pipe():
    return Pipeline.load("zoo", method="ddtree-8")


def test_sizes_are_bucketed_from_the_floor_and_capped_at_the_positions():
    assert SIZE_BUCKET_FLOOR == 32
    assert [_bucket(n) for n in (1, 6, 32, 33, 64, 65, 600)] == [32, 32, 32, 64, 64, 128, 1024]
    assert _bucket(600, 1000) == 1000 and _bucket(20, 24) == 24  # the model's positions bound the bucket
    assert _bucket(1500, 1000) == 1500  # never below the size itself (the positions check names it later)


def test_another_prompt_length_and_fewer_tokens_compile_nothing_new_with_the_unpadded_output(pipe, monkeypatch):
    """One program (batch 2, width bucket 32, reserve bucket 64) serves calls of other prompt lengths, of
    fewer new tokens and, sized by reserve_new_tokens, of more; every call turns the persistent compilation
    cache on (`compile_cache.enable`)."""
    enabled = []
    monkeypatch.setattr(compile_cache, "enable", lambda directory=None: enabled.append(directory))
    compile_totals()  # listening from here on
    first = pipe.generate([SHORT, LONG], max_new_tokens=16, reserve_new_tokens=48)
    programs, cold = _generate._cache_size(), compile_totals()
    second = pipe.generate([OTHER, SHORT], max_new_tokens=9, reserve_new_tokens=48)  # 6 tokens wide, not 13
    longer = pipe.generate([SHORT, LONG], max_new_tokens=40)  # 40 new tokens, not 48: bucket 64 all the same
    warm = compile_totals()
    assert _generate._cache_size() == programs  # the jitted loop: no new trace, no new program
    # What compiles at all (a persistent-cache load counts too): at most jax's eager slices of the outputs to
    # 9 and 40 columns (~0.1 s each), never the loop (before bucketing: ~6 s here, on every new prompt width
    # or max_new_tokens).
    assert warm["compiles"] - cold["compiles"] <= 2, (cold, warm)
    assert enabled == [None] * 3
    assert [o.num_tokens for o in first + second + longer] == [16, 16, 9, 9, 40, 40]
    assert [o.token_ids[:16] for o in longer] == [o.token_ids for o in first]
    # The reused program's tokens and rounds are those of a direct, unbucketed call (the prompts padded only
    # to their longest, the program sized for exactly max_new_tokens).
    ids = [pipe.pair.encode(t) for t in (OTHER, SHORT)]
    tokens, lengths = pad_prompts(ids)
    assert tokens.shape[1] == 6 and max(len(pipe.pair.encode(t)) for t in (SHORT, LONG)) == 13
    ref = generate(pipe.pair.params, pipe.pair.cfg, pipe.method.drafter, pipe.method.params, tokens, lengths, 9,
                   eos_ids=tuple(pipe.pair.cfg.eos_token_ids))
    got, counts = np.asarray(ref.tokens), np.asarray(ref.num_tokens)
    assert [o.token_ids for o in second] == [got[b, :counts[b]].tolist() for b in range(len(ids))]
    assert [o.rounds for o in second] == np.asarray(ref.stats.num_rounds).tolist()
    with pytest.raises(ValueError, match="reserve_new_tokens must be >= 1"):
        pipe.generate(SHORT, max_new_tokens=4, reserve_new_tokens=0)


def test_one_stop_string_is_one_string_not_its_characters(pipe):
    """Guards: stop="the world" was read as the characters t, h, e, ' ', ... and cut the text at the first
    of them (a text starting with a space came out empty). Runs the program of the test above."""
    full = pipe.generate([SHORT, LONG], max_new_tokens=40)[0]
    stop = " ".join(full.text.split()[2:4])  # two words: a space, which the text holds earlier as well
    at = full.text.find(stop)
    assert at > 0 and " " in full.text[:at], full.text
    cut = pipe.generate([SHORT, LONG], max_new_tokens=40, stop=stop)[0]
    assert cut.finish == "stop" and cut.text == full.text[:at]
    assert pipe.generate([SHORT, LONG], max_new_tokens=40, stop=[stop])[0].text == cut.text
