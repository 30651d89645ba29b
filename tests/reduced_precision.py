"""Every speculative family's bfloat16 generations classified against AR (tests/test_equality.py).

`python -m tests.reduced_precision` prints {method: {kind: count}} as JSON, or exits non-zero
naming the first row that is a MISMATCH or is misclassified. The test runs it in a child
process compiled with `RUN_HEAVY_XLA_FLAGS` (tests/xla_flags.py): bfloat16 programs run several
times slower at the suite's cheaper compilation (measured 2026-11-25, one process: 49 s of run
time at the suite's flags, 9 s at XLA's defaults, for 18 s vs 44 s of compile; the whole child
took 74 s at the suite's flags, 58-59 s at the defaults, 40 s at RUN_HEAVY_XLA_FLAGS).
"""

import json
import sys

import jax
import jax.numpy as jnp
import numpy as np

from specjax import zoo
from specjax.bench.methods import parse_method
from specjax.decode import generate, generate_ar
from specjax.equality import compare_with_ar, count
from specjax.models import pad_prompts
from tests.zoo_prompts import HELDOUT

SPECS = ("chain4", "dynatree-zoo", "dflash", "ddtree-16")
NEW_TOKENS = 200


def classify_bfloat16_generations() -> dict[str, dict[str, int]]:
    """bfloat16 params, every family in SPECS, NEW_TOKENS greedy tokens on the held-out prompts
    (32 tokens each): the tally of agreements with AR per method. Raises AssertionError when a
    row is a MISMATCH, or when the classifier's "identical" disagrees with token equality."""
    tcfg, tparams, tok = zoo.load("tiny-neox-target")
    dcfg, dparams = zoo.load_drafter("tiny-neox-dflash")
    draft_cfg, draft_params, _ = zoo.load("tiny-neox-draft")
    bf16 = lambda tree: jax.tree.map(lambda x: x.astype(jnp.bfloat16), tree)  # noqa: E731
    params = bf16(tparams)
    prompts = [zoo.encode(tok, text)[:32] for _, text in HELDOUT]
    tokens, lengths = pad_prompts(prompts, 32)
    ar = generate_ar(params, tcfg, tokens, lengths, NEW_TOKENS, eos_ids=())
    tally = {}
    for spec in SPECS:
        m = parse_method(spec, draft_cfg, dflash=(dcfg, dparams), target_cfg=tcfg)
        dp = bf16(m.params if m.params is not None else draft_params)
        out = generate(params, tcfg, m.drafter, dp, tokens, lengths, NEW_TOKENS, eos_ids=())
        found = []
        for b, prompt in enumerate(prompts):
            a = compare_with_ar(params, tcfg, prompt, ar.tokens[b], out.tokens[b])
            same = bool(np.array_equal(np.asarray(ar.tokens[b]), np.asarray(out.tokens[b])))
            assert (a.kind == "identical") == same and a.kind != "MISMATCH", (spec, b, str(a))
            found.append(a)
        tally[spec] = count(found)
    return tally


if __name__ == "__main__":
    try:
        result = classify_bfloat16_generations()
    except AssertionError as err:
        sys.exit(f"reduced precision: {err}")
    print(json.dumps(result))
