"""How every registry of specjax finds what is declared: one mechanism for methods, readers, model families,
trainers and round splits.

A module declares something by assigning a known name at its top level: ``METHODS`` and ``READER``
(`specjax.drafters.registry`), ``FAMILY`` (`specjax.models.families`), ``TRAINER`` (`specjax.train.run`),
``ROUND_SPLITS`` (`specjax.bench.round_split`). A registry asks for the declarations of one name:

    declared(specjax.train, "TRAINER")  -> [(module name, value), ...]

which are the package's own, from the modules of the package that assign the name (found by reading
their syntax trees, so nothing else is imported and no list names them), followed by those of the modules
added from outside the package (`add`: `specjax.load_methods` / ``--methods-from`` and the entry points
of ``specjax.methods`` add the module they import, so one file outside the package can declare a whole
drafter kind: its methods, its reader, its trainer and its round split). `restoring()` undoes what a block
added (tests).
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import pathlib
import pkgutil
import types
from collections.abc import Callable, Iterator, Mapping

__all__ = ["Registry", "add", "added", "declared", "declares", "declaring", "own", "restoring"]

_ADDED: list[types.ModuleType] = []  # modules added from outside the package, in the order they came


def declares(path: pathlib.Path, name: str) -> bool:
    """Whether the module at `path` assigns `name` at its top level (``NAME = ...`` or ``NAME: T = ...``),
    read from its syntax tree without importing it."""
    for node in ast.parse(path.read_text()).body:
        targets = (node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign)
                   else [])
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            return True
    return False


def declaring(package: types.ModuleType, name: str) -> tuple[str, ...]:
    """The names of the modules of `package` (every directory of its ``__path__``, in module-name order; private
    modules and subpackages left out) that declare `name`."""
    found = []
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
        path = pathlib.Path(info.module_finder.path) / f"{info.name}.py"
        if not info.name.startswith("_") and not info.ispkg and path.is_file() and declares(path, name):
            found.append(f"{package.__name__}.{info.name}")
    return tuple(found)


def added(name: str) -> list[tuple[str, object]]:
    """(module name, value) of `name` in each module added from outside the package that declares it."""
    return [(m.__name__, getattr(m, name)) for m in _ADDED if getattr(m, name, None) is not None]


def own(package: types.ModuleType, name: str) -> list[tuple[str, object]]:
    """(module name, value) of `name` in each module of `package` that declares it (`declaring`), imported."""
    found = [(m, getattr(importlib.import_module(m), name, None)) for m in declaring(package, name)]
    return [(m, v) for m, v in found if v is not None]


def declared(package: types.ModuleType, name: str) -> list[tuple[str, object]]:
    """(module name, value) of every declaration of `name`: the package's own modules (imported), then the
    modules added from outside it."""
    return own(package, name) + added(name)


def add(module: types.ModuleType) -> None:
    """Add a module imported from outside the package: its declarations join every registry (a module already
    added is not added twice)."""
    if not isinstance(module, types.ModuleType):
        raise TypeError(f"add takes a module, got {type(module).__name__}")
    if all(m is not module for m in _ADDED):
        _ADDED.append(module)


@contextlib.contextmanager
def restoring(always: bool = True) -> Iterator[None]:
    """``with restoring():`` the modules added inside the block are forgotten when it ends; with `always`
    False, only when it raises (all or none)."""
    before = list(_ADDED)
    try:
        yield
    except BaseException:
        _ADDED[:] = before
        raise
    if always:
        _ADDED[:] = before

class Registry(Mapping):
    """A live registry of one declared name: key -> value over `declared(package, name)`, read at each use (the
    package's own modules imported once, at the first use; the modules added since then included).

    package: the package's module name ("specjax.train"); name: the declared name ("TRAINER"); key: value -> its
    key (e.g. the trainer's kind); several: each declaration is a tuple of values (``ROUND_SPLITS = (...)``).
    Two declarations under one key raise RuntimeError naming both modules."""

    def __init__(self, package: str, name: str, key: Callable[[object], object], several: bool = False):
        self.package, self.name, self.key, self.several = package, name, key, several
        self._own: list[tuple[str, object]] | None = None

    def _table(self) -> dict:
        if self._own is None:
            self._own = own(importlib.import_module(self.package), self.name)
        table, where = {}, {}
        pairs = self._own + added(self.name)
        if self.several:
            pairs = [(module, value) for module, values in pairs for value in values]
        for module, value in pairs:
            key = self.key(value)
            if key in table and table[key] is not value:
                raise RuntimeError(f"two modules declare the {self.name} {key!r}: {where[key]} and {module}")
            table[key], where[key] = value, module
        return table

    def __getitem__(self, key):
        return self._table()[key]

    def __iter__(self):
        return iter(self._table())

    def __len__(self) -> int:
        return len(self._table())

    def __repr__(self) -> str:
        return f"Registry({self.package}.*.{self.name}: {', '.join(map(str, self))})"
