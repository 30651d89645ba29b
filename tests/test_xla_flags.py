"""The suite's compile flags are the backend's: XLA:CPU's reach only a CPU backend, XLA:GPU's only a GPU, each
only where the jaxlib knows them (tests/xla_flags.py).

On a GPU machine the flags aborted the process at backend start (an H200 with jax 0.11.2: "Unknown flag
in XLA_FLAGS"), so the decision is the backend's: tested here by the parts that decide it, each in a
child process or with the cached decision out of the way.
"""

import os
import subprocess
import sys

import xla_flags
from xla_flags import GPU_TEST_XLA_FLAGS, RUN_HEAVY_XLA_FLAGS, TEST_XLA_FLAGS


def _fresh(monkeypatch, tmp_path=None, **env):
    """xla_flags as a new process would see it: no inherited decision, no memo, `env` set, and (with
    `tmp_path`) a home of its own, so a decision made under a stubbed probe never reaches the real cache."""
    monkeypatch.delenv("SPECJAX_TEST_XLA_FLAGS_DECIDED", raising=False)
    if tmp_path is not None:
        monkeypatch.setenv("HOME", str(tmp_path))
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    xla_flags._decided.cache_clear()
    monkeypatch.setattr(xla_flags, "_probe", lambda flags, backend="cpu": (_ for _ in ()).throw(AssertionError("probed")))


def test_a_platform_without_test_flags_gets_none_and_no_probe(monkeypatch, tmp_path):
    _fresh(monkeypatch, tmp_path, JAX_PLATFORMS="tpu")
    assert xla_flags.applicable_flags() == ()
    assert xla_flags.applicable_flags(RUN_HEAVY_XLA_FLAGS) == ()
    assert os.environ["SPECJAX_TEST_XLA_FLAGS_DECIDED"] == "none"  # what workers and children inherit
    xla_flags._decided.cache_clear()


def test_a_gpu_platform_gets_the_gpu_flags_and_never_the_cpu_ones(monkeypatch, tmp_path):
    """JAX_PLATFORMS naming a GPU: the GPU's test flags are probed on the GPU backend and used; no XLA:CPU flag
    reaches XLA_FLAGS, the heavy children's included (on an H200 one aborted the process at backend start)."""
    for platforms in ("cuda", "gpu,cpu"):
        _fresh(monkeypatch, tmp_path, JAX_PLATFORMS=platforms, XLA_FLAGS="")
        asked = []
        monkeypatch.setattr(xla_flags, "_probe", lambda flags, backend="cpu": asked.append((flags, backend)) or flags)
        assert xla_flags.applicable_flags() == GPU_TEST_XLA_FLAGS and asked == [(GPU_TEST_XLA_FLAGS, "gpu")]
        assert xla_flags.applicable_flags(RUN_HEAVY_XLA_FLAGS) == ()
        xla_flags.use_test_xla_flags()
        assert os.environ["XLA_FLAGS"].split() == list(GPU_TEST_XLA_FLAGS)
        heavy = xla_flags.child_env(RUN_HEAVY_XLA_FLAGS).get("XLA_FLAGS", "")
        assert not set(heavy.split()) & set(TEST_XLA_FLAGS + RUN_HEAVY_XLA_FLAGS + GPU_TEST_XLA_FLAGS), heavy
    xla_flags._decided.cache_clear()


def test_this_jaxlib_knows_the_gpu_flags_by_name():
    """XLA parses XLA_FLAGS for every backend at start: a child on this CPU starts with the GPU test flags (a
    misspelt name would abort it with "Unknown flag", and the probe would drop it)."""
    assert xla_flags._probe(GPU_TEST_XLA_FLAGS, "cpu") == GPU_TEST_XLA_FLAGS


def test_the_inherited_decision_is_used_as_is(monkeypatch):
    _fresh(monkeypatch, None, SPECJAX_TEST_XLA_FLAGS_DECIDED="--xla_backend_optimization_level=0")
    assert xla_flags.applicable_flags() == ("--xla_backend_optimization_level=0",)
    # the heavy children keep their own value of a flag the decision allows
    assert xla_flags.applicable_flags(RUN_HEAVY_XLA_FLAGS) == ("--xla_backend_optimization_level=1",)
    xla_flags._decided.cache_clear()


def test_probe_drops_a_flag_the_jaxlib_does_not_know_and_keeps_the_rest(monkeypatch):
    """A real child process: XLA names the unknown flag, the probe drops it and starts again."""
    monkeypatch.delenv("JAX_PLATFORMS", raising=False)
    bogus = "--xla_cpu_flag_no_jaxlib_has=true"
    assert xla_flags._probe((bogus, TEST_XLA_FLAGS[0])) == (TEST_XLA_FLAGS[0],)


def test_this_process_runs_on_the_cpu_with_the_flags_it_was_given():
    """The suite on this machine: the CPU backend, and XLA_FLAGS holds exactly the applicable flags."""
    import jax

    if jax.default_backend() == "cpu" and os.environ.get("SPECJAX_TEST_XLA_FLAGS") != "off":
        given = os.environ.get("XLA_FLAGS", "").split()
        assert set(xla_flags.applicable_flags()) <= set(given)
    else:  # a GPU gets its own test flags, never the CPU's
        assert not set(TEST_XLA_FLAGS) & set(os.environ.get("XLA_FLAGS", "").split())


def test_a_child_on_a_non_cpu_platform_starts_where_the_flags_would_abort_it():
    """The GPU failure in miniature: JAX_PLATFORMS names a platform this jaxlib has no plugin for; the
    decision must not add the CPU flags, so the only error is the platform's (not an XLA flag abort)."""
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "SPECJAX_TEST_XLA_FLAGS_DECIDED")}
    env["JAX_PLATFORMS"] = "cuda"
    code = ("import sys; sys.path.insert(0, 'tests'); import xla_flags, os; xla_flags.use_test_xla_flags(); "
            "print(repr(os.environ.get('XLA_FLAGS', '')))")
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120,
                         cwd=os.path.dirname(os.path.dirname(__file__)))
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "''"
