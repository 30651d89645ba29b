"""The rounding gap between the zoo target's decode and prefill logits (tests/test_equality.py).

`python -m tests.rounding_gap` prints {dtype: gap} as JSON for float32 and bfloat16; the test
runs it in a child process with XLA's default flags (tests/xla_flags.py). Kept apart from the
test module so that the child imports nothing but specjax and the held-out prompts.
"""

import json

import jax
import jax.numpy as jnp
import numpy as np

from specjax import zoo
from specjax.decode import generate_ar
from specjax.equality import UNIT_ROUNDOFF
from specjax.models import init_cache, pad_prompts, prefill
from specjax.models.cache import commit
from specjax.models.model import forward
from tests.zoo_prompts import HELDOUT


def rounding_gap(dtype_name: str):
    """max over positions of |decode logits - prefill logits| / (u * max|logit|) on the zoo
    target: 3 held-out prompts, 32 prompt tokens, 48 greedy tokens each."""
    tcfg, tparams, tok = zoo.load("tiny-neox-target")
    dtype = jnp.dtype(dtype_name)
    params = jax.tree.map(lambda x: x.astype(dtype), tparams)
    worst = 0.0
    step = jax.jit(lambda p, x, c: forward(p, tcfg, x, c.lengths[:, None], jnp.ones((1, 1, 1), bool), c))
    for _, text in HELDOUT[:3]:
        ids = zoo.encode(tok, text)[:32]
        tokens, lengths = pad_prompts([ids])
        out = generate_ar(params, tcfg, tokens, lengths, 48, eos_ids=())
        seq = ids + np.asarray(out.tokens[0]).tolist()
        full, _, _ = prefill(params, tcfg, *pad_prompts([seq]), init_cache(tcfg, 1, len(seq), dtype))
        _, _, cache = prefill(params, tcfg, tokens, lengths, init_cache(tcfg, 1, len(seq) + 1, dtype))
        for j in range(len(ids), len(seq)):
            logits, cache = step(params, jnp.asarray([[seq[j]]], jnp.int32), cache)
            cache = commit(cache, jnp.zeros((1, 1), jnp.int32), jnp.ones((1,), jnp.int32))
            ref = np.asarray(full[0, j], np.float64)
            gap = np.max(np.abs(np.asarray(logits[0, 0], np.float64) - ref))
            worst = max(worst, gap / (UNIT_ROUNDOFF[dtype_name] * max(1.0, np.max(np.abs(ref)))))
    return worst


if __name__ == "__main__":
    print(json.dumps({d: rounding_gap(d) for d in ("float32", "bfloat16")}))
