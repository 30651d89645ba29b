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
import difflib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from tokenizers import Tokenizer

from specjax import declared, zoo
from specjax.data import compile_cache
from specjax.data.assets import fetch
from specjax.data.prompts import wiki_prompts
from specjax.decode import checks_trees_by_default, generate, generate_ar
from specjax.drafters.protocol import CarriesOver
from specjax.drafters.registry import READERS, Method, needs_of
from specjax.drafters.registry import method as build_method
from specjax.inputs import check_callback, check_finite, check_int, pad_prompts, stop_strings
from specjax.models import load_checkpoint, load_config
from specjax.models.llama import LlamaConfig
from specjax.models.gguf import load_gguf
from specjax.models.model import LAYOUTS, early_exit, with_layout
from specjax.sampling import Sampling

__all__ = ["DEFAULT_METHOD", "MODELS", "Completion", "NamedModel", "Pair", "Pipeline", "Serving", "check_source",
           "cut_at_stop", "default_layout", "default_method", "load_pair", "model_config", "model_entry",
           "register_model", "unregister_model"]

# The fastest method on the embedded pair in a same-run benchmark (docs/results.md).
DEFAULT_METHOD = "ddtree-8"


def _load_zoo_target(dtype):
    return zoo.load("tiny-neox-target", dtype)


SMOLLM2_ASSET = "smollm2_135m_instruct_q4_1"  # the registry asset (`specjax.data.assets`): a Q4_1 GGUF, 94 MB


def _load_smollm2(dtype):
    cfg, params, tok = load_gguf(fetch(SMOLLM2_ASSET))
    return cfg, jax.tree.map(lambda x: x.astype(dtype), params), tok


def _smollm2_config() -> LlamaConfig:
    """SmolLM2-135M-Instruct's config as its GGUF gives it, without reading the file (tests/test_device_bench.py
    keeps the two equal): what a plan on a machine without the weights needs."""
    return LlamaConfig(vocab_size=49152, hidden_size=576, num_layers=30, num_heads=9, num_kv_heads=3, head_dim=64,
                       intermediate_size=1536, rope_theta=100000.0, rms_norm_eps=1e-5, tie_word_embeddings=True,
                       flavor="llama", max_position_embeddings=8192)


def _zoo_prompt() -> str:
    return wiki_prompts("test")[0].prompt  # the registry's wiki text, fetched when asked for


@dataclasses.dataclass(frozen=True)
class Serving:
    """How a named model runs fastest on one backend (jax's platform name: "cpu", "gpu", "tpu"), as measured.

    Fields:
      method: the method string `make run`, the quickstart and the benchmarks' "best" use.
      layout: the target's (and draft LM's) layer layout (`specjax.models.model.LAYOUTS`).
      dtype: the params' dtype name ("float32", "bfloat16").
      measured: what chose it (the command and its numbers, or why it is the default).
    """

    method: str
    layout: str = "stacked"
    dtype: str = "float32"
    measured: str = ""


@dataclasses.dataclass(frozen=True)
class NamedModel:
    """One entry of the catalogue of named models (`MODELS`): everything specjax knows about a model
    that is loaded by name rather than from a directory.

    Fields:
      name: the name `Pipeline.load`, the CLI (`--model`) and training (`--target`) take.
      load: dtype -> (cfg, params, tokenizer) of the target.
      zoo_prefix: the zoo prefix of its trained drafters ("<prefix>-dflash", ...).
      display: how benchmarks name the target.
      draft_display: how they name its draft LM (None: no draft LM).
      draft: the zoo name of its draft LM, or None.
      prefix: ids put before every prompt (the zoo's EOS separator), or ().
      default_prompt: () -> the prompt `specjax generate` continues when given none.
      dataset_chat: whether benchmark prompt sets go through its chat template.
      held_out: the held-out prompt set its comparisons default to (`specjax.data.datasets`).
      serving: backend -> `Serving` (best method, layout, dtype); a backend not listed takes "cpu"'s.
      config: () -> the target's config without loading its weights (a plan's sizes), or None: loaded.
      hf_directory: () -> a Hugging Face checkpoint directory of the target (what transformers loads), or
        None: written from the loaded params when one is needed (`specjax.models.save_checkpoint`).
      asset: the package-registry asset its weights come from (`specjax.data.assets`), or None.
    """

    name: str
    load: Callable
    zoo_prefix: str
    display: str
    draft_display: str | None = None
    draft: str | None = None
    prefix: tuple[int, ...] = ()
    default_prompt: Callable[[], str] = (lambda: "The")
    dataset_chat: bool = False
    held_out: str = "wiki"
    serving: Mapping[str, Serving] = dataclasses.field(default_factory=lambda: {"cpu": Serving(DEFAULT_METHOD)})
    config: Callable[[], object] | None = None
    hf_directory: Callable[[], Path] | None = None
    asset: str | None = None

    def serving_for(self, backend: str | None = None) -> Serving:
        """Its `Serving` on `backend` (default: jax's default backend; "cuda" / "rocm" read as "gpu")."""
        backend = jax.default_backend() if backend is None else backend
        backend = "gpu" if backend in ("cuda", "rocm") else backend
        return self.serving.get(backend, self.serving["cpu"])


_BUILT_IN = {m.name: m for m in (
    NamedModel("zoo", _load_zoo_target, "tiny-neox", "tiny-neox-target", "tiny-neox-draft", "tiny-neox-draft",
               (zoo.EOS_ID,), _zoo_prompt,
               serving={"cpu": Serving(DEFAULT_METHOD, measured="the fastest on the embedded pair (README)")},
               config=lambda: load_config(zoo.path("tiny-neox-target")),
               hf_directory=lambda: zoo.path("tiny-neox-target")),
    NamedModel("smollm2-135m", _load_smollm2, "smollm2-135m", "smollm2-135m-instruct (Q4_1 GGUF)",
               "smollm2-135m-draft (11M, distilled)", "smollm2-135m-draft",
               default_prompt=lambda: "The capital of France is", dataset_chat=True, held_out="gsm8k",
               config=_smollm2_config, asset=SMOLLM2_ASSET,
               serving={
                   # DDTree over the block-8 DFlash drafter at a budget of 7 (8 verified tokens, a width the CPU's
                   # products run fastest at), the layers unstacked (no per-layer weight copy in the loop).
                   "cpu": Serving("ddtree-7", "unstacked", "float32",
                                  "2 AMD EPYC cores, 20 prompts each: 1.26x / 1.51x / 1.35x AR on GSM8K / MATH-500 / "
                                  "HumanEval (ddtree-3 1.38x, ddtree-8 1.17x, DFlash chain 1.22x; docs/results.md)"),
                   # One H200 (stacked, the only layout benched there): ddtree-7 1.27x, ddtree-16 1.20x, ddtree-32
                   # 1.23x, ddtree-64 1.20x on GSM8K; AR 1.14 ms/token unstacked against 1.38 stacked. Unstacked
                   # also keeps each layer's weights out of a scan's per-step slice (issue 58's AR gap).
                   "gpu": Serving("ddtree-7", "unstacked", "float32",
                                  "one H200: ddtree-7 1.27x AR on GSM8K (stacked); AR 1.14 ms/token unstacked vs "
                                  "1.38 stacked (`make gpu-check` re-measures both)"),
               }),
)}
_REGISTERED: dict[str, NamedModel] = {}  # `register_model`


class _Catalogue(Mapping):
    """The catalogue of named models, live: the package's own (`_BUILT_IN`), those given to `register_model`, and
    the ``NAMED_MODELS`` tuples of modules added from outside the package (`specjax.declared`: `--methods-from`,
    `specjax.load_methods`, the ``specjax.methods`` entry points), later ones replacing none of the earlier."""

    def _merged(self) -> dict[str, NamedModel]:
        merged = dict(_BUILT_IN)
        for source, entries in declared.added("NAMED_MODELS"):
            for entry in entries:
                if not isinstance(entry, NamedModel):
                    raise TypeError(f"{source}: NAMED_MODELS holds a {type(entry).__name__}; make it a NamedModel")
                merged.setdefault(entry.name, entry)
        for name, entry in _REGISTERED.items():
            merged.setdefault(name, entry)
        return merged

    def __getitem__(self, name: str) -> NamedModel:
        return self._merged()[name]

    def __iter__(self):
        return iter(self._merged())

    def __len__(self) -> int:
        return len(self._merged())


MODELS: Mapping[str, NamedModel] = _Catalogue()


# A checkpoint directory's serving per backend: the package's default method; on a GPU the layers unstacked
# (a scanned stack slices every layer's weights out of the stacked arrays at every step: the whole model's
# weights copied once per token, about the measured gap of Qwen3-8B's AR step on an H200, 9.90 ms against
# 4.52 ms of weight products; `tests/test_layouts.py` counts those slices in the compiled program), on a CPU
# stacked (one compiled layer: the shorter first compile for a model nobody has measured here).
DIRECTORY_SERVING = {
    "cpu": Serving(DEFAULT_METHOD, "stacked", measured="default: the shorter compile"),
    "gpu": Serving(DEFAULT_METHOD, "unstacked", measured="default: no per-layer weight copy in the decode step"),
}


def model_entry(model: str) -> NamedModel:
    """The catalogue entry of a named model; a checkpoint directory gets a plain entry named by its path."""
    if model in MODELS:
        return MODELS[model]
    return NamedModel(model, lambda dtype: (*load_checkpoint(model, dtype),
                                            Tokenizer.from_file(str(Path(model) / "tokenizer.json"))),
                      "", model, serving=DIRECTORY_SERVING)


def register_model(entry: NamedModel, *, replace: bool = False) -> NamedModel:
    """Add `entry` to the catalogue (`MODELS`), so that `Pipeline.load`, `load_pair`, `specjax generate` / `bench`
    (`--model`, when registered before the parser is built: from a module imported first), the data engine, the
    recipe's plan, `versus-transformers` and the showcase take its name. Returns it. (A module read with
    ``--methods-from`` declares its models as ``NAMED_MODELS = (NamedModel(...), ...)`` instead.) Raises
    ValueError for a name of specjax's own or already registered (unless `replace`), or one that is an existing
    path (a directory is loaded as such)."""
    if not isinstance(entry, NamedModel):
        raise TypeError(f"register_model takes a NamedModel, got {type(entry).__name__}")
    if entry.name in _BUILT_IN:
        raise ValueError(f"model {entry.name!r} is one of specjax's own: choose another name")
    if entry.name in MODELS and not replace:
        raise ValueError(f"model {entry.name!r} is registered already: pass replace=True to replace it")
    if Path(entry.name).exists():
        raise ValueError(f"model name {entry.name!r} is an existing path: choose a name that is not one")
    if "cpu" not in entry.serving:
        raise ValueError(f"model {entry.name!r}: serving needs a 'cpu' entry (the backends not listed use it)")
    _REGISTERED[entry.name] = entry
    return entry


def unregister_model(name: str) -> None:
    """Forget a model given to `register_model` (KeyError for any other name)."""
    del _REGISTERED[name]


def model_config(model: str):
    """The target's config of a named model or a checkpoint directory, without loading weights where the entry
    says how (`NamedModel.config`; a directory's config.json), else from the loaded model."""
    entry = model_entry(model)
    if entry.config is not None:
        return entry.config()
    if model not in MODELS:
        return load_config(model)
    return entry.load(jnp.float32)[0]


def default_layout(model: str, backend: str | None = None) -> str:
    """The layer layout `model` runs in when none is given: its serving layout on `backend` (default: jax's)."""
    return model_entry(model).serving_for(backend).layout


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
    draft: a draft LM directory, or "early-exit:K" (the target's first K layers with its own norm and head:
    `specjax.models.model.early_exit`); readers: kind -> directory of a trained drafter reading the target
    (else the zoo's for a named model). Raises ValueError naming the flag and what to fix.
    """
    unknown = set(readers) - set(READERS)
    if unknown:
        raise ValueError(f"unknown drafter kinds {sorted(unknown)}; the kinds are {', '.join(READERS)}")
    if model not in MODELS:
        _unknown_name(model)
        _directory(model, "--checkpoint", "tokenizer.json")
    out: dict[str, object] = {}
    if draft is not None and str(draft).startswith(EARLY_EXIT):
        if not str(draft)[len(EARLY_EXIT):].isdigit():
            raise ValueError(f"--draft {draft}: an early-exit draft is early-exit:K, K the target layers it keeps")
        out["draft"] = str(draft)
    elif draft is not None:
        out["draft"] = _directory(draft, "--draft")
    elif model in MODELS and MODELS[model].draft:
        out["draft"] = f"zoo:{MODELS[model].draft}"
    for kind in READERS:
        if readers.get(kind) is not None:
            out[kind] = _directory(readers[kind], f"--{kind}")
        elif model in MODELS and zoo.has(f"{MODELS[model].zoo_prefix}-{kind}"):
            out[kind] = f"zoo:{MODELS[model].zoo_prefix}-{kind}"
    return out


def _unknown_name(model: str) -> None:
    """A model that is neither named nor an existing path: say which names exist, and the closest."""
    if Path(model).exists() or "/" in model or model.startswith("."):
        return
    close = difflib.get_close_matches(model, list(MODELS), n=1, cutoff=0.5)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise ValueError(f"unknown model {model!r}: give one of {', '.join(MODELS)} or a checkpoint directory{hint}")


def default_method(available, model: str | None = None) -> str:
    """The method a model runs when none is given: its serving method on this backend (`NamedModel.serving_for`)
    when what that needs is `available`; else DEFAULT_METHOD with a DFlash drafter, "dynatree-zoo" with a draft
    LM, "ar" with neither."""
    if model is not None:
        best = model_entry(model).serving_for().method
        if all(k == "target" or k in available for k in needs_of(best)):
            return best
    return DEFAULT_METHOD if "dflash" in available else "dynatree-zoo" if "draft" in available else "ar"


EARLY_EXIT = "early-exit:"  # a draft source: the target's first K layers (`check_source`)


def _load_from(kind: str, where, dtype, target):
    """(cfg, params) of the draft LM (kind "draft") or a trained drafter of a reader kind. target: the
    target's (cfg, params): an early-exit draft is made of them, and a drafter's reference-layout facts left
    to the target (e.g. EAGLE-3's taps without `eagle_config`) come from its config."""
    if isinstance(where, str) and where.startswith(EARLY_EXIT):
        return early_exit(*target, int(where[len(EARLY_EXIT):]))
    if isinstance(where, str) and where.startswith("zoo:"):
        return zoo.load_drafter(where[4:], dtype)
    return load_checkpoint(where, dtype, target_cfg=None if kind == "draft" else target[0])


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

    @property
    def entry(self) -> NamedModel:
        """Its catalogue entry (`MODELS`; a plain one for a checkpoint directory)."""
        return model_entry(self.name)

    def training_encoder(self, chat: bool = True) -> tuple[Callable, Callable, bool]:
        """(template, body, chat) of the training data's prompts: body = the message's own ids (no
        template, no special tokens, no prefix); template = the chat template applied when `chat` and the
        model has one (else body). The data engine's `PromptEncoder` is made of these."""
        tok = self.tokenizer
        if self.has_chat_template:
            body = (lambda t: tok.encode(t, add_special_tokens=False))
            if chat:
                return (lambda t: tok.encode(tok.apply_chat_template([{"role": "user", "content": t}]),
                                             add_special_tokens=False)), body, True
            return body, body, False
        body = (lambda t: tok.encode(t, add_special_tokens=False).ids)
        return body, body, False

    def reserved_ids(self) -> tuple[int, ...]:
        """Special ids a drafter's mask token must avoid: the GGUF's "<|...|>" tokens, the zoo's EOS, or
        the EOS ids of a checkpoint directory."""
        if self.has_chat_template:
            return tuple(i for i in range(self.cfg.vocab_size) if self.tokenizer.tokenizer.id_to_token(i).startswith("<|"))
        return tuple(self.prefix) or tuple(self.cfg.eos_token_ids)


def load_pair(model: str = "zoo", needs: Sequence[str] = ("draft", *READERS), *, draft=None, dtype=jnp.float32,
              layout: str = "stacked", **readers) -> Pair:
    """Load `model` (see `check_source`) with those of `needs` ("draft", reader kinds) it has.
    layout: the target's and the draft LM's layer layout (`specjax.models.model.LAYOUTS`: on a CPU
    "unstacked" runs decode steps and speculative rounds faster and compiles longer)."""
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layer layout {layout!r}; choose one of {', '.join(LAYOUTS)}")
    where = check_source(model, draft, **readers)
    entry = model_entry(model)
    cfg, params, tok = entry.load(dtype)
    loaded = {k: _load_from(k, where[k], dtype, (cfg, params)) for k in needs if k in where}
    draft = loaded.pop("draft", None)
    if draft is not None:  # the draft LM's forwards run in the target's layout too (same trade-offs)
        draft = (draft[0], with_layout(draft[1], layout))
    return Pair(model, cfg, with_layout(params, layout), tok, entry.prefix, draft, loaded)


# `Pipeline.generate` pads prompts to, and sizes the program for, a bucket of these: calls of nearby sizes
# share one compiled program (a new prompt width or max_new_tokens recompiled the loop: ~6 s on the
# embedded pair on a CPU, 14-21 s on SmolLM2-135M).
SIZE_BUCKET_FLOOR = 32


def _bucket(n: int, cap: int | None = None) -> int:
    """The smallest SIZE_BUCKET_FLOOR * 2^k >= n, lowered to `cap` (the model's positions) but never below n."""
    size = SIZE_BUCKET_FLOOR
    while size < n:
        size *= 2
    return max(n, min(size, cap)) if cap is not None else size


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

    A drafter whose params learn during a generation (`CarriesOver`: the successor table of Graft,
    DDTree + retrieval, Graft-DFlash) starts each `generate` from the table the previous one left (hot
    start, as a server keeps it across requests); `reset()` returns to the table it was built with, and
    ``carry_over=False`` starts every call from that one.
    """

    def __init__(self, pair: Pair, method_: Method, *, carry_over: bool = True):
        self.pair, self.method = pair, method_
        self.carry_over = carry_over
        self._initial_params = method_.params

    def reset(self) -> None:
        """Forget what a `CarriesOver` drafter learned: the next `generate` starts from the built params."""
        self.method = dataclasses.replace(self.method, params=self._initial_params)

    @classmethod
    def load(cls, model: str = "zoo", method: str | None = None, *, draft=None, dtype=jnp.float32,
             layout: str | None = None, **readers) -> Pipeline:
        """Load `model` and build `method` for it (default: `default_method` of what the model has).

        model: "zoo", "smollm2-135m" or an HF checkpoint directory; method: a method string such as
        "ddtree-8", "eagle3", "chain4", "ar", or that of a method added with `specjax.register` (its builder
        gets the target's config and params, `Build.target_params`); draft: a draft LM directory;
        readers: dflash= / eagle3= / domino= directories of trained drafters (default: the zoo's for a named
        model); layout: the target's layer layout (`specjax.models.model.LAYOUTS`; default: the model's measured
        serving layout on this backend, `default_layout`); method None: its serving method where what that needs is
        there (`default_method`). Raises ValueError, before loading weights, when the method needs a model that is
        not there.
        """
        available = check_source(model, draft, **readers)
        spec = method or default_method(available, model)
        needs = needs_of(spec)
        missing = [k for k in needs if k != "target" and k not in available]
        if missing:
            what = {"draft": "a draft LM (draft=DIR)", **{k: f"{r.what} ({k}=DIR)" for k, r in READERS.items()}}
            raise ValueError(f"method {spec!r} needs {', '.join(what[k] for k in missing)}; model {model!r} has "
                             f"none: pass it, or choose another method")
        layout = default_layout(model) if layout is None else layout
        pair = load_pair(model, needs, draft=draft, dtype=dtype, layout=layout, **readers)
        return cls(pair, build_method(spec, pair.cfg, draft=pair.draft, target_params=pair.params, **pair.readers))

    def generate(self, prompts: str | Sequence[str], max_new_tokens: int = 64, *, temperature: float = 0.0,
                 top_k: int | None = None, top_p: float | None = None, stop: Sequence[str] = (),
                 chat: bool | None = None, key: jax.Array | int = 0, stop_at_eos: bool = True,
                 callback: Callable[[int, list[str]], None] | None = None,
                 check_trees: bool | None = None, reserve_new_tokens: int | None = None) -> list[Completion]:
        """Continue each prompt; greedy by default (output identical to plain decoding), else sampled.

        prompts: one string or a list (one batch: one compiled program). chat: wrap each prompt in the
        model's chat template (default: when it has one). stop: strings that end a row's text (they
        cut the text; the device loop runs to EOS or max_new_tokens). key: a PRNG key or an int seed,
        used when sampling. callback: streaming, called as ``callback(round_index, texts_so_far)``
        after the prefill (round 0) and after every verification round (every step for "ar"), from
        inside the one compiled generation (`specjax.streaming`); a row's text stops growing at its
        stop string. check_trees: validate every tree the drafter proposes inside the loop
        (`specjax.decode.generate`'s `check_trees`; "ar" proposes none); default None: on for a method from
        outside specjax (`specjax.decode.from_outside`: your drafter class, or a method you registered), off for
        the package's own; False turns it off.

        No recompiles in interactive use: the prompts are right-padded to a bucketed width (32, 64,
        128, ... tokens, `SIZE_BUCKET_FLOOR`, at most the model's positions) and the program is
        compiled for a bucketed number of new tokens, `reserve_new_tokens` (default: max_new_tokens)
        rounded up the same way, then stopped after max_new_tokens; so a call whose longest prompt
        and max(max_new_tokens, reserve_new_tokens) fall in the buckets of an earlier call (same
        batch size and settings) reuses its compiled program. The output is the same as unpadded
        (padding is carried by the prompt lengths). The persistent compilation cache is turned on
        (`specjax.data.compile_cache.enable`; ``SPECJAX_COMPILE_CACHE=0`` keeps it off).
        """
        if isinstance(prompts, str):
            prompts = [prompts]
        if not prompts or any(not isinstance(p, str) or not p.strip() for p in prompts):
            raise ValueError("every prompt must be a non-empty string")
        # Every argument checked on the host, naming it, before anything compiles (`specjax.inputs`).
        max_new_tokens = check_int("max_new_tokens", max_new_tokens, 1)
        check_finite("temperature", temperature)
        check_finite("top_p", top_p)
        top_k = None if top_k is None else check_int("top_k", top_k, 1)
        key = check_int("key", key) if isinstance(key, (int, np.integer, bool)) else key
        stop = stop_strings(stop)  # one str is one stop string, not its characters
        if reserve_new_tokens is not None:
            reserve_new_tokens = check_int("reserve_new_tokens", reserve_new_tokens, 1)
        check_callback("callback", callback)
        for name, flag in (("chat", chat), ("stop_at_eos", stop_at_eos)):
            if flag is not None and not isinstance(flag, bool):
                raise TypeError(f"{name} must be True or False, got {type(flag).__name__} {flag!r}")
        sampling = Sampling(temperature, top_k, top_p)
        chat = self.pair.has_chat_template if chat is None else chat
        ids = [self.pair.encode(p, chat) for p in prompts]
        key = jax.random.key(key) if isinstance(key, int) else key
        eos = set(self.pair.cfg.eos_token_ids) if stop_at_eos else set()
        eos_ids = tuple(eos) if eos else ()
        positions = getattr(self.pair.cfg, "max_position_embeddings", None)
        tokens, lengths = pad_prompts(ids, _bucket(max(len(i) for i in ids), positions))
        reserve = _bucket(max(max_new_tokens, reserve_new_tokens or 0), positions)
        compile_cache.enable()
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
                              sampling=sampling, key=key, on_round=on_round, reserve_new_tokens=reserve)
            rounds = np.maximum(np.asarray(out.num_tokens) - 1, 0)
        else:
            out = generate(self.pair.params, self.pair.cfg, self.method.drafter, self.method.params, tokens, lengths,
                           max_new_tokens, sampling=sampling, key=key, eos_ids=eos_ids, on_round=on_round,
                           check_trees=checks_trees_by_default(check_trees, self.method.drafter, self.method.name),
                           reserve_new_tokens=reserve)
            rounds = np.asarray(out.stats.num_rounds)
            if self.carry_over and isinstance(self.method.drafter, CarriesOver):
                self.method = dataclasses.replace(
                    self.method, params=self.method.drafter.carry_over(self.method.params, out.draft_state))
        got, counts = np.asarray(out.tokens), np.asarray(out.num_tokens)
        made = [got[b, :counts[b]].tolist() for b in range(len(ids))]
        committed = np.maximum(counts - 1, 0)  # the first token comes from the prefill
        texts = [cut_at_stop(self.pair, m, stop, eos) for m in made]
        return [Completion(text, cut, len(m), int(r), float(c / r) if r else 1.0, reason or "length")
                for (text, cut, reason), m, r, c in zip(texts, made, rounds, committed)]
