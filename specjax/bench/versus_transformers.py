"""specjax against transformers on torch, on this machine, in one run: `python -m specjax versus-transformers`.

    python -m specjax versus-transformers --models smollm2-135m,zoo --prompts 8 --warmup 2 \
        --max-new-tokens 64 [--best] --json results.json

What a user would otherwise run is transformers' `generate` on torch (installed here as our test reference;
on a GPU machine, torch with CUDA). For each model, the same prompts (held-out GSM8K questions through the chat
template for SmolLM2-135M-Instruct, held-out Wikipedia openings for the embedded pair), the same number of new
tokens (every row runs to `max_new_tokens`: no EOS stop on either side), greedy, batch 1, float32; torch on the
GPU where jax runs on one (and torch sees it), else on the CPU with the threads XLA uses:

  engines    transformers `model.generate` (eager torch, its default dynamic cache) against specjax's
             `generate_ar` with the target's layers stacked (scanned) and unstacked
             (`specjax.models.model.unstack_layers`);
  lookup     transformers' prompt lookup (`prompt_lookup_num_tokens` 10, `max_matching_ngram_size` 2)
             against our `pld:ngram=2,num=10`, on every model;
  assisted   where the model's draft LM is an HF checkpoint over the target's vocabulary (the embedded
             pair's), speculative decoding both ways at equal settings: transformers' assisted generation
             (`assistant_model` = that draft LM, a constant `num_assistant_tokens` = K, no confidence
             cut-off) against our `chain<K>`;
  best       with `--best`, specjax's measured best method for the model on this backend, in its layout
             (the catalogue's `NamedModel.serving_for`: `make run`'s method).

Every engine runs every prompt, interleaved (prompt by prompt, so drift hits all alike), after
`warmup` prompts that are run and discarded (they compile / warm the caches); tokens/s is the median
over the counted prompts of new tokens / wall seconds. Each output is compared with specjax's AR output
by `specjax.equality.compare_with_ar` (identical / near-tie / MISMATCH: two implementations round
differently, so a flip at a near-tie is expected; a MISMATCH is a bug in one of them).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import jax
import numpy as np

from specjax import zoo
from specjax.bench.timing import timed_call
from specjax.data.datasets import dataset_prompts
from specjax.decode import generate, generate_ar
from specjax.drafters.registry import method, needs_of
from specjax.equality import compare_with_ar, count
from specjax.models import pad_prompts, save_checkpoint
from specjax.models.model import unstack_layers
from specjax.pipeline import MODELS, load_pair, model_entry

__all__ = ["compare", "run"]

ASSISTED_K = 4  # draft tokens per round of the assisted-generation pair (our chain4)


def _hf_model(name: str, pair, workdir: Path, device: str = "cpu"):
    """The target as a transformers model in float32: the entry's HF directory where it has one (the zoo's, as
    committed), else written from the params we load (SmolLM2's GGUF-dequantised: both engines run the same
    weights)."""
    import torch  # the dev extra (a test reference): imported where needed
    import transformers

    entry = model_entry(name)
    if entry.hf_directory is not None:
        directory = entry.hf_directory()
    else:
        directory = workdir / name
        save_checkpoint(directory, pair.cfg, pair.params)
    return _no_eos(transformers.AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32)).to(device)


def _no_eos(model):
    """The model in eval mode, its generation config without an EOS (every row runs to max_new_tokens)."""
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model.eval()


def _hf_runner(model, max_new: int, **kwargs):
    """prompt ids -> generated ids, greedy (`model.generate` with kwargs)."""
    import torch

    def run(ids):
        tokens = torch.tensor([ids], device=model.device)
        with torch.inference_mode():  # an explicit mask: the zoo's prompts start with id 0, the pad id
            out = model.generate(tokens, attention_mask=torch.ones_like(tokens), max_new_tokens=max_new,
                                 do_sample=False, **kwargs)
        return out[0, len(ids):].tolist()
    return run


def _jax_runner(fn, width: int):
    """prompt ids -> generated ids; every prompt right-padded to `width` (one compiled program)."""
    def run(ids):
        tokens, lengths = pad_prompts([ids], length=width)
        out = jax.block_until_ready(fn(tokens, lengths))
        return np.asarray(out.tokens[0, : int(out.num_tokens[0])]).tolist()
    return run


def _assisted(name: str, pair) -> bool:
    """Whether the model's draft LM runs as transformers' assistant: committed in the zoo as an HF checkpoint,
    over the target's whole vocabulary (a draft LM over a reduced draft vocabulary is not an HF assistant)."""
    draft = model_entry(name).draft
    return (pair.draft is not None and draft is not None and zoo.has(draft)
            and pair.draft[0].vocab_size == pair.cfg.vocab_size)


def _engines(name: str, pair, workdir: Path, max_new: int, width: int, device: str = "cpu", best: bool = False) -> dict:
    """engine label -> run(prompt ids) -> generated ids; AR engines first, then prompt lookup both ways, the
    assisted pairs (a model with a draft LM loaded) and, with `best`, specjax's measured best method for the
    model on this backend (`NamedModel.serving_for`)."""
    flat = unstack_layers(pair.params)
    hf = _hf_model(name, pair, workdir, device)
    engines = {
        "transformers generate": _hf_runner(hf, max_new),
        "specjax AR (stacked)": _jax_runner(lambda t, n: generate_ar(pair.params, pair.cfg, t, n, max_new, eos_ids=()),
                                            width),
        "specjax AR (unstacked)": _jax_runner(lambda t, n: generate_ar(flat, pair.cfg, t, n, max_new, eos_ids=()),
                                              width),
    }
    engines["transformers prompt lookup"] = _hf_runner(hf, max_new, prompt_lookup_num_tokens=10,
                                                       max_matching_ngram_size=2)
    pld = method("pld:ngram=2,num=10", pair.cfg)
    engines["specjax pld:ngram=2,num=10"] = _jax_runner(
        lambda t, n: generate(pair.params, pair.cfg, pld.drafter, pld.params, t, n, max_new, eos_ids=()), width)
    if _assisted(name, pair):  # a draft LM transformers can load too: speculative decoding both ways
        import torch
        import transformers

        assistant = _no_eos(transformers.AutoModelForCausalLM.from_pretrained(zoo.path(model_entry(name).draft),
                                                                              dtype=torch.float32)).to(device)
        assistant.generation_config.num_assistant_tokens = ASSISTED_K
        assistant.generation_config.num_assistant_tokens_schedule = "constant"
        assistant.generation_config.assistant_confidence_threshold = 0.0
        engines[f"transformers assisted (K={ASSISTED_K})"] = _hf_runner(hf, max_new, assistant_model=assistant)
        m = method(f"chain{ASSISTED_K}", pair.cfg, draft=pair.draft)
        engines[f"specjax chain{ASSISTED_K}"] = _jax_runner(
            lambda t, n: generate(pair.params, pair.cfg, m.drafter, m.params, t, n, max_new, eos_ids=()), width)
    if best:
        serving = MODELS[name].serving_for()
        b = method(serving.method, pair.cfg, draft=pair.draft, target_params=pair.params, **pair.readers)
        params = pair.params if serving.layout == "stacked" else flat
        engines[f"specjax {serving.method} (best, {serving.layout})"] = _jax_runner(
            lambda t, n: generate(params, pair.cfg, b.drafter, b.params, t, n, max_new, eos_ids=()), width)
    return engines


def compare(name: str, prompts: int = 8, warmup: int = 2, max_new_tokens: int = 64, prompt_len: int = 192,
            log=print, device: str = "cpu", best: bool = False) -> dict:
    """One model's table: per engine, median tokens/s over the counted prompts and the agreement with
    specjax's AR output (module docstring). device: torch's ("cpu", "cuda"); best: add specjax's best method."""
    entry = model_entry(name)
    needs = (("draft",) if entry.draft else ()) + (needs_of(entry.serving_for().method) if best else ())
    pair = load_pair(name, tuple(dict.fromkeys(k for k in needs if k != "target")))
    dataset, chat = entry.held_out, entry.dataset_chat
    ids = dataset_prompts(dataset, lambda text: pair.encode(text, chat), prompts, prompt_len, chat=chat)
    with tempfile.TemporaryDirectory() as tmp:
        engines = _engines(name, pair, Path(tmp), max_new_tokens, max(len(p) for p in ids), device, best)
        speeds = {label: [] for label in engines}
        outputs = {label: [] for label in engines}
        for i, prompt in enumerate(ids):
            for label, run in engines.items():
                out, seconds = timed_call(run, prompt)
                if i >= warmup:
                    speeds[label].append(len(out) / seconds)
                    outputs[label].append(out)
    reference = outputs["specjax AR (stacked)"]
    rows = {}
    for label in engines:
        agreements = [compare_with_ar(pair.params, pair.cfg, p, ar, out)
                      for p, ar, out in zip(ids[warmup:], reference, outputs[label])]
        rows[label] = {"tokens_per_s": float(np.median(speeds[label])), "per_prompt_tokens_per_s": speeds[label],
                       "vs_specjax_ar": count(agreements), "first_differences": [str(a) for a in agreements
                                                                                  if a.kind != "identical"]}
    base = rows["transformers generate"]["tokens_per_s"]
    for label, row in rows.items():
        row["vs_transformers_generate"] = row["tokens_per_s"] / base
    import torch

    log(f"\n== {name}: {len(ids) - warmup} counted {dataset} prompts (+{warmup} warm-up), {max_new_tokens} new tokens, "
        f"greedy, batch 1, float32, torch on {device}"
        + (f" ({torch.get_num_threads()} threads)" if device == "cpu" else ""))
    for label, row in rows.items():
        agree = ", ".join(f"{k} {v}" for k, v in row["vs_specjax_ar"].items() if v)
        log(f"  {label:34s} {row['tokens_per_s']:8.1f} tok/s  {row['vs_transformers_generate']:5.2f}x transformers"
            f"  outputs vs specjax AR: {agree}")
    return {"model": name, "dataset": dataset, "chat": chat, "counted_prompts": len(ids) - warmup,
            "warmup": warmup, "max_new_tokens": max_new_tokens, "torch_device": device, "engines": rows}


def run(models: tuple[str, ...] = ("smollm2-135m", "zoo"), prompts: int = 8, warmup: int = 2,
        max_new_tokens: int = 64, prompt_len: int = 192, json_path: str | None = None, best: bool = False) -> dict:
    """Compare each model's engines (module docstring); returns the report (written to `json_path` when
    given). torch runs on the GPU where jax does (and torch sees one), else on the CPU with XLA's threads.
    Raises ValueError naming a bad argument before anything loads."""
    bad = [m for m in models if m not in MODELS]
    if bad:
        raise ValueError(f"unknown model(s) {bad}; choose from {', '.join(MODELS)}")
    if not 0 <= warmup < prompts or max_new_tokens < 1:
        raise ValueError("need 0 <= warmup < prompts and max_new_tokens >= 1")
    import torch
    import transformers

    device = "cuda" if jax.default_backend() == "gpu" and torch.cuda.is_available() else "cpu"
    if device == "cpu":
        torch.set_num_threads(os.cpu_count() or 1)
    report = {"environment": {"jax": jax.__version__, "torch": torch.__version__,
                              "transformers": transformers.__version__, "cpu_count": os.cpu_count(),
                              "platform": jax.default_backend(), "device": jax.devices()[0].device_kind,
                              "torch_device": device},
              "results": [compare(m, prompts, warmup, max_new_tokens, prompt_len, device=device, best=best)
                          for m in models]}
    if json_path:
        Path(json_path).write_text(json.dumps(report, indent=2))
    return report
