"""The XLA flags the test suite compiles with, and the environment without them.

The suite is compile-bound: tiny models, thousands of jitted programs. At XLA:CPU's lowest
backend optimisation level and without LLVM's expensive passes its programs compile about
2x faster (measured on 2 cores: tests/test_dynatree.py + tests/test_decode.py 311 s -> 159 s,
CPU time 473 s -> 208 s); they run about 2x slower, which tiny models do not notice. With
XLA:CPU's older elemental emitters instead of its MLIR fusion emitters, on top of those two,
XLA's compile time halves again (measured 2026-11-25, one process, no compile cache:
tests/test_dynatree.py + test_decode_sampling.py + test_graft.py 246 s -> 164 s, of it XLA
compile 157 s -> 79 s; `specjax bench-device --parts compile` dynatree-p3 8.4 s -> 4.9 s of
XLA), and the run time of those tests did not grow. Then, XLA:CPU compiles a program's LLVM module
as one part instead of splitting it into parts for a thread pool (its default): the split pays only
where a core is idle. The generation programs of DDTree-8, DynaTree, EAGLE-3, Graft and Domino on
the zoo pair (`python tests/compile_programs.py`, no compile cache; 2026-11-28, 2-core AMD EPYC):
with the niced data generation running beside them, 24.7 s instead of 27.7 s one process at a time
and 27.7 s instead of 34.2 s two at a time (means of four runs each, interleaved); on the idle
machine, two at a time (a 2-worker suite's load) 20.4 s instead of 21.3 s (one run each), one at a
time 19.0 s instead of 17.3 s (one run: slower). So it helps a loaded 2-core machine and is neutral
for two workers on an idle one. Last, Eigen's matrix products run on one thread: two workers on two
cores already keep both busy, and each product split over a pool of two only adds hand-offs between
threads (tests/test_graft.py + test_decode.py + test_domino.py, two workers, no compile cache, the
data generation paused, 2026-11-28: 223 s and 218 s against 240 s and 249 s, runs interleaved). And
XLA's HLO verifier does not run between its passes (`--xla_disable_hlo_passes=hlo-verifier`): it only
checks XLA's own invariants and changes nothing it compiles, yet a `perf` profile of XLA:CPU compiling
the DynaTree, Graft and DDTree-8 programs put 14 % of the compile in it (`HloVerifier::RunImpl`, run
after every pass). Without it: those six programs compiled in 29.9 s and 34.7 s against 35.8 s and
39.8 s (runs interleaved), and the same three modules as above, two workers, no compile cache, the
data generation niced beside them: 239 s and 229 s against 282 s and 239 s (2026-11-28); on the idle
machine, 28.0 s and 29.1 s against 30.9 s and 36.0 s. The whole suite's XLA compile fell only 2 %
(1,533 s against 1,570 s, runs of two days): the share is large only in the big generation programs. The
programs and every assert stay the same; only the compiler's effort, its self-checks and the
products' threading change. The library, the CLI and the benchmarks keep XLA's defaults.

jaxlib 0.11 (Python >= 3.12) has no older emitters left: `--xla_cpu_use_fusion_emitters` is an unknown flag
there (the probe drops it), and so is `--xla_cpu_disable_new_fusion_emitters`. The same five programs
(`python tests/compile_programs.py`, the data generation paused, 2026-11-28, another 2-core AMD EPYC):
jaxlib 0.10.2 with the flags above 5.1 s and 4.9 s, without the emitter flag 11.0 s and 11.4 s, jaxlib
0.11.2 with the flags it keeps 12.3, 11.7, 12.5 and 11.2 s; adding `--xla_cpu_opt_preset=CPU_OPT_PRESET_FAST_COMPILE`
11.9 and 11.0 s, `--xla_cpu_use_thunk_runtime=false` 14.6 and 12.0 s, `--xla_cpu_emitter_verification_level=0`
14.1 and 11.7 s: none recovers it, so none is added. The whole suite on jax 0.11.2 (CPU, Python 3.12): 1,504 s
of XLA compile against 583 s on 0.10.2 on the same machine, 1,542 s of pytest against 857 s.

A test that measures a property of the *default* compilation (float32 rounding of the
decode forward vs the prefill forward, tests/test_equality.py) runs in a child process with
`default_flags_env()`. One that runs long bfloat16 generations (tests/reduced_precision.py)
runs in a child with `child_env(RUN_HEAVY_XLA_FLAGS)`: bfloat16 programs run several times
slower at TEST_XLA_FLAGS, and at LLVM's O1 with the other two cheap flags the child took 40 s
against 58-59 s at XLA's defaults and 74 s at TEST_XLA_FLAGS (one process each, 2026-11-25;
at O1 the graft notebook took 136 s against 114 s at O0: more compile than run saved, so the
suite stays at O0). SPECJAX_TEST_XLA_FLAGS=off keeps XLA's defaults everywhere (e.g. to rule
the flags out of a failure).

Those flags are XLA:CPU's, and XLA parses XLA_FLAGS once for every backend: a flag the jaxlib does
not know aborts the process at backend start (measured on an H200, jax 0.11.2: "Unknown flag in
XLA_FLAGS: --xla_cpu_use_fusion_emitters=false", pytest printed nothing). So the backend decides,
not a variable the user must know (`applicable_flags`): BACKEND_TEST_FLAGS names each backend's
(XLA:CPU's above where jax's default backend is the CPU, GPU_TEST_XLA_FLAGS on a GPU: no GEMM
autotuning, no Triton GEMMs, for compile time; none elsewhere), and only those a child process starts
with are used (one its jaxlib does not know is dropped, so a newer jaxlib keeps the others). The answer is
cached per jaxlib, installed jax plugins and device variables (~/.cache/specjax-xla-flags.json),
and handed to pytest-xdist workers and other children through SPECJAX_TEST_XLA_FLAGS_DECIDED.
"""

import functools
import importlib.metadata
import json
import os
import pathlib
import subprocess
import sys

TEST_XLA_FLAGS = ("--xla_backend_optimization_level=0", "--xla_llvm_disable_expensive_passes=true",
                  "--xla_cpu_use_fusion_emitters=false", "--xla_cpu_parallel_codegen_split_count=1",
                  "--xla_cpu_multi_thread_eigen=false", "--xla_disable_hlo_passes=hlo-verifier")
# On a GPU the tests' tiny programs compiled ~3.5 s each (an H100, jax 0.11.2, 2026-11-27: 89 programs of the first
# two DDTree tests in 330 s), against ~0.1 s on a CPU at TEST_XLA_FLAGS. XLA:GPU's compile time for such programs
# is mostly GEMM autotuning (candidate kernels compiled and timed per product shape) and Triton GEMM kernels
# (each through ptxas): without either, products go to cuBLAS's default algorithm. Every product is still exact to
# its precision setting; the compile report of `make gpu-check`'s tests step measures what this saves.
GPU_TEST_XLA_FLAGS = ("--xla_gpu_autotune_level=0", "--xla_gpu_enable_triton_gemm=false")
BACKEND_TEST_FLAGS = {"cpu": TEST_XLA_FLAGS, "gpu": GPU_TEST_XLA_FLAGS}
ALL_TEST_FLAGS = TEST_XLA_FLAGS + GPU_TEST_XLA_FLAGS
RUN_HEAVY_XLA_FLAGS = ("--xla_backend_optimization_level=1", "--xla_llvm_disable_expensive_passes=true",
                       "--xla_cpu_use_fusion_emitters=false", "--xla_cpu_parallel_codegen_split_count=1",
                       "--xla_disable_hlo_passes=hlo-verifier")

_DECIDED = "SPECJAX_TEST_XLA_FLAGS_DECIDED"  # the XLA:CPU flags that apply here, space-separated, or "none"
_DEVICE_VARIABLES = ("JAX_PLATFORMS", "JAX_PLATFORM_NAME", "CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES",
                     "TPU_VISIBLE_CHIPS")
# Where XLA:CPU might not be the backend: the plugins that bring another one.
_PLUGIN_PREFIXES = ("jax-cuda", "jax_cuda", "jax-rocm", "jax_rocm", "libtpu", "jax-tpu", "jax_tpu", "jax-metal")
_UNKNOWN = "Unknown flag in XLA_FLAGS: "


def _plugins() -> tuple[str, ...]:
    names = {(d.metadata["Name"] or "").lower() for d in importlib.metadata.distributions()}
    return tuple(sorted(n for n in names if n.startswith(_PLUGIN_PREFIXES)))


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _child_backend(flags: tuple[str, ...] = ()):
    """A child process with `flags` added to XLA_FLAGS: (its jax default backend or None, the run)."""
    env = dict(os.environ)
    env["XLA_FLAGS"] = " ".join(env.get("XLA_FLAGS", "").split() + list(flags))
    run = subprocess.run([sys.executable, "-c", "import jax; print(jax.default_backend())"], env=env,
                         capture_output=True, text=True, timeout=300)
    lines = run.stdout.strip().splitlines()
    return (lines[-1] if run.returncode == 0 and lines else None), run


def _probe(flags: tuple[str, ...], backend: str = "cpu") -> tuple[str, ...]:
    """Those of `flags` a child process starts with on `backend`: () where its default backend is another;
    a flag its jaxlib does not know is dropped (XLA names it) and the child started again."""
    flags = tuple(flags)
    for _ in range(len(flags) + 1):
        started, run = _child_backend(flags)
        if started is not None:
            return flags if started == backend else ()
        unknown = [f for f in flags if f"{_UNKNOWN}{f}" in run.stderr or f"{_UNKNOWN}{f.split('=')[0]}" in run.stderr]
        if not unknown:
            return ()  # it did not start for another reason: keep XLA's defaults
        flags = tuple(f for f in flags if f not in unknown)
    return ()


def applicable_flags(flags: tuple[str, ...] | None = None) -> tuple[str, ...]:
    """Those of `flags` (default: the test flags of every backend) that go into XLA_FLAGS here (module
    docstring): the flags of jax's default backend (BACKEND_TEST_FLAGS: XLA:CPU's on a CPU, XLA:GPU's on a
    GPU, none elsewhere), only those this jaxlib knows. Decided once per jaxlib, plugins and device variables
    by child processes (cached in ~/.cache/specjax-xla-flags.json, ~4 s the first time) and handed to
    workers and children through SPECJAX_TEST_XLA_FLAGS_DECIDED."""
    flags = ALL_TEST_FLAGS if flags is None else flags
    return tuple(f for f in flags if f.split("=")[0] in {d.split("=")[0] for d in _decided()})


_PLATFORM_BACKEND = {"cpu": "cpu", "cuda": "gpu", "gpu": "gpu", "rocm": "gpu"}


def _decide() -> tuple[str, ...]:
    """The test flags of the backend a child process starts on (JAX_PLATFORMS' first platform when set)."""
    platforms = (os.environ.get("JAX_PLATFORMS") or os.environ.get("JAX_PLATFORM_NAME") or "").lower()
    backend = _PLATFORM_BACKEND.get(platforms.split(",")[0].strip()) if platforms else _child_backend()[0]
    return _probe(BACKEND_TEST_FLAGS[backend], backend) if backend in BACKEND_TEST_FLAGS else ()


@functools.lru_cache(maxsize=None)
def _decided() -> tuple[str, ...]:
    if os.environ.get(_DECIDED):
        value = os.environ[_DECIDED]
        return () if value == "none" else tuple(value.split())
    platforms = (os.environ.get("JAX_PLATFORMS") or os.environ.get("JAX_PLATFORM_NAME") or "").lower()
    if platforms and _PLATFORM_BACKEND.get(platforms.split(",")[0].strip()) not in BACKEND_TEST_FLAGS:
        decided: tuple[str, ...] = ()
    else:
        key = json.dumps({"jax": _version("jax"), "jaxlib": _version("jaxlib"), "plugins": _plugins(),
                          "python": sys.executable, "flags": BACKEND_TEST_FLAGS,
                          "env": {v: os.environ.get(v) for v in _DEVICE_VARIABLES}}, sort_keys=True)
        cache = pathlib.Path(os.path.expanduser("~")) / ".cache" / "specjax-xla-flags.json"
        try:
            known = json.loads(cache.read_text())
        except (OSError, ValueError):
            known = {}
        if key in known:
            decided = tuple(known[key])
        else:
            decided = _decide()
            known[key] = list(decided)
            try:
                cache.parent.mkdir(parents=True, exist_ok=True)
                cache.write_text(json.dumps(known, indent=1))
            except OSError:
                pass
    os.environ[_DECIDED] = " ".join(decided) or "none"  # workers and children inherit the decision
    return decided


def use_test_xla_flags() -> None:
    """Append the applicable test flags (the backend's) to XLA_FLAGS (before jax creates its backend);
    SPECJAX_TEST_XLA_FLAGS=off: none."""
    if os.environ.get("SPECJAX_TEST_XLA_FLAGS") == "off":
        return
    flags = os.environ.get("XLA_FLAGS", "").split()
    os.environ["XLA_FLAGS"] = " ".join(flags + [f for f in applicable_flags() if f not in flags])


def child_env(flags: tuple[str, ...] = ()) -> dict[str, str]:
    """This process's environment with TEST_XLA_FLAGS in XLA_FLAGS replaced by `flags` (none: XLA's
    defaults), such as RUN_HEAVY_XLA_FLAGS, those of them that apply here (`applicable_flags`)."""
    env = default_flags_env()
    if flags and os.environ.get("SPECJAX_TEST_XLA_FLAGS") != "off":
        env["XLA_FLAGS"] = " ".join(env.get("XLA_FLAGS", "").split() + list(applicable_flags(flags)))
    return env


def default_flags_env() -> dict[str, str]:
    """This process's environment with every backend's test flags taken out of XLA_FLAGS."""
    env = dict(os.environ)
    flags = [f for f in env.get("XLA_FLAGS", "").split() if f not in ALL_TEST_FLAGS]
    if flags:
        env["XLA_FLAGS"] = " ".join(flags)
    else:
        env.pop("XLA_FLAGS", None)
    return env
