"""The XLA flags the test suite compiles with, and the environment without them.

The suite is compile-bound: tiny models, thousands of jitted programs. At XLA:CPU's lowest
backend optimisation level and without LLVM's expensive passes its programs compile about
2x faster (measured on 2 cores: tests/test_dynatree.py + tests/test_decode.py 311 s -> 159 s,
CPU time 473 s -> 208 s); they run about 2x slower, which tiny models do not notice. With
XLA:CPU's older elemental emitters instead of its MLIR fusion emitters, on top of those two,
XLA's compile time halves again (measured 2026-11-25, one process, no compile cache:
tests/test_dynatree.py + test_decode_sampling.py + test_graft.py 246 s -> 164 s, of it XLA
compile 157 s -> 79 s; `specjax bench-device --parts compile` dynatree-p3 8.4 s -> 4.9 s of
XLA), and the run time of those tests did not grow. The programs and every assert stay the
same; only the compiler's effort changes. The library, the CLI and the benchmarks keep XLA's
defaults.

A test that measures a property of the *default* compilation (float32 rounding of the
decode forward vs the prefill forward, tests/test_equality.py) runs in a child process with
`default_flags_env()`. One that runs long bfloat16 generations (tests/reduced_precision.py)
runs in a child with `child_env(RUN_HEAVY_XLA_FLAGS)`: bfloat16 programs run several times
slower at TEST_XLA_FLAGS, and at LLVM's O1 with the other two cheap flags the child took 40 s
against 58-59 s at XLA's defaults and 74 s at TEST_XLA_FLAGS (one process each, 2026-11-25;
at O1 the graft notebook took 136 s against 114 s at O0: more compile than run saved, so the
suite stays at O0). SPECJAX_TEST_XLA_FLAGS=off keeps XLA's defaults everywhere (e.g. to rule
the flags out of a failure).
"""

import os

TEST_XLA_FLAGS = ("--xla_backend_optimization_level=0", "--xla_llvm_disable_expensive_passes=true",
                  "--xla_cpu_use_fusion_emitters=false")


def use_test_xla_flags() -> None:
    """Append TEST_XLA_FLAGS to XLA_FLAGS (before jax creates its CPU backend)."""
    if os.environ.get("SPECJAX_TEST_XLA_FLAGS") == "off":
        return
    flags = os.environ.get("XLA_FLAGS", "").split()
    os.environ["XLA_FLAGS"] = " ".join(flags + [f for f in TEST_XLA_FLAGS if f not in flags])


RUN_HEAVY_XLA_FLAGS = ("--xla_backend_optimization_level=1", "--xla_llvm_disable_expensive_passes=true",
                       "--xla_cpu_use_fusion_emitters=false")


def child_env(flags: tuple[str, ...] = ()) -> dict[str, str]:
    """This process's environment with TEST_XLA_FLAGS in XLA_FLAGS replaced by `flags` (none: XLA's defaults)."""
    env = default_flags_env()
    if flags and os.environ.get("SPECJAX_TEST_XLA_FLAGS") != "off":
        env["XLA_FLAGS"] = " ".join(env.get("XLA_FLAGS", "").split() + list(flags))
    return env


def default_flags_env() -> dict[str, str]:
    """This process's environment with TEST_XLA_FLAGS taken out of XLA_FLAGS."""
    env = dict(os.environ)
    flags = [f for f in env.get("XLA_FLAGS", "").split() if f not in TEST_XLA_FLAGS]
    if flags:
        env["XLA_FLAGS"] = " ".join(flags)
    else:
        env.pop("XLA_FLAGS", None)
    return env
