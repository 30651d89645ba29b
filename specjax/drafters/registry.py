"""The method registry: every method the drafter modules declare (`METHODS`), read and built in one place.

    method("ddtree-16", target_cfg, dflash=(dcfg, dparams))  -> Method(name, drafter, params)
    method("chain4", target_cfg, draft=(draft_cfg, draft_params))
    parse("dynatree:tau=0.03")                                -> Parsed (the string alone, no models)
    forms(), markdown_table(), reader_kinds(), READERS

Each module of `specjax.drafters` may declare ``METHODS`` (its `MethodSpec`s) and ``READER`` (a
kind of trained drafter reading the target); this module collects them when it is imported,
in module order with ``ar`` first, and checks that no two methods share a name or a form.
The grammar (forms, ``:field=value`` overrides, aliases) is `specjax.drafters.spec`'s.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil

import specjax.drafters as _package
from specjax.drafters.spec import AR, Build, MethodSpec, Parsed, Reader, parse_fields, render_form

__all__ = ["ALIASES", "METHOD_SPECS", "READERS", "Method", "describe_readers", "forms", "markdown_table", "method",
           "needs_of", "parse", "parse_method", "reader_kinds", "split_methods"]


def _collect() -> tuple[tuple[MethodSpec, ...], dict[str, Reader]]:
    specs, readers = [], {}
    for info in sorted(pkgutil.iter_modules(_package.__path__), key=lambda i: i.name):
        if info.name == "registry":
            continue
        module = importlib.import_module(f"{_package.__name__}.{info.name}")
        specs.extend(getattr(module, "METHODS", ()))
        reader = getattr(module, "READER", None)
        if reader is not None:
            readers[reader.kind] = reader
    specs.sort(key=lambda s: s is not AR)  # stable: ar first, then module order
    names = [s.name for s in specs]
    forms_ = [f for s in specs for f in s.forms]
    if len(set(names)) != len(names) or len(set(forms_)) != len(forms_):
        raise RuntimeError(f"two methods share a name or a form: {names}, {forms_}")
    for s in specs:
        unknown = set() if callable(s.needs) else set(s.needs) - {"draft", "target", *readers}
        if unknown:
            raise RuntimeError(f"method {s.name!r} needs unknown kinds {sorted(unknown)}")
    return tuple(specs), readers


METHOD_SPECS, READERS = _collect()
ALIASES = {head.lower(): (spec, text) for spec in METHOD_SPECS for head, text in spec.aliases}
_NEED_WORDS = {"draft": "a draft model", "target": "the target config"}


def reader_kinds() -> tuple[str, ...]:
    """The kinds of trained drafters that read the target ("dflash", "domino", "eagle3", ...)."""
    return tuple(READERS)


def _describe_need(kind: str) -> str:
    return _NEED_WORDS.get(kind) or READERS[kind].what


@dataclasses.dataclass(frozen=True)
class Method:
    """A method built for a target: what `generate` takes.

    Fields:
      name: the canonical spec (aliases resolved, overrides spelled out), e.g. "chain4", "dynatree-p3:d0=4".
      drafter: the drafter object passed to `generate`; None = autoregressive (`generate_ar`, `is_ar`).
      params: the drafter's params as `generate` takes them (DFlash / DDTree / Domino params, a `GraftParams`,
        Token Recycling's table, ...); None: the draft LM's params (pass them yourself). `method()`
        fills in the draft LM's params when it was given them. `warm_up` returns a copy with warm params.
      needs: what it drafts with ("draft", "target", reader kinds); not part of equality.
    """

    name: str
    drafter: object | None
    params: object | None = None
    needs: tuple[str, ...] = dataclasses.field(default=(), compare=False)

    @property
    def is_ar(self) -> bool:
        return self.drafter is None


def forms() -> str:
    """Every method's forms and override fields, comma-separated: the list messages and the CLI help show."""
    return ", ".join(s.display() for s in METHOD_SPECS)


def parse(text: str) -> Parsed:
    """Read a method string (module docstring of `specjax.drafters.spec`) without any model.

    Raises ValueError naming the accepted forms for an unknown head, the fields for an unknown
    override, and the kind for a value that does not read.
    """
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"a method is a non-empty string such as 'ddtree-8'; use one of: {forms()}")
    head, _, rest = text.strip().partition(":")
    head = head.strip().lower()
    preset = ""
    if head in ALIASES:
        head, _, preset = ALIASES[head][1].partition(":")
    for spec in METHOD_SPECS:
        positional = spec.match(head)
        if positional is not None:
            break
    else:
        raise ValueError(f"unknown method {text!r}; use one of: {forms()}")
    given = parse_fields(preset, spec, text)
    given.update(parse_fields(rest, spec, text))
    values = {f.name: f.default for f in spec.fields} | positional | given
    name = render_form(spec.forms[0], positional, spec.positional)
    name += (":" + ",".join(f"{k}={v}" for k, v in given.items())) if given else ""
    return Parsed(spec, name, values, given)


def split_methods(text: str) -> list[str]:
    """A comma-separated list of method strings, where a method's own overrides are comma-separated too:
    a piece of the form ``name=value`` (no ``:``) continues the method before it, e.g.
    ``"ar,ddtree-8:ret=4,prune=0,dflash"`` -> ``["ar", "ddtree-8:ret=4,prune=0", "dflash"]``.
    Raises ValueError for an override with no method before it."""
    out: list[str] = []
    for piece in (p.strip() for p in text.split(",")):
        if not piece:
            continue
        if "=" in piece and ":" not in piece:
            if not out or ":" not in out[-1]:
                raise ValueError(f"override {piece!r} in {text!r} follows no method with overrides; write it as "
                                 f"METHOD:{piece}")
            out[-1] += "," + piece
        else:
            out.append(piece)
    return out


def needs_of(text: str) -> tuple[str, ...]:
    """What method `text` drafts with ("draft", "target", reader kinds), read from the string alone."""
    p = parse(text)
    return p.spec.required(p.values)


def _is_config(x) -> bool:
    """A model config (a dataclass instance with a vocabulary), as load_checkpoint returns it first."""
    return dataclasses.is_dataclass(x) and not isinstance(x, type) and hasattr(x, "vocab_size")


def _what(x) -> str:
    if isinstance(x, dict):
        return "a dict (params alone, without their config?)"
    if _is_config(x):
        return f"a {type(x).__name__} (a config alone, without its params?)"
    return f"a {type(x).__name__}"


def _check_models(target_cfg, draft, readers: dict) -> None:
    """The model arguments' forms, before anything is built: target_cfg a config; draft= and each reader
    kind= a (cfg, params) pair. A mix-up (params where the pair belongs, a config alone) is named."""
    if target_cfg is not None and not _is_config(target_cfg):
        raise TypeError(f"target_cfg must be the target's config (the cfg of cfg, params = load_checkpoint(...)), "
                        f"got {_what(target_cfg)}")
    for name, pair in (("draft", draft), *readers.items()):
        if pair is None:
            continue
        what = "the draft LM" if name == "draft" else f"the {name} drafter"
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise TypeError(f"{name}= must be {what} as a (cfg, params) pair, e.g. {name}=load_checkpoint(DIR); "
                            f"got {_what(pair)}")
        cfg, params = pair
        if not _is_config(cfg) or _is_config(params):
            raise TypeError(f"{name}= must be {what} as a (cfg, params) pair: its first item a config, its second "
                            f"the params; got ({type(cfg).__name__}, {type(params).__name__})")


def _build(text: str, target_cfg, draft, readers: dict) -> Method:
    unknown = set(readers) - set(READERS)
    if unknown:
        raise TypeError(f"unknown drafter kinds {sorted(unknown)}; the kinds are {', '.join(READERS)}")
    _check_models(target_cfg, draft, readers)
    p = parse(text)
    b = Build(text, p.values, p.given, target_cfg, draft, {k: v for k, v in readers.items() if v is not None},
              {k: _describe_need(k) for k in READERS})
    needs = p.spec.required(p.values)
    for kind in needs:
        b.need(kind)
    drafter, params = p.spec.build(b)
    return Method(p.name, drafter, params, needs=needs)


def method(spec: str, target_cfg=None, *, draft: tuple | None = None, **readers: tuple | None) -> Method:
    """Build method `spec` for a target: its drafter and the params `generate` takes.

    spec: a method string (`forms()`), e.g. "ddtree-16", "chain4", "eagle3:topk=4".
    target_cfg: the target's config. draft: the draft LM as (cfg, params), for draft-LM methods.
    readers: trained drafters that read the target, by kind, as (cfg, params): dflash=, eagle3=, domino=.
    Returns a `Method`; run it as ``generate(params, target_cfg, m.drafter, m.params, tokens, ...)``
    (``m.is_ar``: use `generate_ar`). Raises ValueError saying what is missing or wrong.
    """
    m = _build(spec, target_cfg, draft, readers)
    if m.params is None and not m.is_ar and draft is not None and len(draft) > 1:
        m = dataclasses.replace(m, params=draft[1])
    return m


def parse_method(spec: str, draft_cfg=None, *, target_cfg=None, draft_params=None, **readers) -> Method:
    """`method` in the benchmarks' older argument order: the draft LM's config first, its params apart.

    A draft-LM method comes back with ``params`` None (the harness passes the draft LM's).
    """
    draft = (draft_cfg, draft_params) if draft_cfg is not None else None
    return _build(spec, target_cfg, draft, readers)


def describe_readers(readers: dict, used: set[str]) -> dict[str, str]:
    """{"<kind>_drafter": one line} for each reader in `readers` ((cfg, params) or None) that a method
    in `used` (kinds, `Method.needs`) uses: the benchmark's environment record."""
    return {f"{kind}_drafter": READERS[kind].describe(*pair) for kind, pair in readers.items()
            if pair is not None and kind in used}


def _needs_text(spec: MethodSpec) -> str:
    words = {"draft": "draft LM", "target": "target config", **{k: r.label for k, r in READERS.items()}}
    defaults = {f.name: f.default for f in spec.fields + spec.positional}
    text = ", ".join(words[k] for k in spec.required(defaults) if k != "target")
    return text + (" (by field)" if callable(spec.needs) else "")


def markdown_table() -> str:
    """The README's method table: form, fields with defaults, what it drafts with, what it is."""
    rows = ["| method | fields (default) | drafts with | what it is |", "|---|---|---|---|"]
    for s in METHOD_SPECS:
        form = " / ".join(f"`{f}`" for f in s.forms)
        aliases = [f"`{h}`" + (" (preset)" if ":" in t else f" = `{t}`") for h, t in s.aliases]
        if aliases:
            form += "; " + ", ".join(aliases)
        fields = ", ".join(f"`{f.name}`" + (f" ({f.default})" if f.default is not None else "") for f in s.fields)
        rows.append(f"| {form} | {fields} | {_needs_text(s)} | {s.help} |")
    return "\n".join(rows)
