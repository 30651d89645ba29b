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
# # specjax quickstart: one speculative decode, one round under the microscope, and when it pays
#
# Open this first. It generates text with plain greedy decoding and with **DDTree** (a tree of
# a DFlash drafter's most probable prefixes, verified in one target forward; on SmolLM2 half its
# nodes come from a table of the target's own successors instead), shows that the
# outputs are identical, takes one round apart (the tree the drafter proposed, its attention
# mask, the target's verdict) and then measures **when speculative decoding pays** on this
# machine. Everything is a pure JAX function over explicit pytrees; nothing is specific to the
# notebook. The paper notebooks (`dynatree.py`, `ddtree.py`, `domino.py`, `graft.py`) reproduce
# the four papers' tables.
#
# **The model** is what the profile (`SPECJAX_PROFILE`) names. `cpu-smollm2` (`make notebooks`'
# default, the committed outputs) and `gpu`: SmolLM2-135M-Instruct (a real model: the registry's
# GGUF through the Llama port, fetched once and cached, with the DFlash drafter trained for it in
# `specjax/zoo`). `cpu-tiny` (the default here, no download) and `ci`: the embedded pair (a
# 4.9M-parameter GPT-NeoX trained by specjax, and its drafter). `cpu-tiny` and `cpu-smollm2`
# generate 64 tokens, `gpu` 256; `ci` is the test suite's smoke run (`tests/test_notebooks.py`):
# 16 tokens, every cell and every check still runs; its numbers are not results.

# %% tags=["parameters"]
import os

PROFILE = os.environ.get("SPECJAX_PROFILE", "cpu-tiny")

# %%
import time

import jax
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from specjax import Pipeline, Sampling, ancestor_mask, generate, generate_ar, pad_prompts
from specjax.decode import cache_sizes, initial_state, speculative_round
from specjax.pipeline import MODELS


NEW_TOKENS = {"ci": 16, "cpu-tiny": 64, "cpu-smollm2": 64, "gpu": 256}
if PROFILE not in NEW_TOKENS:
    raise ValueError(f"SPECJAX_PROFILE={PROFILE!r}: choose one of {', '.join(NEW_TOKENS)}")
MODEL = "smollm2-135m" if PROFILE in ("cpu-smollm2", "gpu") else "zoo"  # the profile says which model runs
NEW = NEW_TOKENS[PROFILE]
# On SmolLM2: `make run`'s method and layer layout, the fastest measured on this backend (its catalogue
# entry's `serving`; `Pipeline.load` takes the layout from it); on the tiny pair DDTree-16.
METHOD = MODELS[MODEL].serving_for().method if MODEL != "zoo" else "ddtree-16"
pipe = Pipeline.load(MODEL, method=METHOD)
pair, drafter, dparams = pipe.pair, pipe.method.drafter, pipe.method.params
cfg, params = pair.cfg, pair.params
TEXT = ("What is the capital of France, and what is it famous for?" if MODEL != "zoo" else
        "The Eiffel Tower is a wrought-iron lattice tower in Paris, France. It is named after")
print(f"model: {MODEL} ({cfg.num_layers} layers, vocab {cfg.vocab_size}); method: {METHOD}; "
      f"device {jax.devices()[0].device_kind}")

# %% [markdown]
# ## Text in, text out
#
# `Pipeline` is the front door: a model name (or an HF checkpoint directory), a method string,
# strings in, strings and per-row statistics out (τ = tokens committed per target forward).

# %%
out = pipe.generate([TEXT], max_new_tokens=NEW, chat=MODEL != "zoo")
print(out[0].text)
print(f"\n{out[0].num_tokens} tokens in {out[0].rounds} rounds: tau = {out[0].tau:.2f}, finished by {out[0].finish}")

# %% [markdown]
# ## AR vs DDTree, same call shape, timed
#
# Underneath, `generate_ar` and `generate` are each one jitted `lax.while_loop`; the first call
# compiles, the next ones are timed (median of 5). Greedy speculative output equals AR's token
# for token.

# %%
tokens, lengths = pad_prompts([pair.encode(TEXT, chat=MODEL != "zoo")])


def timed(fn, reps: int = 5):
    out = jax.block_until_ready(fn())  # compile
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        out = jax.block_until_ready(fn())
        times.append(time.perf_counter() - start)
    return out, float(np.median(times))


ar, t_ar = timed(lambda: generate_ar(params, cfg, tokens, lengths, NEW, eos_ids=()))
spec, t_spec = timed(lambda: generate(params, cfg, drafter, dparams, tokens, lengths, NEW, eos_ids=()))
assert (np.asarray(spec.tokens) == np.asarray(ar.tokens)).all(), "greedy speculative output must equal AR's"
tau = float(spec.stats.mean_accepted_length()[0])
rounds = int(spec.stats.num_rounds[0])
pd.DataFrame({"method": ["AR", METHOD], "tokens": [NEW, NEW],
              "target forwards": [NEW, rounds], "tau": [1.0, round(tau, 2)],
              "ms": [round(t_ar * 1e3, 1), round(t_spec * 1e3, 1)],
              "tokens/s": [round(NEW / t_ar, 1), round(NEW / t_spec, 1)],
              "speedup": [1.0, round(t_ar / t_spec, 2)], "identical to AR": [True, True]}).set_index("method")

# %% [markdown]
# ## One round, taken apart
#
# The loop's body is public: `initial_state` prefills the target and the drafter, and
# `speculative_round` is one draft → verify → walk → commit. Here the drafter's `propose` also
# runs by hand before each of the first rounds, to see the tree and the mask the target verifies
# it under; we draw the round where the target accepted the most.

# %%
slots, reserve = cache_sizes(drafter, tokens.shape[1], NEW)
state = initial_state(params, cfg, drafter, dparams, tokens, lengths, jax.random.key(0), max_new_tokens=NEW,
                      eos_ids=(), sampling=Sampling(), pad_id=0, num_slots=slots, reserve=reserve)
rounds_seen = []
for r in range(min(8, NEW // 4)):
    tree, _, _ = drafter.propose(state.draft_state, state.root, ~state.done, None, Sampling())
    before = int(state.count[0])
    after = speculative_round(params, cfg, drafter, state, max_new_tokens=NEW, eos_ids=(), sampling=Sampling())
    accepted = int(after.stats.accepted[0, r])
    # the round commits its root's accepted children chain, then the target's bonus token
    new_tokens = np.asarray(after.out[0, before:int(after.count[0])]).tolist()
    rounds_seen.append((accepted, r, tree, int(state.root[0]), new_tokens))
    state = after
accepted, r, tree, root, new_tokens = max(rounds_seen, key=lambda x: (x[0], -x[1]))

tok, par, dep, val = (np.asarray(x[0]) for x in (tree.tokens, tree.parents, tree.depth, tree.valid))
nodes = [i for i in range(len(tok)) if val[i]]
path, parent = [], -1  # the accepted nodes: from the root, the child whose token was committed
for t in new_tokens[:accepted]:
    child = next(i for i in nodes if par[i] == parent and tok[i] == t)
    path.append(child)
    parent = child
print(f"round {r + 1}: root {pair.decode([root])!r}, {len(nodes)} drafted nodes, depth {dep[val].max()}; the target "
      f"accepted {accepted} of them + its own bonus token: {pair.decode(new_tokens)!r}")

# %%
fig, (ax_tree, ax_mask) = plt.subplots(1, 2, figsize=(13, 4.8), gridspec_kw={"width_ratios": [1.6, 1]})
per_depth = {d: [i for i in nodes if dep[i] == d] for d in sorted(set(dep[val].tolist()))}
height = max(len(v) for v in per_depth.values())
xy = {-1: (0, 0.0)}
for d, members in per_depth.items():  # each depth's nodes centred on the root's row, in their parents' order
    members = sorted(members, key=lambda i: -xy[int(par[i])][1])
    for k, i in enumerate(members):
        xy[i] = (d, (len(members) - 1) / 2 - k)
label = (lambda t: repr(pair.decode([int(t)]))[1:-1][:10])  # noqa: E731
for i in nodes:
    (x0, y0), (x1, y1) = xy[int(par[i])], xy[i]
    on_path = i in path
    ax_tree.plot([x0, x1], [y0, y1], color="tab:green" if on_path else "0.75", lw=2.5 if on_path else 1, zorder=1)
    ax_tree.text(x1, y1, label(tok[i]), ha="center", va="center", fontsize=8, zorder=2,
                 bbox=dict(boxstyle="round", fc="honeydew" if on_path else "white", ec="tab:green" if on_path else "0.6"))
ax_tree.text(0, 0, label(root), ha="center", va="center", fontsize=8, bbox=dict(boxstyle="round", fc="lightsteelblue"))
ax_tree.set_xticks(range(0, max(per_depth) + 1))
ax_tree.set_xlim(-0.4, max(per_depth) + 0.4)
ax_tree.set_ylim(-height / 2 - 0.5, height / 2 + 0.5)
ax_tree.set_xlabel("depth below the root (blue)")
ax_tree.set_yticks([])
ax_tree.set_title(f"{METHOD}, round {r + 1}: the drafted tree (green: accepted by the target)")
mask = np.asarray(ancestor_mask(tree))[0]
keep = [0] + [i + 1 for i in nodes]
ax_mask.imshow(mask[np.ix_(keep, keep)], cmap="Greys", interpolation="nearest")
ax_mask.set_title("tree attention mask (row: query node, column: key node;\nslot 0 is the root)")
ax_mask.set_xlabel("key slot")
ax_mask.set_ylabel("query slot")
plt.tight_layout()
plt.show()

# %% [markdown]
# ## Acceptance over the whole generation
#
# How many drafted tokens the target kept, round by round (`RoundStats.accepted`). Every
# round commits those plus one token of the target's own, so τ = mean + 1.

# %%
acc = np.asarray(spec.stats.accepted[0])
acc = acc[acc >= 0]
counts = np.bincount(acc, minlength=acc.max() + 1)
plt.figure(figsize=(6, 3))
plt.bar(np.arange(len(counts)), counts, color="tab:blue")
plt.xlabel("drafted tokens accepted in the round")
plt.ylabel("rounds")
plt.title(f"{len(acc)} rounds, tau = {acc.mean() + 1:.2f}")
plt.show()

# %% [markdown]
# ## When does speculative decoding pay?
#
# A round costs one drafter call plus one target forward over the tree; it commits τ tokens.
# AR commits one token per target forward. So the speedup is
#
# $$\text{speedup} = \frac{\tau}{c}, \qquad c = \frac{\text{time of one round}}{\text{time of one AR step}},$$
#
# and speculative decoding pays exactly when τ > c. On a GPU at batch 1 a target forward over 16
# tokens costs about as much as over one (the step is bound by reading the weights), so c stays
# near 1 + the drafter's share. On a CPU each verified token also costs compute, so c grows with the
# tree, and so does τ: small trees win (`notebooks/ddtree.py` sweeps the budget). Measured here:

# %%
t_step = t_ar / NEW
t_round = t_spec / rounds
c = t_round / t_step
pays = pd.DataFrame({"AR step (ms)": [round(t_step * 1e3, 2)], "round (ms)": [round(t_round * 1e3, 2)],
                     "round cost c (AR steps)": [round(c, 2)], "tau": [round(tau, 2)],
                     "tau / c": [round(tau / c, 2)], "measured speedup": [round(t_ar / t_spec, 2)]})
taus = np.linspace(1, max(6.0, tau + 1), 50)
plt.figure(figsize=(6, 3.2))
plt.plot(taus, taus / c, label=f"speedup at this round cost (c = {c:.2f})")
plt.axhline(1, color="0.5", ls="--", lw=1)
plt.scatter([tau], [t_ar / t_spec], color="tab:red", zorder=3, label="this run")
plt.xlabel("tau (tokens per round)")
plt.ylabel("speedup over AR")
plt.legend(loc="upper left", fontsize=8)
plt.show()
pays

# %% [markdown]
# Read the table as: with this drafter the round costs c AR steps, so τ must exceed c. A better
# trained drafter raises τ at the same c; a cheaper verify (a GPU, or a smaller tree) lowers c.
# On SmolLM2 with the zoo's DFlash drafter (`specjax/zoo/TRAINING.md`), the layers unstacked, a round
# of `ddtree-7` (8 verified tokens) costs about 1.8 AR steps on a 2-core CPU and commits about 2.5
# tokens: over 20 test prompts of GSM8K / MATH-500 / HumanEval it ran 1.26× / 1.51× / 1.35× AR
# (docs/results.md, "Speculative rounds on a CPU"); a single short prompt like this one may sit lower.
# Higher τ needs a drafter trained on more of the target's answers; on a GPU the verify of a few
# tokens costs about one AR step.

# %% [markdown]
# ## Sampling is lossless too
#
# At temperature > 0 the tree is verified by the sampling walk (one target sample per node,
# follow the matching child): the output has exactly the target's distribution, whatever the
# drafter proposes (proofs/sampling_walk.md, tested by exact G-tests in tests/).

# %%
sampled = generate(params, cfg, drafter, dparams, tokens, lengths, NEW, sampling=Sampling(temperature=1.0),
                   key=jax.random.key(7), eos_ids=())
print(f"T = 1: tau = {float(sampled.stats.mean_accepted_length()[0]):.2f}")
print("next: docs/reusing.md (verify your own tree, DDTree on your marginals, a new drafter)")
