# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.7
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # DDTree at small scale: Table 1, Figures 3–4, calibration, round costs, a projection
#
# This notebook reruns the experiments of *Accelerating speculative decoding with block
# diffusion draft trees* (DDTree, arXiv 2604.12989) with `specjax`: one drafter forward
# of a trained DFlash drafter gives per-position marginals q_1..q_L; DDTree verifies the N
# most probable prefixes under Q = prod q_d as one tree; chain DFlash verifies the argmax
# chain. Every method runs in the same decode loop (one jitted `lax.while_loop`), is timed
# in the same process with compile time excluded and warm-up prompts discarded
# (`specjax.bench.harness`), and greedy outputs are checked token for token against AR.
#
# **Profiles.** `cpu-smollm2` (default; the committed outputs): SmolLM2-135M-Instruct (the
# registry GGUF, fetched once and cached) with `smollm2-135m-dflash` (a DFlash drafter
# trained by specjax: `specjax/zoo/TRAINING.md`; the committed outputs predate its current
# weights of 2026-11-29, and `make notebooks` reruns them), chat-templated prompts, two
# counted prompts per dataset, 48 new tokens, budgets up to 64, the target's layers unstacked
# (`MODELS["smollm2-135m"].serving`: the faster AR step and speculative round on a CPU). `cpu-tiny`:
# the embedded pair (`specjax.zoo`: the 4.9M-parameter GPT-NeoX target and
# `tiny-neox-dflash`), no download, a few minutes. `gpu`: SmolLM2 again at the paper's
# settings (longer prompts and generations, budgets to 1024) and the projection on a
# Qwen3-8B-shaped random-weight target. `ci` is the test suite's smoke run (`tests/test_notebooks.py`):
# the embedded pair, one counted prompt per dataset (all six, both temperatures) and no
# warm-up, 24 new tokens, one budget in Table 1, two in the sweep, one in the round split;
# every cell, table, figure and losslessness check still runs, but its numbers are not
# results. The paper's numbers (Qwen3 4B/8B/30B on H200s, 2048 new tokens) are shown
# beside ours as cited input; only orderings and mechanisms are comparable, never
# absolute values.
#
# **On a CPU** the target's cost grows with every token it verifies, so small budgets win
# on time there; τ (tokens per round, bonus included) is the primary small-scale metric.

# %% tags=["parameters"]
import os

PROFILE = os.environ.get("SPECJAX_PROFILE", "cpu-smollm2")

# %%
import json
import pathlib

if PROFILE == "gpu":  # measured on an H100: 2.3x faster bf16 decode without XLA's Triton GEMMs (must precede jax)
    os.environ.setdefault("XLA_FLAGS", "--xla_gpu_enable_triton_gemm=false")

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from IPython.display import display

from specjax import zoo
from specjax.bench.harness import environment, run_benchmark, table_rows, write_json
from specjax.bench.methods import parse_method
from specjax.bench.round_split import PARTS, costs_from_figures, project_speedup, round_split
from specjax.data.datasets import dataset_prompts
from specjax.decode import generate
from specjax.models import pad_prompts
from specjax.pipeline import MODELS, load_pair
from specjax.sampling import Sampling

PROFILES = {
    # ci: every cell at the least compile + run time (tests/test_notebooks.py); not results.
    "ci": dict(prompts=1, warmup=0, max_new=24, prompt_len=48, budgets=(16,), fixed=16, sweep=(16, 32),
               sweep_prompts=1, calib_prompts=1, reps=1, split_budgets=(16,), datasets=("GSM8K",)),
    "cpu-tiny": dict(prompts=3, warmup=1, max_new=64, prompt_len=48, budgets=(4, 8, 16, 32, 64), fixed=16,
                     sweep=(16, 32, 64, 128, 256, 512, 1024), sweep_prompts=2, calib_prompts=6, reps=15),
    # cpu-smollm2: the real model on 2 CPU cores (about 30 minutes); a round's cost grows with its width
    # there, so the budgets stop at 64.
    "cpu-smollm2": dict(prompts=2, warmup=1, max_new=48, prompt_len=192, budgets=(4, 8, 16), fixed=8,
                        sweep=(4, 8, 16, 32, 64), sweep_prompts=2, calib_prompts=3, reps=5),
    "gpu": dict(prompts=16, warmup=2, max_new=256, prompt_len=256, budgets=(16, 32, 64, 128, 256, 512), fixed=256,
                sweep=(16, 32, 64, 128, 256, 512, 1024), sweep_prompts=8, calib_prompts=16, reps=20),
}
P = PROFILES[PROFILE]
DATASETS = {"GSM8K": "gsm8k", "MATH-500": "math500", "HumanEval": "humaneval", "MBPP": "mbpp",
            "MT-Bench": "mtbench", "ShareGPT (Alpaca stand-in)": "sharegpt"}
DATASETS = {label: name for label, name in DATASETS.items() if label in P.get("datasets", DATASETS)}  # ci: one
pd.set_option("display.max_colwidth", None)  # long labels (claims, method specs) in full
OUT = pathlib.Path(os.environ.get("SPECJAX_NOTEBOOK_OUT", "results")) / "ddtree"
OUT.mkdir(parents=True, exist_ok=True)

# One `Pair` (specjax.pipeline): the target, its tokenizer (`encode` puts the zoo's EOS separator before a
# prompt; SmolLM2's wraps it in the chat template) and the zoo's DFlash drafter for it.
SMOLLM2 = PROFILE in ("cpu-smollm2", "gpu")
LAYOUT = MODELS["smollm2-135m"].serving_for().layout if SMOLLM2 else "stacked"  # its measured best here
pair = load_pair("smollm2-135m" if SMOLLM2 else "zoo", ("dflash",),
                 layout=LAYOUT)
names = (("smollm2-135m-instruct", "smollm2-135m-dflash") if SMOLLM2 else
         ("tiny-neox-target", "tiny-neox-dflash"))
t_cfg, t_params, dflash, chat = pair.cfg, pair.params, pair.readers["dflash"], pair.has_chat_template
target = (t_cfg, t_params)


def encode(text):
    return pair.encode(text, chat=chat)


def method(spec):
    return parse_method(spec, None, dflash=dflash, target_cfg=t_cfg)


def prompts_of(dataset, count, length=None):
    return dataset_prompts(dataset, encode, count, length or P["prompt_len"], chat=chat)


def bench(specs, prompt_list, temperature=0.0, max_new=None):
    """One same-run benchmark; every prompt padded to prompt_len so all datasets share compiled shapes."""
    return run_benchmark(target, None, prompt_list, [method(s) if s != "ar" else "ar" for s in specs],
                         max_new_tokens=max_new or P["max_new"], prompt_width=P["prompt_len"], warmup=P["warmup"],
                         sampling=Sampling(temperature), progress=False, ttft=False)


def results_table(results):
    """`format_table`'s columns as a DataFrame, one row per method (NaN: not measured)."""
    return pd.DataFrame(table_rows(results)).set_index("method").fillna(float("nan"))


env = environment(*names, t_params, extra={"profile": PROFILE})
print(f"profile {PROFILE}: target {names[0]}, drafter {names[1]} (block {dflash[0].block_size}, reads target "
      f"layers {dflash[0].target_layer_ids}); {P['prompts']} prompts per dataset (+{P['warmup']} warm-up), "
      f"{P['max_new']} new tokens; device {jax.devices()[0].device_kind}")

# %% [markdown]
# ## Table 1: chain DFlash vs DDTree, per dataset, at T = 0 and T = 1
#
# As in the paper, "DDTree (best)" is the best budget per cell over the budgets in the
# profile (an oracle choice, as the paper's); "DDTree (N fixed)" is one budget for every
# cell, the fair number (the paper's Table 1, §5.2, reports only the best of its seven budgets
# per cell). Speedups are over AR in the same run.

# %%
BUDGETS, FIXED = P["budgets"], P["fixed"]
SPECS = ["ar", "dflash", *(f"ddtree-{n}" for n in BUDGETS)]
table1 = {}
for label, dataset in DATASETS.items():
    plist = prompts_of(dataset, P["warmup"] + P["prompts"])
    for temperature in (0.0, 1.0):
        table1[label, temperature] = {r.method: r for r in bench(SPECS, plist, temperature)}
        lossy = [m for m, r in table1[label, temperature].items() if r.mismatches]
        assert not lossy, f"greedy output differs from AR beyond a near-tie on {label} (a losslessness bug): {lossy}"


def best(rows):
    return max((rows[f"ddtree-{n}"] for n in BUDGETS), key=lambda r: r.speedup)


rows_out = []
for (label, temperature), rows in table1.items():
    chain, top, fixed = rows["dflash"], best(rows), rows[f"ddtree-{FIXED}"]
    tau_ratio = fixed.tokens_per_iteration / chain.tokens_per_iteration
    rows_out.append(dict(dataset=label, temperature=temperature, dflash_speedup=chain.speedup,
                         dflash_tau=chain.tokens_per_iteration, best_method=top.method, best_speedup=top.speedup,
                         best_tau=top.tokens_per_iteration, fixed_speedup=fixed.speedup,
                         fixed_tau=fixed.tokens_per_iteration, tau_ratio_fixed=tau_ratio,
                         max_tau=max(rows[f"ddtree-{n}"].tokens_per_iteration for n in BUDGETS)))
    rows_out[-1]["tau_ratio_best_tau"] = rows_out[-1]["max_tau"] / chain.tokens_per_iteration
write_json(OUT / "table1.json", [r for rows in table1.values() for r in rows.values()], env,
           {"profile": PROFILE, **P, "rows": rows_out})
TAU, SPEEDUP = "τ (tokens/round)", "speedup (×)"
pd.DataFrame(
    {("DFlash (chain)", SPEEDUP): [round(r["dflash_speedup"], 2) for r in rows_out],
     ("DFlash (chain)", TAU): [round(r["dflash_tau"], 2) for r in rows_out],
     ("DDTree (best)", SPEEDUP): [round(r["best_speedup"], 2) for r in rows_out],
     ("DDTree (best)", TAU): [round(r["best_tau"], 2) for r in rows_out],
     ("DDTree (best)", "budget N (nodes)"): [int(r["best_method"].split("-")[1]) for r in rows_out],
     (f"DDTree ({FIXED} fixed)", SPEEDUP): [round(r["fixed_speedup"], 2) for r in rows_out],
     (f"DDTree ({FIXED} fixed)", TAU): [round(r["fixed_tau"], 2) for r in rows_out],
     ("τ / DFlash τ (×)", f"DDTree-{FIXED}"): [round(r["tau_ratio_fixed"], 2) for r in rows_out],
     ("τ / DFlash τ (×)", "largest over budgets"): [round(r["tau_ratio_best_tau"], 2) for r in rows_out]},
    index=pd.MultiIndex.from_tuples([(r["dataset"], int(r["temperature"])) for r in rows_out], names=["dataset", "T"]))

# %%
PAPER_TABLE1_QWEN3_8B = {  # (DFlash speedup, tau, DDTree speedup, tau), Table 1 of the paper, Qwen3-8B (cited input)
    ("GSM8K", 0): (4.78, 6.57, 6.75, 9.54), ("MATH-500", 0): (5.56, 7.79, 7.52, 10.73),
    ("HumanEval", 0): (4.84, 6.61, 6.90, 9.67), ("MBPP", 0): (4.33, 5.99, 6.39, 9.07),
    ("MT-Bench", 0): (2.56, 4.28, 4.10, 6.58), ("ShareGPT (Alpaca stand-in)", 0): (2.07, 3.12, 3.36, 5.09),
    ("GSM8K", 1): (4.33, 5.93, 6.27, 8.95), ("MATH-500", 1): (4.56, 6.46, 6.59, 9.54),
    ("HumanEval", 1): (4.00, 5.48, 6.09, 8.59), ("MBPP", 1): (3.83, 5.30, 5.87, 8.34),
    ("MT-Bench", 1): (2.30, 3.77, 3.75, 6.02), ("ShareGPT (Alpaca stand-in)", 1): (1.95, 2.94, 3.20, 4.89),
}
fig, ax = plt.subplots(1, 2, figsize=(13, 3.8))
labels = [f"{k[0].split(' ')[0]}\nT={k[1]:.0f}" for k in table1]
x = np.arange(len(labels))
bars = (("dflash", "chain DFlash", "tab:gray"), ("fixed", f"DDTree-{FIXED}", "tab:blue"),
        ("best", "DDTree (best budget)", "tab:orange"))
for i, (key, name, color) in enumerate(bars):  # τ: the largest over budgets; speedup: the fastest budget
    ax[0].bar(x + (i - 1) * 0.27, [r["max_tau" if key == "best" else f"{key}_tau"] for r in rows_out], 0.27,
              label=name, color=color)
    ax[1].bar(x + (i - 1) * 0.27, [r[f"{key}_speedup"] for r in rows_out], 0.27, label=name, color=color)
paper_ratio = [v[3] / v[1] for v in PAPER_TABLE1_QWEN3_8B.values()]
ax[0].set_ylabel("τ (tokens / round)")
ax[1].set_ylabel("speedup vs AR (this device)")
ax[1].axhline(1.0, color="k", lw=0.8)
for a in ax:
    a.set_xticks(x, labels, fontsize=7, rotation=45)
    a.legend(fontsize=8)
fig.suptitle(f"Table 1 analogue ({names[0]}); paper DDTree/DFlash τ ratio on Qwen3-8B: "
             f"{min(paper_ratio):.2f}–{max(paper_ratio):.2f}x")
fig.tight_layout()
fig.savefig(OUT / "table1.png", dpi=120)

# %% [markdown]
# ## Figure 3: the budget sweep (MATH-500, T = 0)
#
# τ must be non-decreasing in the budget (the optimal trees are nested, P6); the speedup is
# unimodal in the paper (peak at 256–512 on an H200). On a CPU each verified token costs
# target time, so the peak moves to small budgets.

# %%
sweep_prompts = prompts_of("math500", P["warmup"] + P["sweep_prompts"])
sweep = {r.method: r for r in bench(["ar", "dflash", *(f"ddtree-{n}" for n in P["sweep"])], sweep_prompts)}
PAPER_FIG3 = {16: (6.1, 8.6), 32: (6.6, 9.3), 64: (7.0, 9.75), 128: (7.3, 10.2), 256: (7.4, 10.4), 512: (7.5, 10.7),
              1024: (6.8, 11.0)}  # (speedup, tau) read from the paper's Figure 3 (±0.05; cited input)
taus = [sweep[f"ddtree-{n}"].tokens_per_iteration for n in P["sweep"]]
speedups = [sweep[f"ddtree-{n}"].speedup for n in P["sweep"]]
nodes = [sweep[f"ddtree-{n}"].mean_tree_nodes for n in P["sweep"]]
figure3 = pd.DataFrame(
    {"τ (tokens/round)": [round(t, 2) for t in taus] + [round(sweep["dflash"].tokens_per_iteration, 2)],
     "speedup (×)": [round(s, 2) for s in speedups] + [round(sweep["dflash"].speedup, 2)],
     "kept nodes/round": [round(k, 1) for k in nodes] + [round(sweep["dflash"].mean_tree_nodes, 1)],
     "paper τ (tokens/round)": [PAPER_FIG3.get(n, (np.nan, np.nan))[1] for n in P["sweep"]] + [7.79],
     "paper speedup (×)": [PAPER_FIG3.get(n, (np.nan, np.nan))[0] for n in P["sweep"]] + [5.56]},  # NaN: not in Fig. 3
    index=pd.Index([f"DDTree-{n}" for n in P["sweep"]] + ["chain DFlash"], name="method"))
display(figure3)
fig, ax = plt.subplots(1, 2, figsize=(11, 3.5))
ax[0].semilogx(P["sweep"], taus, "o-", base=2, label="ours (DDTree)")
ax[0].axhline(sweep["dflash"].tokens_per_iteration, color="gray", ls="--", label="ours (chain DFlash)")
ax[0].set_ylabel("τ")
ax[1].semilogx(P["sweep"], speedups, "o-", base=2, label="ours (DDTree)")
ax[1].axhline(sweep["dflash"].speedup, color="gray", ls="--", label="ours (chain DFlash)")
ax[1].set_ylabel("speedup vs AR")
ax2 = [a.twinx() for a in ax]
ax2[0].semilogx(list(PAPER_FIG3), [v[1] for v in PAPER_FIG3.values()], "k^:", base=2, label="paper (right axis)")
ax2[1].semilogx(list(PAPER_FIG3), [v[0] for v in PAPER_FIG3.values()], "k^:", base=2, label="paper (right axis)")
for a, b in zip(ax, ax2):
    a.set_xlabel("node budget N")
    a.legend(loc="upper left", fontsize=8)
    b.legend(loc="lower right", fontsize=8)
fig.suptitle("Figure 3 analogue: budget sweep, MATH-500, T = 0")
fig.tight_layout()
fig.savefig(OUT / "figure3.png", dpi=120)

# %% [markdown]
# ## Figure 4: acceptance-length histograms (MATH-500, T = 0)
#
# Acceptance length = accepted draft tokens + the bonus (1..L+1). The paper (B = 512):
# length-1 rounds nearly vanish under DDTree.

# %%
big = f"ddtree-{max(n for n in P['sweep'] if n <= 512)}"
fig, ax = plt.subplots(figsize=(7, 3.3))
figure4 = {}
for i, name in enumerate(("dflash", big)):
    hist = np.asarray(sweep[name].accept_hist, float)
    hist /= hist.sum()
    lengths = np.arange(1, len(hist) + 1)
    ax.bar(lengths + (i - 0.5) * 0.4, 100 * hist, 0.4, label=name)
    figure4[name] = {"length 1 (% of rounds)": round(100 * hist[0], 1),
                     f"length {len(hist)} (% of rounds)": round(100 * hist[-1], 1),
                     "mean acceptance length (tokens)": round(float((lengths * hist).sum()), 2)}
display(pd.DataFrame.from_dict(figure4, orient="index").rename_axis("method"))
ax.set_xlabel("acceptance length (bonus included)")
ax.set_ylabel("% of rounds")
ax.legend()
fig.suptitle("Figure 4 analogue (paper, B = 512: DFlash 10 % at length 1, DDTree ≈ 0 %)")
fig.tight_layout()
fig.savefig(OUT / "figure4.png", dpi=120)

# %% [markdown]
# ## Calibration: the surrogate Σ q(u) against the realised acceptance, per round
#
# DDTree maximises the drafter-side expectation E_{Y~Q}[α_T(Y)] = Σ_{u∈T} q(u)
# (Proposition 1 with the drafter's law). Under the target, one round accepts Σ_{u∈T} p(u)
# drafted tokens on average (T = 1; tested exactly in `tests/test_ddtree.py`). How well
# does the surrogate predict what the target accepts? Each round's Σ q(u) is recorded by
# the drafter (`DDTreeState.surrogate`); rounds are binned by it.

# %%
calib_prompts = prompts_of("math500", P["calib_prompts"]) + prompts_of("gsm8k", P["calib_prompts"])
tokens, lengths = pad_prompts(calib_prompts, P["prompt_len"])
calib, calib_rows = {}, {}
for temperature in (0.0, 1.0):
    m = method(f"ddtree-{FIXED}")
    out = generate(t_params, t_cfg, m.drafter, m.params, tokens, lengths, P["max_new"],
                   sampling=Sampling(temperature), key=jax.random.key(3), eos_ids=())
    surrogate = np.asarray(out.draft_state.surrogate)
    accepted = np.asarray(out.stats.accepted)
    ok = (accepted >= 0) & (surrogate >= 0)
    ok[np.arange(len(ok)), np.asarray(out.stats.num_rounds) - 1] = False  # last round: cut by max_new_tokens
    calib[temperature] = (surrogate[ok], accepted[ok])
fig, ax = plt.subplots(1, 2, figsize=(11, 3.6))
for a, (temperature, (s, acc)) in zip(ax, calib.items()):
    edges = np.quantile(s, np.linspace(0, 1, 9))
    which = np.clip(np.searchsorted(edges, s, side="right") - 1, 0, len(edges) - 2)
    xs = [s[which == i].mean() for i in range(len(edges) - 1) if np.any(which == i)]
    ys = [acc[which == i].mean() for i in range(len(edges) - 1) if np.any(which == i)]
    a.scatter(s, acc + np.random.default_rng(0).uniform(-0.15, 0.15, acc.shape), s=4, alpha=0.25, color="tab:blue")
    a.plot(xs, ys, "o-", color="tab:red", label="binned mean")
    a.plot([0, s.max()], [0, s.max()], "k--", lw=0.8, label="y = x")
    a.set_xlabel("Σ_{u∈T} q(u) (drafter's expected accepted tokens)")
    a.set_ylabel("accepted draft tokens")
    a.set_title(f"T = {temperature:.0f}: {len(s)} rounds, mean surrogate {s.mean():.2f}, mean accepted {acc.mean():.2f},"
                f" corr {np.corrcoef(s, acc)[0, 1]:.2f}", fontsize=8)
    a.legend(fontsize=8)
    calib_rows[int(temperature)] = {"mean Σq(u) (tokens/round)": round(float(s.mean()), 3),
                                    "mean accepted (tokens/round)": round(float(acc.mean()), 3),
                                    "correlation": round(float(np.corrcoef(s, acc)[0, 1]), 3), "rounds": len(s)}
display(pd.DataFrame.from_dict(calib_rows, orient="index").rename_axis("T"))
fig.suptitle(f"Calibration of the DDTree surrogate (ddtree-{FIXED}, MATH-500 + GSM8K)")
fig.tight_layout()
fig.savefig(OUT / "calibration.png", dpi=120)

# %% [markdown]
# ## What a round costs: draft / select / mask / verify / walk + commit
#
# Each part jitted alone from a real mid-generation state (`specjax.bench.round_split`),
# medians in milliseconds, per budget; `round` is the loop's round jitted whole.

# %%
split_tokens, split_lengths = pad_prompts(prompts_of("math500", 1), P["prompt_len"])
costs = {}
for n in P.get("split_budgets", P["sweep"]):
    m = method(f"ddtree-{n}")
    costs[n] = round_split(target, m.drafter, m.params, split_tokens, split_lengths, reps=P["reps"],
                           max_new=P["max_new"])
display(pd.DataFrame.from_dict({n: {"verify width (tokens)": c["width"], **{f"{p} (ms)": round(c[p], 3) for p in PARTS}}
                                for n, c in costs.items()}, orient="index").rename_axis("budget N"))
fig, ax = plt.subplots(figsize=(7, 3.5))
bottom = np.zeros(len(costs))
for part in ("draft", "select", "mask", "verify", "walk_commit"):
    vals = np.array([c[part] for c in costs.values()])
    ax.bar([str(n) for n in costs], vals, bottom=bottom, label=part)
    bottom += vals
ax.plot([str(n) for n in costs], [c["round"] for c in costs.values()], "k^", label="whole round (fused)")
ax.set_xlabel("node budget N")
ax.set_ylabel("ms")
ax.legend(fontsize=8)
fig.suptitle(f"Round time split on {jax.devices()[0].device_kind}")
fig.tight_layout()
fig.savefig(OUT / "round_split.png", dpi=120)

# %% [markdown]
# ## A projection to the paper's scale (a simulation, not a measurement)
#
# Predicted speedup over AR = τ(N) × (AR step) / (round at budget N), with specjax's own
# round costs measured above and τ(N) from the paper's Figure 3 (Qwen3-8B, MATH-500, T = 0;
# typed-in cited input, ±0.05). With the `gpu` profile the costs come from a Qwen3-8B-shaped
# random-weight target and a 5-layer DFlash drafter of that width (bf16); on a CPU the table
# uses the costs measured above on this profile's target (SmolLM2-135M, or the tiny pair), so it
# says what *our round costs* would give with the paper's acceptance, nothing about Qwen3-8B.

# %%
if PROFILE == "gpu":
    from specjax.drafters.ddtree import DDTreeDrafter
    from specjax.drafters.dflash import DFlashDrafter
    from specjax.models import LlamaConfig, init_params
    from specjax.models.dflash import DFlashConfig

    big_cfg = LlamaConfig(vocab_size=151936, hidden_size=4096, num_layers=36, num_heads=32, num_kv_heads=8,
                          head_dim=128, intermediate_size=12288, qk_norm=True, flavor="qwen3", rope_theta=1e6)
    big_params = init_params(big_cfg, jax.random.key(0), jnp.bfloat16)
    big_draft = DFlashConfig.for_target(big_cfg, num_layers=5, block_size=16, mask_token_id=151669)
    big_dparams = init_params(big_draft, jax.random.key(1), jnp.bfloat16)
    ptoks, plens = pad_prompts([list(range(1, 513))], 512)
    proj_costs = {n: round_split((big_cfg, big_params), DDTreeDrafter(DFlashDrafter(big_draft, big_cfg), n,
                                                                       prune_mass=0.0),
                                 big_dparams, ptoks, plens, reps=P["reps"]) for n in PAPER_FIG3}
    shape_note = "Qwen3-8B-shaped random weights, bf16"
else:
    proj_costs, shape_note = costs, f"{names[0]}'s shapes, fp32"
projected = project_speedup(proj_costs, {n: v[1] for n, v in PAPER_FIG3.items()})
print(f"projection ({shape_note}; τ from the paper's Figure 3):")
pd.DataFrame({"paper τ (tokens/round)": [PAPER_FIG3[n][1] for n in projected],
              "round (ms)": [round(proj_costs[n]["round"], 3) for n in projected],
              "AR step (ms)": [round(proj_costs[n]["ar_step"], 3) for n in projected],
              "projected speedup (×)": [round(s, 2) for s in projected.values()],
              "paper measured speedup (×)": [PAPER_FIG3[n][0] for n in projected]},
             index=pd.Index(list(projected), name="budget N"))

# %% [markdown]
# ## A projection to a GPU (a projection, not a measurement)
#
# Our measured τ per budget (the Figure 3 sweep above: this profile's target and drafter) with
# the per-part costs of a Qwen3-8B-shaped target on one H100 (bf16, batch 1, XLA's Triton GEMMs
# off), cited from a `python -m specjax bench-device --shapes qwen3-8b` run because no GPU was
# lent to this session: AR 6.9 ms/token; verify forward at T = 1 / 64 / 256 / 512 pending tokens
# 8.6 / 11.0 / 17.9 / 24.0 ms (interpolated linearly for a budget's N + 1 tokens);
# `select_tree` at V = 151,936 and budget 512: 1.44 ms (used for every budget, an upper bound);
# the 5-layer DFlash drafter's forward estimated as 5/36 of the target's T = 16 verify forward.
# A round is draft + select + verify; projected speedup = τ(N) × AR step / round(N).

# %%
H100_QWEN3_8B = dict(ar_ms=6.9, verify_ms={1: 8.6, 64: 11.0, 256: 17.9, 512: 24.0}, select_ms=1.44)
h100_verify_16 = costs_from_figures([15], draft_ms=0.0, **H100_QWEN3_8B)[15]["verify"]
gpu_costs = costs_from_figures(P["sweep"], draft_ms=5 / 36 * h100_verify_16, **H100_QWEN3_8B)
gpu_projection = project_speedup(gpu_costs, dict(zip(P["sweep"], taus)))
print(f"projection to one H100 (cited Qwen3-8B-shaped costs; τ measured here on {names[0]} + {names[1]}):")
pd.DataFrame({"τ measured here (tokens/round)": [round(dict(zip(P["sweep"], taus))[n], 2) for n in gpu_projection],
              "round (ms)": [round(gpu_costs[n]["round"], 2) for n in gpu_projection],
              "verify (ms)": [round(gpu_costs[n]["verify"], 2) for n in gpu_projection],
              "AR step (ms)": H100_QWEN3_8B["ar_ms"],
              "projected speedup (×)": [round(s, 2) for s in gpu_projection.values()]},
             index=pd.Index(list(gpu_projection), name="budget N"))

# %% [markdown]
# ## Where we agree with the paper, and where not
#
# Computed from this run; shown, not asserted (the notebook reports what it measured).

# %%
ratios = [r["tau_ratio_best_tau"] for r in rows_out]
checks = {
    "every greedy output identical to AR (or parting at a float near-tie)": all(
        not r.mismatches for rows in table1.values() for r in rows.values()),
    f"DDTree-{FIXED} τ > chain DFlash τ in every cell": all(r["fixed_tau"] > r["dflash_tau"] for r in rows_out),
    "DDTree τ >= 1.25x chain DFlash τ (best budget) in every cell": min(ratios) >= 1.25,
    "τ non-decreasing in the budget (Figure 3)": all(a <= b + 1e-9 for a, b in zip(taus, taus[1:])),
    "DDTree (best) faster than chain DFlash in every cell": all(r["best_speedup"] > r["dflash_speedup"]
                                                                for r in rows_out),
    "length-1 rounds rarer under DDTree than chain DFlash": sweep[big].accept_hist[0] / sum(sweep[big].accept_hist)
    < sweep["dflash"].accept_hist[0] / sum(sweep["dflash"].accept_hist),
}
display(pd.DataFrame({"this run": ["agrees" if holds else "differs" for holds in checks.values()]},
                     index=pd.Index(list(checks), name="claim")))
print(f"DDTree/DFlash τ ratio (best budget) per cell: {min(ratios):.2f}–{max(ratios):.2f} (paper 1.3–1.7)")
summary = {"checks": checks, "table1": rows_out, "figure3": {n: (t, s) for n, t, s in zip(P["sweep"], taus, speedups)},
           "round_split": costs, "projection": projected, "gpu_projection": gpu_projection, "environment": env}
(OUT / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
results_table(list(sweep.values()))  # every method of the Figure 3 sweep, as `format_table` lists them

# %% [markdown]
# **Reading the results.** The τ columns are the small-scale reproduction: one drafter pass,
# and verifying a best-first tree of its marginals instead of the argmax chain raises the
# tokens per round on every dataset and at both temperatures, monotonically in the budget,
# and the length-1 rounds shrink, as in the paper. How much depends on the drafter: on
# SmolLM2 our CPU-trained one-layer drafter gives τ ≈ 1.3–1.8 as a chain, DDTree lifts it by
# 1.2–1.4× at the budgets of Table 1 (the paper: 1.3–1.7× over drafters with τ 3–8) and to
# about 2.9 at 64 nodes. On a CPU the target's forward grows with the verified width (the
# round split: a 9-token verify costs about 1.7 AR steps on SmolLM2, 65 tokens about 4.5), so
# the best speedup sits at small budgets, near AR with this drafter, and the wide trees that
# pay on an H200 lose time here; the projection cells show what our round costs would give with
# the paper's τ, and what our τ would give with an H100's costs. At T = 1 τ drops (the drafter
# learned mostly from greedy answers, `specjax/zoo/TRAINING.md`). The calibration cell compares
# the drafter's surrogate Σ q(u) with the realised acceptance: at T = 0 they correlate
# round by round (Proposition 1 with the drafter's law standing in for the target's), and at
# T = 1 the realised mean is Σ p(u), not Σ q(u). The GPU figures (speedup of DDTree over chain
# DFlash at the best fixed budget, the Qwen3-8B-shaped projection) need the `gpu` profile on a
# lent GPU; the projection cell puts our measured τ on cited H100 costs meanwhile, labelled as a
# projection. `cpu-tiny` runs the same cells on the embedded pair in minutes, where the tiny
# drafter reaches τ ≈ 4 and the wide trees' costs are smaller.
