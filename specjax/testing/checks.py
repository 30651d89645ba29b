"""The kit's checks of one drafter (`specjax.testing`): greedy losslessness against autoregressive decoding,
every proposed tree valid, and the sampled law equal to the target's, computed exactly.
"""

from __future__ import annotations

import functools
import math

import jax
import numpy as np
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from specjax.decode import cache_sizes, generate, generate_ar, initial_state, speculative_round
from specjax.equality import compare_with_ar
from specjax.inputs import pad_prompts
from specjax.models import init_cache
from specjax.models.model import prefill_unchecked
from specjax.sampling import Sampling
from specjax.testing.targets import (FAMILIES, Target, build, eos_sets, law_target, prompt_batches, tiny_targets,
                                     zoo_target)
from specjax.tree import Tree, check_tree
from specjax.zoo import EOS_ID as ZOO_EOS_ID

__all__ = ["assert_greedy_lossless", "assert_law", "assert_rows_match", "assert_sampling_law", "check_proposals",
           "exact_law"]

_SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _hypothesis(max_examples: int, shrink: bool):
    phases = tuple(p for p in Phase if shrink or p not in (Phase.shrink, Phase.explain))
    return settings(settings(), max_examples=max_examples, phases=phases, **_SETTINGS)


def assert_rows_match(target: Target, prompts, ar, spec, what: str) -> None:
    """Greedy: every row of `spec` identical to AR's, or parting from it at a near-tie (`specjax.equality`)."""
    for b, prompt in enumerate(prompts):
        n_ar, n_spec = int(ar.num_tokens[b]), int(spec.num_tokens[b])
        agreement = compare_with_ar(target.params, target.cfg, prompt, ar.tokens[b, :n_ar], spec.tokens[b, :n_spec])
        if agreement.kind == "near-tie":
            continue  # after a legitimate near-tie the continuations may differ
        assert agreement.kind == "identical", (f"{what} on target {target.name}: row {b} (prompt {prompt}) differs "
                                               f"from autoregressive greedy decoding: {agreement}")


def assert_greedy_lossless(subject, draft_params=None, *, families=tuple(FAMILIES), zoo: bool = True,
                           max_examples: int = 6, zoo_examples: int = 3, max_new_tokens: int = 12,
                           zoo_new_tokens: int = 32, batch: int = 3,
                           check_trees: bool = False, shrink: bool = True) -> tuple[str, ...]:
    """Greedy `generate` with `subject` equals `generate_ar` token for token (or parts at a near-tie), with
    Hypothesis drawing the target (a random `tiny_targets` of `families`), a ragged prompt batch and an EOS
    set; then the same on the trained `zoo_target` (prompts: prefixes of natural text or random ids,
    `zoo_new_tokens` each), where a drafter's trees are accepted deeply and a wrong position, mask or depth
    changes the output (a depth off by one shifts the positions of the committed keys: the output parts
    from AR's within 32 tokens in most batches, rarely within 12). Random targets the
    subject cannot run on (a method needing trained readers) are skipped; with `zoo`, the zoo must run it.

    Returns the names of the targets checked, in order; raises AssertionError naming the target, the row and where the
    output parted from AR's. `check_trees`: also validate every proposed tree in the loop. Hypothesis's
    settings are the active profile's, with `max_examples`; `shrink=False` reports the first failing example
    as found (faster) instead of the smallest.
    """
    checked = []

    def run(target: Target, prompts, eos, width: int, new_tokens: int):
        built = build(subject, target, draft_params)
        if built is None:
            return
        drafter, dparams = built
        tokens, lengths = pad_prompts(prompts, width)
        ar = generate_ar(target.params, target.cfg, tokens, lengths, new_tokens, eos_ids=eos)
        spec = generate(target.params, target.cfg, drafter, dparams, tokens, lengths, new_tokens, eos_ids=eos,
                        check_trees=check_trees)
        assert_rows_match(target, prompts, ar, spec, f"{type(drafter).__name__} (EOS {eos})")
        checked.append(target.name)

    if families:
        @_hypothesis(max_examples, shrink)
        @given(st.data())
        def random_targets(data):
            target = data.draw(tiny_targets(families), label="target")
            vocab = target.cfg.vocab_size
            run(target, data.draw(prompt_batches(vocab, batch), label="prompts"),
                data.draw(eos_sets(vocab), label="eos"), 8, max_new_tokens)

        random_targets()
    if zoo:
        target = zoo_target()
        if build(subject, target, draft_params) is None:
            raise AssertionError(f"{subject!r} cannot run on the zoo target (it lacks what it drafts with)")

        @_hypothesis(zoo_examples, shrink)
        @given(st.data())
        def trained_target(data):
            eos = data.draw(st.sampled_from(((), (ZOO_EOS_ID,))), label="eos")
            run(target, data.draw(prompt_batches(target.cfg.vocab_size, batch, 24, target.texts), label="prompts"),
                eos, 24, zoo_new_tokens)

        trained_target()
    return tuple(dict.fromkeys(checked))


def check_proposals(subject, draft_params=None, *, target: Target | None = None, prompts=None, rounds: int = 4,
                    max_new_tokens: int = 16, sampling: Sampling = Sampling(), key=None) -> list[Tree]:
    """Drive the loop round by round (`initial_state`, `speculative_round`) and check every tree `subject`
    proposes for the active rows on the host: `specjax.tree.check_tree` (parents before children,
    prefix-closed, depth = parent depth + 1, normalised padding, tokens in the vocabulary), its shape
    [B, budget], its depth within the drafter's `max_depth`, and draft probs f32[B, D, V] when the drafter
    verifies by chain rejection. target: default the zoo; prompts: default prefixes of its texts.
    Returns the trees checked (one per round); raises AssertionError naming the round, the row and the rule.
    """
    target = target or zoo_target()
    built = build(subject, target, draft_params)
    if built is None:
        raise ValueError(f"{subject!r} cannot run on target {target.name}")
    drafter, dparams = built
    if prompts is None:
        prompts = [list(t[: 4 + 3 * i]) for i, t in enumerate(target.texts[:3])] or [[1, 2, 3], [4, 5]]
    tokens, lengths = pad_prompts(prompts)
    slots, reserve = cache_sizes(drafter, tokens.shape[1], max_new_tokens)
    static = dict(max_new_tokens=max_new_tokens, eos_ids=(), sampling=sampling)
    start = jax.jit(functools.partial(initial_state, pad_id=0, num_slots=slots, reserve=reserve, **static),
                    static_argnums=(1, 2))
    step = jax.jit(functools.partial(speculative_round, **static), static_argnums=(1, 2))
    propose = jax.jit(lambda s, k: drafter.propose(s.draft_state, s.root, ~s.done, k, sampling)[:2])
    state = start(target.params, target.cfg, drafter, dparams, tokens, lengths,
                  key if key is not None else jax.random.key(0))
    checked = []
    for r in range(rounds):
        if bool(np.all(np.asarray(state.done))):
            break
        _, k_draft, _ = jax.random.split(state.key, 3)  # the round's draft key, as `speculative_round` splits it
        tree, probs = propose(state, k_draft)
        active = np.flatnonzero(~np.asarray(state.done))
        where = f"{type(drafter).__name__} on {target.name}, round {r}"
        assert tree.tokens.shape == (len(prompts), drafter.budget), (
            f"{where}: tree of shape {tree.tokens.shape}, expected [B, budget] = {(len(prompts), drafter.budget)}")
        rows = Tree(*(np.asarray(x)[active] for x in (tree.tokens, tree.parents, tree.depth, tree.valid)))
        try:
            check_tree(rows, vocab_size=target.cfg.vocab_size)
        except ValueError as e:  # check_tree names the row among the active ones
            raise AssertionError(f"{where} (active rows {active.tolist()}): {e}") from None
        deepest = int(np.max(np.where(rows.valid, rows.depth, 0), initial=0))
        assert deepest <= drafter.max_depth, f"{where}: a node at depth {deepest} > max_depth {drafter.max_depth}"
        if drafter.uses_rejection(sampling):
            want = (len(prompts), drafter.max_depth, target.cfg.vocab_size)
            got = getattr(probs, "shape", None)
            assert got == want, f"{where}: draft probs of shape {got}, want {want}"
        checked.append(tree)
        state = step(target.params, target.cfg, drafter, state)
    return checked


@functools.partial(jax.jit, static_argnums=(1, 4))
def _next_log_probs(params, cfg, tokens, lengths, sampling: Sampling):
    """f32[B, V]: the processed target log-probabilities of the token after each right-padded row."""
    _, last, _ = prefill_unchecked(params, cfg, tokens, lengths, init_cache(cfg, tokens.shape[0], tokens.shape[1]))
    return sampling.log_probs(last)


def exact_law(target: Target, prompt, new_tokens: int, sampling: Sampling,
              max_outcomes: int = 2**16) -> tuple[np.ndarray, np.ndarray]:
    """The processed target law of the next `new_tokens` tokens after `prompt`, enumerated exactly:
    (continuations int32[K, new_tokens], probabilities float64[K]) over every continuation of positive
    probability. Found level by level (one prefill of every positive prefix), so a `top_k` / `top_p`
    sampling keeps K small on any vocabulary. ValueError when K would exceed `max_outcomes`."""
    if sampling.greedy:
        raise ValueError("the law of a greedy sampling is one continuation: use assert_greedy_lossless")
    v = target.cfg.vocab_size
    if sampling.top_p is None and min(v, sampling.top_k or v) ** new_tokens > max_outcomes:
        raise ValueError(f"{min(v, sampling.top_k or v)}^{new_tokens} continuations are too many to enumerate: "
                         f"use a smaller target, a top_k or fewer tokens")
    prompt = np.asarray(prompt, np.int32)
    width = -(-(len(prompt) + new_tokens - 1) // 16) * 16  # one program for every level and most prompts
    prefixes, path = np.zeros((1, 0), np.int32), np.zeros(1)
    for _ in range(new_tokens):
        rows = 1 << max(4, (len(prefixes) - 1).bit_length())
        tokens, lengths = pad_prompts([[*prompt, *p] for p in prefixes.tolist()] + [[0]] * (rows - len(prefixes)),
                                      width)
        logp = np.asarray(_next_log_probs(target.params, target.cfg, tokens, lengths, sampling),
                          np.float64)[:len(prefixes)]  # [prefixes, V]
        at, token = np.nonzero(np.isfinite(logp))
        if len(at) > max_outcomes:
            raise ValueError(f"{len(at)} continuations are too many to enumerate: use a smaller target, a top_k or "
                             f"fewer tokens")
        prefixes = np.concatenate([prefixes[at], token[:, None].astype(np.int32)], 1)
        path = path[at] + logp[at, token]
    law = np.exp(path)
    return prefixes, law / law.sum()


def assert_law(outcomes: np.ndarray, law: np.ndarray, sampled: np.ndarray, what: str,
               false_alarm: float = 1e-6) -> tuple[float, float]:
    """`sampled` int32[N, n] (N independent draws) follows the exact law (`outcomes` int32[K, n], `law`
    float64[K], as `exact_law` returns). Fails when a draw has probability 0, when the total variation
    distance between the empirical and the exact law exceeds its bound 1/2 sum_x sqrt(p(1-p)/N) +
    sqrt(ln(2/a)/(2N)) (McDiarmid), or when one outcome's frequency leaves its Bernstein interval (a union
    bound over the outcomes), a = `false_alarm`: draws from the exact law fail with probability below a.
    Returns (total variation, its bound)."""
    index = {tuple(o): i for i, o in enumerate(np.asarray(outcomes).tolist())}
    hits = np.asarray([index.get(tuple(r), -1) for r in np.asarray(sampled).tolist()])
    impossible = np.asarray(sampled)[hits < 0]
    assert not len(impossible), f"{what}: sampled continuations of probability 0: {impossible[:5].tolist()}"
    n, a = float(len(hits)), false_alarm / 2
    freq = np.bincount(hits, minlength=len(law)) / n
    tv = 0.5 * float(np.abs(freq - law).sum())
    bound = 0.5 * float(np.sqrt(law * (1 - law) / n).sum()) + math.sqrt(math.log(2 / a) / (2 * n))
    assert tv <= bound, f"{what}: total variation {tv:.4f} from the exact law exceeds its bound {bound:.4f}"
    log_term = math.log(4 * len(law) / a)
    width = np.sqrt(2 * law * (1 - law) * log_term / n) + 2 * log_term / (3 * n)
    worst = int(np.argmax(np.abs(freq - law) - width))
    assert abs(freq[worst] - law[worst]) <= width[worst], (
        f"{what}: continuation {outcomes[worst].tolist()} sampled with frequency {freq[worst]:.4f}, exact "
        f"probability {law[worst]:.4f} (allowed +-{width[worst]:.4f})")
    return tv, bound


def assert_sampling_law(subject, draft_params=None, *, target: Target | None = None, prompt=(1, 3, 2),
                        new_tokens: int = 3, sampling: Sampling = Sampling(1.0), samples: int = 20_000, seed: int = 0,
                        false_alarm: float = 1e-6) -> tuple[float, float]:
    """The law of the first `new_tokens` tokens `generate` samples with `subject` is the target's.

    The reference is exact (`exact_law`: every continuation of `prompt` of positive probability under the
    processed target; target: default `law_target()`, 4 tokens; on a large vocabulary give `sampling` a
    top_k). `samples` rows of `prompt` are generated at once (each row its own draws) and compared by
    `assert_law` (false alarm below `false_alarm`). Returns (total variation, its bound).
    """
    target = target or law_target()
    law_of = exact_law(target, prompt, new_tokens, sampling)
    built = build(subject, target, draft_params)
    if built is None:
        raise ValueError(f"{subject!r} cannot run on target {target.name}")
    drafter, dparams = built
    tokens, lengths = pad_prompts([list(prompt)] * samples)
    out = generate(target.params, target.cfg, drafter, dparams, tokens, lengths, new_tokens, sampling=sampling,
                   key=jax.random.key(seed), eos_ids=())
    return assert_law(*law_of, np.asarray(out.tokens), f"{type(drafter).__name__} on {target.name} ({sampling})",
                      false_alarm)
