"""Time XLA's compile of registered methods' generation programs on the embedded zoo pair, under the
XLA_FLAGS of this process (no compile cache): how tests/xla_flags.py's flags were chosen.

    XLA_FLAGS="--xla_backend_optimization_level=0 ..." python tests/compile_programs.py [method ...]

Prints one JSON line: the flags, and per method the seconds to trace and lower (`lower_s`), to compile
(`compile_s`) and to run the compiled program once (`run_s`), and the lowered module's line count. The
program is the one the suite's conformance test compiles (`generate_core` under the caller's `jax.jit`,
three prompts padded to 16, 24 new tokens). Compare flag sets in separate processes, interleaved, and
run two processes at once to see a 2-worker suite's load.
"""

import json
import os
import sys
import time

os.environ.setdefault("SPECJAX_COMPILE_CACHE", "0")  # every program compiled, none loaded

import jax  # noqa: E402

from specjax import testing  # noqa: E402
from specjax.core import generate_core  # noqa: E402
from specjax.models import pad_prompts  # noqa: E402

DEFAULT_METHODS = ("ddtree-8", "dynatree", "eagle3", "graft", "domino")


def time_method(target, spec: str, tokens, lengths, max_new_tokens: int = 24) -> dict:
    drafter, dparams = testing.build(spec, target)
    program = jax.jit(lambda p, d, t, n: generate_core(p, target.cfg, drafter, d, t, n,
                                                       max_new_tokens=max_new_tokens))
    start = time.perf_counter()
    lowered = program.lower(target.params, dparams, tokens, lengths)
    lowered_at = time.perf_counter()
    compiled = lowered.compile()
    compiled_at = time.perf_counter()
    jax.block_until_ready(compiled(target.params, dparams, tokens, lengths))  # the first run pays allocations
    ran_at = time.perf_counter()
    jax.block_until_ready(compiled(target.params, dparams, tokens, lengths))
    return {"lower_s": round(lowered_at - start, 3), "compile_s": round(compiled_at - lowered_at, 3),
            "run_s": round(time.perf_counter() - ran_at, 3), "module_lines": lowered.as_text().count("\n")}


def main(methods) -> None:
    jax.config.update("jax_compilation_cache_dir", None)
    jax.config.update("jax_default_matmul_precision", "highest")  # as tests/conftest.py
    target = testing.zoo_target()
    prompts = [list(t[: 5 + 4 * i]) for i, t in enumerate(target.texts[:3])]
    tokens, lengths = pad_prompts(prompts, 16)
    out = {"xla_flags": os.environ.get("XLA_FLAGS", "")}
    for spec in methods:
        out[spec] = time_method(target, spec, tokens, lengths)
    out["compile_s_total"] = round(sum(out[m]["compile_s"] for m in methods), 2)
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1:] or DEFAULT_METHODS)
