"""Method specs: the one grammar of a method string, and what a drafter module declares about itself.

A method string is ``<head>[:<field>=<value>,...]``, e.g. ``ddtree-16``, ``fixed4x3n64``,
``dynatree-p3:d0=4,tau=0.03``. The head follows one of the method's *forms*: literal text,
``<X>`` a non-negative integer filling the positional field ``X``, ``[...]`` an optional part
(left out: its positional fields keep their defaults). Heads are case-insensitive; a value
is read by its field's kind (int, float, str, or bool as true / false / 1 / 0). Whole heads
may be *aliases* of another spec (``chain`` = ``chain4``, ``dynatree-zoo`` = a tuned
``dynatree-p3:...``); fields written after an alias override the alias's own.

Every drafter module declares, next to its drafter class::

    METHODS = (MethodSpec("chain", ("chain<K>", "linear<K>"), "a draft-LM chain of K tokens", _build,
                          positional=(Field("K", int, None, "draft tokens per round"),), needs=("draft",)),)

and, when it defines a kind of trained drafter that reads the target's features,
``READER = Reader("dflash", "DFlash", describe)``. `specjax.drafters.registry` collects both
from every module of `specjax.drafters`, so adding a method touches its own file only. A method
from outside the package is the same `MethodSpec`, given to `specjax.register` (or declared in a
file that ``--methods-from`` / `registry.load_methods` imports, or in an installed package's entry
point of group ``specjax.methods``).

A builder gets a `Build` (the fields with defaults filled in, the models at hand, the target's config
and params where the caller has them) and returns ``(drafter, params)``; ``params`` None means the
draft LM's params.
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import re
from collections.abc import Callable, Mapping

__all__ = ["AR", "METHODS", "Build", "Field", "MethodSpec", "Parsed", "Reader", "fields_from", "parse_fields",
           "render_form"]

_KIND_NAMES = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}


@dataclasses.dataclass(frozen=True)
class Field:
    """One field of a method: positional (``<X>`` in a form) or an override (``:name=value``).

    Fields:
      name: the field's name as written in a spec (``block``, ``N``).
      kind: int, float, bool or str.
      default: its value when not written; None: the drafter's own default (e.g. the trained block).
      help: one line: what it sets.
    """

    name: str
    kind: type = int
    default: object = None
    help: str = ""

    def parse(self, text: str, label: str):
        """`text` read as this field's kind; ValueError naming the method, the field and the kind."""
        try:
            if self.kind is bool:
                if text.lower() not in ("true", "false", "1", "0"):
                    raise ValueError(text)
                return text.lower() in ("true", "1")
            return self.kind(text)
        except ValueError:
            raise ValueError(f"{label} field {self.name!r} needs {_KIND_NAMES[self.kind]}, got {text!r}") from None


@dataclasses.dataclass(frozen=True)
class Reader:
    """A kind of trained drafter that reads the target's features (DFlash, EAGLE-3, Domino).

    Its checkpoint comes from ``--<kind> DIR`` on the command line or the zoo's ``<pair>-<kind>``.

    Fields:
      kind: the name methods list in `MethodSpec.needs` and the CLI flag, e.g. "dflash".
      label: how messages name it, e.g. "DFlash" ("needs a DFlash drafter trained for this target").
      describe: (cfg, params) -> one line for the benchmark's environment record.
    """

    kind: str
    label: str
    describe: Callable[[object, object], str]

    @property
    def what(self) -> str:
        article = "an" if self.label[:1].upper() in "AEIOU" else "a"
        return f"{article} {self.label} drafter trained for this target"


@dataclasses.dataclass(frozen=True)
class Build:
    """What a method's builder receives.

    Fields:
      spec: the method string as written (for messages).
      values: every positional and override field, defaults filled in (name -> value).
      given: the override fields written in the spec (name -> value), in order.
      target_cfg: the target's config, or None.
      draft: the draft LM as (cfg, params) (params may be None), or None.
      readers: reader kind -> (cfg, params) of the trained drafters at hand.
      describe_need: kind -> what a message calls it ("a draft model", "a DFlash drafter ...").
      target_params: the target's params (the pytree `generate` takes, in the caller's layer layout) where the
        caller loaded them (`Pipeline.load`, the CLI, the bench suite, `method(..., target_params=)`), else
        None: a builder that reads them raises a ValueError saying to pass them.
    """

    spec: str
    values: Mapping[str, object]
    given: Mapping[str, object]
    target_cfg: object = None
    draft: tuple | None = None
    readers: Mapping[str, tuple] = dataclasses.field(default_factory=dict)
    describe_need: Mapping[str, str] = dataclasses.field(default_factory=dict)
    target_params: object = None

    def need(self, kind: str):
        """The model of `kind` ("draft", "target" or a reader kind); ValueError naming what is missing."""
        if kind == "target":
            if self.target_cfg is None:
                raise ValueError(f"method {self.spec!r} needs the target config")
            return self.target_cfg
        if kind == "draft":
            if self.draft is None or self.draft[0] is None:
                raise ValueError(f"method {self.spec!r} needs a draft model")
            return self.draft
        if self.readers.get(kind) is None or self.target_cfg is None:
            raise ValueError(f"method {self.spec!r} needs {self.describe_need.get(kind, kind)} (and the target config)")
        return self.readers[kind]


@dataclasses.dataclass(frozen=True)
class MethodSpec:
    """A method as its drafter module declares it.

    Fields:
      name: the method's name, e.g. "ddtree".
      forms: how its head is written, the canonical form first, e.g. ("chain<K>", "linear<K>").
      help: one line: what the method is.
      build: Build -> (drafter, params or None for the draft LM's).
      positional: the ``<X>`` fields of the forms.
      fields: the ``:name=value`` override fields, in the order messages list them.
      needs: what it drafts with: "draft" (a draft LM), "target" (the target config) or reader kinds;
        a callable of the field values for methods whose needs depend on a field (Graft's base).
      aliases: (head, spec) pairs: a whole head standing for a spec of this method, e.g. ("chain", "chain4").
      label: how messages name it ("DDTree"); default: name.
    """

    name: str
    forms: tuple[str, ...]
    help: str
    build: Callable[[Build], tuple]
    positional: tuple[Field, ...] = ()
    fields: tuple[Field, ...] = ()
    needs: tuple[str, ...] | Callable[[Mapping], tuple[str, ...]] = ()
    aliases: tuple[tuple[str, str], ...] = ()
    label: str = ""

    def __post_init__(self):
        for form in self.forms:
            missing = set(re.findall(r"<(\w+)>", form)) - {f.name for f in self.positional}
            if missing:
                raise ValueError(f"method {self.name!r}: form {form!r} names no positional field {sorted(missing)}")

    @property
    def title(self) -> str:
        return self.label or self.name

    def required(self, values: Mapping) -> tuple[str, ...]:
        """The kinds this method needs for these field values."""
        return tuple(self.needs(values)) if callable(self.needs) else tuple(self.needs)

    def match(self, head: str) -> dict | None:
        """Positional values (defaults filled) if `head` (lower case) is one of the forms, else None."""
        for form in self.forms:
            m = re.fullmatch(_form_regex(form), head)
            if m:
                return {f.name: (int(m.group(f.name)) if m.group(f.name) is not None else f.default)
                        for f in self.positional}
        return None

    def display(self) -> str:
        """The canonical form, its alternatives in brackets, and its override fields: one line of the method list."""
        text = self.forms[0] + "".join(f" ({f})" for f in self.forms[1:])
        if len(self.fields) > 7:
            text += "[:field=value,...]"
        elif self.fields:
            text += "[:" + ",".join(f"{f.name}={f.kind.__name__}" for f in self.fields) + "]"
        return text


@dataclasses.dataclass(frozen=True)
class Parsed:
    """A method string read against its spec (no model involved).

    Fields:
      spec: the method's `MethodSpec`.
      name: the canonical spec string (aliases resolved, overrides spelled out).
      values: every field, defaults filled in.
      given: the override fields written, in order.
    """

    spec: MethodSpec
    name: str
    values: Mapping[str, object]
    given: Mapping[str, object]


def _form_regex(form: str) -> str:
    out = []
    for token in re.findall(r"<\w+>|\[|\]|[^<\[\]]+", form):
        if token.startswith("<"):
            out.append(f"(?P<{token[1:-1]}>\\d+)")
        elif token == "[":
            out.append("(?:")
        elif token == "]":
            out.append(")?")
        else:
            out.append(re.escape(token))
    return "".join(out)


def render_form(form: str, values: Mapping[str, object], positional: tuple[Field, ...]) -> str:
    """`form` with its ``<X>`` filled from `values`; an optional part whose fields all hold their
    defaults is left out."""
    defaults = {f.name: f.default for f in positional}

    def fill(text: str) -> str:
        return re.sub(r"<(\w+)>", lambda m: str(values[m.group(1)]), text)

    def optional(m) -> str:
        names = re.findall(r"<(\w+)>", m.group(1))
        return fill(m.group(1)) if any(values[n] != defaults[n] for n in names) else ""

    return fill(re.sub(r"\[([^\[\]]*)\]", optional, form))


def parse_fields(text: str, spec: MethodSpec, written: str) -> dict:
    """'k=v,k=v' -> {k: value} for `spec`'s override fields, with errors naming the method and its fields."""
    label = spec.title
    kinds = {f.name: f for f in spec.fields}
    items = [s.strip() for s in text.split(",") if s.strip()]
    if items and not kinds:
        raise ValueError(f"{spec.forms[0]} takes no overrides (':field=value'), got {written!r}")
    listing = ", ".join(f"{f.name}=<{f.kind.__name__}>" for f in spec.fields)
    values = {}
    for item in items:
        key, eq, value = (part.strip() for part in item.partition("="))
        if not eq or not value:
            raise ValueError(f"{label} override {item!r} is not of the form field=value; the fields are {listing}")
        if key not in kinds:
            close = difflib.get_close_matches(key, list(kinds), n=1, cutoff=0.75)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(f"unknown {label} field {key!r}{hint}; the fields are {listing}")
        if key in values:
            raise ValueError(f"{label} field {key!r} is set twice")
        values[key] = kinds[key].parse(value, label)
    return values


def fields_from(cls, names: Mapping[str, str], **kinds: type) -> tuple[Field, ...]:
    """Override fields read off dataclass `cls`: {spec name: class field name}; the default is the class
    field's, the kind its default's type (or `kinds[spec name]`), the help the first line of the field's
    entry in the class docstring's "Fields:" block. So a method's fields cannot drift from its drafter."""
    doc = inspect.getdoc(cls) or ""
    entries = dict(re.findall(r"^\s*(\w+): (.*)$", doc.split("Fields:", 1)[-1], re.M))
    defaults = {f.name: f.default for f in dataclasses.fields(cls)}
    out = []
    for name, attr in names.items():
        default = defaults[attr]
        default = None if default is dataclasses.MISSING else default
        if name in kinds and default is not None:
            default = kinds[name](default)
        out.append(Field(name, kinds.get(name, type(default) if default is not None else int), default,
                         entries.get(attr, "").strip()))
    return tuple(out)


AR = MethodSpec("ar", ("ar",), "plain autoregressive decoding (the baseline every method must match)",
                lambda b: (None, None))
METHODS = (AR,)
