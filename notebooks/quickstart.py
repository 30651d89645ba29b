# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # specjax quickstart: one speculative decode, one round under the microscope
#
# Open this first. It loads the embedded tiny target (a 4.9M-parameter GPT-NeoX trained by
# specjax, `specjax.zoo`) with the DFlash drafter trained for it, decodes a prompt with plain
# greedy decoding and with **DDTree** (a tree of the drafter's most probable prefixes,
# verified in one target forward), shows that the outputs are identical, then takes one
# round apart: the tree the drafter proposed, the target's verdict, the committed path.
# Everything is a pure JAX function over explicit pytrees; nothing here is specific to the
# notebook. The paper notebooks (`dynatree.py`, `ddtree.py`, `domino.py`, `graft.py`)
# reproduce the four papers' tables.
#
# **Profiles** (`SPECJAX_PROFILE`). `cpu-tiny` (default; the committed outputs) generates 48
# tokens, `gpu` 256. `ci` is the test suite's smoke run (`tests/test_notebooks.py`): 16
# tokens, every cell and every check still runs; its numbers are not results.

# %% tags=["parameters"]
import os

PROFILE = os.environ.get("SPECJAX_PROFILE", "cpu-tiny")

# %%
import time

import jax
import jax.numpy as jnp
import numpy as np

from specjax import DDTreeDrafter, DFlashDrafter, Sampling, generate, generate_ar, pad_prompts, token_paths, zoo
from specjax.decode import cache_sizes, initial_state, speculative_round

cfg, params, tokenizer = zoo.load("tiny-neox-target")
dcfg, dparams = zoo.load_drafter("tiny-neox-dflash")
drafter = DDTreeDrafter(DFlashDrafter(dcfg, cfg), budget=16)
prompt = zoo.encode(tokenizer, "The Eiffel Tower is a wrought-iron lattice tower in Paris, France. It is named after")
tokens, lengths = pad_prompts([prompt])
NEW = {"ci": 16, "cpu-tiny": 48}.get(PROFILE, 256)
print(f"target: {cfg.num_layers} layers, vocab {cfg.vocab_size}; drafter reads target layers {dcfg.target_layer_ids}, "
      f"block {dcfg.block_size}; device {jax.devices()[0].device_kind}")

# %% [markdown]
# ## Decode: AR vs DDTree, same call shape
#
# `generate_ar` and `generate` are each one jitted `lax.while_loop`; the first call
# compiles, the second is timed. Greedy speculative output equals AR's token for token.

# %%
def timed(fn):
    jax.block_until_ready(fn())  # compile
    start = time.perf_counter()
    out = jax.block_until_ready(fn())
    return out, time.perf_counter() - start


ar, t_ar = timed(lambda: generate_ar(params, cfg, tokens, lengths, NEW, eos_ids=()))
spec, t_spec = timed(lambda: generate(params, cfg, drafter, dparams, tokens, lengths, NEW, eos_ids=()))
assert (np.asarray(spec.tokens) == np.asarray(ar.tokens)).all(), "greedy speculative output must equal AR's"
tau = float(spec.stats.mean_accepted_length()[0])
print(tokenizer.decode(np.asarray(ar.tokens[0]).tolist()))
print(f"\nAR {t_ar * 1e3:.0f} ms, DDTree-16 {t_spec * 1e3:.0f} ms ({t_ar / t_spec:.2f}x on this device); "
      f"tau = {tau:.2f} tokens per target forward; identical to AR")

# %% [markdown]
# ## One round, taken apart
#
# The loop's body is public: `initial_state` prefills the target and the drafter, and
# `speculative_round` is one draft → verify → walk → commit. Here we run the drafter's
# `propose` by hand on the state after prefill to see the tree, then the round itself.

# %%
slots, reserve = cache_sizes(drafter, tokens.shape[1], NEW)
state = initial_state(params, cfg, drafter, dparams, tokens, lengths, jax.random.key(0), max_new_tokens=NEW,
                      eos_ids=(), sampling=Sampling(), pad_id=0, num_slots=slots, reserve=reserve)
tree, _, _ = drafter.propose(state.draft_state, state.root, ~state.done, None, Sampling())
paths = token_paths(tree)[0]
print(f"root token {int(state.root[0])!r}; the drafter proposes {len(paths)} prefixes, e.g.:")
for path in paths[:8]:
    print("   ", [tokenizer.decode([t]) for t in path])
after = speculative_round(params, cfg, drafter, state, max_new_tokens=NEW, eos_ids=(), sampling=Sampling())
accepted = int(after.stats.accepted[0, 0])
committed = np.asarray(after.out[0, :int(after.count[0])]).tolist()
print(f"the target accepted {accepted} drafted token(s) + its own bonus token; the output so far (the first "
      f"token comes from the prefill): {committed} = {tokenizer.decode(committed)!r}")

# %% [markdown]
# ## Sampling is lossless too
#
# At temperature > 0 the tree is verified by the sampling walk (one target sample per node,
# follow the matching child): the output has exactly the target's distribution, whatever
# the drafter proposes (proofs/sampling_walk.md, tested by exact G-tests in tests/).

# %%
sampled = generate(params, cfg, drafter, dparams, tokens, lengths, NEW, sampling=Sampling(temperature=1.0),
                   key=jax.random.key(7), eos_ids=())
print(f"T = 1: tau = {float(sampled.stats.mean_accepted_length()[0]):.2f}")
print("next: README 'Reusing the pieces' (verify your own tree, DDTree on your marginals, a new drafter)")
