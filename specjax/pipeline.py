"""Text in, text out: a target, its tokenizer and a method behind one call.

    import specjax
    pipe = specjax.Pipeline.load("zoo", method="ddtree-8")        # or "smollm2-135m", or an HF directory
    out = pipe.generate(["The river flows through the"], max_new_tokens=32)
    print(out[0].text, out[0].tau, out[0].rounds)

`Pipeline.load` takes a model name ("zoo": the embedded tiny pair; "smollm2-135m":
SmolLM2-135M-Instruct from a registry GGUF) or an HF checkpoint directory (config.json,
model.safetensors, tokenizer.json), and any method string (`specjax.drafters.registry.forms()`).
The trained drafters a method reads come from ``dflash=DIR`` / ``eagle3=DIR`` / ``domino=DIR`` or
the zoo's for that model (`specjax.zoo`). `check_source` validates all of that without
loading a weight (the CLI uses it before anything loads).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from tokenizers import Tokenizer

from specjax import zoo
from specjax.data.assets import fetch
from specjax.decode import generate, generate_ar
from specjax.drafters.registry import READERS, Method, needs_of
from specjax.drafters.registry import method as build_method
from specjax.inputs import pad_prompts
from specjax.models import load_checkpoint
from specjax.models.gguf import load_gguf
from specjax.models.model import LAYOUTS, with_layout
from specjax.sampling import Sampling

__all__ = ["DEFAULT_METHOD", "MODELS", "Completion", "Pair", "Pipeline", "check_source", "cut_at_stop",
           "default_method", "load_pair"]

# The fastest method on the embedded pair in a same-run benchmark (docs/results.md).
DEFAULT_METHOD = "ddtree-8"
# Named models -> the zoo prefix of their trained drafters ("<prefix>-dflash", ...).
MODELS = {"zoo": "tiny-neox", "smollm2-135m": "smollm2-135m"}


def _directory(path, flag: str, *files: str) -> Path:
    p = Path(path)
    if not p.is_dir():
        raise ValueError(f"{flag} {path}: no such directory")
    for name in ("config.json", *files):
        if not (p / name).is_file():
            extra = (" (the text is encoded and decoded with it: save it with tokenizer.save_pretrained(dir) in "
                     "transformers)") if name == "tokenizer.json" else ""
            raise ValueError(f"{flag} {path} has no {name}{extra}")
    return p


def check_source(model: str = "zoo", draft=None, **readers) -> dict[str, object]:
    """What `model` can draft with, checked without loading a weight: {"draft" / reader kind: where from}.

    model: "zoo", "smollm2-135m" or an HF checkpoint directory (config.json and tokenizer.json needed);
    draft: a draft LM directory; readers: kind -> directory of a trained drafter reading the target
    (else the zoo's for a named model). Raises ValueError naming the flag and what to fix.
    """
    unknown = set(readers) - set(READERS)
    if unknown:
        raise ValueError(f"unknown drafter kinds {sorted(unknown)}; the kinds are {', '.join(READERS)}")
    if model not in MODELS:
        _directory(model, "--checkpoint", "tokenizer.json")
    out: dict[str, object] = {}
    if draft is not None:
        out["draft"] = _directory(draft, "--draft")
    elif model == "zoo":
        out["draft"] = "zoo:tiny-neox-draft"
    for kind in READERS:
        if readers.get(kind) is not None:
            out[kind] = _directory(readers[kind], f"--{kind}")
        elif model in MODELS and zoo.has(f"{MODELS[model]}-{kind}"):
            out[kind] = f"zoo:{MODELS[model]}-{kind}"
    return out


def default_method(available) -> str:
    """DEFAULT_METHOD with a DFlash drafter, else "dynatree-zoo" with a draft LM, else "ar"."""
    return DEFAULT_METHOD if "dflash" in available else "dynatree-zoo" if "draft" in available else "ar"


def _load_from(where, dtype):
    if isinstance(where, str) and where.startswith("zoo:"):
        return zoo.load_drafter(where[4:], dtype) if where[4:] in zoo.DRAFTERS else zoo.load(where[4:], dtype)[:2]
    return load_checkpoint(where, dtype)


@dataclasses.dataclass(frozen=True)
class Pair:
    """A target with its tokenizer and what drafts for it.

    Fields:
      name: "zoo", "smollm2-135m" or the checkpoint directory.
      cfg: the target's config.
      params: the target's params.
      tokenizer: a `tokenizers.Tokenizer` or the GGUF tokenizer (`specjax.models.gguf.GGUFTokenizer`).
      prefix: ids put before every prompt (the zoo's EOS separator), or ().
      draft: the draft LM as (cfg, params), or None.
      readers: reader kind -> (cfg, params) of the trained drafters loaded for the method.
    """

    name: str
    cfg: object
    params: object
    tokenizer: object
    prefix: tuple[int, ...] = ()
    draft: tuple | None = None
    readers: dict = dataclasses.field(default_factory=dict)

    @property
    def has_chat_template(self) -> bool:
        return hasattr(self.tokenizer, "apply_chat_template")

    def encode(self, text: str, chat: bool = False) -> list[int]:
        """Token ids of a prompt; `chat` wraps it as one user turn in the model's chat template."""
        if chat:
            if not self.has_chat_template:
                raise ValueError(f"model {self.name!r} has no chat template: pass chat=False")
            templated = self.tokenizer.apply_chat_template([{"role": "user", "content": text}])
            return list(self.prefix) + self.tokenizer.encode(templated, add_special_tokens=False)
        ids = self.tokenizer.encode(text)
        return list(self.prefix) + list(getattr(ids, "ids", ids))

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids))


def load_pair(model: str = "zoo", needs: Sequence[str] = ("draft", *READERS), *, draft=None, dtype=jnp.float32,
              layout: str = "stacked", **readers) -> Pair:
    """Load `model` (see `check_source`) with those of `needs` ("draft", reader kinds) it has.
    layout: the target's layer layout (`specjax.models.model.LAYOUTS`: on a CPU "unstacked" runs
    one-token decode steps faster and compiles longer, "dual" keeps both for AR and verify forwards)."""
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layer layout {layout!r}; choose one of {', '.join(LAYOUTS)}")
    where = check_source(model, draft, **readers)
    if model == "zoo":
        cfg, params, tok = zoo.load("tiny-neox-target", dtype)
        prefix = (zoo.EOS_ID,)
    elif model == "smollm2-135m":
        cfg, params, tok = load_gguf(fetch("smollm2_135m_instruct_q4_1"))
        prefix = ()
    else:
        tok = Tokenizer.from_file(str(Path(model) / "tokenizer.json"))
        cfg, params = load_checkpoint(model, dtype)
        prefix = ()
    loaded = {k: _load_from(where[k], dtype) for k in needs if k in where}
    return Pair(model, cfg, with_layout(params, layout), tok, prefix, loaded.pop("draft", None), loaded)


@dataclasses.dataclass(frozen=True)
class Completion:
    """One prompt's continuation.

    Fields:
      text: the generated text (cut before a stop string; the EOS token left out).
      token_ids: the generated ids behind `text` (through the token that completed a stop string).
      num_tokens: tokens the model generated for this row (all chunks; a stop string cuts `text`, not this).
      rounds: target forwards after the prefill (verification rounds; AR: one per token after the first).
      tau: tokens per round, bonus included (the tokens those rounds committed / rounds; AR: 1).
      finish: "stop" (a stop string), "eos" (an EOS token) or "length" (max_new_tokens).
    """

    text: str
    token_ids: list[int]
    num_tokens: int
    rounds: int
    tau: float
    finish: str


def cut_at_stop(pair: Pair, ids: list[int], stop: Sequence[str], eos: set[int]) -> tuple[str, list[int], str | None]:
    """(text, ids, reason) of one row: cut at its first EOS and at the first stop string."""
    reason = None
    if eos and any(i in eos for i in ids):
        ids, reason = ids[: next(n for n, i in enumerate(ids) if i in eos)], "eos"
    text = pair.decode(ids)
    hits = [text.index(s) for s in stop if s in text]
    if not hits:
        return text, ids, reason
    end = min(hits)
    for n in range(1, len(ids) + 1):  # the shortest prefix of ids whose text reaches the stop string
        if len(pair.decode(ids[:n])) > end:
            return text[:end], ids[:n], "stop"
    return text[:end], ids, "stop"


class Pipeline:
    """A `Pair` and a built `Method`: `generate` maps prompt strings to `Completion`s.

    Attributes: `pair` (the target, its tokenizer, the drafters loaded), `method` (`Method`: name,
    drafter, params). Build one with `Pipeline.load`, or from parts with ``Pipeline(pair, method)``.
    """

    def __init__(self, pair: Pair, method_: Method):
        self.pair, self.method = pair, method_

    @classmethod
    def load(cls, model: str = "zoo", method: str | None = None, *, draft=None, dtype=jnp.float32,
             layout: str = "stacked", **readers) -> Pipeline:
        """Load `model` and build `method` for it (default: `default_method` of what the model has).

        model: "zoo", "smollm2-135m" or an HF checkpoint directory; method: a method string such as
        "ddtree-8", "eagle3", "chain4", "ar"; draft: a draft LM directory; readers: dflash= / eagle3= /
        domino= directories of trained drafters (default: the zoo's for a named model); layout: the
        target's layer layout (`specjax.models.model.LAYOUTS`: "unstacked" / "dual" decode faster on a CPU). Raises
        ValueError, before loading weights, when the method needs a model that is not there.
        """
        available = check_source(model, draft, **readers)
        spec = method or default_method(available)
        needs = needs_of(spec)
        missing = [k for k in needs if k != "target" and k not in available]
        if missing:
            what = {"draft": "a draft LM (draft=DIR)", **{k: f"{r.what} ({k}=DIR)" for k, r in READERS.items()}}
            raise ValueError(f"method {spec!r} needs {', '.join(what[k] for k in missing)}; model {model!r} has "
                             f"none: pass it, or choose another method")
        pair = load_pair(model, needs, draft=draft, dtype=dtype, layout=layout, **readers)
        return cls(pair, build_method(spec, pair.cfg, draft=pair.draft, **pair.readers))

    def generate(self, prompts: str | Sequence[str], max_new_tokens: int = 64, *, temperature: float = 0.0,
                 top_k: int | None = None, top_p: float | None = None, stop: Sequence[str] = (),
                 chat: bool | None = None, key: jax.Array | int = 0, stop_at_eos: bool = True,
                 callback: Callable[[int, list[str]], None] | None = None) -> list[Completion]:
        """Continue each prompt; greedy by default (output identical to plain decoding), else sampled.

        prompts: one string or a list (one batch: one compiled program). chat: wrap each prompt in the
        model's chat template (default: when it has one). stop: strings that end a row's text (they
        cut the text; the device loop runs to EOS or max_new_tokens). key: a PRNG key or an int seed,
        used when sampling. callback: streaming, called as ``callback(round_index, texts_so_far)``
        after the prefill (round 0) and after every verification round (every step for "ar"), from
        inside the one compiled generation (`specjax.streaming`); a row's text stops growing at its
        stop string.
        """
        if isinstance(prompts, str):
            prompts = [prompts]
        if not prompts or any(not isinstance(p, str) or not p.strip() for p in prompts):
            raise ValueError("every prompt must be a non-empty string")
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        sampling = Sampling(temperature, top_k, top_p)
        chat = self.pair.has_chat_template if chat is None else chat
        ids = [self.pair.encode(p, chat) for p in prompts]
        key = jax.random.key(key) if isinstance(key, int) else key
        eos = set(self.pair.cfg.eos_token_ids) if stop_at_eos else set()
        eos_ids = tuple(eos) if eos else ()
        tokens, lengths = pad_prompts(ids)
        on_round = None
        if callback is not None:
            made, index = [[] for _ in ids], [0]

            def on_round(new):
                for m, t in zip(made, new):
                    m += t.tolist()
                callback(index[0], [cut_at_stop(self.pair, m, stop, eos)[0] for m in made])
                index[0] += 1
        if self.method.is_ar:
            out = generate_ar(self.pair.params, self.pair.cfg, tokens, lengths, max_new_tokens, eos_ids=eos_ids,
                              sampling=sampling, key=key, on_round=on_round)
            rounds = np.maximum(np.asarray(out.num_tokens) - 1, 0)
        else:
            out = generate(self.pair.params, self.pair.cfg, self.method.drafter, self.method.params, tokens, lengths,
                           max_new_tokens, sampling=sampling, key=key, eos_ids=eos_ids, on_round=on_round)
            rounds = np.asarray(out.stats.num_rounds)
        got, counts = np.asarray(out.tokens), np.asarray(out.num_tokens)
        made = [got[b, :counts[b]].tolist() for b in range(len(ids))]
        committed = np.maximum(counts - 1, 0)  # the first token comes from the prefill
        texts = [cut_at_stop(self.pair, m, stop, eos) for m in made]
        return [Completion(text, cut, len(m), int(r), float(c / r) if r else 1.0, reason or "length")
                for (text, cut, reason), m, r, c in zip(texts, made, rounds, committed)]
