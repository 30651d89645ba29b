"""The researcher's testing kit: property-test a drafter (yours or a registered method) the way the
project tests its own.

    from specjax import testing
    testing.assert_greedy_lossless("chain3")              # a method by name (the registry builds it)
    testing.assert_greedy_lossless(make)                  # make(target) -> (drafter, draft_params): yours
    testing.check_proposals(make)                         # every proposed tree valid (`specjax.tree.check_tree`)
    testing.assert_sampling_law(make)                     # the sampled law is the target's (enumerated exactly)
    testing.assert_conforms("ddtree-8")                   # the conformance checks tests/test_conformance.py runs
    testing.assert_drafter(make)                          # all of the above in one call (profile "quick": <= 60 s)

A *subject* is a method string (`specjax.drafters.registry.forms()`), a drafter object (used as is on every
target it `validate`s for; `draft_params` passed along), or a callable ``make(target) -> (drafter, draft_params)``
(None: this target does not suit it) that builds your drafter for a `Target`: its config, params, a draft LM
and the trained drafters that read it.

Targets: `FAMILIES` (tiny random GPT-NeoX / Llama / Qwen2 / Qwen3 targets with a tiny draft LM of their
vocabulary; `tiny_target`, Hypothesis's `tiny_targets`), `zoo_target()` (the embedded *trained* pair,
`specjax.zoo`, with its draft LM and DFlash / EAGLE-3 / Domino drafters: a wrong tree that random weights
never accept is caught there) and `law_target()` (a 4-token target whose law over a few tokens is enumerated).
Strategies (`hypothesis.strategies`): `tiny_targets`, `prompt_batches` (ragged), `eos_sets`, `samplings`,
`trees` / `tree_rows` (valid padded trees), with `spread` and `tree_from_arrays`.

The kit lives in three modules: `specjax.testing.targets` (targets, strategies, `build`),
`specjax.testing.checks` (losslessness, trees, the exact law) and `specjax.testing.conformance`
(`assert_conforms`, `assert_drafter`); this package re-exports them.

Programs are shared between examples: every target of a family has one config (only its params are
drawn), prompts are padded to one width and EOS sets are traced, so each (family, drafter) compiles once.
Hypothesis is a core dependency of specjax so that this module imports like the rest of the package.
"""

from specjax.testing.checks import (assert_greedy_lossless, assert_law, assert_rows_match, assert_sampling_law,
                                    check_proposals, exact_law)
from specjax.testing.conformance import (PROFILES, Conformance, DrafterReport, Profile, assert_conforms,
                                         assert_drafter, example_spec, registered_methods)
from specjax.testing.targets import (FAMILIES, Target, available, build, eos_sets, law_target, perturbed,
                                     prompt_batches, random_params, samplings, spread, tiny_target, tiny_targets,
                                     tree_from_arrays, tree_rows, trees, zoo_target)

__all__ = ["FAMILIES", "PROFILES", "Conformance", "DrafterReport", "Profile", "Target", "assert_conforms",
           "assert_drafter", "assert_greedy_lossless", "assert_law", "assert_rows_match", "assert_sampling_law",
           "available", "build", "check_proposals", "eos_sets", "exact_law", "example_spec", "law_target",
           "perturbed", "prompt_batches", "random_params", "registered_methods", "samplings", "spread", "tiny_target",
           "tiny_targets", "tree_from_arrays", "tree_rows", "trees", "zoo_target"]
