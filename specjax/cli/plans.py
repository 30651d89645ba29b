"""Plans make their own flags: `flags_of(parser, PlanClass)` adds one flag per field of a plan dataclass
(`BenchPlan`, `TrainPlan`, `RecipeConfig`, a drafter kind's architecture and training config, ...),
`plan_from(args, PlanClass)` builds the plan back from the parsed flags, and `as_flags(message, PlanClass)`
rewrites a plan's own error (which names its fields) with the flags' names. The plan validates itself
(its ``check``, whose messages name a field first or in backticks); the command line restates nothing.

A field's flag is ``--<name>`` (underscores as dashes) typed by its annotation (`int`, `float`, `str`,
``X | None``, ``tuple[...]`` comma-separated, `bool` a switch: ``--<name>``, or ``--no-<name>`` when it
defaults to true, ``--<name>`` / ``--no-<name>`` when it defaults to None); its help is the field's entry in the class docstring's "Fields:" section (`field_docs`),
with the default. A field's ``metadata`` may refine it:

    help     the help text (instead of the docstring's entry)
    flag     the flag's name when it is not the field's ("dataset" for `BenchPlan.datasets`)
    parse    text -> value, for text the annotation does not read (e.g. "data=2,model=1"); applied by
             `plan_from`, whose ValueError becomes the flag's error
    choices  the values argparse accepts
    repeat   the flag is given once per item (``--prompt A --prompt B``)
    metavar  how the help names the value
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import math
import re
import types
import typing

from specjax.cli.common import UsageError

__all__ = ["as_flags", "field_docs", "flag_name", "flags_of", "number", "plan_from"]

_PLAIN = (int, float, str, bool)


def number(kind):
    """An argparse type that accepts only finite numbers of `kind` (int or float)."""
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not {'an integer' if kind is int else 'a number'}: {text!r}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"not a finite number: {text!r}")
        return value
    parse.__name__ = kind.__name__
    return parse


def field_docs(cls) -> dict[str, str]:
    """{field: its text} from the "Fields:" sections of the docstrings of `cls` and its bases (a subclass's
    text wins), each entry `name: text` one indent deeper than "Fields:", continued on deeper lines."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        lines, current, indent = inspect.cleandoc(klass.__doc__ or "").splitlines(), None, None
        for line in lines[next((i + 1 for i, x in enumerate(lines) if x.strip().startswith("Fields")), len(lines)):]:
            depth = len(line) - len(line.lstrip())
            match = re.match(r"(\w+): (.*)", line.strip())
            if match and (indent is None or depth == indent):
                indent, current = depth, match.group(1)
                docs[current] = match.group(2)
            elif current and line.strip() and depth > (indent or 0):
                docs[current] += " " + line.strip()
            elif line.strip():
                break  # the section ended
    return docs


def flag_name(f: dataclasses.Field) -> str:
    """The flag of field `f`: ``--<metadata flag or name>``, underscores as dashes."""
    return "--" + f.metadata.get("flag", f.name).replace("_", "-")


def _annotation(cls, f: dataclasses.Field):
    """(the field's type without ``| None``, its item type for a tuple or None)."""
    hint = typing.get_type_hints(cls)[f.name]
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    if typing.get_origin(hint) is tuple:
        return tuple, (typing.get_args(hint) or (str,))[0]
    return hint, None


def _shown(value) -> str:
    return ",".join(map(str, value)) if isinstance(value, tuple) else str(value)


def _with_default(doc: str, default) -> str:
    """A flag's help saying its default: a docstring's "(None: what none means)" reads "(default: ...)"."""
    if default in (None, ()):
        doc = doc.replace("(None: ", "(default: ")
        return doc if "default" in doc else f"{doc} (default: none)"
    return f"{doc} (default: {_shown(default)})"


def flags_of(ap, cls, *, skip=(), defaults: dict | None = None) -> None:
    """Add one flag per field of dataclass `cls` to argparse parser (or group) `ap` (module docstring);
    `skip` leaves fields out (their values come from elsewhere: `plan_from`'s keywords); `defaults` replaces a
    field's default on the command line (e.g. None where the command derives it). A field without a default
    is a required flag."""
    docs = field_docs(cls)
    defaults = defaults or {}
    flags = {f.name: flag_name(f) for f in dataclasses.fields(cls) if f.name not in skip}
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        meta = f.metadata
        kind, item = _annotation(cls, f)
        default = defaults.get(f.name, f.default if f.default is not dataclasses.MISSING else None)
        doc = meta.get("help") or docs.get(f.name) or f"{cls.__name__} field {f.name}"
        doc = re.sub(r"`(\w+)`", lambda m: flags.get(m.group(1), m.group(0)), doc)  # `a field` -> its flag
        common = {"dest": f.name}
        if kind is bool and default is None:  # three ways: --x, --no-x, or neither (the plan decides)
            ap.add_argument(flag_name(f), action=argparse.BooleanOptionalAction, default=None,
                            help=_with_default(doc, None), **common)
            continue
        if kind is bool:
            flag = flag_name(f) if not default else "--no-" + flag_name(f)[2:]
            ap.add_argument(flag, action="store_false" if default else "store_true",
                            help=f"turns off what is on by default: {doc[:1].lower()}{doc[1:]}" if default else doc,
                            **common)
            continue
        if not meta.get("choices"):
            common["metavar"] = meta.get("metavar", flag_name(f)[2:].replace("-", "_").upper())
        if f.default is dataclasses.MISSING and f.name not in defaults:
            ap.add_argument(flag_name(f), required=True, help=doc, dest=f.name)
            continue
        plain = meta.get("parse") in (None, *_PLAIN)
        base = item if meta.get("repeat") else kind
        typed = number(base) if plain and base in (int, float) else str
        ap.add_argument(flag_name(f), type=typed, default=default, choices=meta.get("choices"),
                        action="append" if meta.get("repeat") else None,
                        help=_with_default(doc, default), **common)


def _read(cls, f: dataclasses.Field, value):
    """A flag's value as field `f` holds it: text read by the field's ``parse`` or, for a tuple, split at
    commas into its item type; a repeated flag's list as a tuple; anything else as it came."""
    if value is None:
        return None
    if isinstance(value, list):
        return tuple(value)
    parse = f.metadata.get("parse")
    kind, item = _annotation(cls, f)
    if not isinstance(value, str) or (parse is None and kind is not tuple) or parse in _PLAIN:
        return value
    if parse is not None:
        value = parse(value)
        return tuple(value) if isinstance(value, list) else value
    try:
        return tuple(item(x.strip()) for x in value.split(",") if x.strip())
    except ValueError:
        raise ValueError(f"{f.name} must be comma-separated {item.__name__} values, got {value!r}") from None


def plan_from(args, cls, **given):
    """The `cls` plan of parsed flags `args` (each field from its flag, read by `_read`), `given` filling or
    replacing fields; UsageError naming the flag when a flag's text does not read."""
    values = {}
    for f in dataclasses.fields(cls):
        if f.name in given or not hasattr(args, f.name):
            continue
        try:
            values[f.name] = _read(cls, f, getattr(args, f.name))
        except ValueError as e:
            raise UsageError(as_flags(str(e) if str(e).startswith(f.name) else f"{f.name}: {e}", cls)) from None
    return cls(**values, **given)


def as_flags(message: str, *classes) -> str:
    """A plan's error with its fields named as the flags of `classes`: the message's first word when it is a
    field ("lr must be > 0"), and every field it writes in backticks ("0 <= `warmup` < `num_prompts`")."""
    flags = {f.name: flag_name(f) for cls in classes for f in dataclasses.fields(cls)}
    message = re.sub(r"`(\w+)`", lambda m: flags.get(m.group(1), m.group(0)), message)
    head = re.match(r"\w*", message).group(0)
    return flags.get(head, head) + message[len(head):]
