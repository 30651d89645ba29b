"""Generated training data: the target answers training prompts; token shards with a manifest, resumable.

    python -m specjax.train data --target smollm2-135m --out specjax/zoo/data/smollm2-135m --tokens 500000

A drafter learns the target's own distribution, so its training text is the target's answers
(DFlash / EAGLE-3 / Domino all regenerate responses with the target). The prompts are
`specjax.data.train_sources.training_prompts` (ShareGPT, wiki, MATH minus MATH-500, code
stubs, then the follow-on sources: later ShareGPT turns and wiki tasks, ~75k distinct prompts in all;
never an evaluation prompt), in one seeded order; each goes through the target's chat
template when it has one, cut to `max_prompt_tokens`. Generation keeps `batch_size` rows busy
(`specjax.train.continuous`: finished rows are refilled from a look-ahead of the next prompts,
`refill_choice`; the "batched" engine runs `generate_ar` per batch instead); every `round(1 / sampled_fraction)`-th
prompt samples at temperature 1, the rest are greedy; a row stops at the target's EOS (kept) or
after `max_new_tokens`.

On disk (`out/`):
  manifest.json            recipe, target (name, params sha256), cursor (prompts consumed), totals,
                           and per shard: file, sha256, sequences, prompt / response tokens,
                           temperature, seconds, response tokens / s
  shard-NNNNN.npz          tokens uint16 (int32 for a vocabulary over 65,536 ids; earlier shards int32)
                           [sum of lengths] (prompt + response of each sequence, concatenated),
                           offsets int64[n + 1], prompt_lengths int32[n], temperature f32[n],
                           prompt_index int32[n] (position in the prompt order)
  shard-NNNNN.prompts.jsonl.gz  the user messages of the shard's sequences (source, key, text), gzip'd
                           JSON lines (`read_shard_prompts`; plain `.jsonl` before 2026-11-28: the texts were
                           two thirds of the directory, gzip takes them to a third; resuming a directory
                           compresses its plain ones, `compress_prompt_files`)

A shard (the next `shard_batches * batch_size` prompts) and then the manifest are written
atomically once all its prompts are answered, so an interrupted run loses at most the shards in
flight; the last shard of a run ends early, at the first prompt whose answer brings the directory
to `--tokens` (its prompts before that one all answered: the cursor stays a prompt index), so a run
stops within one answer of its target. Re-running the same command continues at the
manifest's cursor (a different recipe in the same directory is refused). Shards are small
(int32, compressed): commit them; nobody has to generate them twice.
"""

from __future__ import annotations

import dataclasses
import functools
import gzip
import hashlib
import io
import json
import os
import pathlib
import time
import zipfile
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from tqdm.auto import tqdm

from specjax.atomic import write_bytes
from specjax.data.train_sources import (DEFAULT_WEIGHTS, SOURCES, TrainPrompt, dump_prompts, read_prompt_order,
                                        training_prompts)
from specjax.core import generate_ar_core
from specjax.decode import generate_ar
from specjax.models import pad_prompts
from specjax.pipeline import load_pair
from specjax.sampling import Sampling
from specjax.train.continuous import lookahead_for, precompile_wanted, stream

__all__ = ["DataRecipe", "PromptEncoder", "TokenShards", "params_sha256", "encode_prompt", "load_target", "sampled_every",
           "read_shard_prompts", "compress_prompt_files",
           "generate_shards", "load_shards", "parse_weights", "read_manifest_file"]

MANIFEST = "manifest.json"


@dataclasses.dataclass(frozen=True)
class DataRecipe:
    """What a data directory holds; a resumed run must have the same recipe.

    Fields:
      target: target name (`zoo`, `smollm2-135m` or a checkpoint directory).
      weights: source -> mixture weight (`specjax.data.train_sources.DEFAULT_WEIGHTS`), as sorted pairs.
      seed: seeds the prompt order and the sampled answers' keys (one of its own for each prompt).
      max_new_tokens: response tokens per sequence at most.
      max_prompt_tokens: templated prompt tokens at most (the user message is cut to fit).
      batch_size: rows generated together (the pool or the batch of the engine); may change when a
        run is continued (each shard records its engine).
      sampled_fraction: fraction of sequences sampled at temperature 1 (the rest greedy). 0.5: at equal tokens,
        sampled answers raise a drafter's T = 1 acceptance more than they lower its greedy acceptance (measured
        for the SmolLM2 draft LM at 2M tokens, all greedy / a quarter sampled / all sampled: greedy τ 1.44 / 1.41
        / 1.37, T = 1 τ 1.30 / 1.35 / 1.46; specjax/zoo/TRAINING.md "The sampled share"), and a drafter serves
        both; 1 for T = 1 serving only, 0 for greedy only. A continued directory keeps its own
        (`fraction_for`).
      chat: whether prompts go through the target's chat template.
    """

    target: str
    weights: tuple[tuple[str, float], ...] = tuple(sorted(DEFAULT_WEIGHTS.items()))
    seed: int = 0
    max_new_tokens: int = 256
    max_prompt_tokens: int = 192
    batch_size: int = 128
    sampled_fraction: float = 0.5
    chat: bool = True

    def to_json(self) -> dict:
        d = dataclasses.asdict(self)
        d["weights"] = dict(self.weights)
        return d


def params_sha256(params) -> str:
    """sha256 over the target's parameter leaves (path, dtype, shape, bytes): names the exact weights."""
    h = hashlib.sha256()
    for path, leaf in sorted(jax.tree_util.tree_flatten_with_path(params)[0], key=lambda kv: str(kv[0])):
        arr = np.asarray(leaf)
        h.update(f"{jax.tree_util.keystr(path)}|{arr.dtype}|{arr.shape}".encode())
        h.update(np.ascontiguousarray(arr).tobytes())
    return h.hexdigest()


@dataclasses.dataclass(frozen=True)
class PromptEncoder:
    """How a target turns a user message into prompt ids.

    Fields:
      template: text -> the whole prompt's ids (the chat template applied, or the plain text).
      body: text -> the message's own ids (no template, no special tokens).
      decode: ids -> text.
      chat: whether `template` applies a chat template (False: it is `body`).
    """

    template: Callable[[str], list[int]]
    body: Callable[[str], list[int]]
    decode: Callable[[list[int]], str]
    chat: bool = False


def encode_prompt(enc: PromptEncoder, text: str, max_tokens: int) -> list[int] | None:
    """Prompt ids of one user message, the message cut from its end until the whole fits
    `max_tokens`; None when even an 8-token message does not fit."""
    out = enc.template(text)
    if len(out) <= max_tokens:
        return out
    body = enc.body(text)
    keep = max_tokens - (len(out) - len(body)) - 2  # 2: a cut can re-tokenise at its edge
    if keep < 8:
        return None
    out = enc.template(enc.decode(body[:keep]))
    return out if len(out) <= max_tokens else None


def load_target(name: str, chat: bool = True):
    """(cfg, params, PromptEncoder, reserved special ids) of a named model (`specjax.pipeline.MODELS`) or an HF
    checkpoint directory, loaded by `specjax.pipeline.load_pair` (the one loader of named models); a tokenizer
    without a chat template gives plain text (`enc.chat` False)."""
    pair = load_pair(name, ())
    template, body, is_chat = pair.training_encoder(chat)
    return pair.cfg, pair.params, PromptEncoder(template, body, pair.tokenizer.decode, is_chat), pair.reserved_ids()


def _atomic_write(path: pathlib.Path, data: bytes) -> None:
    write_bytes(path, data)  # `specjax.atomic`: a fresh temporary name, fsync'ed, removed if the write fails


_ENGINE_FIELDS = ("batch_size",)  # how the data was generated, not what it is: may change between runs


def read_manifest_file(directory: str | pathlib.Path) -> dict | None:
    """The manifest of a data directory (None: there is none yet); a truncated or edited one raises
    ValueError naming the file."""
    path = pathlib.Path(directory) / MANIFEST
    if not path.exists():
        return None
    try:
        manifest = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} is not valid JSON ({e}): restore it from version control or regenerate") from None
    missing = [k for k in ("recipe", "target", "cursor", "shards") if not isinstance(manifest, dict) or k not in manifest]
    if missing:
        raise ValueError(f"{path} has no {', '.join(missing)}: not a specjax data manifest")
    return manifest


def fraction_for(out: str | pathlib.Path, given: float | None = None) -> float:
    """The sampled fraction a generation into `out` uses: `given`, else the directory's own when it exists (a
    continued directory keeps its recipe, whatever the default is now), else `DataRecipe`'s default."""
    if given is not None:
        return given
    manifest = read_manifest_file(out)
    if manifest is not None and "sampled_fraction" in manifest["recipe"]:
        return float(manifest["recipe"]["sampled_fraction"])
    return DataRecipe.sampled_fraction


def _read_manifest(out: pathlib.Path, recipe: DataRecipe, target_sha: str) -> dict:
    path = out / MANIFEST
    manifest = read_manifest_file(out)
    if manifest is None:
        return {"recipe": recipe.to_json(), "target": {"name": recipe.target, "params_sha256": target_sha},
                "cursor": 0, "skipped_prompts": 0, "shards": []}
    same = (lambda r: {k: v for k, v in r.items() if k not in _ENGINE_FIELDS})  # noqa: E731
    if same(manifest["recipe"]) != same(recipe.to_json()):
        raise ValueError(f"{path} was generated with another recipe:\n  {manifest['recipe']}\nnot\n  "
                         f"{recipe.to_json()}\nuse another --out directory, or the same options")
    if manifest["target"]["params_sha256"] != target_sha:
        raise ValueError(f"{path} was generated by other target weights (params sha256 "
                         f"{manifest['target']['params_sha256'][:12]}..., these are {target_sha[:12]}...)")
    return manifest


def _gzip(text: str) -> bytes:
    return gzip.compress(text.encode(), compresslevel=9, mtime=0)  # mtime 0: the same text, the same bytes


def read_shard_prompts(directory: str | pathlib.Path, shard: dict) -> list[dict]:
    """The prompts of one manifest shard entry, in its sequences' order: [{"source", "key", "text"}, ...].
    Reads its `prompts_file`, gzip'd (`.gz`) or plain JSON lines. Lines are split on "\n" only (a prompt
    may hold U+2028, which `str.splitlines` would also split on)."""
    path = pathlib.Path(directory) / shard["prompts_file"]
    raw = path.read_bytes()
    text = (gzip.decompress(raw) if path.name.endswith(".gz") else raw).decode("utf-8")
    return [json.loads(line) for line in text.split("\n") if line]


def compress_prompt_files(directory: str | pathlib.Path, manifest: dict) -> int:
    """gzip the plain `.prompts.jsonl` files of `manifest`'s shards in place and point the manifest at
    the `.gz` files; returns how many. Crash-safe in this order: each `.gz` written atomically, then
    the manifest, then the plain files removed (an interrupted run leaves both, the manifest naming
    one that exists). The texts are unchanged: `read_shard_prompts` reads the same prompts back."""
    out = pathlib.Path(directory)
    plain = [s for s in manifest["shards"] if not s["prompts_file"].endswith(".gz")]
    for shard in plain:
        _atomic_write(out / (shard["prompts_file"] + ".gz"), _gzip((out / shard["prompts_file"]).read_text("utf-8")))
    if plain:
        old = [s["prompts_file"] for s in plain]
        for shard in plain:
            shard["prompts_file"] += ".gz"
        _atomic_write(out / MANIFEST, (json.dumps(manifest, indent=1) + "\n").encode())
        for name in old:
            (out / name).unlink()
    return len(plain)


def _totals(manifest: dict) -> dict:
    shards = manifest["shards"]
    secs = sum(s["seconds"] for s in shards)
    resp = sum(s["response_tokens"] for s in shards)
    return {"sequences": sum(s["sequences"] for s in shards), "prompt_tokens": sum(s["prompt_tokens"] for s in shards),
            "response_tokens": resp, "seconds": round(secs, 1),
            "response_tokens_per_s": round(resp / secs, 1) if secs else None}


ENGINES = ("continuous", "batched")


def generate_shards(target, enc: PromptEncoder, recipe: DataRecipe, out: str | pathlib.Path, *, response_tokens: int,
                    shard_batches: int = 4, progress: bool = True, engine: str = "continuous",
                    chunk: int = 16, prompt_order: str | pathlib.Path | None = None,
                    deadline: float | None = None, precompile: str = "auto") -> dict:
    """Generate until the directory holds >= `response_tokens` response tokens (or the prompts run out);
    returns the manifest. target: (cfg, params); enc: the target's `PromptEncoder`. The last shard ends
    at the first prompt (in order) whose answer reaches `response_tokens`, so the directory ends with
    fewer than `response_tokens + max_new_tokens`; the progress bar counts the tokens of that prefix,
    what the manifest's totals will hold.

    A shard is the next `shard_batches * batch_size` prompts of the order. engine "continuous"
    (`specjax.train.continuous`: a pool of batch_size rows refilled as rows finish, prompts of the
    next shard already in flight; needs EOS ids) or "batched" (`generate_ar` per batch of
    batch_size prompts, sorted by length within the shard). Sampled sequences: every k-th prompt
    index, k = round(1 / sampled_fraction), each drawn with a key of its own prompt index, so a continued run's
    data is the uninterrupted run's, prompt for prompt, with either engine (a run that stopped inside a shard
    forms the next run's batches from another first prompt; no answer depends on its batch).

    prompt_order: a file of `write_prompt_order` (the same weights and seed) read instead of the
    registry's sources: the same prompts, on a machine that cannot reach the registry.
    deadline: a `time.time()` after which no new shard is started: it returns after the first shard that
    ends past it (the shards in flight are dropped, as an interrupted run's are).
    precompile: the continuous engine compiles all its programs before the first shard ("on"), each
    when first needed ("off"), or "auto": on unless jax runs on the CPU (`specjax.train.continuous.stream`);
    the shards are the same either way."""
    cfg, params = target
    if recipe.chat != enc.chat:
        raise ValueError(f"the recipe says chat={recipe.chat} but the prompt encoder "
                         f"{'applies' if enc.chat else 'has no'} chat template: make them agree")
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
    precompile_wanted(precompile)  # an unknown value raises ValueError here, before any prompt is read
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    manifest = _read_manifest(out, recipe, params_sha256(params))
    compress_prompt_files(out, manifest)  # a directory of plain prompt files continues in the gzip'd form
    order: list[TrainPrompt | None] = (training_prompts(dict(recipe.weights), recipe.seed) if prompt_order is None
                                       else read_prompt_order(prompt_order, dict(recipe.weights), recipe.seed))
    if manifest["cursor"] < len(order) and order[manifest["cursor"]] is None:
        raise ValueError(f"{prompt_order} starts after {out / MANIFEST}'s cursor {manifest['cursor']}: write the "
                         f"order from that cursor (--write-prompt-order)")
    have = _totals(manifest)["response_tokens"]
    if have >= response_tokens or manifest["cursor"] >= len(order):
        return manifest
    bar = tqdm(total=response_tokens, initial=have, unit="tok", disable=not progress, desc="response tokens",
               smoothing=0.1)
    start = have

    def show(tokens: int) -> None:  # `tokens`: the run's answered prefix so far, what its shards will hold
        bar.update(max(start + tokens - bar.n, 0))

    args = (cfg, params, enc, recipe, order, manifest["cursor"], shard_batches * recipe.batch_size, chunk,
            response_tokens - have, show)
    shards = _continuous_shards(*args, precompile=precompile) if engine == "continuous" else _batched_shards(*args)
    for shard in shards:
        _write_shard(out, manifest, order, shard)
        have = manifest["totals"]["response_tokens"]
        bar.set_postfix_str(f"{manifest['totals']['response_tokens_per_s']} tok/s, {len(manifest['shards'])} shards")
        if have >= response_tokens or (deadline is not None and time.time() >= deadline):
            break
    shards.close()
    bar.n = have  # what was written (a time box drops the answered prompts of the shard in flight)
    bar.close()
    return manifest


def parse_weights(text: str) -> tuple[tuple[str, float], ...]:
    """"sharegpt=0.4,math=0.3" -> sorted (source, weight) pairs; ValueError naming what is wrong."""
    try:
        weights = tuple(sorted((k.strip(), float(v)) for k, v in (kv.split("=") for kv in text.split(","))))
    except ValueError:
        raise ValueError(f"weights must look like sharegpt=0.4,math=0.3, got {text!r}") from None
    unknown = sorted(set(dict(weights)) - set(SOURCES))
    if unknown:
        raise ValueError(f"weights name unknown sources {unknown}; choose from {sorted(SOURCES)}")
    if any(not w >= 0 for _, w in weights) or not sum(w for _, w in weights) > 0:
        raise ValueError(f"weights must be >= 0 and not all 0, got {text!r}")
    return weights


def sampled_every(recipe: DataRecipe) -> int:
    """k: every k-th prompt (continuous) or batch (batched) is sampled at T = 1; 0: none."""
    return int(round(1 / recipe.sampled_fraction)) if recipe.sampled_fraction > 0 else 0


@dataclasses.dataclass
class _Shard:
    """One finished shard before it is written: prompts [start, start + n) of the order, the kept ones
    as (prompt index, prompt ids, response ids, temperature) in prompt order."""

    start: int
    n: int
    rows: list[tuple[int, list[int], list[int], float]]
    seconds: float
    engine: dict


def _answered_prefix(start: int, end: int, front: int, tokens: int, encoded: dict, answers: dict, written: int,
                     budget: int) -> tuple[int, int, bool]:
    """Advance `front` (prompts [start, front) answered or skipped, `tokens` response tokens among them) over the
    answered prompts after it, stopping at `end` or at the first answer that brings `written + tokens` to
    `budget`: (front, tokens, whether the budget is reached)."""
    while front < end and front in encoded and (not encoded[front] or front in answers):
        tokens += len(answers[front]) if encoded[front] else 0
        front += 1
        if written + tokens >= budget:
            return front, tokens, True
    return front, tokens, False


@functools.partial(jax.jit, static_argnames=("cfg", "max_new_tokens", "cache_slots"))
def _sampled_answers(params, cfg, tokens, prompt_lengths, index, seed, *, max_new_tokens: int, cache_slots: int):
    """(tokens int32[B, max_new_tokens], num_tokens int32[B]): T = 1 answers of prompts tokens int32[B, P] (right-
    padded, prompt_lengths int32[B]) whose indices in the prompt order are index int32[B], row b drawn with the
    key fold_in(key(seed), index[b]): a one-row `generate_ar_core` vmapped over the rows, so an answer depends on
    its prompt and index only, never on the batch it was formed in (a resumed run forms other batches)."""
    base = jax.random.key(seed)

    def one(tokens, length, i):
        out = generate_ar_core(params, cfg, tokens[None], length[None], jax.random.fold_in(base, i),
                               max_new_tokens=max_new_tokens, sampling=Sampling(temperature=1.0),
                               cache_slots=cache_slots)
        return out.tokens[0], out.num_tokens[0]
    return jax.vmap(one)(tokens, prompt_lengths, index)


def _batched_shards(cfg, params, enc, recipe, order, cursor, per_shard, chunk, budget, show):
    """The "batched" engine: `generate_ar` over batches of similar prompt lengths, the sampled prompts in batches
    of their own (`_sampled_answers`). A shard's batches are sorted by length, so the answered prefix of the last
    shard (`_answered_prefix`) may need most of it."""
    every = sampled_every(recipe)
    start, written = cursor, 0
    while start < len(order):
        n = min(per_shard, len(order) - start)
        chunk_ids = list(range(start, start + n))
        encoded = {i: encode_prompt(enc, order[i].text, recipe.max_prompt_tokens) for i in chunk_ids}
        kept = [i for i in chunk_ids if encoded[i]]
        batches = []  # greedy and sampled prompts (every k-th index, as the continuous engine) in batches of their own
        for sampled in (False, True):
            group = sorted((i for i in kept if (bool(every) and i % every == every - 1) == sampled),
                           key=lambda i: len(encoded[i]))  # less padded prefill
            batches += [(group[b0:b0 + recipe.batch_size], sampled) for b0 in range(0, len(group), recipe.batch_size)]
        batches.sort(key=lambda bs: len(encoded[bs[0][0]]))  # shortest first (stable: greedy before sampled)
        t0 = time.time()
        rows, answers, front, tokens, enough = [], {}, start, 0, False
        for batch, sampled in batches:
            width = -(-max(len(encoded[i]) for i in batch) // 64) * 64  # a few padded widths: a few compiles
            toks, lens = pad_prompts([encoded[i] for i in batch], min(width, recipe.max_prompt_tokens))
            slots = toks.shape[1] + recipe.max_new_tokens
            if sampled:
                gen, num = map(np.asarray, _sampled_answers(params, cfg, toks, lens, jnp.asarray(batch, jnp.int32),
                                                            recipe.seed, max_new_tokens=recipe.max_new_tokens,
                                                            cache_slots=slots))
            else:
                res = generate_ar(params, cfg, toks, lens, recipe.max_new_tokens, cache_slots=slots)
                gen, num = np.asarray(res.tokens), np.asarray(res.num_tokens)
            rows += [(i, encoded[i], gen[r, :num[r]].tolist(), 1.0 if sampled else 0.0) for r, i in enumerate(batch)]
            answers.update((i, gen[r, :num[r]]) for r, i in enumerate(batch))
            front, tokens, enough = _answered_prefix(start, start + n, front, tokens, encoded, answers, written,
                                                     budget)
            show(written + tokens)
            if enough:
                break
        if enough:  # the run's last shard: its answered prefix reaches the target
            rows, n = [row for row in rows if row[0] < front], front - start
        yield _Shard(start, n, rows, time.time() - t0, {"name": "batched", "batch_size": recipe.batch_size})
        if enough:
            return
        start, written = start + n, written + tokens


def _continuous_shards(cfg, params, enc, recipe, order, cursor, per_shard, chunk, budget, show, precompile="auto"):
    """The "continuous" engine (`specjax.train.continuous.stream`, compiling ahead per `precompile`, its
    programs' compile time counted in the first shard's seconds); a shard is yielded once every
    prompt of it has finished (the pool already works on the next shard's prompts), or, the run's
    last, once its answered prefix reaches the target (`_answered_prefix`; the answers in flight after
    it are dropped, as an interrupted run's: a prompt's answer does not depend on the pool)."""
    every = sampled_every(recipe)
    encoded: dict[int, list[int] | None] = {}

    def prompts():
        for i in range(cursor, len(order)):
            encoded[i] = encode_prompt(enc, order[i].text, recipe.max_prompt_tokens)
            if encoded[i]:
                yield i, encoded[i], bool(every) and i % every == every - 1

    finished: dict[int, list[int]] = {}
    start, t0 = cursor, time.time()
    picked = [0]  # response tokens the pool picked since the last shard (in-flight rows included)
    written, front, tokens = 0, cursor, 0  # the yielded shards' response tokens; the answered prefix after them

    def on_tokens(n: int) -> None:
        picked[0] += n

    results = stream(params, cfg, prompts(), batch_size=recipe.batch_size, max_new_tokens=recipe.max_new_tokens,
                     max_prompt_tokens=recipe.max_prompt_tokens, eos_ids=tuple(cfg.eos_token_ids), seed=recipe.seed,
                     chunk=chunk, on_tokens=on_tokens, precompile=precompile)

    def shard(n: int) -> _Shard:
        nonlocal start, t0, written, front, tokens
        kept = [i for i in range(start, start + n) if encoded[i]]
        rows = [(i, encoded[i], finished.pop(i), 1.0 if every and i % every == every - 1 else 0.0) for i in kept]
        now = time.time()
        # the pool's own speed: every token it picked meanwhile, this shard's or the next one's
        engine = {"name": "continuous", "batch_size": recipe.batch_size, "chunk": chunk, "sampler": "inverse_cdf",
                  "refill": "lookahead", "lookahead": lookahead_for(recipe.batch_size),  # `continuous.refill_choice`
                  "pool_tokens_per_s": round(picked[0] / max(now - t0, 1e-9), 1)}
        out = _Shard(start, n, rows, now - t0, engine)
        start, t0, picked[0] = start + n, now, 0
        written, front, tokens = written + sum(len(r[2]) for r in rows), start, 0
        return out

    def ready():  # the shards whose every prompt has finished, oldest first; True after the run's last
        nonlocal front, tokens
        while start < len(order):
            end = min(start + per_shard, len(order))
            front, tokens, enough = _answered_prefix(start, end, front, tokens, encoded, finished, written, budget)
            show(written + tokens)
            if enough or front == end:  # the target reached, or every prompt of the shard answered (or skipped)
                yield shard(front - start)
                if enough:
                    return True
            else:
                return False
        return False

    for i, response in results:
        finished[i] = response
        if (yield from ready()):
            return
    yield from ready()  # a last shard whose prompts were all skipped (too long) finishes with no answer


def _machine() -> str:
    """The generating machine: "cpu x2 cores", or the accelerator's kind ("gpu NVIDIA H100 80GB HBM3, 16 cores")."""
    d = jax.devices()[0]
    return f"cpu x{os.cpu_count()} cores" if d.platform == "cpu" else f"{d.platform} {d.device_kind}, {os.cpu_count()} cores"


def _npz_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    """`np.savez_compressed`'s format (np.load reads it) with every zip entry dated 1980-01-01: the same
    arrays give the same bytes and sha256 whenever they are written (savez stamps the time of writing)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for name, array in arrays.items():
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            with z.open(info, "w", force_zip64=True) as f:
                np.lib.format.write_array(f, np.asanyarray(array), allow_pickle=False)
    return buf.getvalue()


def _write_shard(out: pathlib.Path, manifest: dict, order: list[TrainPrompt], shard: _Shard) -> None:
    """Write a shard's arrays and prompts, then the manifest with the cursor after it (each atomically)."""
    seqs = [np.asarray(p + r, np.int32) for _, p, r, _ in shard.rows]
    plens = [len(p) for _, p, _, _ in shard.rows]
    temps = [t for *_, t in shard.rows]
    index = [i for i, *_ in shard.rows]
    lengths = np.array([len(s) for s in seqs], np.int64)
    tokens = np.concatenate(seqs) if seqs else np.zeros(0, np.int32)
    if tokens.size == 0 or (tokens.min() >= 0 and tokens.max() <= np.iinfo(np.uint16).max):
        tokens = tokens.astype(np.uint16)  # every vocabulary below 65,536 ids: half the bytes (read back as int32)
    arrays = {"tokens": tokens,
              "offsets": np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
              "prompt_lengths": np.asarray(plens, np.int32), "temperature": np.asarray(temps, np.float32),
              "prompt_index": np.asarray(index, np.int32)}
    name = f"shard-{len(manifest['shards']):05d}"
    buf = io.BytesIO(_npz_bytes(arrays))
    _atomic_write(out / f"{name}.npz", buf.getvalue())
    _atomic_write(out / f"{name}.prompts.jsonl.gz", _gzip(dump_prompts(order[i] for i in index)))
    response = int(lengths.sum() - sum(plens))
    manifest["shards"].append({
        "file": f"{name}.npz", "prompts_file": f"{name}.prompts.jsonl.gz",
        "sha256": hashlib.sha256(buf.getvalue()).hexdigest(), "prompt_range": [shard.start, shard.start + shard.n],
        "sequences": len(seqs), "prompt_tokens": int(sum(plens)), "response_tokens": response,
        "sampled_sequences": int(sum(t > 0 for t in temps)), "seconds": round(shard.seconds, 1),
        "response_tokens_per_s": round(response / max(shard.seconds, 1e-9), 1), "engine": shard.engine,
        "machine": _machine()})
    manifest["cursor"] = shard.start + shard.n
    manifest["skipped_prompts"] += shard.n - len(seqs)
    manifest["totals"] = _totals(manifest)
    _atomic_write(out / MANIFEST, (json.dumps(manifest, indent=1) + "\n").encode())


@dataclasses.dataclass(frozen=True)
class TokenShards:
    """A data directory's sequences, verified against the manifest's sha256s.

    Fields:
      tokens: int32[total] every sequence's prompt + response, concatenated.
      offsets: int64[n + 1]: sequence i is tokens[offsets[i]:offsets[i + 1]].
      prompt_lengths: int32[n]; the response (the loss region) follows the prompt.
      temperature: f32[n] the temperature it was generated at.
      manifest: the directory's manifest.
    """

    tokens: np.ndarray
    offsets: np.ndarray
    prompt_lengths: np.ndarray
    temperature: np.ndarray
    manifest: dict

    def __len__(self) -> int:
        return len(self.prompt_lengths)


def load_shards(directory: str | pathlib.Path, num_shards: int | None = None) -> TokenShards:
    """All shards of a data directory, or its first `num_shards`, concatenated (sha256-checked; a mismatch names
    the shard); the manifest returned lists those shards, its totals theirs."""
    directory = pathlib.Path(directory)
    path = directory / MANIFEST
    manifest = read_manifest_file(directory)
    if manifest is None:
        raise FileNotFoundError(f"{path} not found: generate the data first (python -m specjax.train data ...)")
    if num_shards is not None and num_shards != len(manifest["shards"]):
        if num_shards > len(manifest["shards"]):
            raise ValueError(f"{path} lists {len(manifest['shards'])} shards, fewer than the {num_shards} asked for")
        kept = manifest["shards"][:num_shards]
        manifest = {**manifest, "shards": kept, "totals": {k: sum(int(e.get(k, 0)) for e in kept)
                                                           for k in ("sequences", "prompt_tokens", "response_tokens")}}
    toks, offs, plens, temps, base = [], [np.zeros(1, np.int64)], [], [], 0
    for shard in manifest["shards"]:
        raw = (directory / shard["file"]).read_bytes()
        if hashlib.sha256(raw).hexdigest() != shard["sha256"]:
            raise ValueError(f"{directory / shard['file']}: sha256 differs from {path}; regenerate or restore it")
        with np.load(io.BytesIO(raw)) as z:
            toks.append(z["tokens"])
            offs.append(z["offsets"][1:] + base)
            base += int(z["offsets"][-1])
            plens.append(z["prompt_lengths"])
            temps.append(z["temperature"])
    cat = (lambda xs, dt: np.concatenate(xs).astype(dt) if xs else np.zeros(0, dt))
    return TokenShards(tokens=cat(toks, np.int32), offsets=np.concatenate(offs), prompt_lengths=cat(plens, np.int32),
                       temperature=cat(temps, np.float32), manifest=manifest)
