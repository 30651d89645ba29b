"""The method registry: every method the drafter modules declare (`METHODS`), and those added from outside
the package, read and built in one place.

    method("ddtree-16", target_cfg, dflash=(dcfg, dparams))  -> Method(name, drafter, params)
    method("chain4", target_cfg, draft=(draft_cfg, draft_params))
    parse("dynatree:tau=0.03")                                -> Parsed (the string alone, no models)
    forms(), markdown_table(), method_specs(), reader_kinds(), READERS
    register(MethodSpec(...)), unregister("mine"), registered(spec)  methods from outside the package
    load_methods("my_drafter.py")                             a file's or module's METHODS (`--methods-from`)

Each module of `specjax.drafters` may declare ``METHODS`` (its `MethodSpec`s) and ``READER`` (a
kind of trained drafter reading the target); this module collects them through `specjax.declared` (the
one mechanism of every registry) when it is imported, in module order with ``ar`` first. `READERS` is
live: a module added from outside the package (`load_methods`, an entry point) brings its ``READER``
too, and with it its ``TRAINER`` and ``ROUND_SPLITS`` join `specjax.train.run.TRAINERS` and
`specjax.bench.round_split.SPLITS`; `registered()` forgets them again. Methods from outside the package join at run time: `register`,
`load_methods` (a module name or a .py path: what ``--methods-from`` imports), and the entry points of
group ``specjax.methods`` (`ENTRY_POINT_GROUP`) of installed packages, each naming a module that declares
``METHODS`` or a callable returning MethodSpecs, read once, the first time a name is resolved. Every
lookup (`parse`, `method`, `forms`, `markdown_table`, `needs_of`, `method_specs`, and the live views
`METHOD_SPECS` and `ALIASES`) sees them. Each method joins under the same checks, the package's own
included: a `MethodSpec`, a name no other method has, forms and alias heads that no other method reads
(checked on examples of each form), lower-case forms, aliases that read as their own method, and needs
among "draft", "target" and the reader kinds. The grammar (forms, ``:field=value`` overrides, aliases) is
`specjax.drafters.spec`'s.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import importlib
import importlib.metadata
import importlib.util
import re
import sys
import types
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import specjax.drafters as _package
from specjax import declared
from specjax.declared import Registry, own
from specjax.drafters.spec import AR, Build, MethodSpec, Parsed, Reader, parse_fields, render_form
from specjax.models import families

__all__ = ["ALIASES", "ENTRY_POINT_GROUP", "METHOD_SPECS", "READERS", "Method", "describe_readers", "forms",
           "load_methods", "markdown_table", "method", "method_specs", "needs_of", "parse", "parse_method",
           "reader_kinds", "register", "registered", "split_methods", "unregister", "with_method_table"]

ENTRY_POINT_GROUP = "specjax.methods"
TABLE_START, TABLE_END = "<!-- methods:", "<!-- /methods -->"  # the README's markers around the table


def _own_specs() -> list[MethodSpec]:
    specs = [spec for _, methods in own(_package, "METHODS") for spec in methods]
    return sorted(specs, key=lambda s: s is not AR)  # stable: ar first, then module order


_OWN_SPECS = _own_specs()
# reader kind -> its Reader: the package's own and those of the modules added from outside (`load_methods`,
# entry points), read at each use
READERS = Registry(_package.__name__, "READER", key=lambda reader: reader.kind)
_NEED_WORDS = {"draft": "a draft model", "target": "the target config"}


# ------------------------------------------------------------------------------------------ joining checks


def _example_heads(spec: MethodSpec) -> list[str]:
    """Heads `spec` reads: each form with its optional parts kept and dropped, every ``<X>`` as 3."""
    out = []
    for form in spec.forms:
        for variant in (re.sub(r"\[([^\[\]]*)\]", r"\1", form), re.sub(r"\[[^\[\]]*\]", "", form)):
            out.append(re.sub(r"<\w+>", "3", variant))
    return list(dict.fromkeys(out))


def _reads(spec: MethodSpec, head: str) -> bool:
    return spec.match(head) is not None or head in (h.lower() for h, _ in spec.aliases)


def _check_joins(spec: MethodSpec, others: Sequence[MethodSpec], where: Mapping[str, str], origin: str) -> None:
    """Raise (TypeError / ValueError naming `origin`, the clash and the other method's origin) unless `spec`
    can join `others`: see the module docstring."""
    if not isinstance(spec, MethodSpec):
        raise TypeError(f"a method is a specjax.drafters.spec.MethodSpec, got {type(spec).__name__} {spec!r} "
                        f"({origin})")
    label = f"method {spec.name!r} ({origin})"
    if not spec.name or not spec.forms:
        raise ValueError(f"{label} needs a name and at least one form")
    upper = [f for f in spec.forms if re.sub(r"<\w+>", "", f) != re.sub(r"<\w+>", "", f).lower()]
    upper += [h for h, _ in spec.aliases if h != h.lower()]
    if upper:
        raise ValueError(f"{label}: forms and alias heads are read in lower case; write {upper} in lower case")
    for head, text in spec.aliases:
        if spec.match(text.partition(":")[0].strip().lower()) is None:
            raise ValueError(f"{label}: alias {head!r} stands for {text!r}, which is not one of its forms "
                             f"{list(spec.forms)}")
    unknown = set() if callable(spec.needs) else set(spec.needs) - {"draft", "target", *READERS}
    if unknown:
        raise ValueError(f"{label} needs unknown kinds {sorted(unknown)}; the kinds are draft, target, "
                         f"{', '.join(READERS)}")
    mine = _example_heads(spec) + [h for h, _ in spec.aliases]
    for other in others:
        if other.name == spec.name:
            raise ValueError(f"{label}: the name is taken ({where[other.name]}); pick another name, or unregister "
                             f"the other first")
        theirs = _example_heads(other) + [h for h, _ in other.aliases]
        both = [h for h in mine if _reads(other, h)] + [h for h in theirs if _reads(spec, h)]
        if both:
            raise ValueError(f"{label} clashes with method {other.name!r} ({where[other.name]}): {both[0]!r} would "
                             f"read as both; change a form or an alias (theirs: {', '.join(other.forms)})")


# ------------------------------------------------------------------------------------------ the table


@dataclasses.dataclass
class _Table:
    """The methods known now (the one mutable object of the registry).

    Fields:
      own: the package's own methods, ar first (collected at import).
      added: name -> (spec, where it came from), in the order they joined.
      plugins: "unread", "reading" or "read": the entry points of ENTRY_POINT_GROUP.
    """

    own: tuple[MethodSpec, ...]
    added: dict = dataclasses.field(default_factory=dict)
    plugins: str = "unread"

    def specs(self) -> tuple[MethodSpec, ...]:
        return self.own + tuple(s for s, _ in self.added.values())

    def where(self) -> dict[str, str]:
        return {**{s.name: "one of specjax's own" for s in self.own},
                **{name: origin for name, (_, origin) in self.added.items()}}

    def add(self, spec: MethodSpec, origin: str, replace: bool = False) -> MethodSpec:
        """`spec` joined (after `_check_joins`); the very same spec again is a no-op; `replace`: a method
        added earlier under its name gives way."""
        old = self.added.get(getattr(spec, "name", None))
        if old is not None and old[0] == spec:
            return spec
        others = [s for s in self.specs() if not (replace and old is not None and s is old[0])]
        _check_joins(spec, others, self.where(), origin)
        self.added[spec.name] = (spec, origin)
        return spec


def _own_table() -> _Table:
    table = _Table(())
    for spec in _OWN_SPECS:
        _check_joins(spec, table.own, table.where(), f"declared in {getattr(spec.build, '__module__', '?')}")
        table.own += (spec,)
    return table


_TABLE = _own_table()
_LOADED: dict[str, tuple] = {}  # load_methods: source -> (its module, the methods it brought)


def _specs_of(obj, origin: str) -> tuple[MethodSpec, ...]:
    """The MethodSpecs an entry point or a loaded module gives: a module's METHODS, a MethodSpec, or what a
    callable returns (one MethodSpec or an iterable of them)."""
    if isinstance(obj, types.ModuleType):
        got = getattr(obj, "METHODS", ())
    elif isinstance(obj, MethodSpec):
        got = obj
    elif callable(obj):
        got = obj()
    else:
        raise TypeError(f"{origin}: names a {type(obj).__name__}; name a module declaring METHODS or a callable "
                        f"returning MethodSpecs")
    got = (got,) if isinstance(got, MethodSpec) else tuple(got)
    bad = [x for x in got if not isinstance(x, MethodSpec)]
    if bad:
        raise TypeError(f"{origin}: gave a {type(bad[0]).__name__} where a MethodSpec belongs")
    return got


def _read_plugins() -> None:
    """Register the methods of every entry point of ENTRY_POINT_GROUP, once (all of them or none)."""
    table = _TABLE
    if table.plugins != "unread":
        return
    table.plugins, before = "reading", dict(table.added)
    try:
        with declared.restoring(always=False):  # all of them or none
            for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
                dist = getattr(getattr(ep, "dist", None), "name", None)
                origin = f"entry point {ep.name} = {ep.value} ({ENTRY_POINT_GROUP}{f', package {dist}' if dist else ''})"
                try:
                    loaded = ep.load()
                except Exception as e:
                    raise ImportError(f"{origin} does not load: {type(e).__name__}: {e}; fix or uninstall that "
                                      f"package") from e
                if isinstance(loaded, types.ModuleType):  # its other declarations (reader, trainer, ...) join too
                    declared.add(loaded)
                for spec in _specs_of(loaded, origin):
                    table.add(spec, origin)
    except BaseException:
        table.added, table.plugins = before, "unread"
        raise
    table.plugins = "read"


def method_specs() -> tuple[MethodSpec, ...]:
    """Every method known now: the package's own (ar first, then module order), then those added at run time
    (`register`, `load_methods`, entry points), in the order they joined."""
    _read_plugins()
    return _TABLE.specs()


def _aliases() -> dict[str, tuple[MethodSpec, str]]:
    return {head.lower(): (spec, text) for spec in method_specs() for head, text in spec.aliases}


class _SpecsView(Sequence):
    """`METHOD_SPECS`: `method_specs()` read at each use (so registered methods are in it)."""

    def __getitem__(self, i):
        return method_specs()[i]

    def __len__(self) -> int:
        return len(method_specs())

    def __repr__(self) -> str:
        return f"METHOD_SPECS{method_specs()!r}"


class _AliasView(Mapping):
    """`ALIASES`: alias head (lower case) -> (its MethodSpec, the spec it stands for), read at each use."""

    def __getitem__(self, head):
        return _aliases()[head]

    def __iter__(self):
        return iter(_aliases())

    def __len__(self) -> int:
        return len(_aliases())


METHOD_SPECS = _SpecsView()
ALIASES = _AliasView()


def register(spec: MethodSpec, *, replace: bool = False) -> MethodSpec:
    """Add method `spec` to the registry: `parse`, `method`, `Pipeline.load`, the CLI and the bench suite then
    run it by name. Returns `spec`; registering the very same spec again does nothing.

    replace: let `spec` take the place of a method registered earlier under its name (a notebook cell run
    again); the package's own methods are never replaced.
    Raises TypeError for anything but a `MethodSpec`, ValueError naming the clash (a taken name, a form or
    alias another method reads, an unknown need) and where the other method came from.
    """
    _read_plugins()
    module = getattr(getattr(spec, "build", None), "__module__", None)
    return _TABLE.add(spec, f"registered from {module or '?'}", replace)


def unregister(name: str) -> MethodSpec:
    """Remove the method named `name` that was added at run time (`register`, `load_methods`, an entry point);
    returns its spec. ValueError for one of the package's own methods or a name not registered."""
    _read_plugins()
    if name in _TABLE.added:
        return _TABLE.added.pop(name)[0]
    if any(s.name == name for s in _TABLE.own):
        raise ValueError(f"{name!r} is one of specjax's own methods: only methods added at run time can be "
                         f"unregistered")
    raise ValueError(f"no method {name!r} was registered; added at run time: {', '.join(_TABLE.added) or 'none'}")


@contextlib.contextmanager
def registered(*specs: MethodSpec) -> Iterator[tuple[MethodSpec, ...]]:
    """``with registered(spec, ...):`` the specs registered for the block; on leaving it, the registry is as it
    was before (what the block registered, replaced or unregistered itself included): tests and notebooks
    that must not leak methods into what runs after them."""
    _read_plugins()
    before = dict(_TABLE.added)
    try:
        # the modules `load_methods` adds inside the block (their readers, trainers, ...) and the families they register
        with declared.restoring(), families.restoring():
            yield tuple(register(s) for s in specs)
    finally:
        _TABLE.added = before


def _import_path(path: Path) -> types.ModuleType:
    """The module of .py file `path` (already imported from that file: that module), named by its stem."""
    path = path.resolve()
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file (give a module name or the path of a .py file)")
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if file and Path(file).resolve() == path:
            return module
    name = path.stem
    if not name.isidentifier() or name in sys.modules:
        raise ValueError(f"{path}: its module name {name!r} is " + ("taken by an imported module" if name in
                         sys.modules else "not a Python identifier") + "; rename the file")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look the module up by name
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def load_methods(source: str) -> tuple[MethodSpec, ...]:
    """Import `source` and register its methods (what ``--methods-from`` does); returns them.

    source: a module name ("my_pkg.drafters", importable from sys.path) or the path of a .py file
    ("docs/examples/my_drafter.py"). Its methods: its ``METHODS`` and those it registers itself when
    imported. It is imported once; calling again registers the same methods again (nothing, while they are).
    The module's other declarations (``READER``, ``TRAINER``, ``ROUND_SPLITS``: a whole drafter kind) join
    their registries with its methods (`specjax.declared.add`).
    Raises ImportError / FileNotFoundError when it does not import, ValueError when it brings no method
    or a method clashes (`register`), TypeError for a READER that is not a `Reader`.
    """
    if not isinstance(source, str) or not source.strip():
        raise ValueError(f"load_methods takes a module name or a .py path, got {source!r}")
    source = source.strip()
    is_path = source.endswith(".py") or "/" in source or "\\" in source
    key = str(Path(source).resolve()) if is_path else source
    _read_plugins()
    if key not in _LOADED:
        before = set(_TABLE.added)
        if is_path:
            module = _import_path(Path(source))
        else:
            try:
                module = importlib.import_module(source)
            except ModuleNotFoundError as e:
                raise ImportError(f"cannot import {source!r} ({e}): give an importable module name or the path of "
                                  f"a .py file") from e
        at_import = tuple(s for name, (s, _) in _TABLE.added.items() if name not in before)
        specs = at_import + tuple(s for s in _specs_of(module, source) if s not in at_import)
        if not specs and getattr(module, "NAMED_MODELS", None) is None:  # a module may bring models alone
            raise ValueError(f"{source} declares no METHODS and registers no method: add "
                             f"METHODS = (MethodSpec(...),) to it")
        reader = getattr(module, "READER", None)
        if reader is not None and not isinstance(reader, Reader):
            raise TypeError(f"{source}: READER is a {type(reader).__name__}; make it a specjax.drafters.spec.Reader")
        _LOADED[key] = module, specs
    module, specs = _LOADED[key]
    with declared.restoring(always=False):  # its reader, trainer and round split join with its methods, or none
        declared.add(module)
        for spec in specs:
            _TABLE.add(spec, source)
    return specs


# ------------------------------------------------------------------------------------------ reading and building


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
    return ", ".join(s.display() for s in method_specs())


def _close_to(head: str) -> str | None:
    """The form or alias closest to an unknown `head` (difflib), its ``<X>`` filled with the numbers of
    `head` in order (a missing one stays ``<X>``); None when nothing is close."""
    numbers = re.findall(r"\d+", head)
    shown = {}  # what is compared with `head` (an unfilled <X> left out) -> what the hint shows
    for spec in method_specs():
        for form in spec.forms:
            for variant in (re.sub(r"\[([^\[\]]*)\]", r"\1", form), re.sub(r"\[[^\[\]]*\]", "", form)):
                it = iter(numbers)
                filled = re.sub(r"<\w+>", lambda m: next(it, m.group(0)), variant)
                shown.setdefault(re.sub(r"<\w+>", "", filled), filled)
        shown.update({h.lower(): h.lower() for h, _ in spec.aliases})
    close = difflib.get_close_matches(head, list(shown), n=1, cutoff=0.6)
    return shown[close[0]] if close else None


def parse(text: str) -> Parsed:
    """Read a method string (module docstring of `specjax.drafters.spec`) without any model.

    Raises ValueError naming the accepted forms (and the closest one: "did you mean 'ddtree-8'?") for an
    unknown head, the fields for an unknown override, and the kind for a value that does not read.
    """
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"a method is a non-empty string such as 'ddtree-8'; use one of: {forms()}")
    head, colon, rest = text.strip().partition(":")
    head = head.strip().lower()
    preset = ""
    aliases = _aliases()
    if head in aliases:
        head, _, preset = aliases[head][1].partition(":")
    for spec in method_specs():
        positional = spec.match(head)
        if positional is not None:
            break
    else:
        close = _close_to(head)
        hint = f"; did you mean {close + colon + rest!r}?" if close else ""
        raise ValueError(f"unknown method {text!r}{hint}{' Or' if close else ';'} use one of: {forms()}")
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


def _build(text: str | Parsed, target_cfg, draft, readers: dict, target_params=None) -> Method:
    unknown = set(readers) - set(READERS)
    if unknown:
        raise TypeError(f"unknown drafter kinds {sorted(unknown)}; the kinds are {', '.join(READERS)}")
    _check_models(target_cfg, draft, readers)
    if target_params is not None and target_cfg is None:
        raise TypeError("target_params= given without target_cfg: pass the target's config with its params")
    p = text if isinstance(text, Parsed) else parse(text)  # a method read once (`BenchPlan.check`) is not read again
    b = Build(p.name if isinstance(text, Parsed) else text, p.values, p.given, target_cfg, draft,
              {k: v for k, v in readers.items() if v is not None},
              {k: _describe_need(k) for k in READERS}, target_params)
    needs = p.spec.required(p.values)
    for kind in needs:
        b.need(kind)
    drafter, params = p.spec.build(b)
    return Method(p.name, drafter, params, needs=needs)


def method(spec: str, target_cfg=None, *, draft: tuple | None = None, target_params=None,
           **readers: tuple | None) -> Method:
    """Build method `spec` for a target: its drafter and the params `generate` takes.

    spec: a method string (`forms()`), e.g. "ddtree-16", "chain4", "eagle3:topk=4".
    target_cfg: the target's config. draft: the draft LM as (cfg, params), for draft-LM methods.
    target_params: the target's params, for a builder that reads them (`Build.target_params`; None: unknown).
    readers: trained drafters that read the target, by kind, as (cfg, params): dflash=, eagle3=, domino=.
    Returns a `Method`; run it as ``generate(params, target_cfg, m.drafter, m.params, tokens, ...)``
    (``m.is_ar``: use `generate_ar`). Raises ValueError saying what is missing or wrong.
    """
    m = _build(spec, target_cfg, draft, readers, target_params)
    if m.params is None and not m.is_ar and draft is not None and len(draft) > 1:
        m = dataclasses.replace(m, params=draft[1])
    return m


def parse_method(spec: str | Parsed, draft_cfg=None, *, target_cfg=None, draft_params=None, target_params=None,
                 **readers) -> Method:
    """`method` in the benchmarks' older argument order: the draft LM's config first, its params apart; `spec`
    a method string or one already read (`parse`).

    A draft-LM method comes back with ``params`` None (the harness passes the draft LM's).
    """
    draft = (draft_cfg, draft_params) if draft_cfg is not None else None
    return _build(spec, target_cfg, draft, readers, target_params)


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


def markdown_table(*, own: bool = False) -> str:
    """The method table: form, fields with defaults, what it drafts with, what it is; every method known
    now, or with `own` the package's own only (the README's, `with_method_table`)."""
    rows = ["| method | fields (default) | drafts with | what it is |", "|---|---|---|---|"]
    for s in (_TABLE.own if own else method_specs()):
        form = " / ".join(f"`{f}`" for f in s.forms)
        aliases = [f"`{h}`" + (" (preset)" if ":" in t else f" = `{t}`") for h, t in s.aliases]
        if aliases:
            form += "; " + ", ".join(aliases)
        fields = ", ".join(f"`{f.name}`" + (f" ({f.default})" if f.default is not None else "") for f in s.fields)
        rows.append(f"| {form} | {fields} | {_needs_text(s)} | {s.help} |")
    return "\n".join(rows)


def with_method_table(text: str) -> str:
    """`text` (the README) with the lines between its ``<!-- methods: ... -->`` and ``<!-- /methods -->``
    markers replaced by ``markdown_table(own=True)`` (what ``make methods-table`` writes); ValueError
    when the markers are missing."""
    start, end = text.find(TABLE_START), text.find(TABLE_END)
    if start < 0 or end < start:
        raise ValueError(f"no method table: the text has no {TABLE_START} ... --> line followed by {TABLE_END}")
    body = text.index("\n", start) + 1
    return text[:body] + markdown_table(own=True) + "\n" + text[end:]
