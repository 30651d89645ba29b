"""Every registered method passes the same checks on the embedded trained pair (issue 48 item 6): a method
declared tomorrow in a module of `specjax.drafters` is checked without anyone writing a test.

For each method of the registry the zoo pair can run, with its default fields (`specjax.testing.example_spec`):
greedy `generate_core` under the caller's `jax.jit` equals autoregressive decoding on three prompts; the round
statistics agree with the output (tau = tokens / target forwards, accepted <= tree depth <= max_depth); at
T = 1 the first token is the target's own draw for the same key (`specjax.testing.assert_conforms`). And a
toy method declared in a temporary module is picked up by the same machinery.

Budget (<= 90 s): one compiled loop and one tapped prefill per method, the autoregressive references shared;
measured 2026-11-26 on 2 shared cores, cold compile cache: 64-70 s of CPU (105-123 s wall under a load of 6-8
from other processes); with the persistent compile cache warm: 33 s of CPU, 40 s wall.
"""

import subprocess
import sys
import textwrap

import numpy as np
import pytest

from specjax import testing
from specjax.drafters import registry

METHODS = testing.registered_methods()


def test_the_zoo_runs_every_registered_method():
    """Nothing is skipped silently: the zoo pair has a draft LM and every kind of trained drafter, so every
    method but "ar" is in the conformance run."""
    names = {registry.parse(m).spec.name for m in METHODS}
    assert names == {s.name for s in registry.METHOD_SPECS} - {"ar"}
    assert len(METHODS) >= 17


@pytest.mark.parametrize("spec", METHODS)
def test_registered_method_conforms(spec):
    report = testing.assert_conforms(spec)
    assert (report.rounds >= 1).all() and np.isfinite(report.tau).all()
    if registry.parse(spec).spec.name in ("chain", "dflash", "ddtree", "eagle3", "domino"):
        assert report.max_accepted >= 1, f"{spec}: the trained drafters never had a token accepted"


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
