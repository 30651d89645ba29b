"""The kit's conformance checks (`specjax.testing`): what every registered method passes
(tests/test_conformance.py), and `assert_drafter`, every check of the kit on one drafter in one call.
"""

from __future__ import annotations

import dataclasses
import time

import jax
import numpy as np

from specjax.core import generate_ar_core, generate_core
from specjax.decode import generate
from specjax.drafters import registry
from specjax.drafters.spec import render_form
from specjax.inputs import pad_prompts
from specjax.pipeline import check_source
from specjax.sampling import Sampling
from specjax.testing.checks import (assert_greedy_lossless, assert_law, assert_rows_match, assert_sampling_law,
                                    check_proposals, exact_law)
from specjax.testing.targets import FAMILIES, Target, available, build, law_target, tiny_target, zoo_target

__all__ = ["PROFILES", "Conformance", "DrafterReport", "Profile", "assert_conforms", "assert_drafter", "example_spec",
           "registered_methods"]


def example_spec(spec) -> str:
    """The method string of a registered `MethodSpec` with its default fields; a positional field without a
    default (a chain's K, a tree's N, D, B) gets 3."""
    values = {f.name: 3 if f.default is None else f.default for f in spec.positional}
    return render_form(spec.forms[0], values, spec.positional)


def registered_methods(target: Target | None = None) -> tuple[str, ...]:
    """`example_spec` of every method in the registry (read when called: a method module added to
    `specjax.drafters` is in it) except "ar", that `target` has the models for (default: the zoo's, read
    from its file listing without loading a weight)."""
    have = available(target) if target is not None else {"target", *check_source("zoo")}
    specs = (example_spec(s) for s in registry.METHOD_SPECS if s.name != "ar")
    return tuple(s for s in specs if set(registry.needs_of(s)) <= have)


@dataclasses.dataclass(frozen=True)
class Conformance:
    """What `assert_conforms` measured (B prompt rows).

    Fields:
      drafter: the drafter checked.
      tau: float64[B] tokens per target forward after the prefill (num_tokens - 1) / rounds.
      rounds: int32[B] target verification forwards per row.
      max_accepted: the most draft tokens accepted in one round.
      law: (total variation, its bound) of the first round's law at T = 1 (`assert_law`; zeros: not checked).
    """

    drafter: object
    tau: np.ndarray
    rounds: np.ndarray
    max_accepted: int
    law: tuple[float, float] = (0.0, 0.0)


def _check_stats(out, drafter, what: str) -> Conformance:
    st_, count = out.stats, np.asarray(out.num_tokens)
    accepted, proposed, depth = (np.asarray(x) for x in (st_.accepted, st_.proposed, st_.depth))
    rounds = np.asarray(st_.num_rounds)
    for b, r in enumerate(rounds):
        acc = accepted[b, :r]
        assert (acc >= 0).all() and (accepted[b, r:] == -1).all(), f"{what}: row {b} records {r} rounds: {accepted[b]}"
        assert acc.sum() + r == count[b] - 1, (
            f"{what}: row {b}: its rounds kept {acc.sum() + r} tokens, the output has {count[b] - 1} after the first")
        assert (acc <= depth[b, :r]).all() and (depth[b, :r] <= drafter.max_depth).all(), (
            f"{what}: row {b}: accepted {acc} vs tree depth {depth[b, :r]} (max_depth {drafter.max_depth})")
        assert (acc <= proposed[b, :r]).all(), f"{what}: row {b}: accepted {acc} > proposed {proposed[b, :r]}"
    tau = (count - 1) / np.maximum(rounds, 1)
    np.testing.assert_allclose(tau, np.where(rounds > 0, st_.mean_accepted_length(), 0), err_msg=what)
    return Conformance(drafter, tau, rounds, int(accepted.max(initial=0)))


_LAWS: dict = {}  # (target name, prompt, tokens, sampling) -> (target params, exact_law): shared by the methods


def _uncertain_prompt(target: Target, prompts, tokens: int, sampling: Sampling):
    """(prompt, outcomes, law): the prompt among `prompts` whose law of the next `tokens` tokens has the most
    entropy (a peaked law hides a drafter that commits its own guesses)."""
    best = None
    for prompt in prompts:
        key = (target.name, tuple(prompt), tokens, sampling)
        if key not in _LAWS or _LAWS[key][0] is not target.params:
            _LAWS[key] = (target.params, exact_law(target, prompt, tokens, sampling))
        outcomes, law = _LAWS[key][1]
        entropy = -float(np.sum(law * np.log(law)))
        if best is None or entropy > best[0]:
            best = (entropy, prompt, outcomes, law)
    return best[1:]


def assert_conforms(subject, draft_params=None, *, target: Target | None = None, prompts=None,
                    max_new_tokens: int = 10, law_samples: int = 256, law_tokens: int = 3,
                    law_sampling: Sampling = Sampling(1.0, top_k=3), seed: int = 0,
                    false_alarm: float = 1e-6) -> Conformance:
    """The checks every registered method passes (tests/test_conformance.py), on `target` (default the zoo):

    * greedy `generate_core` inside the caller's `jax.jit` equals `generate_ar_core` token for token
      (or parts at a near-tie) on `prompts` (default: three prefixes of natural text, one padded width);
    * round statistics agree: tokens = first + sum over rounds of (accepted + 1), accepted <= the proposed
      tree's depth <= max_depth and <= its size, tau = (tokens - 1) / target forwards = mean tokens per round;
    * at T = 1 the first round's law is the target's (skipped with `law_samples=0`): rows of one prompt
      generate `law_tokens` tokens at T = 1 and their empirical law matches the exact one (`exact_law`,
      `assert_law`, false alarm below `false_alarm`). On `law_target()` (4 tokens: the full law, prompt
      (1, 3, 2), 8 x `law_samples` rows) when the subject runs there, else on `target` with `law_sampling`
      (top-k 3: enumerable on any vocabulary) from the prompt of `prompts` whose law is the least peaked,
      `law_samples` rows. The first token comes from the prefill; the others are what the drafter's first
      round commits (its tree, its draft probabilities, its acceptance), or the second's when the first
      accepts nothing. The sampled program compiles apart from the greedy one (10-30 s of CPU per drafter).

    Returns a `Conformance`; raises AssertionError saying which check failed.
    """
    target = target or zoo_target()
    built = build(subject, target, draft_params)
    if built is None:
        raise ValueError(f"{subject!r} cannot run on target {target.name}")
    drafter, dparams = built
    what = f"{subject if isinstance(subject, str) else type(drafter).__name__} on {target.name}"
    if prompts is None:
        prompts = [list(t[: 5 + 4 * i]) for i, t in enumerate(target.texts[:3])] or [[1, 2, 3], [4, 5], [6]]
    tokens, lengths = pad_prompts(prompts, max(16, max(map(len, prompts))))
    cfg, m = target.cfg, max_new_tokens

    @jax.jit
    def greedy(params, dparams, tokens, lengths):  # the caller's own jit around the core
        return generate_core(params, cfg, drafter, dparams, tokens, lengths, max_new_tokens=m)

    out = greedy(target.params, dparams, tokens, lengths)
    ar = generate_ar_core(target.params, cfg, tokens, lengths, max_new_tokens=m)
    assert_rows_match(target, prompts, ar, out, what)
    report = _check_stats(out, drafter, what)

    if not law_samples:
        return report
    small = law_target()
    built = build(subject, small, draft_params)
    if built is not None:
        target, (drafter, dparams), prompts, law_sampling = small, built, [[1, 3, 2]], Sampling(1.0)
        law_samples *= 8  # 64 continuations, and rows of a 4-token target are cheap
    prompt, outcomes, law = _uncertain_prompt(target, prompts, law_tokens, law_sampling)
    rows, row_lengths = pad_prompts([list(prompt)] * law_samples)
    drawn = generate(target.params, target.cfg, drafter, dparams, rows, row_lengths, law_tokens,
                     sampling=law_sampling, key=jax.random.key(seed), eos_ids=())
    tv = assert_law(outcomes, law, np.asarray(drawn.tokens), f"{what}: at T = 1 ({law_sampling}, on {target.name}) "
                    f"the law of the first round's tokens", false_alarm)
    return dataclasses.replace(report, law=tv)


# ------------------------------------------------------------------------------------------ every check at once


@dataclasses.dataclass(frozen=True)
class Profile:
    """How much `assert_drafter` draws (`PROFILES`).

    Fields:
      rounds: rounds of proposed trees `check_proposals` checks.
      examples: Hypothesis examples of random tiny targets for greedy losslessness.
      zoo_examples: examples on the trained zoo target (32 new tokens each).
      law_samples: rows sampled for the sampling law (on `law_target`, or the zoo at top-k 3).
      conform_samples: rows sampled for the law at top-k 3 on the zoo (a subject that runs only there).
    """

    rounds: int
    examples: int
    zoo_examples: int
    law_samples: int
    conform_samples: int


# quick: measured in tests/test_assert_drafter.py (<= 60 s on 2 cores); full: the kit's own defaults.
PROFILES = {"quick": Profile(rounds=3, examples=2, zoo_examples=1, law_samples=8_000, conform_samples=256),
            "full": Profile(rounds=6, examples=6, zoo_examples=3, law_samples=20_000, conform_samples=1_024)}


@dataclasses.dataclass(frozen=True)
class DrafterReport:
    """What `assert_drafter` checked, every check passed.

    Fields:
      home: the target of the tree and conformance checks ("zoo", or a tiny target where the zoo cannot run it).
      trees: proposed trees checked (`check_proposals`).
      greedy: the targets greedy losslessness ran on (`assert_greedy_lossless`).
      law: (total variation, its bound, target name) of the sampling law (`assert_sampling_law`).
      conformance: the `Conformance` of `assert_conforms`.
      seconds: check name -> wall seconds it took.
    """

    home: str
    trees: int
    greedy: tuple[str, ...]
    law: tuple[float, float, str]
    conformance: Conformance
    seconds: dict


def _home(subject, draft_params) -> Target:
    """The zoo when `subject` runs on it, else the first tiny target that runs it."""
    for target in (zoo_target(), *(tiny_target(f) for f in FAMILIES)):
        if build(subject, target, draft_params) is not None:
            return target
    raise ValueError(f"{subject!r} runs on no target of the kit (the zoo, {', '.join(FAMILIES)}): its make "
                     f"returned None or its drafter did not validate for every one")


def assert_drafter(subject, draft_params=None, *, profile: str | Profile = "quick") -> DrafterReport:
    """Every check of the kit on `subject` (a method string, a drafter, or ``make(target) -> (drafter,
    draft_params)``; `specjax.testing`), in one call, cheapest first:

    1. `check_proposals`: every tree proposed on the home target (the zoo, or the first tiny target that runs
       it) valid (parents before children, prefix-closed, depth = parent depth + 1, normalised padding,
       tokens in the vocabulary), of shape [B, budget], no deeper than `max_depth`, draft probs of their shape;
    2. `assert_greedy_lossless`: greedy output equals autoregressive decoding on random tiny targets of every
       family it runs on and on the trained zoo (the only target where most wrong trees change the output);
    3. `assert_sampling_law`: at T = 1 the law of the first three tokens is the target's, exactly enumerated
       (on `law_target`, or on the zoo with top-k 3 for a subject that needs what only the zoo has);
    4. `assert_conforms`: greedy inside the caller's `jax.jit`, the round statistics (its T = 1 law is step 3's).

    profile: "quick" (`PROFILES`: measured <= 60 s on 2 CPU cores, compiles included), "full", or a `Profile`.
    Raises the first failing check's AssertionError (ValueError when it runs on no target); returns a
    `DrafterReport`.
    """
    p = PROFILES[profile] if isinstance(profile, str) else profile
    home, seconds = _home(subject, draft_params), {}

    def timed(name, fn, *args, **kwargs):
        start = time.perf_counter()
        out = fn(*args, **kwargs)
        seconds[name] = round(time.perf_counter() - start, 1)
        return out

    trees = timed("proposals", check_proposals, subject, draft_params, target=home, rounds=p.rounds)
    on_zoo = home.name == "zoo"
    greedy = timed("greedy", assert_greedy_lossless, subject, draft_params, zoo=on_zoo, max_examples=p.examples,
                   zoo_examples=p.zoo_examples, shrink=False)
    law = law_target()
    if build(subject, law, draft_params) is not None:
        tv = timed("law", assert_sampling_law, subject, draft_params, target=law, samples=p.law_samples)
    else:
        candidates = [list(t[: 5 + 4 * i]) for i, t in enumerate(home.texts[:3])] or [[1, 3, 2]]
        prompt = _uncertain_prompt(home, candidates, 3, Sampling(1.0, top_k=3))[0]
        tv = timed("law", assert_sampling_law, subject, draft_params, target=home, prompt=prompt,
                   sampling=Sampling(1.0, top_k=3), samples=p.conform_samples)  # rows of the zoo are heavier
        law = home
    conformance = timed("conformance", assert_conforms, subject, draft_params, target=home,
                        law_samples=0)  # its T = 1 law: step 3 checked it
    return DrafterReport(home.name, len(trees), greedy, (*tv, law.name), conformance, seconds)
