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
# # DynaTree at small scale: Tables 1–5 of the paper on the embedded Pythia-architecture pair
#
# This notebook reruns the experiments of *DynaTree: confidence-aware adaptive tree
# speculative decoding for efficient LLM inference* (Chen, Liu and Li; no arXiv id: the paper is
# `paper/dynatree.pdf` in github.com/cny123222/DynaTree) with `specjax`: the same decode
# loop for every method (one jitted `lax.while_loop`), the same prompts, every method timed
# in the same process with compile time excluded and warm-up prompts discarded
# (`specjax.bench.harness`). Greedy decoding throughout; every speculative output is
# checked token for token against AR.
#
# **On SmolLM2.** The other paper notebooks run on SmolLM2-135M-Instruct (`cpu-smollm2`); DynaTree
# drafts with a separate small LM that shares the target's tokenizer (the paper: Pythia-70M for
# Pythia-2.8B, 1/40 of its size), and the offline registry holds no smaller model with SmolLM2's
# 49,152-token vocabulary. `cpu-smollm2` uses the zoo's `smollm2-135m-draft`: a 4-layer x 192 LM
# (11M parameters, 1/12 of the target) distilled on the target's own answers (`python -m specjax.train
# draft-lm`, `specjax/zoo/TRAINING.md`). Measured outside this notebook (docs/results.md, "DynaTree on
# SmolLM2": 10 prompts each of GSM8K / HumanEval / wiki, 128 new tokens, one run): chain4 0.89x AR (τ
# 1.77), DynaTree with the paper's knobs 0.74x (τ 1.71), the fixed 5x2 tree 0.32x (τ 2.16): the fixed tree
# falls behind as in the paper, DynaTree does not beat the chain with this draft on this CPU (its trees stay
# at ~2.6 nodes). The draft continued on 6M tokens ("The draft LM on 6M tokens", unstacked layers): chain4
# 1.05x (τ 1.92), DynaTree 0.90x (τ 1.96, 3.7-3.9 nodes): its τ now above the chains', its speed not; verified at 4 and 8 rows ("DynaTree's verify at 4 and 8
# rows") 1.05x against chain3's 1.26x on GSM8K / HumanEval. The untrained alternative, SmolLM2's own first layers under its final norm and LM head
# (`--draft early-exit:K`, profile `cpu-smollm2-early-exit`), is accepted 1.4 % (K = 6) and 2.8 % (K = 12)
# of the time (0.2-0.36x AR). The committed `dynatree.ipynb` outputs are still the `cpu-tiny` run (this
# profile has not been run through the whole notebook yet).
#
# **Profiles.** `cpu-tiny` (default; the committed outputs) uses the embedded pair
# (`specjax.zoo`: a 4.9M-parameter GPT-NeoX target and a 1.1M draft trained by specjax on
# Wikipedia + ShareGPT), a handful of held-out Wikipedia openings and short generations, on
# whatever device JAX finds; `cpu-smollm2` the same sizes on SmolLM2-135M-Instruct with its distilled
# draft LM, `cpu-smollm2-early-exit` with its untrained early-exit draft (above). `gpu` uses longer prompts and generations, and real checkpoints
# when `SPECJAX_TARGET` / `SPECJAX_DRAFT` point to HF-layout directories (e.g. Pythia-2.8B
# and Pythia-70M, the paper's pair). `ci` is the test suite's smoke run
# (`tests/test_notebooks.py`): the embedded pair, one counted prompt and no warm-up, 24 new
# tokens, two points per sweep and per plotted line, two forward widths in the cost cell;
# every cell, table, figure and losslessness check still runs, but its numbers are not
# results. The paper's numbers are shown beside ours; they come from a different scale
# (Pythia-2.8B/70M on an NVIDIA GPU, T = 1000, prompts of 800 tokens), so only orderings
# and mechanisms are comparable, never absolute values.

# %% tags=["parameters"]
import os

PROFILE = os.environ.get("SPECJAX_PROFILE", "cpu-tiny")

# %%
import json
import pathlib

import jax
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from IPython.display import display

from specjax.bench.harness import Method, environment, run_benchmark, table_rows, write_csv, write_json
from specjax.bench.methods import parse_method
from specjax.data.austen import austen_corpus
from specjax.data.prompts import wiki_corpus
from specjax.drafters.dynatree import DynaTreeDrafter, DynaTreeParams, Knobs
from specjax.pipeline import load_pair

PROFILES = {
    # ci: every cell at the least compile + run time (tests/test_notebooks.py); not results.
    # Tables 3 and 5 at Table 1's own shapes reuse its compiled programs (each length is a program per method).
    "ci": dict(prompts=1, warmup=0, max_new=24, prompt_len=48, gen_lengths=(24,), prompt_lengths=(48,),
               sweep_prompts=1, sweep_depths=(3, 6), sweep_branching=(2, 3), sweep_taus=(0.1,),
               cost_widths=(1, 64)),
    "cpu-tiny": dict(prompts=4, warmup=1, max_new=64, prompt_len=48, gen_lengths=(32, 64, 128),
                     prompt_lengths=(16, 48, 128), sweep_prompts=3, sweep_depths=(3, 5, 8), sweep_branching=(2, 3),
                     sweep_taus=(0.01, 0.03, 0.1)),
    "gpu": dict(prompts=10, warmup=2, max_new=500, prompt_len=200, gen_lengths=(100, 200, 500, 1000),
                prompt_lengths=(100, 200, 800), sweep_prompts=4, sweep_depths=(3, 4, 5, 6, 7, 8),
                sweep_branching=(2, 3, 4), sweep_taus=(0.01, 0.02, 0.03, 0.05, 0.1)),
}
PROFILES["cpu-smollm2"] = PROFILES["cpu-tiny"]  # the same sizes: SmolLM2 and its distilled draft LM (above)
PROFILES["cpu-smollm2-early-exit"] = PROFILES["cpu-tiny"]  # the same sizes: SmolLM2, drafted by its first layers
EARLY_EXIT_LAYERS = 6  # the early-exit draft of cpu-smollm2-early-exit (see "On SmolLM2" above)
if PROFILE not in PROFILES:
    raise ValueError(f"unknown profile {PROFILE!r}: one of {', '.join(PROFILES)}")
P = PROFILES[PROFILE]
pd.set_option("display.max_colwidth", None)  # long labels (claims, method specs) in full
OUT = pathlib.Path(os.environ.get("SPECJAX_NOTEBOOK_OUT", "results")) / "dynatree"
OUT.mkdir(parents=True, exist_ok=True)

# One `Pair` (specjax.pipeline): the target, its tokenizer and the draft LM, either the embedded pair (`encode`
# puts the zoo's EOS separator before a prompt) or the HF checkpoint directories SPECJAX_TARGET / SPECJAX_DRAFT.
if os.environ.get("SPECJAX_TARGET"):
    if not os.environ.get("SPECJAX_DRAFT"):
        raise ValueError("SPECJAX_TARGET is set but SPECJAX_DRAFT is not: give both checkpoint directories")
    pair = load_pair(os.environ["SPECJAX_TARGET"], ("draft",), draft=os.environ["SPECJAX_DRAFT"])
    names = (os.environ["SPECJAX_TARGET"], os.environ["SPECJAX_DRAFT"])
elif PROFILE == "cpu-smollm2":
    pair = load_pair("smollm2-135m", ("draft",))  # the zoo's draft LM, smollm2-135m-draft
    names = ("smollm2-135m-instruct", "smollm2-135m-draft")
elif PROFILE == "cpu-smollm2-early-exit":
    pair = load_pair("smollm2-135m", ("draft",), draft=f"early-exit:{EARLY_EXIT_LAYERS}")
    names = ("smollm2-135m-instruct", f"smollm2-135m-instruct, first {EARLY_EXIT_LAYERS} layers (early exit)")
else:
    pair = load_pair("zoo", ("draft",))
    names = ("tiny-neox-target", "tiny-neox-draft")
target, draft, encode = (pair.cfg, pair.params), pair.draft, pair.encode
d_cfg = draft[0]


def prompts_from(texts, length, count):
    """The first `length` tokens of the first `count` texts that are at least that long."""
    out = [ids[:length] for ids in map(encode, texts) if len(ids) >= length][:count]
    if len(out) < count:
        raise ValueError(f"only {len(out)} texts have >= {length} tokens, {count} needed")
    return out


wiki_texts = wiki_corpus("test")
prompts = prompts_from(wiki_texts, P["prompt_len"], P["warmup"] + P["prompts"])
print(f"profile {PROFILE}: {len(prompts)} prompts of {P['prompt_len']} tokens (first {P['warmup']} = warm-up), "
      f"{P['max_new']} new tokens, device {jax.devices()[0].device_kind}")


def bench(methods, prompt_list=None, max_new=None, ttft=False):
    """One same-run benchmark (TTFT/TPOT only where asked: they compile every method twice)."""
    return run_benchmark(target, draft, prompt_list or prompts, methods, max_new_tokens=max_new or P["max_new"],
                         warmup=P["warmup"], progress=False, ttft=ttft)


def results_table(results):
    """`format_table`'s columns as a DataFrame, one row per method (NaN: not measured)."""
    return pd.DataFrame(table_rows(results)).set_index("method").fillna(float("nan"))


# %% [markdown]
# ## Table 1 (and Table 2): AR, fixed tree, the three DynaTree phases, linear K = 6 / 7
#
# Settings as in Appendix A: fixed tree D = 5, B = 2, N_max = 256; DynaTree D_0 = 5,
# D_max = 8, (B_min, B_max) = (1, 3), (τ_h, τ_ℓ) = (0.9, 0.4); the knobs the paper does not
# list (B_mid, ρ_stop, ρ_deep, τ, N_max, the Phase-3 schedule) are documented in
# `specjax/drafters/dynatree.py`. `dynatree-p3 (tuned)` is Phase 3 with the knobs tuned on
# the *validation* split for this pair (`dynatree-zoo` in `specjax.bench.methods`); the
# paper also tunes ρ on held-out data (§3.2).
#
# Two caveats on comparing columns with the paper, found in the authors' code (details in
# `specjax/bench/harness.py`): their trees put a draft token at depth 0, so their "D = 5"
# holds 6 draft tokens per path (ours: 5), and their fixed tree also prunes at cumulative
# probability 0.05; their "Accept." is tokens per round (bonus included) divided by
# D + 2 = 7, and their "Avg. Path Len" includes the bonus token. Our acceptance rate is
# accepted draft tokens / depth of the drafted tree, and our path length excludes the bonus.

# %%
TUNED = parse_method("dynatree-zoo", d_cfg).name  # the preset, spelled out
AS_CHAIN = "dynatree-p1:d0=6,b_mid=1,b_max=1,n_max=6"  # DynaTree's machinery drafting a plain 6-token chain
table1_methods = ["ar", "fixed5x2", "dynatree-p1", "dynatree-p2", "dynatree-p3", TUNED, "chain6", "chain7", AS_CHAIN]
table1 = bench(table1_methods, ttft=True)
env = environment(*names, target[1], extra={"profile": PROFILE})
write_json(OUT / "table1.json", table1, env, {"profile": PROFILE, **P})
write_csv(OUT / "table1.csv", table1, env)
results_table(table1)

# %%
PAPER_TABLE1 = {  # Table 1 / Table 2 of the paper: t/s, speedup, accept %, tokens/iter, path len, TTFT ms, TPOT ms
    "ar": (131.1, 1.00, None, 1.00, None, 18.9, 7.61),
    "fixed5x2": (181.3, 1.38, 80.8, 5.65, 5.65, 12.7, 5.53),
    "dynatree-p1": (176.7, 1.35, 77.9, 5.35, 5.45, 13.9, 5.98),
    "dynatree-p2": (206.0, 1.57, 89.6, 6.06, 6.27, 12.5, 4.95),
    "dynatree-p3": (210.8, 1.61, 94.7, 6.49, 6.63, 12.6, 4.81),
}
PAPER_LINEAR = {"chain6": 1.26, "chain7": 1.30}  # Table 4, WikiText-2, 500 tokens
SHORT = {TUNED: "dynatree-zoo", AS_CHAIN: "dynatree as chain6"}  # row labels for the long method specs


def num(x, digits, scale=1.0):
    return float("nan") if x is None else round(x * scale, digits)


paper = {r.method: PAPER_TABLE1.get(r.method, (None,) * 7) for r in table1}
pd.DataFrame(
    {("ours", "speedup (×)"): [num(r.speedup, 2) for r in table1],
     ("ours", "τ (tokens/round)"): [num(r.tokens_per_iteration, 2) for r in table1],
     ("ours", "path (accepted tokens/round)"): [num(r.avg_path_length, 2) for r in table1],
     ("ours", "accept (%)"): [num(r.acceptance_rate, 1, 100) for r in table1],
     ("ours", "nodes/round"): [num(r.mean_tree_nodes, 1) for r in table1],
     ("ours", "TTFT (ms)"): [num(r.ttft_ms, 2) for r in table1],
     ("ours", "TPOT (ms)"): [num(r.tpot_ms, 3) for r in table1],
     ("paper", "speedup (×)"): [PAPER_LINEAR.get(r.method, paper[r.method][1]) for r in table1],
     ("paper", "τ (tokens/round)"): [paper[r.method][3] for r in table1],
     ("paper", "accept (%)"): [paper[r.method][2] for r in table1],
     ("paper", "TTFT (ms)"): [paper[r.method][5] for r in table1],
     ("paper", "TPOT (ms)"): [paper[r.method][6] for r in table1],
     ("paper", "source"): ["Table 4 (WikiText-2, 500 tokens)" if r.method in PAPER_LINEAR else
                           "Tables 1 / 2" if r.method in PAPER_TABLE1 else "" for r in table1]},
    index=pd.Index([SHORT.get(r.method, r.method) for r in table1], name="method"))

# %%
fig, ax = plt.subplots(1, 2, figsize=(11, 3.5))
labels = [SHORT.get(r.method, r.method) for r in table1]
ax[0].bar(labels, [r.throughput for r in table1], color="tab:blue")
ax[0].set_ylabel("tokens / s (ours)")
ax[1].bar(labels, [r.speedup for r in table1], color="tab:orange", label="ours")
ax[1].scatter([labels[i] for i, r in enumerate(table1) if r.method in PAPER_TABLE1],
              [PAPER_TABLE1[r.method][1] for r in table1 if r.method in PAPER_TABLE1], color="k", zorder=3,
              label="paper")
ax[1].axhline(1.0, color="gray", lw=0.8)
ax[1].set_ylabel("speedup vs AR")
ax[1].legend()
for a in ax:
    a.tick_params(axis="x", rotation=45)
fig.suptitle("Table 1 / Figure 3 analogue")
fig.tight_layout()
fig.savefig(OUT / "table1.png", dpi=120)

# %% [markdown]
# ### Why the ordering differs from the paper here: what a round costs
#
# On a GPU a target forward over 64 tree nodes costs about as much as over 1 (the weights
# are read once; the extra tokens fill idle compute), which is what makes wide trees pay.
# On a CPU the cost grows with the number of tokens verified. The cell below measures the
# target's and the draft's forward time against the number of tokens, on this device.

# %%
import time

import jax.numpy as jnp

from specjax.models.cache import init_cache
from specjax.models.model import forward_jit


def forward_ms(cfg, params, width, context=128, reps=20):
    cache = init_cache(cfg, 1, context + width + 1).replace(lengths=jnp.array([context], jnp.int32))
    tokens, positions = jnp.zeros((1, width), jnp.int32), context + jnp.arange(width)[None]
    mask = jnp.tril(jnp.ones((1, width, width), bool))
    logits, cache = forward_jit(params, cfg, tokens, positions, mask, cache)
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        logits, cache = forward_jit(params, cfg, tokens, positions, mask, cache)
        jax.block_until_ready(logits)
        times.append(time.perf_counter() - start)
    return 1e3 * float(np.median(times))


widths = P.get("cost_widths", (1, 2, 4, 8, 16, 32, 64, 128))  # must hold 1 and 64
cost = {name: [forward_ms(cfg, params, w) for w in widths] for name, (cfg, params) in
        (("target", target), ("draft", draft))}
display(pd.DataFrame({f"{name} forward (ms)": [round(m, 2) for m in ms] for name, ms in cost.items()},
                     index=pd.Index(widths, name="tokens verified")))
print(f"target(64 tokens) / target(1 token) = {cost['target'][widths.index(64)] / cost['target'][0]:.2f} "
      f"(on the paper's GPU this ratio is close to 1); draft / target forward at 1 token = "
      f"{cost['draft'][0] / cost['target'][0]:.2f}")
ms_per_round = {r.method: (r.total_seconds - r.ttft_ms * r.num_prompts / 1e3) * 1e3 / max(r.rounds, 1)
                for r in table1}  # decoding only: each prompt's time to first token removed
display(pd.DataFrame({"nodes/round": [round(r.mean_tree_nodes, 1) for r in table1[1:]],
                      "depth (tokens)": [round(r.mean_tree_depth, 2) for r in table1[1:]],
                      "τ (tokens/round)": [round(r.tokens_per_iteration, 2) for r in table1[1:]],
                      "round (ms)": [round(ms_per_round[r.method], 2) for r in table1[1:]]},
                     index=pd.Index([SHORT.get(r.method, r.method) for r in table1[1:]], name="method")))
print(f"DynaTree machinery as a 6-token chain vs the chain drafter, per round: "
      f"{ms_per_round[AS_CHAIN] / ms_per_round['chain6']:.2f}x")

# %% [markdown]
# ## Hyper-parameter sweep (reduced Figure 4 / Appendix B)
#
# The paper sweeps depth D, branching B and pruning threshold τ. Here: Phase 2 with
# D_max = D (D_0 = D − 1), B_max = B and τ, other knobs as in Table 1. All configurations
# share ONE compiled program: the knobs are passed as data (`DynaTreeParams`), so the sweep
# costs run time only.

# %%
sweep_base = DynaTreeDrafter(d_cfg, phase=2, d_max=max(P["sweep_depths"]), b_max=max(P["sweep_branching"]))
sweep_prompts = prompts[: P["warmup"] + P["sweep_prompts"]]
sweep_methods = []
for depth in P["sweep_depths"]:
    for branching in P["sweep_branching"]:
        for tau in P["sweep_taus"]:
            knobs = Knobs(tau_h=0.9, tau_l=0.4, d0=depth - 1, d_max=depth, b_min=1, b_mid=min(2, branching),
                          b_max=branching, rho_stop=0.1, rho_deep=0.5, tau=tau)
            sweep_methods.append(Method(f"D={depth} B={branching} tau={tau}", sweep_base,
                                        DynaTreeParams(lm=draft[1], knobs=knobs)))
sweep = bench(["ar", *sweep_methods], prompt_list=sweep_prompts)
grid = {m.name: r for m, r in zip(sweep_methods, sweep[1:])}
best = max(sweep[1:], key=lambda r: r.speedup)
print(f"best: {best.method}  {best.speedup:.2f}x  tokens/iter {best.tokens_per_iteration:.2f}")

fig, ax = plt.subplots(1, 3, figsize=(13, 3.5))
tau0 = P["sweep_taus"][len(P["sweep_taus"]) // 2]
for branching in P["sweep_branching"]:
    ax[0].plot(P["sweep_depths"], [grid[f"D={d} B={branching} tau={tau0}"].speedup for d in P["sweep_depths"]],
               marker="o", label=f"B={branching}")
for depth in P["sweep_depths"]:
    ax[1].plot(P["sweep_branching"], [grid[f"D={depth} B={b} tau={tau0}"].speedup for b in P["sweep_branching"]],
               marker="o", label=f"D={depth}")
    ax[2].semilogx(P["sweep_taus"], [grid[f"D={depth} B={max(P['sweep_branching'])} tau={t}"].speedup
                                     for t in P["sweep_taus"]], marker="o", label=f"D={depth}")
for a, xl in zip(ax, ("depth D", "branching B", "pruning threshold tau")):
    a.set_xlabel(xl)
    a.set_ylabel("speedup vs AR")
    a.legend()
fig.suptitle(f"Figure 4 analogue (tau = {tau0} in (a), (b); B = {max(P['sweep_branching'])} in (c))")
fig.tight_layout()
fig.savefig(OUT / "sweep.png", dpi=120)
write_json(OUT / "sweep.json", sweep, env, {"profile": PROFILE, **P})

# %% [markdown]
# ## Table 3: generation length
#
# For each length: AR, linear K = 6 and the tuned DynaTree. (The paper reports the best
# sweep configuration per length; we keep one tuned configuration so that the table
# isolates the effect of length.)

# %%
table3 = {}
for length in P["gen_lengths"]:
    table3[length] = bench(["ar", "chain6", TUNED], max_new=length)
PAPER_TABLE3 = {100: 1.54, 200: 1.32, 500: 1.39, 750: 1.48, 1000: 1.57}
display(pd.DataFrame({"AR (tokens/s)": [round(ar.throughput, 1) for ar, _, _ in table3.values()],
                      "linear K=6 speedup (×)": [round(chain.speedup, 2) for _, chain, _ in table3.values()],
                      "DynaTree (tuned) speedup (×)": [round(dyn.speedup, 2) for _, _, dyn in table3.values()],
                      "DynaTree accept (%)": [round(100 * dyn.acceptance_rate, 1) for _, _, dyn in table3.values()]},
                     index=pd.Index(list(table3), name="generated tokens")))
print("paper, DynaTree (best config per length) vs AR: "
      + ", ".join(f"{length} tokens {speedup:.2f}x" for length, speedup in PAPER_TABLE3.items()))
fig, ax = plt.subplots(figsize=(5, 3.5))
for i, label in enumerate(("AR", "linear K=6", "DynaTree (tuned)")):
    ax.plot(list(table3), [rs[i].throughput for rs in table3.values()], marker="o", label=label)
ax.set_xlabel("generated tokens")
ax.set_ylabel("tokens / s")
ax.legend()
fig.tight_layout()
fig.savefig(OUT / "table3.png", dpi=120)

# %% [markdown]
# ## Table 4: cross-dataset — Wikipedia vs long-form fiction
#
# PG-19 is Project Gutenberg books; our long-form corpus is Jane Austen's six novels
# (Gutenberg texts, shipped in a Debian package, held-out chapters). DynaTree D = 6 / 7 is
# Phase 3 with D_max = 6 / 7 (other knobs as tuned).

# %%
TABLE4_METHODS = ["ar", "chain6", "chain7", TUNED, TUNED.replace("d_max=6", "d_max=7")]
try:
    fiction = prompts_from(austen_corpus("test"), P["prompt_len"], P["warmup"] + P["prompts"])
except Exception as err:  # the Debian package is fetched on first use; report, don't hide
    fiction = None
    print(f"long-form corpus unavailable, Table 4 skipped: {err}")
if fiction:
    table4 = {"fiction (Austen)": bench(TABLE4_METHODS, prompt_list=fiction), "wiki": bench(TABLE4_METHODS)}
    PAPER_TABLE4 = {"PG-19": (None, 1.20, 1.20, 1.32, None), "WikiText-2": (None, 1.26, 1.30, 1.39, None)}
    columns = {}
    for name, rs in table4.items():
        columns[name, "tokens/s"] = [round(r.throughput, 1) for r in rs]
        columns[name, "speedup (×)"] = [round(r.speedup, 2) for r in rs]
    columns.update({(f"paper: {name}", "speedup (×)"): list(v) for name, v in PAPER_TABLE4.items()})
    display(pd.DataFrame(columns, index=pd.Index(["AR", "linear K=6", "linear K=7", "DynaTree D=6", "DynaTree D=7"],
                                                 name="method")))

# %% [markdown]
# ## Table 5: prompt length

# %%
table5 = {}
for length in P["prompt_lengths"]:
    plist = prompts_from(wiki_texts, length, P["warmup"] + P["prompts"])
    table5[length] = bench(["ar", "chain6", "chain7", TUNED], prompt_list=plist)
display(pd.DataFrame({"AR (tokens/s)": [round(rs[0].throughput, 1) for rs in table5.values()],
                      **{f"{label} speedup (×)": [round(rs[i].speedup, 2) for rs in table5.values()]
                         for i, label in enumerate(("linear K=6", "linear K=7", "DynaTree (tuned)"), start=1)}},
                     index=pd.Index(list(table5), name="prompt tokens")))
print("paper (100/200/800/1000 tokens): K=6 1.19/1.38/1.26/1.04x, DynaTree D=6 1.36/1.55/1.39/1.21x")
fig, ax = plt.subplots(figsize=(5, 3.5))
for i, label in enumerate(("linear K=6", "linear K=7", "DynaTree (tuned)"), start=1):
    ax.plot(list(table5), [rs[i].speedup for rs in table5.values()], marker="o", label=label)
ax.axhline(1.0, color="gray", lw=0.8)
ax.set_xlabel("prompt tokens")
ax.set_ylabel("speedup vs AR")
ax.legend()
fig.tight_layout()
fig.savefig(OUT / "table5.png", dpi=120)

# %% [markdown]
# ## Where we agree with the paper, and where not
#
# The checks below are computed from this run (they are shown, not asserted: the
# notebook reports what it measured).

# %%
by = {r.method: r for r in table1}
checks = {
    "every speculative output identical to AR, or parting at a float near-tie (greedy losslessness)": all(
        not r.mismatches for r in table1),
    "Phase 2 beats Phase 1 (dynamic depth + pruning pay)": by["dynatree-p2"].speedup > by["dynatree-p1"].speedup,
    "Phase 3 >= Phase 2": by["dynatree-p3"].speedup >= by["dynatree-p2"].speedup,
    "Phase 3 (paper knobs) beats the fixed tree D=5 B=2": by["dynatree-p3"].speedup > by["fixed5x2"].speedup,
    "tuned DynaTree beats the fixed tree": by[TUNED].speedup > by["fixed5x2"].speedup,
    "tuned DynaTree beats linear K=6 and K=7": by[TUNED].speedup > max(by["chain6"].speedup, by["chain7"].speedup),
    "fixed tree beats AR": by["fixed5x2"].speedup > 1.0,
    "tuned DynaTree beats AR": by[TUNED].speedup > 1.0,
}
display(pd.DataFrame({"this run": ["agrees" if holds else "differs" for holds in checks.values()]},
                     index=pd.Index(list(checks), name="claim")))
print(f"mean draft-token acceptance along the path: paper 77.9–94.7 %, ours "
      f"{min(r.acceptance_rate for r in table1[1:]) * 100:.0f}–{max(r.acceptance_rate for r in table1[1:]) * 100:.0f} %")
summary = {"checks": checks, "table1": [r.to_dict() for r in table1], "environment": env}
every_result = [*table1, *sweep, *(r for rs in table3.values() for r in rs), *(r for rs in table5.values() for r in rs),
                *(r for rs in (table4.values() if fiction else ()) for r in rs)]
lossy = [r.method for r in every_result if r.mismatches]
assert not lossy, f"greedy output differs from AR beyond a near-tie (a losslessness bug): {lossy}"
with open(OUT / "summary.json", "w") as f:
    json.dump(summary, f, indent=2, default=str)

# %% [markdown]
# **Reading the results** (numbers in the cells above; the CPU run recorded in the
# project notes gave the same orderings). The paper's ordering (AR < fixed tree ≈ Phase 1
# < Phase 2 < Phase 3) rests on two facts of its setting: (1) a GPU verifies a 60-node tree
# for about the price of one token, and (2) Pythia-70M is a confident draft for
# Pythia-2.8B (80–95 % in the authors' acceptance measure). Neither holds here:
#
# * *Verification is not free on a CPU.* The cost cell shows the target's forward growing
#   with the number of tokens it verifies (the printed 64-token / 1-token ratio), so the
#   fixed tree (62 nodes) and Phase 1 (the most nodes per round: the weak draft is rarely
#   confident, so most nodes get B_max = 3 children) accept the most tokens per round and
#   are still the slowest per token, below AR.
# * *The draft is weak and under-confident.* Its top-1 probability is mostly below 0.5, so
#   with the paper's gates (ρ_stop = 0.1, τ = 0.05) Phase 2/3 stop most paths after one or
#   two tokens: tiny trees, cheap rounds, but fewer tokens per round than a chain. Phase 3's
#   schedule moves (τ_h, τ_ℓ, D_0) but not the probability gates, so it cannot undo this.
#   Phase 2/3 still beat Phase 1 and the fixed tree, as in the paper.
# * *Tuned on validation prompts* (`dynatree-zoo`: narrow, small, loosely gated trees;
#   about 1.15x AR on the validation prompts it was tuned on) DynaTree is the fastest tree
#   method here but only around AR's speed on the held-out prompts, and a linear chain of
#   6–7 tokens stays ahead: a chain spends its whole budget on the one path that a weak
#   draft most often gets right, and each extra node of a tree costs target time on this
#   device. Phase 3's schedule does not help either: with path acceptance mostly below its
#   `accept_low`, it moves towards conservative settings.
#   The drafting machinery itself is a small part of the gap: DynaTree configured as a pure
#   6-token chain (B = 1) costs only slightly more per round than the chain drafter (the
#   ratio is printed in the cost cell).
#
# With the `gpu` profile and the paper's pair these two mechanisms flip back, which is the
# regime where the paper's ordering is expected; that run needs a GPU (none was lent to
# the task that produced this notebook).
