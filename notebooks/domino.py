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
# # Domino at small scale: Tables 1, 2 and 4, Figure 4, the head's share of a round
#
# This notebook reruns the experiments of *Domino: Decoupling Causal Modeling from
# Autoregressive Drafting in Speculative Decoding* (arXiv 2605.29707) with `specjax`: a
# DFlash backbone drafts a whole block in one parallel forward; a small GRU over the drafted
# prefix and a low-rank correction `W_2 SiLU(W_1 [H_i ; s_i])` of the logits make each draft
# depend on the ones before it, rolled out as a `lax.scan` inside the one decode loop. Every
# method runs in the same loop, is timed in the same process with compile time excluded and
# warm-up prompts discarded (`specjax.bench.harness`), and greedy outputs are checked token
# for token against AR.
#
# **Profiles.** `cpu-smollm2` (default; the committed outputs): SmolLM2-135M-Instruct (the
# registry GGUF, fetched once and cached) with its zoo drafters, trained by specjax on 2 CPU
# cores (`specjax/zoo/TRAINING.md`): `smollm2-135m-domino` (Domino on the trained DFlash
# backbone, head d_s = 144, r = 36, 1,200 steps), `smollm2-135m-dflash` (that backbone, block 8)
# and `smollm2-135m-eagle3` (the committed outputs predate the DFlash weights of 2026-11-29 and the
# EAGLE-3 weights of 2026-12-06; `make notebooks` reruns them); two counted prompts on each of three datasets, 48 new tokens, the
# target's layers unstacked (`MODELS["smollm2-135m"].serving`: the faster AR step and round on a CPU).
# Its training ablation (Figure
# 4) is the tiny pair's: three SmolLM2 Domino runs would take about three CPU hours.
# `cpu-tiny`: the embedded target (`specjax.zoo`, the 4.9M-parameter GPT-NeoX) with
# `tiny-neox-domino` (trained by specjax: 1,200 steps, teacher forcing + the base-anchored
# curriculum), `tiny-neox-dflash` (chain DFlash trained on the same data for the same 1,200
# steps) and `tiny-neox-eagle3`. `gpu`: SmolLM2-135M at the paper's settings (the profile has
# not been run: no GPU was lent). `ci` is
# the test suite's smoke run (`tests/test_notebooks.py`): the cpu-tiny models, one counted
# prompt per dataset and no warm-up, 24 new tokens everywhere (so Table 2's batch 1 reuses
# Table 1's compiled programs), batches 1 and 2, one ablation prompt, one repetition;
# every cell, table, figure and losslessness check still runs, but its numbers are not
# results. The paper's numbers (Qwen3-4B/8B on A100s) are shown beside ours as cited
# input; only orderings and mechanisms are comparable, never absolute values.
#
# **On a CPU** the target's cost grows with every verified token, and the head's sequential
# rollout is not hidden behind a memory-bound target as on a GPU: τ (tokens per round,
# bonus included) is the primary small-scale metric; speedups are this machine's.

# %% tags=["parameters"]
import os

PROFILE = os.environ.get("SPECJAX_PROFILE", "cpu-smollm2")

# %%
import json
import pathlib
import time

if PROFILE == "gpu":  # measured on an H100: 2.3x faster bf16 decode without XLA's Triton GEMMs (must precede jax)
    os.environ.setdefault("XLA_FLAGS", "--xla_gpu_enable_triton_gemm=false")

import jax
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from IPython.display import display

from specjax import zoo
from specjax.bench.harness import environment, run_benchmark, write_json
from specjax.bench.methods import parse_method
from specjax.bench.round_split import domino_split
from specjax.data.datasets import dataset_prompts
from specjax.decode import generate
from specjax.models import load_checkpoint, pad_prompts
from specjax.pipeline import MODELS, load_pair
from specjax.sampling import Sampling

PROFILES = {
    # ci: every cell at the least compile + run time (tests/test_notebooks.py); not results.
    "ci": dict(prompts=1, warmup=0, max_new=24, prompt_len=48, datasets=("gsm8k",), batches=(1, 2),
               batch_new=24, batch_reps=1, ablation_prompts=1, split_reps=1),
    "cpu-tiny": dict(prompts=3, warmup=1, max_new=48, prompt_len=48, datasets=("gsm8k", "humaneval"),
                     batches=(1, 4, 16), batch_new=32, batch_reps=3, ablation_prompts=6, split_reps=10),
    "cpu-smollm2": dict(prompts=2, warmup=1, max_new=48, prompt_len=192, datasets=("gsm8k", "humaneval", "mtbench"),
                        batches=(1, 4, 8), batch_new=32, batch_reps=3, ablation_prompts=6, split_reps=7),
    "gpu": dict(prompts=16, warmup=2, max_new=256, prompt_len=256,
                datasets=("gsm8k", "math500", "humaneval", "mbpp", "mtbench", "sharegpt"),
                batches=(1, 2, 4, 8, 16, 32), batch_new=128, batch_reps=5, ablation_prompts=32, split_reps=20),
}
P = PROFILES[PROFILE]
pd.set_option("display.max_colwidth", None)  # long labels (claims, method specs) in full
OUT = pathlib.Path(os.environ.get("SPECJAX_NOTEBOOK_OUT", "results")) / "domino"
OUT.mkdir(parents=True, exist_ok=True)

# One `Pair` (specjax.pipeline): the target, its tokenizer (`encode` puts the zoo's EOS separator before a
# prompt; SmolLM2's wraps it in the chat template) and the zoo's trained drafters for it.
SMOLLM2 = PROFILE in ("cpu-smollm2", "gpu")
LAYOUT = MODELS["smollm2-135m"].serving_for().layout if SMOLLM2 else "stacked"  # its measured best here
pair = load_pair("smollm2-135m" if SMOLLM2 else "zoo", ("dflash", "eagle3", "domino"),
                 layout=LAYOUT)
prefix = "smollm2-135m" if SMOLLM2 else "tiny-neox"
t_cfg, t_params, readers, chat = pair.cfg, pair.params, pair.readers, pair.has_chat_template
target = (t_cfg, t_params)


def encode(text):
    return pair.encode(text, chat=chat)


names = ("smollm2-135m-instruct" if SMOLLM2 else f"{prefix}-target", f"{prefix}-domino")


def method(spec):
    return parse_method(spec, None, target_cfg=t_cfg, **readers)


def prompts_of(dataset, count, length=None):
    return dataset_prompts(dataset, encode, count, length or P["prompt_len"], chat=chat)


def bench(specs, prompt_list, temperature=0.0, max_new=None):
    return run_benchmark(target, None, prompt_list, [method(s) if s != "ar" else "ar" for s in specs],
                         max_new_tokens=max_new or P["max_new"], prompt_width=P["prompt_len"], warmup=P["warmup"],
                         sampling=Sampling(temperature), progress=False, ttft=False)


dcfg = readers["domino"][0]
EAGLE3 = f"eagle3:total={dcfg.block_size}"  # EAGLE-3's tree verifies as many tokens as a Domino / DFlash block
env = environment(*names, t_params, extra={"profile": PROFILE})
print(f"profile {PROFILE}: target {names[0]}; Domino: {dcfg.num_layers}-layer backbone, block {dcfg.block_size} "
      f"({dcfg.num_draft_positions} drafts), GRU {dcfg.gru_hidden}, rank {dcfg.head_rank}, shift_label "
      f"{dcfg.shift_label}; device {jax.devices()[0].device_kind}")

# %% [markdown]
# ## Table 1 (and Table 4): Domino vs chain DFlash vs EAGLE-3 vs AR, per dataset, T = 0 and 1
#
# Same token budget for every method, as the paper (16 there): Domino and chain DFlash draft
# block - 1 tokens after the root (block 16 on the tiny pair, 8 on SmolLM2), EAGLE-3 a dynamic
# tree of `block` nodes. `domino:head=0`
# is Table 4: the same weights with the head disabled (the backbone alone). At T = 1 Domino
# is verified by chain rejection with the law each draft was drawn from (DO2) and, as the
# reference code does, by the walk (sample-and-match); both acceptance rates are reported.

# %%
SPECS = ["ar", "dflash", "domino", "domino:head=0", EAGLE3]
table1 = {}
for dataset in P["datasets"]:
    plist = prompts_of(dataset, P["warmup"] + P["prompts"])
    for temperature in (0.0, 1.0):
        specs = SPECS + (["domino:verify=walk"] if temperature > 0 else [])
        table1[dataset, temperature] = {r.method: r for r in bench(specs, plist, temperature)}
        lossy = [m for m, r in table1[dataset, temperature].items() if r.mismatches]
        assert not lossy, f"greedy output differs from AR beyond a near-tie on {dataset} (a losslessness bug): {lossy}"

COLS = ["dflash", "domino", "domino:head=0", EAGLE3, "domino:verify=walk"]
rows_out = []
for (dataset, temperature), rows in table1.items():
    rows_out.append({"dataset": dataset, "temperature": temperature,
                     **{c: {"speedup": rows[c].speedup, "tau": rows[c].tokens_per_iteration,
                            "acceptance_rate": rows[c].acceptance_rate} for c in COLS if c in rows}})
TAU, SPEEDUP = "τ (tokens/round)", "speedup (×)"
display(pd.DataFrame({(c, col): [round(r[c][field], 2) if c in r else None for r in rows_out]
                      for c in COLS for col, field in ((SPEEDUP, "speedup"), (TAU, "tau"))},
                     index=pd.MultiIndex.from_tuples([(r["dataset"], int(r["temperature"])) for r in rows_out],
                                                     names=["dataset", "T"])))
mean = lambda key, temp, field="tau": float(np.mean([r[key][field] for r in rows_out if r["temperature"] == temp]))  # noqa
display(pd.DataFrame(
    {"Domino τ (tokens/round)": [round(mean("domino", t), 2) for t in (0.0, 1.0)],
     "head off τ (tokens/round)": [round(mean("domino:head=0", t), 2) for t in (0.0, 1.0)],
     "head on / off (×)": [round(mean("domino", t) / mean("domino:head=0", t), 2) for t in (0.0, 1.0)],
     "paper Table 4: head off τ": 3.49, "paper Table 4: Domino τ": 4.19, "paper Table 4: on / off (×)": 1.20,
     "chain DFlash τ, same steps (tokens/round)": [round(mean("dflash", t), 2) for t in (0.0, 1.0)],
     f"EAGLE-3 ({dcfg.block_size}) τ (tokens/round)": [round(mean(EAGLE3, t), 2) for t in (0.0, 1.0)]},
    index=pd.Index([0, 1], name="T (mean over datasets)")))
walk = mean("domino:verify=walk", 1.0, "acceptance_rate")
print(f"T=1 Domino acceptance rate (accepted / drafted depth): rejection {mean('domino', 1.0, 'acceptance_rate'):.3f}, "
      f"walk {walk:.3f} (rejection accepts min(1, p/q) >= p)")
write_json(OUT / "table1.json", [r for rows in table1.values() for r in rows.values()], env,
           {"profile": PROFILE, **P, "rows": rows_out})

# %%
PAPER_TABLE1_MEAN_SPEEDUP = {("Qwen3-4B", 0): (4.70, 5.47), ("Qwen3-8B", 0): (4.66, 5.49), ("Qwen3-4B", 1): (4.03, 4.61),
                             ("Qwen3-8B", 1): (3.96, 4.46)}  # (DFlash, Domino), averages over benchmarks (cited input)
fig, ax = plt.subplots(1, 2, figsize=(12, 3.6))
labels = [f"{r['dataset']}\nT={r['temperature']:.0f}" for r in rows_out]
x = np.arange(len(labels))
for i, (key, color) in enumerate(zip(COLS[:4], ("tab:gray", "tab:red", "tab:pink", "tab:blue"))):
    ax[0].bar(x + (i - 1.5) * 0.2, [r[key]["tau"] for r in rows_out], 0.2, label=key, color=color)
    ax[1].bar(x + (i - 1.5) * 0.2, [r[key]["speedup"] for r in rows_out], 0.2, label=key, color=color)
ax[0].set_ylabel("τ (tokens / round)")
ax[1].set_ylabel("speedup vs AR (this device)")
ax[1].axhline(1.0, color="k", lw=0.8)
for a in ax:
    a.set_xticks(x, labels, fontsize=8)
    a.legend(fontsize=7)
ratios = [v[1] / v[0] for v in PAPER_TABLE1_MEAN_SPEEDUP.values()]
fig.suptitle(f"Table 1 analogue ({names[0]}); paper Domino/DFlash mean speedup ratio {min(ratios):.2f}–{max(ratios):.2f}x")
fig.tight_layout()
fig.savefig(OUT / "table1.png", dpi=120)

# %% [markdown]
# ## Table 2: throughput at growing batch size
#
# The paper needed SGLang to batch; specjax batches natively (every row its own tree and
# caches in one `lax.while_loop`). Tokens per second over the whole batch (generated tokens
# / wall time of one `generate` call, median of repetitions after a compile call), the
# same prompts for every method, speedup over AR at that batch size. Ragged acceptance
# costs batched speculative decoding: a round lasts as long as its slowest row needs.

# %%
BATCH_SPECS = ["ar", "dflash", "domino", EAGLE3]
pool = prompts_of("gsm8k", max(P["batches"]))
table2 = {}
for b in P["batches"]:
    rows = [pool[i % len(pool)] for i in range(b)]
    tokens, lengths = pad_prompts(rows, P["prompt_len"])
    for spec in BATCH_SPECS:
        if spec == "ar":
            from specjax.decode import generate_ar

            run = lambda: generate_ar(t_params, t_cfg, tokens, lengths, P["batch_new"], eos_ids=())  # noqa: E731
        else:
            m = method(spec)
            run = lambda m=m: generate(t_params, t_cfg, m.drafter, m.params, tokens, lengths,  # noqa
                                       P["batch_new"], eos_ids=())
        jax.block_until_ready(run().tokens)
        times = []
        for _ in range(P["batch_reps"]):
            t0 = time.perf_counter()
            out = run()
            jax.block_until_ready(out.tokens)
            times.append(time.perf_counter() - t0)
        table2[b, spec] = int(np.asarray(out.num_tokens).sum()) / float(np.median(times))
display(pd.DataFrame({(s, col): [round(table2[b, s]) if col == "tokens/s" else
                                 round(table2[b, s] / table2[b, "ar"], 2) for b in P["batches"]]
                      for s in BATCH_SPECS for col in ("tokens/s", "speedup vs AR (×)")},
                     index=pd.Index(P["batches"], name="batch (rows)")))
PAPER_TABLE2_QWEN3_8B_GSM8K = {"EAGLE-3(16)": (1.8, 1.7, 1.5, 1.1, 0.8), "DFlash(16)": (3.7, 3.4, 2.9, 2.2, 1.6),
                               "Domino(16)": (5.1, 4.7, 4.1, 3.0, 2.1)}  # speedup at concurrency 2..32 (cited input)
write_json(OUT / "table2.json", [], env, {"profile": PROFILE, **P,
                                          "tokens_per_second": {f"{b}/{s}": v for (b, s), v in table2.items()},
                                          "paper_qwen3_8b_gsm8k_speedup_c2_to_c32": PAPER_TABLE2_QWEN3_8B_GSM8K})
fig, ax = plt.subplots(figsize=(6, 3.6))
for s in BATCH_SPECS[1:]:
    ax.plot(P["batches"], [table2[b, s] / table2[b, "ar"] for b in P["batches"]], "o-", label=s)
ax.axhline(1.0, color="k", lw=0.8)
ax.set_xscale("log", base=2)
ax.set_xlabel("batch size")
ax.set_ylabel("throughput / AR throughput")
ax.legend(fontsize=8)
ax.set_title("Table 2 analogue (GSM8K prompts)")
fig.tight_layout()
fig.savefig(OUT / "table2.png", dpi=120)

# %% [markdown]
# ## Figure 4: the curriculum and the GRU's inputs (training ablation)
#
# Three drafters trained from scratch with the same data, seed and steps (`ablations/` next
# to the zoo drafter; recipes in `specjax/zoo/TRAINING.md`): teacher forcing with the
# base-anchored curriculum (λ: 1 → 0), teacher forcing without it (λ ≡ 0), and TTT (the GRU
# consumes the block's own argmax drafts; λ ≡ 0). Left: the backbone's validation loss
# (base logits) during training, from each recipe's log. Right: τ through the decoder on
# held-out prompts (greedy), head on, with the head-off τ of the same weights as the
# backbone reference. The paper (Qwen3-8B, ShareGPT): TTT 3.80 < TF 3.96 < TF+curriculum 4.19.
# The three ablation drafters exist for the tiny pair only (three SmolLM2 Domino runs would
# take about three CPU hours), so the SmolLM2 profiles run this cell on the tiny pair.

# %%
ABLATIONS = {"TF + curriculum": "tf-curriculum", "TF": "tf", "TTT": "ttt"}
abl_pair = load_pair("zoo", ()) if SMOLLM2 else pair
abl_cfg, abl_params = abl_pair.cfg, abl_pair.params
abl_dir = zoo.path("tiny-neox-domino") / "ablations"
ABL_LEN = PROFILES["cpu-tiny"]["prompt_len"] if SMOLLM2 else P["prompt_len"]  # the tiny pair's prompts
abl_prompts = dataset_prompts("sharegpt", abl_pair.encode, P["ablation_prompts"], ABL_LEN)
a_tokens, a_lengths = pad_prompts(abl_prompts, ABL_LEN)
fig4 = {}
for label, sub in ABLATIONS.items():
    cfg_a, params_a = load_checkpoint(abl_dir / sub)
    log = json.loads((abl_dir / sub / "recipe.json").read_text())["log"]
    taus = {}
    for head in (True, False):
        m = parse_method(f"domino:head={int(head)}", None, domino=(cfg_a, params_a), target_cfg=abl_cfg)
        out = generate(abl_params, abl_cfg, m.drafter, params_a, a_tokens, a_lengths, P["max_new"], eos_ids=())
        taus[head] = float(np.mean(out.stats.mean_accepted_length()))
    fig4[label] = {"steps": [r["step"] for r in log], "base_loss": [r["valid_loss_base"] for r in log],
                   "final_loss": [r["valid_loss"] for r in log], "tau": taus[True], "tau_head_off": taus[False]}
PAPER_FIG4_TAU = {"TF + curriculum": 4.19, "TF": 3.96, "TTT": 3.80}  # Qwen3-8B, ShareGPT (cited input)
display(pd.DataFrame({"τ, head on (tokens/round)": [round(r["tau"], 2) for r in fig4.values()],
                      "τ, head off (tokens/round)": [round(r["tau_head_off"], 2) for r in fig4.values()],
                      "final valid loss L_final (nats)": [round(r["final_loss"][-1], 3) for r in fig4.values()],
                      "final backbone loss L_base (nats)": [round(r["base_loss"][-1], 3) for r in fig4.values()],
                      "paper τ, head on (tokens/round)": [PAPER_FIG4_TAU[k] for k in fig4]},
                     index=pd.Index(list(fig4), name="recipe")))
order = sorted(fig4, key=lambda k: -fig4[k]["tau"])
print("ordering by τ:", " > ".join(order), "(paper: TF + curriculum > TF > TTT)")
write_json(OUT / "figure4.json", [], env, {"profile": PROFILE, "ablations": fig4})
fig, ax = plt.subplots(1, 2, figsize=(11, 3.6))
for label, r in fig4.items():
    ax[0].plot(r["steps"], r["base_loss"], "o-", label=label)
ax[0].set_xlabel("training step")
ax[0].set_ylabel("backbone (base) validation loss")
ax[0].legend(fontsize=8)
x = np.arange(len(fig4))
ax[1].bar(x - 0.2, [r["tau"] for r in fig4.values()], 0.4, label="head on")
ax[1].bar(x + 0.2, [r["tau_head_off"] for r in fig4.values()], 0.4, label="head off (backbone)")
ax[1].set_xticks(x, list(fig4))
ax[1].set_ylabel("τ (greedy, held-out prompts)")
ax[1].legend(fontsize=8)
fig.suptitle("Figure 4 analogue: curriculum and GRU inputs (paper: TTT 3.80, TF 3.96, TF+curriculum 4.19)")
fig.tight_layout()
fig.savefig(OUT / "figure4.png", dpi=120)

# %% [markdown]
# ## The head's share of a round
#
# The paper reports +2.8% draft-then-verify latency for the head on an A100 (fused kernels,
# CUDA graphs). Here each part of one round is jitted on its own from a real mid-generation
# state (`specjax.bench.round_split.domino_split`), medians of repetitions.

# %%
s_tokens, s_lengths = pad_prompts(prompts_of("gsm8k", 1), P["prompt_len"])
split = domino_split(target, method("domino").drafter, readers["domino"][1], s_tokens, s_lengths,
                     reps=P["split_reps"])
write_json(OUT / "head_share.json", [], env, {"profile": PROFILE, "split_ms": split})
pd.DataFrame({**{f"{k} (ms)": [round(v, 2)] for k, v in split.items()},
              "head share of the round (%)": [round(100 * split["head"] / split["round"], 1)],
              "paper: head's added latency, fused kernels (%)": [2.8]}, index=pd.Index([names[1]], name="drafter"))

# %% [markdown]
# ## What this reproduces, and what it cannot
#
# * Reproduced (numbers above, deterministic at T = 0): the head raises τ over its own backbone
#   with the same weights (Table 4). On the tiny pair by more than the paper's 1.20×; on SmolLM2
#   by a few percent only (the 20-prompt benchmark in docs/results.md: 1.07× on GSM8K, 1.03× on
#   MT-Bench): that drafter learned from 0.9M tokens on 2 CPU cores, its head lifts the later block
#   positions, but a chain stops at its first miss and the first position is the backbone's.
# * The training ablation (Figure 4, the tiny pair: one seed, 300 steps each, a quarter of the main
#   run's) is reported as measured, whichever way it comes out; this run's ordering is printed above.
# * Speedups and batch scaling on a CPU are this machine's: the verify cost grows with the chain
#   length here, and the sequential head is not hidden behind a memory-bound target. On SmolLM2 at
#   block 8 the speculative methods stay at or below AR (a round costs ~1.8 AR steps and commits
#   fewer than 2 tokens); the EAGLE-3 tree has the highest τ and the slowest rounds (one drafter step per
#   depth). The paper's GPU speedups (Table 1: 5.5× mean on Qwen3-8B) need the `gpu` profile and a
#   GPU-trained drafter.
