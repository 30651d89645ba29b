"""Shared pytest configuration: Hypothesis profiles and JAX numerics for the suite.

`CI=true` selects the deterministic CI profile (derandomize, no example database,
no deadline; the habit of jax's own Hypothesis tests, docs/architecture.md). Locally,
HYPOTHESIS_PROFILE=dev|thorough.
"""

import gc
import os
import sys

# Test helper modules (tiny_models, strategies, references) import both as `tests.x` and `x`.
sys.path.insert(0, os.path.dirname(__file__))

# The suite is XLA-compile-bound (tiny models, thousands of programs): its programs compile at
# XLA:CPU's lowest backend optimisation level, without LLVM's expensive passes, with the older
# elemental emitters (tests/xla_flags.py).
# Set before jax creates its backend; children (notebook kernels, CLI subprocesses) inherit it.
from xla_flags import use_test_xla_flags  # noqa: E402

use_test_xla_flags()
# On a GPU every pytest-xdist worker is a process of its own: without this each would reserve 75 % of the
# device's memory at start and the second would fail. (No effect on a CPU.)
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import jax  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

# A persistent XLA compilation cache outside the clone: a later run on the same machine (the
# next CI run, a developer's rerun) loads the programs instead of recompiling them; the
# suite is compile-bound on 2 cores. Children (notebook kernels, CLI subprocesses) inherit it
# through the environment. SPECJAX_XLA_CACHE=off disables it; the cache key covers jax,
# jaxlib, the backend and the program, so a stale entry is never reused.
_XLA_CACHE = os.environ.get("SPECJAX_XLA_CACHE", os.path.join(os.path.expanduser("~"), ".cache", "specjax-xla"))
if _XLA_CACHE == "off":  # and not specjax's own user cache either (`specjax.data.compile_cache.enable`)
    os.environ["SPECJAX_COMPILE_CACHE"] = "0"
else:
    os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", _XLA_CACHE)
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.5")
    jax.config.update("jax_compilation_cache_dir", os.environ["JAX_COMPILATION_CACHE_DIR"])
    jax.config.update("jax_persistent_cache_min_compile_time_secs",
                      float(os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"]))

# Parity tests compare against float32 PyTorch: keep XLA's float32 matmuls exact
# (a no-op on CPU, matters on GPUs that default to TF32).
jax.config.update("jax_default_matmul_precision", "highest")

_common = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("ci", derandomize=True, database=None, print_blob=True, **_common)
settings.register_profile("dev", **_common)
settings.register_profile("thorough", max_examples=500, **_common)
settings.load_profile("ci" if os.environ.get("CI") == "true" else os.environ.get("HYPOTHESIS_PROFILE", "dev"))


import pytest  # noqa: E402


@pytest.fixture(scope="session")
def hf_checkpoint(tmp_path_factory):
    """hf_checkpoint(variant) -> (HF torch model, directory it was save_pretrained to); built once per session."""
    from tests.tiny_models import hf_model

    made = {}

    def get(variant: str):
        if variant not in made:
            model = hf_model(variant)
            directory = tmp_path_factory.mktemp(variant)
            model.save_pretrained(directory)
            made[variant] = (model, directory)
        return made[variant]

    return get


def _memory_maps() -> int | None:
    """This process's number of memory mappings (Linux), or None where /proc is not there."""
    try:
        with open("/proc/self/maps") as f:
            return sum(1 for _ in f)
    except OSError:
        return None


# Under half of the kernel's default vm.max_map_count (65530): one module adds at most ~8,000
# (measured: a worker peaked at 13,600 with the caches cleared after every module), so a worker
# keeps its compiled programs across several modules. Measured 2026-11-25, one process, no compile
# cache, tests/test_decode.py + test_dflash.py + test_ddtree_graft.py: 245 s and 220 s clearing
# after every module, 206 s and 173 s keeping (runs interleaved). SPECJAX_MAX_MAPS_KEPT=0 clears always.
MAX_MAPS_KEPT = int(os.environ.get("SPECJAX_MAX_MAPS_KEPT", 30_000))


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
    """Drop JAX's compiled programs after a test module once the process holds many. Every
    XLA:CPU executable keeps its own memory mappings (about 6 each, measured); the suite
    compiles thousands of programs, and in one process it reached the kernel's map limit
    (vm.max_map_count = 65530 here), which crashed the compiler with a segfault near the end
    of the suite. Clearing after *every* module made later modules trace and compile again
    the programs they share with earlier ones (the decode loops of the shared tiny pairs), so
    the caches are kept until the mappings pass MAX_MAPS_KEPT."""
    yield
    maps = _memory_maps()
    if maps is None or maps > MAX_MAPS_KEPT:
        jax.clear_caches()
        gc.collect()


# SPECJAX_COMPILE_REPORT=<file>: every test appends one JSON line {test, seconds, compile_s,
# trace_s, compiles, xla_flags} to <file> (XLA backend compilation vs tracing + lowering, from jax's own
# monitoring events; setup and teardown included; notebook kernels and CLI children not
# counted) -- where the suite's time goes, e.g. `python tests/compile_report.py <file>`.
_COMPILE_REPORT = os.environ.get("SPECJAX_COMPILE_REPORT")

if _COMPILE_REPORT:
    from specjax.bench.timing import compile_totals

    compile_totals()  # listen from here on

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(item, nextitem):
        import json
        import time

        before, start = compile_totals(), time.perf_counter()
        yield
        after = compile_totals()
        row = {"test": item.nodeid, "seconds": round(time.perf_counter() - start, 3),
               "compile_s": round(after["xla_compile_s"] - before["xla_compile_s"], 3),
               "trace_s": round(after["trace_s"] + after["lower_s"] - before["trace_s"] - before["lower_s"], 3),
               "compiles": after["compiles"] - before["compiles"],
               "xla_flags": os.environ.get("XLA_FLAGS", "")}  # the test flags this backend got (tests/xla_flags.py)
        with open(_COMPILE_REPORT, "a") as f:
            f.write(json.dumps(row) + "\n")


# SPECJAX_TEST_DEADLINE=<unix time>: a test not started by then is skipped (gpu_check.DEADLINE_REASON), so a
# run with a hard time limit (`make gpu-check`'s tests step) still ends by itself and writes its junit XML.
_DEADLINE = float(os.environ.get("SPECJAX_TEST_DEADLINE") or 0)

if _DEADLINE:
    def pytest_runtest_setup(item):
        import time

        if time.time() > _DEADLINE:
            pytest.skip("SPECJAX_TEST_DEADLINE passed: not run")


# `make test` runs the suite on TEST_JOBS pytest-xdist workers (`--dist loadgroup
# --no-loadscope-reorder`). A unit of work is a whole test module, so its tests share
# compiled programs and module fixtures in one process (the suite is compile-bound), except
# each notebook execution, which is a unit of its own: `pytest_xdist_make_scheduler` below
# hands out whole units. Units are handed out in collection order, which is made longest
# first here, so that no long unit starts last and leaves a worker idle.
# The order comes from the compile report (SPECJAX_COMPILE_REPORT, `tests/compile_report.py`)
# of a 2-worker run on a cold compile cache with the tests' XLA flags: worker-seconds per unit,
# measured 2026-11-27 at 6515b90 plus the host-drawn random params, on the 2-core machine with the
# data generation niced in the background (2,478 s wall in all). Units under 40 s keep their
# collection order after these.
LONGEST_FIRST = (
    "test_conformance.py",  # 316
    "test_ddtree.py",  # 300
    "test_testing_kit.py",  # 214
    "test_cli.py",  # 201
    "test_notebooks.py::test_notebook_executes[graft]",  # 186
    "test_notebooks.py::test_notebook_executes[dynatree]",  # 180
    "test_eagle3.py",  # 159
    "test_domino.py",  # 155
    "test_graft.py",  # 141
    "test_equality.py",  # 140
    "test_multiprocess.py",  # 118
    "test_device_bench.py",  # 113
    "test_draft_vocab.py",  # 109
    "test_notebooks.py::test_notebook_executes[domino]",  # 98
    "test_train_run.py",  # 98
    "test_decode.py",  # 97
    "test_sharding.py",  # 95
    "test_train_data.py",  # 94
    "test_dynatree.py",  # 90
    "test_dflash.py",  # 87
    "test_train_domino.py",  # 85
    "test_ddtree_graft.py",  # 82
    "test_recipe.py",  # 81
    "test_verify.py",  # 80
    "test_layouts.py",  # 80
    "test_assert_drafter.py",  # 79
    "test_bench.py",  # 73
    "test_cache_and_tree_attention.py",  # 71
    "test_new_kind.py",  # 66
    "test_gguf.py",  # 65
    "test_pipeline.py",  # 62
    "test_jittable.py",  # 62
    "test_notebooks.py::test_notebook_executes[ddtree]",  # 58
    "test_train_eagle3.py",  # 55
    "test_decode_sampling.py",  # 55
    "test_reference_formats.py",  # 50
    "test_continuous.py",  # 47
    "test_model_parity.py",  # 42
    "test_gpu_check.py",  # 42
)


def _work_unit(nodeid: str) -> str:
    module = nodeid.split("::")[0]
    return nodeid if "::test_notebook_executes[" in nodeid else module


def _rank(unit: str) -> int:
    for i, name in enumerate(LONGEST_FIRST):
        if unit.split("/")[-1] == name:
            return i
    return len(LONGEST_FIRST)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Order the work units longest first (a stable sort: tests keep their order inside a module), and
    mark the `gpu` subset (tests/gpu_subset.py)."""
    from gpu_subset import GPU_SUBSET

    items.sort(key=lambda item: _rank(_work_unit(item.nodeid)))
    for item in items:
        nodeid = item.nodeid if item.nodeid.startswith("tests/") else f"tests/{item.nodeid}"
        if any(nodeid == entry or nodeid.startswith((entry + "::", entry + "[")) for entry in GPU_SUBSET):
            item.add_marker(pytest.mark.gpu)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """`--dist loadgroup`: xdist's scheduler of whole scopes, with our work units as the scopes.

    Not xdist's own loadgroup (`xdist_group` marks): pytest-xdist 3.8 groups by a suffix it
    writes to `item._nodeid`, which pytest 9 no longer reads (a node id is `item._id`), so
    every test went to whichever worker was free -- each module's tests ran on both workers,
    and both compiled the module's shared programs and built its module fixtures
    (seen 2026-11-25: tests/test_sharding.py's one-subprocess fixture ran once per worker)."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class WorkUnitScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _work_unit(nodeid.split("@")[0])

    return WorkUnitScheduling(config, log)
