"""`check_trees` is on by default for every drafter from outside specjax (issue 60 item 5), off by an explicit
False, and stays off for the package's own drafters (their programs and speed unchanged):

* `from_outside` tells them apart: every registered method built for the zoo is the package's own; a drafter
  class written outside (or wrapped by, or wrapping, a package drafter) and a method registered from outside
  (building a package drafter class) are not;
* the issue's planted bug — a drafter written outside the package whose chain depths are each one too deep —
  returns text that differs from autoregressive decoding when the check is turned off, and raises a clear
  error by default in `specjax.generate`, `Pipeline.generate` and the bench harness;
* a package drafter's default call runs the unchecked program.
"""

import dataclasses
import functools

import numpy as np
import pytest
from jax.experimental import checkify

import specjax
from specjax import decode, testing
from specjax.bench.harness import _Runner, run_benchmark
from specjax.decode import checks_trees_by_default, from_outside
from specjax.drafters import registry
from specjax.drafters.chain import ChainDrafter
from specjax.drafters.registry import Method
from specjax.drafters.spec import Field, MethodSpec
from specjax.inputs import pad_prompts
from specjax.pipeline import Pipeline, load_pair
from specjax.sampling import Sampling
from tests.planted_drafters import DepthOffByOne, MyChain

RULE = "depth = parent depth \\+ 1"  # specjax.tree.TREE_RULES[2]
OWN = ("chain3", "fixed3x3", "dynatree-p3", "ddtree-8", "ddtree-16:ret=4", "dflash", "dflash-tail", "domino",
       "eagle3", "graft", "tr", "pld")


@functools.cache
def zoo_chain():
    zoo = testing.zoo_target()
    return zoo, *testing.build("chain3", zoo)


def _my_chain_build(b):
    return ChainDrafter(b.need("draft")[0], b.values["K"]), None


MY_CHAIN = MethodSpec("mychain", ("mychain<K>",), "a package chain, registered from a test module", _my_chain_build,
                      positional=(Field("K", int, None, "draft tokens"),), needs=("draft",))


def test_from_outside_tells_the_package_from_a_researcher():
    zoo, chain, _ = zoo_chain()
    for spec in OWN:
        m = registry.method(spec, zoo.cfg, draft=zoo.draft, target_params=zoo.params, **zoo.readers)
        assert not from_outside(m.drafter, m.name), spec
    assert from_outside(DepthOffByOne(chain)) and from_outside(MyChain(chain.draft_cfg, 3))
    ddtree = registry.method("ddtree-8", zoo.cfg, **zoo.readers).drafter
    block = ddtree.inner  # a package wrapper around a researcher's block drafter is the researcher's
    mine = dataclasses.make_dataclass("MyBlock", [], bases=(type(block),), frozen=True)
    inner_field = next(f.name for f in dataclasses.fields(ddtree) if getattr(ddtree, f.name) is block)
    swapped = dataclasses.replace(ddtree, **{inner_field: mine(**{f.name: getattr(block, f.name)
                                                                  for f in dataclasses.fields(block)})})
    assert from_outside(swapped) and not from_outside(ddtree)
    with registry.registered(MY_CHAIN):
        m = registry.method("mychain3", zoo.cfg, draft=zoo.draft)
        assert type(m.drafter) is ChainDrafter and from_outside(m.drafter, m.name)
        assert not from_outside(m.drafter)  # the class alone is the package's: the method's origin decides
    assert not from_outside(chain, "no such method, built by hand")
    assert checks_trees_by_default(None, DepthOffByOne(chain)) and not checks_trees_by_default(None, chain)
    assert not checks_trees_by_default(False, DepthOffByOne(chain)) and checks_trees_by_default(True, chain)
    with pytest.raises(TypeError, match="check_trees must be True, False or None"):
        checks_trees_by_default("yes", chain)


def test_the_planted_depth_bug_raises_by_default_instead_of_parting_from_ar():
    """The issue's reproduction: 8 prompts, a chain from outside the package one level too deep."""
    zoo, chain, dparams = zoo_chain()
    broken = DepthOffByOne(chain)
    prompts = [list(zoo.texts[i % len(zoo.texts)][: 4 + i]) for i in range(8)]
    tokens, lengths = pad_prompts(prompts, 16)
    ar = specjax.generate_ar(zoo.params, zoo.cfg, tokens, lengths, 24)
    silent = specjax.generate(zoo.params, zoo.cfg, broken, dparams, tokens, lengths, 24, check_trees=False)
    differs = [b for b in range(8) if not np.array_equal(np.asarray(ar.tokens[b]), np.asarray(silent.tokens[b]))]
    assert differs, "the planted bug no longer changes the text: the test shows nothing"
    with pytest.raises(checkify.JaxRuntimeError, match=rf"DepthOffByOne proposed an invalid tree: .*{RULE} .*on by "
                                                       rf"default .*check_trees=False turns it off"):
        specjax.generate(zoo.params, zoo.cfg, broken, dparams, tokens, lengths, 24)
    pipe = Pipeline(load_pair("zoo", ("draft",)), Method("chain3, one too deep", broken, dparams))
    with pytest.raises(checkify.JaxRuntimeError, match=rf"row 0, round 0, node 0: {RULE}"):
        pipe.generate("The river flows", 6)


def test_the_bench_harness_checks_outside_methods_by_default():
    zoo, chain, dparams = zoo_chain()
    broken = Method("chain3, one too deep", DepthOffByOne(chain), dparams)
    own = Method("chain3", chain, dparams)
    runner = functools.partial(_Runner, target=(zoo.cfg, zoo.params), draft=zoo.draft, sampling=Sampling(),
                               eos_ids=())
    assert runner(broken).check_trees and not runner(own).check_trees
    assert not runner(broken, check_trees=False).check_trees
    assert runner(own, check_trees=True).check_trees
    with registry.registered(MY_CHAIN):
        assert runner(registry.parse_method("mychain3", zoo.draft[0], draft_params=dparams)).check_trees
    with pytest.raises(checkify.JaxRuntimeError, match=rf"DepthOffByOne proposed an invalid tree: .*{RULE}"):
        run_benchmark((zoo.cfg, zoo.params), zoo.draft, [list(zoo.texts[0][:8])], [broken], max_new_tokens=8,
                      warmup=0, progress=False, ttft=False)


def test_a_package_drafter_runs_the_unchecked_program_by_default(monkeypatch):
    """The default call of a package drafter goes through the plain loop, never the checkified one."""
    zoo, chain, dparams = zoo_chain()
    used = []
    real = decode._entry_point
    monkeypatch.setattr(decode, "_entry_point", lambda default, entry, cfg, *a: used.append(entry) or
                        real(default, entry, cfg, *a))
    tokens, lengths = pad_prompts([list(zoo.texts[0][:6])], 16)
    specjax.generate(zoo.params, zoo.cfg, chain, dparams, tokens, lengths, 4)
    assert used == [decode.generate_entry]
