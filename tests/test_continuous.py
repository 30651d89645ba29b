"""Continuous batching (specjax.train.continuous): a refilled pool answers every prompt exactly as
`generate_ar` does alone (greedy), a sampled prompt's answer does not depend on the pool it ran in,
and the data engine built on it resumes bit-exactly."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, strategies as st

from specjax import zoo
from specjax.bench.timing import compile_totals
from specjax.decode import generate_ar
from specjax.models import pad_prompts
from specjax.train.continuous import pick_rows, precompile_wanted, prompt_widths, refill_choice, refill_sizes, stream

MAX_NEW, MAX_PROMPT = 12, 16


@pytest.fixture(scope="module")
def target():
    cfg, params, _ = zoo.load("tiny-neox-target")
    return cfg, params


def _prompts(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    return [rng.integers(3, 8000, size=int(rng.integers(2, MAX_PROMPT + 1))).tolist() for _ in range(n)]


def _run(target, prompts, sampled, batch_size, chunk=4, **kw):
    cfg, params = target
    items = [(i, p, s) for i, (p, s) in enumerate(zip(prompts, sampled))]
    order = []
    out = {}
    for i, resp in stream(params, cfg, items, batch_size=batch_size, max_new_tokens=MAX_NEW,
                          max_prompt_tokens=MAX_PROMPT, eos_ids=(zoo.EOS_ID,), seed=7, chunk=chunk, **kw):
        out[i] = resp
        order.append(i)
    return out, order


def test_greedy_rows_equal_generate_ar_one_prompt_at_a_time(target):
    """Every prompt answered through a 3-row pool (rows refilled as they end, prompts of different
    lengths mixed) equals `generate_ar` on that prompt alone, EOS included, and finishing out of
    order proves rows really were refilled independently."""
    cfg, params = target
    prompts = _prompts(9)
    out, order = _run(target, prompts, [False] * len(prompts), batch_size=3)
    assert sorted(out) == list(range(len(prompts)))
    for i, p in enumerate(prompts):
        toks, lens = pad_prompts([p], MAX_PROMPT)
        ref = generate_ar(params, cfg, toks, lens, MAX_NEW, eos_ids=(zoo.EOS_ID,))
        assert out[i] == np.asarray(ref.tokens)[0, :int(ref.num_tokens[0])].tolist(), i
    assert min(len(r) for r in out.values()) < MAX_NEW and order != sorted(order)  # rows were refilled mid-chunk


def test_a_sampled_answer_does_not_depend_on_the_pool(target):
    """Sampled rows draw with keys of (seed, prompt index, token number): pools of 1, 3 and 8 rows,
    refilled at different moments, give every prompt the same answer; the draws are not greedy."""
    prompts = _prompts(8, seed=1)
    sampled = [True] * 8
    one, _ = _run(target, prompts, sampled, batch_size=1)
    three, _ = _run(target, prompts, sampled, batch_size=3, chunk=5)
    eight, _ = _run(target, prompts, sampled, batch_size=8)
    assert one == three == eight
    greedy, _ = _run(target, prompts, [False] * 8, batch_size=8)
    assert greedy != one


def test_a_prompt_longer_than_the_pool_allows_is_refused(target):
    cfg, params = target
    with pytest.raises(ValueError, match="max_prompt_tokens"):
        list(stream(params, cfg, [(0, list(range(3, 3 + MAX_PROMPT + 1)), False)], batch_size=2,
                    max_new_tokens=4, max_prompt_tokens=MAX_PROMPT, eos_ids=(zoo.EOS_ID,)))
    with pytest.raises(ValueError, match="EOS"):
        list(stream(params, cfg, [(0, [5, 6], False)], batch_size=2, max_new_tokens=4, max_prompt_tokens=8,
                    eos_ids=()))


@pytest.mark.registry  # the training prompts are registry assets
def test_the_generation_benchmark_counts_the_pools_tokens():
    from specjax.bench.generation import pool_speed

    out = pool_speed("zoo", start=0, warmup=1.0, seconds=1.0, batch_size=8, max_new_tokens=8, max_prompt_tokens=32,
                     chunk=4)
    assert out["tokens"] > 0 and out["seconds"] > 0
    assert out["tokens_per_s"] == pytest.approx(out["tokens"] / out["seconds"], rel=0.1)  # seconds are rounded


def test_the_generation_benchmark_window_spans_two_chunks_when_one_chunk_outlasts_warmup_and_window(monkeypatch):
    """A chunk that takes longer than warmup + seconds (a cold compile on a busy CI machine) once put both
    marks on the same chunk and divided by zero; the window now starts at one chunk and ends at a later one."""
    import types

    from specjax.bench import generation

    clock = iter(range(0, 10_000, 5))  # every reading of the clock is 5 s after the last
    monkeypatch.setattr(generation, "time", types.SimpleNamespace(time=lambda: float(next(clock))))
    out = generation.pool_speed("zoo", start=0, warmup=1.0, seconds=1.0, batch_size=8, max_new_tokens=8,
                                max_prompt_tokens=32, chunk=4)
    assert out["seconds"] == 5.0 and out["tokens"] > 0 and out["tokens_per_s"] == round(out["tokens"] / 5.0, 1)


def test_a_sampled_row_draws_from_the_softmax_and_a_greedy_row_takes_the_argmax():
    """`pick_rows` inverts each row's CDF at one uniform: over 40,000 rows (distinct prompt indices,
    so distinct keys) the frequencies of a 6-token softmax match it (each within 5 standard errors,
    and a chi-square statistic below the 0.1% point for 5 degrees of freedom, 20.5); the lowest-
    probability token still appears; greedy rows return the argmax, whatever the key."""
    n = 40_000
    logits = jnp.broadcast_to(jnp.asarray([2.0, 0.5, -1.0, 1.0, -3.0, 0.0]), (n, 6))
    probs = np.asarray(jax.nn.softmax(logits[0]))
    rows = jnp.arange(n, dtype=jnp.int32)
    drawn = np.asarray(pick_rows(logits, rows, jnp.full((n,), 3, jnp.int32), jnp.ones((n,), bool), jnp.int32(11)))
    counts = np.bincount(drawn, minlength=6)
    assert counts.sum() == n and counts[4] > 0
    np.testing.assert_array_less(np.abs(counts / n - probs), 5 * np.sqrt(probs * (1 - probs) / n))
    assert ((counts - n * probs) ** 2 / (n * probs)).sum() < 20.5
    greedy = pick_rows(logits, rows, rows, jnp.zeros((n,), bool), jnp.int32(11))
    assert (np.asarray(greedy) == 0).all()


def test_refills_pad_to_a_few_row_counts_from_a_sixteenth_of_the_pool():
    """Each refill row count compiles a prefill: the counts are powers of two from about B / 16 up to B
    (B itself when it is not one), every count a refill can need is covered, and B = 512 needs half the
    programs the powers of two from 1 did (5 against 10)."""
    for b in (1, 2, 3, 7, 16, 100, 128, 512, 1000):
        sizes = refill_sizes(b)
        assert sizes == tuple(sorted(set(sizes))) and sizes[-1] == b
        assert all(s & (s - 1) == 0 for s in sizes[:-1])
        assert sizes[0] <= max(1, b // 16) and (b < 32 or sizes[0] * 32 > b)
    assert refill_sizes(512) == (32, 64, 128, 256, 512) and refill_sizes(128) == (8, 16, 32, 64, 128)


@given(lengths=st.lists(st.integers(1, 192), max_size=40), free=st.integers(1, 128), more=st.booleans(),
       busy=st.booleans())
def test_a_refill_takes_the_oldest_prompt_pads_no_row_while_more_wait_and_fits_the_oldest_width(lengths, free, more,
                                                                                                busy):
    """`refill_choice` against its rules, case by case: with nothing more to come it takes every waiting prompt
    the free rows hold; while more wait it fills a row count of `refill_sizes` exactly (none below the smallest
    while rows are busy); the oldest prompt is always in a refill; the others are the first that fit the
    oldest's width, else the shortest; positions ascending and distinct."""
    sizes, widths = refill_sizes(128), prompt_widths(192, 32)
    more = more and len(lengths) > 0
    chosen = refill_choice(lengths, free, sizes, widths, more, busy)
    assert chosen == sorted(set(chosen)) and all(0 <= j < len(lengths) for j in chosen)
    take = min(free, len(lengths))
    if not more:
        assert len(chosen) == take
    elif busy and take < sizes[0]:
        assert chosen == []
    elif take >= sizes[0]:
        assert len(chosen) == max(s for s in sizes if s <= take)
    else:
        assert len(chosen) == take
    if not chosen:
        return
    assert chosen[0] == 0
    width = next(w for w in widths if w >= lengths[0])
    within = [j for j, n in enumerate(lengths) if n <= width]
    if len(within) >= len(chosen):
        assert chosen == within[:len(chosen)]
    else:  # every prompt within the width, then the shortest of the others (ties: the older)
        longer = sorted((j for j in range(len(lengths)) if j not in within), key=lambda j: (lengths[j], j))
        assert chosen == sorted(within + longer[:len(chosen) - len(within)])


def test_the_look_ahead_changes_no_answer(target):
    """Refills that pick prompts out of order from a look-ahead of the whole prompt list give every prompt the
    answer it gets with the shortest look-ahead (only as many waiting as rows are free), greedy and sampled;
    the two runs answer in different orders (the schedule did change)."""
    prompts = _prompts(40, seed=3)
    sampled = [i % 3 == 0 for i in range(40)]
    short, short_order = _run(target, prompts, sampled, batch_size=8, lookahead=1, width_step=4)
    ahead, order = _run(target, prompts, sampled, batch_size=8, lookahead=40, width_step=4)  # widths 4, 8, 12, 16
    assert ahead == short and sorted(order) == list(range(40))
    assert order != short_order


def test_compiling_ahead_gives_the_same_answers_bit_for_bit(target, capsys):
    """precompile="on" (every refill bucket and the decode chunk compiled first, in threads, then called as
    executables) and "off" (jitted on first use) answer every prompt, greedy and sampled, with the same tokens
    in the same order; only "on" says it compiled (2 row counts x 1 width + the decode chunk = 3 programs)."""
    prompts = _prompts(6, seed=2)
    sampled = [i % 2 == 0 for i in range(6)]
    ahead, ahead_order = _run(target, prompts, sampled, batch_size=2, width_step=MAX_PROMPT, precompile="on")
    said = capsys.readouterr().err
    lazy, lazy_order = _run(target, prompts, sampled, batch_size=2, width_step=MAX_PROMPT, precompile="off")
    assert ahead == lazy and ahead_order == lazy_order and sorted(ahead) == list(range(6))
    assert "continuous: compiled 3 programs in " in said and "compiled" not in capsys.readouterr().err
    with pytest.raises(ValueError, match="precompile must be one of auto, on, off, got 'yes'"):
        stream(target[1], target[0], [], batch_size=2, max_new_tokens=4, max_prompt_tokens=8, eos_ids=(zoo.EOS_ID,),
               precompile="yes")  # refused at the call, before any prompt is read
    assert precompile_wanted("auto", "cpu") is False and precompile_wanted("auto", "gpu") is True


def test_with_precompile_on_nothing_compiles_while_the_pool_streams(target, capsys):
    """Counted with jax's compile events (`compile_totals`, a persistent-cache load included) from the moment
    `stream` reads its first prompt (its programs compiled by then) to its last answer: none. The shapes
    (pool of 3, widths 8 and 16, 3-step chunks) are this test's own, so a refill or chunk shape the
    precompile missed would compile here."""
    cfg, params = target
    prompts = _prompts(8, seed=3)
    counts = []

    def items():
        counts.append(compile_totals())
        yield from ((i, p, i % 3 == 0) for i, p in enumerate(prompts))

    out = dict(stream(params, cfg, items(), batch_size=3, max_new_tokens=MAX_NEW, max_prompt_tokens=MAX_PROMPT,
                      eos_ids=(zoo.EOS_ID,), seed=7, chunk=3, width_step=8, precompile="on"))
    after = compile_totals()
    assert sorted(out) == list(range(8)) and any(len(p) <= 8 for p in prompts) and any(len(p) > 8 for p in prompts)
    assert (after["compiles"], after["cache_hits"]) == (counts[0]["compiles"], counts[0]["cache_hits"])
    assert prompt_widths(MAX_PROMPT, 8) == (8, 16) and refill_sizes(3) == (1, 2, 3)
    assert "continuous: compiled 7 programs in " in capsys.readouterr().err  # 3 row counts x 2 widths + the chunk
    assert prompt_widths(192, 32) == (32, 64, 96, 128, 160, 192) and prompt_widths(20, 8) == (8, 16, 20)
