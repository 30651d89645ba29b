"""Causal-LM training of small GPT-NeoX (Pythia-architecture) models: data pipeline + loop.

Data: the train split of our corpora (`tokenizer.corpus_texts`), each document encoded
and followed by `<|endoftext|>` (id 0), concatenated into one token stream and cut into
non-overlapping windows of `seq_len + 1` tokens (packed; attention crosses document
boundaries as in GPT-2/Pythia pretraining). Window order is a permutation per epoch
drawn from `(seed, epoch)`, so batch `i` is a pure function of `(seed, i)`: a resumed
run sees exactly the batches an uninterrupted one would.

Model/loss: `specjax.models.forward` itself (the inference forward) on a fresh cache of
`seq_len` slots with a causal mask; loss = mean next-token cross entropy. Training the
very function used for decoding means there is no second forward to keep in sync.

Optimiser: optax AdamW (b1 0.9, b2 0.95, weight decay on matrices/embeddings only) with
linear warmup + cosine decay to 10% and global-norm clipping. One jitted step per batch.

Every `eval_every` steps: mean loss on fixed windows of the valid split, per source.
Every `ckpt_every` steps (and at the end): `OUT/ckpt/` = float32 `save_checkpoint`
+ `opt_state.npz` + `state.json`; `--resume` continues from it. At the end, `export`
writes the 16-bit HF directory (+ tokenizer.json) that the zoo commits.
"""

from __future__ import annotations

import dataclasses
import json
import math
import pathlib
import shutil
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from tqdm import tqdm

from specjax.atomic import replace_directory, staging_path
from specjax.data.prompts import wiki_prompts
from specjax.decode import generate, generate_ar
from specjax.drafters.chain import ChainDrafter
from specjax.models import (GPTNeoXConfig, causal_mask, forward, init_cache, init_params, load_checkpoint, pad_prompts,
                            save_checkpoint)
from specjax.train.tokenizer import EOS_ID, corpus_texts, load_tokenizer

# Pythia-style configs (parallel residual, rotary_pct 0.25, untied embed_out, gelu, biases).
PRESETS = {
    "target": dict(hidden_size=192, num_layers=4, num_heads=4, intermediate_size=768),
    "draft": dict(hidden_size=64, num_layers=2, num_heads=2, intermediate_size=256),
}


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Causal-LM training of a GPT-NeoX model (`train`; data, loss and optimiser: module docstring).

    Fields:
      steps: optimiser steps in total (the schedule's length; a resumed run continues to it).
      batch_size: windows per step (also the evaluation batch).
      seq_len: T, tokens per training window (windows hold T + 1 tokens: inputs + shifted targets).
      lr: peak learning rate, reached after the warm-up.
      warmup: steps of linear warm-up from 0 (a step count, unlike the drafters' warmup_frac).
      min_lr_ratio: the cosine decay's final learning rate as a fraction of lr (0.1: to 10%).
      weight_decay: AdamW's decoupled weight decay, on matrices and embeddings only (not norms, biases).
      clip: global gradient-norm clipping threshold.
      eval_every: steps between evaluations on the valid split (also at the last step).
      eval_windows: valid windows per source (wiki, sharegpt) in each evaluation.
      ckpt_every: steps between checkpoints (also at the last step).
      seed: seeds the model's init and the per-epoch window order (batch i is a pure function of
        (seed, i)).
      sharegpt_chars: character budget of ShareGPT text in the train split (valid / test get 1/18 of it).
    """

    steps: int = 1500
    batch_size: int = 16
    seq_len: int = 128
    lr: float = 3e-3
    warmup: int = 100
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.1
    clip: float = 1.0
    eval_every: int = 250
    eval_windows: int = 32
    ckpt_every: int = 250
    seed: int = 0
    sharegpt_chars: int = 4_000_000


def model_config(name: str, vocab_size: int, **overrides) -> GPTNeoXConfig:
    """The GPT-NeoX config of preset `name` for a tokenizer of `vocab_size` tokens."""
    kw = dict(PRESETS[name], **overrides)
    head_dim = kw["hidden_size"] // kw["num_heads"]
    return GPTNeoXConfig(vocab_size=vocab_size, rotary_dim=int(head_dim * 0.25), use_parallel_residual=True,
                         max_position_embeddings=2048, eos_token_ids=(EOS_ID,), bos_token_id=EOS_ID, **kw)


def count_params(params) -> int:
    return int(sum(np.prod(x.shape) for x in jax.tree.leaves(params)))


# --------------------------------------------------------------------------- data


def token_stream(tokenizer, docs: list[str]) -> np.ndarray:
    """int32 stream: each document's ids followed by EOS."""
    parts = []
    for enc in tokenizer.encode_batch(docs):
        parts.append(np.asarray(enc.ids, np.int32))
        parts.append(np.asarray([EOS_ID], np.int32))
    return np.concatenate(parts) if parts else np.zeros((0,), np.int32)


def windows(stream: np.ndarray, seq_len: int) -> np.ndarray:
    """Non-overlapping int32[N, seq_len + 1] windows (inputs + shifted targets); tail dropped."""
    n = (len(stream) - 1) // seq_len
    idx = np.arange(n)[:, None] * seq_len + np.arange(seq_len + 1)[None, :]
    return stream[idx]


def batch_at(data: np.ndarray, step: int, batch_size: int, seed: int) -> np.ndarray:
    """Batch number `step` (0-based): rows of a per-epoch permutation seeded by (seed, epoch)."""
    n = len(data)
    rows = []
    for j in range(step * batch_size, (step + 1) * batch_size):
        epoch, i = divmod(j, n)
        perm = _perm(n, seed, epoch)
        rows.append(perm[i])
    return data[np.asarray(rows)]


_PERMS: dict = {}


def _perm(n: int, seed: int, epoch: int) -> np.ndarray:
    key = (n, seed, epoch)
    if key not in _PERMS:
        _PERMS.clear()
        _PERMS[key] = np.random.default_rng([seed, epoch]).permutation(n)
    return _PERMS[key]


def load_split(tokenizer, split: str, seq_len: int, sharegpt_chars: int) -> dict[str, np.ndarray]:
    """{source: windows} for one split."""
    return {src: windows(token_stream(tokenizer, docs), seq_len)
            for src, docs in corpus_texts(split, sharegpt_chars).items()}


# --------------------------------------------------------------------------- model / loss


def token_nll(params, cfg: GPTNeoXConfig, batch: jax.Array) -> jax.Array:
    """f32[B, T] next-token negative log-likelihood of int32[B, T + 1] windows."""
    x, y = batch[:, :-1], batch[:, 1:]
    b, t = x.shape
    cache = init_cache(cfg, b, t, jnp.float32)
    positions = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (b, t))
    logits, _ = forward(params, cfg, x, positions, causal_mask(b, t), cache)  # [B, T, V]
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.take_along_axis(logp, y[..., None], axis=-1)[..., 0]


def loss_fn(params, cfg, batch):
    return token_nll(params, cfg, batch).mean()


_DECAY_LEAVES = ("kernel", "qkv", "dense", "embedding")


def make_optimizer(tc: TrainConfig):
    schedule = optax.warmup_cosine_decay_schedule(0.0, tc.lr, tc.warmup, max(tc.steps, tc.warmup + 1),
                                                  end_value=tc.lr * tc.min_lr_ratio)

    def decay_mask(params):
        return jax.tree_util.tree_map_with_path(lambda p, _: str(getattr(p[-1], "key", "")) in _DECAY_LEAVES, params)

    opt = optax.chain(optax.clip_by_global_norm(tc.clip),
                      optax.adamw(schedule, b1=0.9, b2=0.95, weight_decay=tc.weight_decay, mask=decay_mask))
    return opt, schedule


def make_step(cfg, opt):
    @jax.jit
    def step(params, opt_state, batch):
        loss, grads = jax.value_and_grad(loss_fn)(params, cfg, batch)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss, optax.global_norm(grads)

    return step


def make_eval(cfg, batch_size: int):
    nll = jax.jit(lambda p, b: token_nll(p, cfg, b).mean())

    def evaluate(params, data: np.ndarray) -> float:
        losses = [float(nll(params, jnp.asarray(data[i:i + batch_size]))) for i in range(0, len(data), batch_size)]
        sizes = [len(data[i:i + batch_size]) for i in range(0, len(data), batch_size)]
        return float(np.average(losses, weights=sizes))

    return evaluate


def unigram_loss(train: np.ndarray, data: np.ndarray, vocab: int) -> float:
    """Cross entropy of an add-one unigram model fitted on `train` tokens, on `data` targets."""
    counts = np.bincount(train[:, 1:].ravel(), minlength=vocab).astype(np.float64) + 1.0
    logp = np.log(counts / counts.sum())
    return float(-logp[data[:, 1:].ravel()].mean())


# --------------------------------------------------------------------------- checkpoints


def save_state(ckpt: pathlib.Path, cfg, params, opt_state, step: int, tc: TrainConfig, log: list) -> None:
    tmp = staging_path(ckpt)  # written whole beside it, then swapped in: a crash leaves the old or the new
    save_checkpoint(tmp, cfg, params)
    leaves = jax.tree.leaves(opt_state)
    np.savez(tmp / "opt_state.npz", *[np.asarray(x) for x in leaves])
    (tmp / "state.json").write_text(json.dumps({"step": step, "train_config": dataclasses.asdict(tc), "log": log}))
    replace_directory(tmp, ckpt)


def init_or_resume(ckpt: pathlib.Path, cfg, opt, seed: int, resume: bool):
    """(params, opt_state, start step, log): fresh (init_params(cfg, seed), float32) or, with
    `resume` and a checkpoint at `ckpt`, restored from it (its config must equal `cfg`)."""
    params = init_params(cfg, jax.random.key(seed), jnp.float32)
    opt_state = opt.init(params)
    if not (resume and ckpt.exists()):
        return params, opt_state, 0, []
    saved_cfg, params, opt_state, start, log = load_state(ckpt, opt_state)
    if saved_cfg != cfg:
        raise ValueError(f"checkpoint config {saved_cfg} differs from requested {cfg}")
    print(f"resumed from {ckpt} at step {start}", flush=True)
    return params, opt_state, start, log


def load_state(ckpt: pathlib.Path, opt_state_template):
    cfg, params = load_checkpoint(ckpt, jnp.float32)
    with np.load(ckpt / "opt_state.npz") as z:
        leaves = [z[f"arr_{i}"] for i in range(len(z.files))]
    treedef = jax.tree.structure(opt_state_template)
    template = jax.tree.leaves(opt_state_template)
    if len(leaves) != len(template):
        raise ValueError(f"{ckpt}: optimizer state has {len(leaves)} leaves, expected {len(template)}")
    opt_state = jax.tree.unflatten(treedef, [jnp.asarray(a, t.dtype) for a, t in zip(leaves, template)])
    state = json.loads((ckpt / "state.json").read_text())
    return cfg, params, opt_state, state["step"], state.get("log", [])


def export(out: pathlib.Path, cfg, params, tokenizer_path: pathlib.Path, dtype=np.float16) -> pathlib.Path:
    """16-bit HF checkpoint dir (config.json, model.safetensors) + tokenizer.json."""
    save_checkpoint(out, cfg, params, dtype=np.dtype(dtype))
    shutil.copyfile(tokenizer_path, out / "tokenizer.json")
    return out


# --------------------------------------------------------------------------- held-out evaluation


def heldout_loss(params, cfg, tokenizer, split: str = "test", seq_len: int = 128, batch_size: int = 16,
                 sharegpt_chars: int = 4_000_000, max_windows: int | None = None) -> dict[str, float]:
    """{source: mean next-token loss (nats)} over the packed windows of `split` (same pipeline as training)."""
    evaluate = make_eval(cfg, batch_size)
    out = {}
    for src, w in load_split(tokenizer, split, seq_len, sharegpt_chars).items():
        w = w[:max_windows] if max_windows else w
        out[src] = evaluate(params, w)
    return out


def encode_prompt(tokenizer, text: str) -> list[int]:
    """Prompt ids as the models saw documents in training: EOS (the separator) then the text."""
    return [EOS_ID] + tokenizer.encode(text).ids


def chain_acceptance(target, draft, tokenizer, prompts: list[str], k: int = 4, max_new_tokens: int = 64):
    """Greedy chain drafting (ChainDrafter(draft_cfg, k)) of the draft against the target.

    target/draft: (cfg, params). Returns (mean accepted length per row np.ndarray,
    speculative tokens int32[B, max_new_tokens], whether they equal plain greedy `generate_ar`).
    EOS does not stop generation (eos_ids=()), so every row runs max_new_tokens tokens.
    """
    (tcfg, tparams), (dcfg, dparams) = target, draft
    tokens, lengths = pad_prompts([encode_prompt(tokenizer, p) for p in prompts])
    out = generate(tparams, tcfg, ChainDrafter(dcfg, k), dparams, tokens, lengths, max_new_tokens, eos_ids=())
    ref = generate_ar(tparams, tcfg, tokens, lengths, max_new_tokens, eos_ids=())
    same = bool(np.array_equal(np.asarray(out.tokens), np.asarray(ref.tokens)))
    return out.stats.mean_accepted_length(), np.asarray(out.tokens), same


def report(target_dir, draft_dir, n_prompts: int = 20, k: int = 4, max_new_tokens: int = 64) -> dict:
    """Held-out (test split) losses/perplexities of both models, unigram baseline, 3 greedy
    continuations and chain-drafting mean accepted length on `n_prompts` test wiki prompts."""
    tok = load_tokenizer(target_dir)
    if tok.to_str() != load_tokenizer(draft_dir).to_str():
        raise ValueError("target and draft tokenizers differ")
    models = {name: load_checkpoint(d, jnp.float32) for name, d in (("target", target_dir), ("draft", draft_dir))}
    rep: dict = {}
    train_w = np.concatenate(list(load_split(tok, "train", 128, 4_000_000).values()))
    test = load_split(tok, "test", 128, 4_000_000)
    rep["unigram"] = {src: unigram_loss(train_w, w, tok.get_vocab_size()) for src, w in test.items()}
    for name, (cfg, params) in models.items():
        rep[name] = heldout_loss(params, cfg, tok, "test")
    for name in ("unigram", "target", "draft"):
        rep[name] = {src: {"loss": v, "ppl": math.exp(v)} for src, v in rep[name].items()}
    prompts = [p.prompt for p in wiki_prompts("test")[:n_prompts]]
    mal, toks, same = chain_acceptance(models["target"], models["draft"], tok, prompts, k, max_new_tokens)
    rep["chain"] = {"k": k, "num_prompts": len(prompts), "max_new_tokens": max_new_tokens,
                    "mean_accepted_length": float(mal.mean()), "per_prompt": [round(float(x), 3) for x in mal],
                    "equals_greedy_ar": same}
    rep["continuations"] = [{"prompt": p, "continuation": tok.decode(t.tolist()[:40])}
                            for p, t in zip(prompts[:3], toks[:3])]
    return rep


# --------------------------------------------------------------------------- loop


def _progress(total: int, initial: int):
    try:
        return tqdm(total=total, initial=initial, mininterval=15, file=sys.stdout, dynamic_ncols=False, ncols=100)
    except ImportError:  # pragma: no cover - tqdm is optional
        class _Plain:
            def __init__(self):
                self.n, self.t0, self.last, self.post = initial, time.time(), 0.0, ""

            def update(self, k=1):
                self.n += k
                if time.time() - self.last > 15 or self.n == total:
                    self.last = time.time()
                    print(f"step {self.n}/{total} {self.post} ({(time.time() - self.t0):.0f}s)", flush=True)

            def set_postfix_str(self, s, refresh=True):
                self.post = s

            def write(self, s):
                print(s, flush=True)

            def close(self):
                pass

        return _Plain()


def train(model: str, out: str | pathlib.Path, tokenizer_path: str | pathlib.Path, tc: TrainConfig,
          resume: bool = False, export_dir: str | pathlib.Path | None = None,
          export_dtype=np.float16, **model_overrides) -> dict:
    """Train preset `model` and return a summary dict (losses, timings, param count)."""
    out, tokenizer_path = pathlib.Path(out), pathlib.Path(tokenizer_path)
    out.mkdir(parents=True, exist_ok=True)
    ckpt = out / "ckpt"
    tok = load_tokenizer(tokenizer_path)
    cfg = model_config(model, tok.get_vocab_size(), **model_overrides)
    t_data = time.time()
    train_w = np.concatenate(list(load_split(tok, "train", tc.seq_len, tc.sharegpt_chars).values()))
    valid = {src: w[: tc.eval_windows] for src, w in load_split(tok, "valid", tc.seq_len, tc.sharegpt_chars).items()}
    print(f"data: {len(train_w)} train windows of {tc.seq_len + 1} tokens ({train_w[:, 1:].size:,} train tokens), "
          f"valid windows {{{', '.join(f'{k}: {len(v)}' for k, v in valid.items())}}} "
          f"({time.time() - t_data:.1f}s)", flush=True)
    print("unigram valid loss: " + ", ".join(f"{k} {unigram_loss(train_w, v, cfg.vocab_size):.3f}"
                                             for k, v in valid.items()), flush=True)

    opt, schedule = make_optimizer(tc)
    params, opt_state, start, log = init_or_resume(ckpt, cfg, opt, tc.seed, resume)
    print(f"model {model}: {count_params(params):,} params  {cfg}", flush=True)
    step_fn, evaluate = make_step(cfg, opt), make_eval(cfg, tc.batch_size)

    def do_eval(step, train_loss):
        rec = {"step": step, "train_loss": train_loss, "lr": float(schedule(step)),
               **{f"valid_{k}": evaluate(params, v) for k, v in valid.items()}}
        log.append(rec)
        bar.write(json.dumps(rec))

    bar = _progress(tc.steps, start)
    t0, recent = time.time(), []
    for s in range(start, tc.steps):
        batch = jnp.asarray(batch_at(train_w, s, tc.batch_size, tc.seed))
        params, opt_state, loss, gnorm = step_fn(params, opt_state, batch)
        recent.append(float(loss))
        recent = recent[-50:]
        bar.update(1)
        bar.set_postfix_str(f"loss {np.mean(recent):.3f} gnorm {float(gnorm):.2f}", refresh=False)
        done = s + 1
        if done % tc.eval_every == 0 or done == tc.steps:
            do_eval(done, float(np.mean(recent)))
        if done % tc.ckpt_every == 0 or done == tc.steps:
            save_state(ckpt, cfg, params, opt_state, done, tc, log)
    bar.close()
    elapsed = time.time() - t0
    summary = {"model": model, "params": count_params(params), "config": cfg.to_hf(),
               "train_config": dataclasses.asdict(tc), "steps_run": tc.steps - start,
               "seconds": elapsed, "final": log[-1] if log else None}
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps({k: summary[k] for k in ("model", "params", "steps_run", "seconds", "final")}), flush=True)
    if export_dir is not None:
        print(f"exported -> {export(pathlib.Path(export_dir), cfg, params, tokenizer_path, export_dtype)}")
    return summary


__all__ = ["PRESETS", "TrainConfig", "model_config", "count_params", "token_stream", "windows", "batch_at",
           "load_split", "token_nll", "loss_fn", "make_optimizer", "make_step", "make_eval", "unigram_loss",
           "save_state", "load_state", "init_or_resume", "export", "train", "heldout_loss", "encode_prompt",
           "chain_acceptance", "report"]
