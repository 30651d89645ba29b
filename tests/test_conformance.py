"""Every registered method passes the same checks on the embedded trained pair (issue 48 item 6, issue 60 item 5):
a method declared tomorrow in a module of `specjax.drafters` is checked without anyone writing a test.

For each method of the registry the zoo pair can run, with its default fields (`specjax.testing.example_spec`)
and with non-default fields (`NON_DEFAULT`: retrieval grafted into DDTree, its pruning, widths and merges,
Domino's walk at T > 0 and bare backbone, smaller EAGLE trees, Graft over the draft LM, ...): greedy
`generate_core` under the caller's `jax.jit` equals autoregressive decoding on three prompts; the round
statistics agree with the output (tau = tokens / target forwards, accepted <= tree depth <= max_depth); and,
in a slow test, at T = 1 the law of the first round's tokens is the target's, enumerated exactly (on the 4-token
law target, or at top-k 3 on the zoo; `specjax.testing.assert_conforms`; a drafter that breaks it fails:
tests/test_assert_drafter.py). And a toy
method declared in a temporary module is picked up by the same machinery.

Budget: one compiled greedy loop per method, the autoregressive references shared: measured 2026-11-26 on 2
shared cores: 64-70 s of CPU, cold compile cache; with the 11 `NON_DEFAULT` specs (2026-11-27, load ~5): 258 s
wall (cut to 6 since). The T = 1 law (a sampled loop per method; the slow test): 10 s for chain3 on the law target, 33 s for
ddtree-8:ret=4 on the zoo (2026-11-27, load ~3); in a suite run dflash and domino:verify=walk took 86 s and 130 s
on the zoo, so the zoo keeps ddtree-8:ret=4 alone (`ZOO_LAW`) and the law target runs the rest.
"""

import subprocess
import sys
import textwrap

import numpy as np
import pytest

from specjax import testing
from specjax.drafters import registry

METHODS = testing.registered_methods()
# Fields other than the defaults, each read by the drafter it builds (a field the conformance run never set
# could break the tree or the law unseen).
# One per code path a field switches on (retrieval grafted into DDTree, its pruning, Domino's walk, a smaller
# EAGLE tree, Graft over the draft LM, a smaller Token Recycling template): the 11 specs of 2026-11-27 made this
# module 476 s of a cold 2-core suite run; the field values that only resize a path were dropped.
NON_DEFAULT = ("ddtree-8:ret=4", "ddtree-8:prune=0.2", "domino:verify=walk", "eagle3:topk=4,depth=4,total=12",
               "graft:base=lm", "tr:budget=16,width=4,depth=4")


def test_the_zoo_runs_every_registered_method():
    """Nothing is skipped silently: the zoo pair has a draft LM and every kind of trained drafter, so every
    method but "ar" is in the conformance run."""
    names = {registry.parse(m).spec.name for m in METHODS}
    assert names == {s.name for s in registry.METHOD_SPECS} - {"ar"}
    assert len(METHODS) >= 17


# The T = 1 law (`assert_conforms`) costs a sampled program per method (10-30 s of CPU each): it runs in its own
# test, marked slow, for every method that runs on the 4-token `law_target` (cheap rows) and, on the zoo (top-k
# 3), for a DDTree grafted with retrieval over the trained reader (the sampling walk on a trained tree). On the
# zoo, chain rejection over the DFlash reader took 86 s and Domino's walk 130 s in a suite run (2026-11-27):
# their laws at T = 1 are tested in tests/test_decode_sampling.py and tests/test_domino.py, on exact laws.
ZOO_LAW = ("ddtree-8:ret=4",)


def runs_on_law_target(spec: str) -> bool:
    try:
        return testing.build(spec, testing.law_target()) is not None
    except ValueError:  # its builder refuses the 4-token target (a tree wider than the vocabulary, ...)
        return False


def test_the_non_default_fields_are_fields_the_methods_read():
    for spec in NON_DEFAULT:
        parsed = registry.parse(spec)
        assert parsed.given or parsed.name != testing.example_spec(parsed.spec), f"{spec} sets no field"


@pytest.mark.parametrize("spec", METHODS + NON_DEFAULT)
def test_registered_method_conforms(spec):
    report = testing.assert_conforms(spec, law_samples=0)
    assert (report.rounds >= 1).all() and np.isfinite(report.tau).all()
    if registry.parse(spec).spec.name in ("chain", "dflash", "ddtree", "eagle3", "domino"):
        assert report.max_accepted >= 1, f"{spec}: the trained drafters never had a token accepted"


@pytest.mark.slow
@pytest.mark.parametrize("spec", [s for s in METHODS + NON_DEFAULT if s in ZOO_LAW or runs_on_law_target(s)])
def test_registered_method_keeps_the_law_at_t1(spec):
    report = testing.assert_conforms(spec)
    assert 0 <= report.law[0] <= report.law[1]


TOY_MODULE = '''
"""A toy method from outside the package: a chain of K copies of the root token."""
import dataclasses

import jax.numpy as jnp

from specjax.drafters.spec import Field, MethodSpec
from specjax.tree import chain_tree


@dataclasses.dataclass(frozen=True)
class EchoDrafter:
    depth: int
    target_layers = ()
    target_topk = 0

    @property
    def budget(self):
        return self.depth

    @property
    def max_depth(self):
        return self.depth

    def validate(self, target_cfg):
        pass

    def uses_rejection(self, sampling):
        return False

    def init(self, params, tokens, prompt_lengths, max_new_tokens, context=None):
        return jnp.zeros((), jnp.int32)

    def propose(self, state, root, active, key, sampling):
        tokens = jnp.repeat(root[:, None], self.depth, axis=1)
        return chain_tree(tokens, jnp.where(active, self.depth, 0)), None, state + 1

    def observe(self, state, verified):
        return state


METHODS = (MethodSpec("toy-echo", ("toy-echo<K>",), "a chain repeating the root token",
                      lambda b: (EchoDrafter(b.values["K"]), None), positional=(Field("K", int, None, "depth"),)),)
'''

CHILD = '''
import importlib, sys
import specjax.drafters
from specjax.drafters import registry
specjax.drafters.__path__.append(sys.argv[1])   # the toy module sits in a temporary directory
importlib.reload(registry)                      # the registry collects its METHODS like any drafter module's
from specjax import testing
methods = testing.registered_methods()
assert "toy-echo3" in methods, methods
report = testing.assert_conforms("toy-echo3")
print("conforms", "toy-echo3", report.rounds.tolist())
'''


def test_a_method_declared_in_a_new_module_is_checked(tmp_path):
    """A module declaring `METHODS` next to the drafter modules (here a temporary directory on the package's
    path, in a child process) is in `registered_methods` and runs through `assert_conforms`."""
    (tmp_path / "toy_echo.py").write_text(textwrap.dedent(TOY_MODULE))
    out = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "conforms toy-echo3" in out.stdout
