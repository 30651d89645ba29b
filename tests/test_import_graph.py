"""The house's import rules, read from every module's syntax tree (imports inside functions included):

* imports point down the layers of `LAYERS` (a module imports its own layer or lower ones): the
  math (tree, sampling, ops) below the model ports, those below verification, the drafters, the
  loop, then data / pipeline / benchmarks / training, the CLI on top;
* no module uses another module's private (underscore) name;
* imports sit at the top of a module (inside a function only for an optional dependency);
* notebooks import the library, never the command line;
* argv is parsed only in `specjax/cli/` (and the `python -m` shims that call it): no other module
  imports argparse or reads sys.argv;
* no module under tests/ imports a test module (tests/test_*.py): what several test modules share
  lives in helper modules (tests/fixtures.py, tests/drafter_fixtures.py, ...).
"""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent

# Layer of each package or module prefix (the longest matching prefix wins); `specjax` itself (the
# public API re-exporting everything) sits on top with the CLI.
LAYERS = {
    "specjax.inputs": 0, "specjax.numerics": 0, "specjax.ops": 0, "specjax.sampling": 0, "specjax.tree": 0,
    "specjax.streaming": 0, "specjax.atomic": 0, "specjax.declared": 0,
    "specjax.models": 1,
    "specjax.verify": 2, "specjax.sharding": 2, "specjax.equality": 2, "specjax.distributed": 2, "specjax.launch": 2,
    "specjax.drafters": 3,
    "specjax.decode": 4, "specjax.core": 4, "specjax.tree_checks": 4,
    "specjax.data": 5, "specjax.zoo": 5,
    "specjax.pipeline": 6, "specjax.recipe": 8,
    "specjax.bench": 7, "specjax.train": 7, "specjax.testing": 7,
    "specjax": 8, "specjax.cli": 8,
    "specjax.showcase": 9, "specjax.__main__": 9, "specjax.train.__main__": 9, "specjax.launch.__main__": 9,
}


def layer(module: str) -> int:
    best = max((p for p in LAYERS if module == p or module.startswith(p + ".")), key=len)
    return LAYERS[best]


def module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_module(name: str) -> bool:
    path = ROOT.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def imports(path: pathlib.Path):
    """(line, imported module, imported names) of every specjax import in the file; `from a import b`
    with b a module counts as importing a.b."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "specjax":
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                yield node.lineno, (sub if is_module(sub) else node.module), alias.name
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "specjax":
                    yield node.lineno, alias.name, None


SOURCES = sorted((ROOT / "specjax").rglob("*.py"))


def test_imports_point_down_the_layers():
    upward = [f"{path.relative_to(ROOT)}:{line} {module_name(path)} (layer {layer(module_name(path))}) imports "
              f"{target} (layer {layer(target)})"
              for path in SOURCES for line, target, _ in imports(path)
              if module_name(path) != "specjax" and layer(target) > layer(module_name(path))]
    assert not upward, "\n".join(upward)


def test_no_private_name_crosses_modules():
    crossing = [f"{path.relative_to(ROOT)}:{line} imports {name} from {target}"
                for path in SOURCES + sorted((ROOT / "notebooks").glob("*.py"))
                for line, target, name in imports(path)
                if name and name.startswith("_") and not name.startswith("__") and target != module_name(path)]
    for path in SOURCES:  # module._name through an imported specjax module
        tree = ast.parse(path.read_text())
        aliases = {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                   and n.module and n.module.startswith("specjax") for a in n.names
                   if is_module(f"{n.module}.{a.name}")}
        crossing += [f"{path.relative_to(ROOT)}:{n.lineno} uses {n.value.id}.{n.attr}" for n in ast.walk(tree)
                     if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in aliases
                     and n.attr.startswith("_") and not n.attr.startswith("__")]
    assert not crossing, "\n".join(crossing)


OPTIONAL = {"torch", "transformers", "jinja2"}  # the dev extra: imported where a function needs them


def test_imports_inside_functions_are_optional_dependencies_only():
    """Imports sit at the top of a module; inside a function only for an optional dependency (and the
    data package's lazy `assets` attribute, which keeps `import specjax.data` free of file reads)."""
    inside = []
    for path in SOURCES:
        for fn in ast.walk(ast.parse(path.read_text())):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for node in ast.walk(fn):
                    if isinstance(node, (ast.Import, ast.ImportFrom)):
                        module = node.module if isinstance(node, ast.ImportFrom) else node.names[0].name
                        if module.split(".")[0] not in OPTIONAL and (module_name(path), fn.name) != (
                                "specjax.data", "__getattr__"):
                            inside.append(f"{path.relative_to(ROOT)}:{node.lineno} {fn.name} imports {module}")
    assert not inside, "\n".join(inside)


CLI_PACKAGE = ROOT / "specjax" / "cli"


def argv_uses(path: pathlib.Path):
    """(line, what) of every `import argparse` / `from argparse import ...` and every read of `sys.argv`."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import) and any(a.name == "argparse" for a in node.names):
            yield node.lineno, "imports argparse"
        elif isinstance(node, ast.ImportFrom) and node.module == "argparse":
            yield node.lineno, "imports from argparse"
        elif (isinstance(node, ast.Attribute) and node.attr == "argv" and isinstance(node.value, ast.Name)
              and node.value.id == "sys"):
            yield node.lineno, "reads sys.argv"
        elif isinstance(node, ast.ImportFrom) and node.module == "sys" and any(a.name == "argv" for a in node.names):
            yield node.lineno, "imports sys.argv"


def test_argv_is_parsed_only_in_the_cli_package():
    """Library modules take dataclasses and arguments; the command line (specjax/cli/) turns argv into them."""
    found = [f"{path.relative_to(ROOT)}:{line} {what}" for path in SOURCES if CLI_PACKAGE not in path.parents
             for line, what in argv_uses(path)]
    assert not found, "\n".join(found)


def test_the_argv_rule_sees_argparse_and_sys_argv(tmp_path):
    source = tmp_path / "made_up.py"
    source.write_text("import argparse\nimport sys\nfrom argparse import Namespace\nx = sys.argv[1:]\n")
    assert [w for _, w in argv_uses(source)] == ["imports argparse", "imports from argparse", "reads sys.argv"]


@pytest.mark.parametrize("notebook", sorted((ROOT / "notebooks").glob("*.py")), ids=lambda p: p.name)
def test_notebooks_do_not_import_the_command_line(notebook):
    cli = [f"{notebook.name}:{line} imports {target}" for line, target, _ in imports(notebook)
           if layer(target) >= LAYERS["specjax.cli"] and target != "specjax"]
    assert not cli, "\n".join(cli)


def is_test_module(name: str) -> bool:
    """`tests.test_x`, or the bare `test_x` (tests/ is on sys.path, tests/conftest.py)."""
    parts = name.split(".")
    return (parts[0] == "tests" and len(parts) > 1 and parts[1].startswith("test_")) or (
        len(parts) == 1 and parts[0].startswith("test_"))


def imports_of_test_modules(path: pathlib.Path):
    """(line, test module) of every import of a test module (tests/test_*.py) in the file: `tests.test_x`,
    `from tests import test_x`, the bare `test_x` and relative imports."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:  # relative: `from .test_x import y`, `from . import test_x`
                names = [node.module] if node.module else [a.name for a in node.names]
                yield from ((node.lineno, f"tests.{n}") for n in names if is_test_module(n.split(".")[0]))
            elif node.module and is_test_module(node.module):
                yield node.lineno, node.module
            elif node.module == "tests":
                yield from ((node.lineno, f"tests.{a.name}") for a in node.names if is_test_module(f"tests.{a.name}"))
        elif isinstance(node, ast.Import):
            yield from ((node.lineno, a.name) for a in node.names if is_test_module(a.name))


def test_no_test_module_imports_another_test_module():
    """A test module's helpers that other modules use live in a helper module, never in the test module: no
    module under tests/ (test or helper) imports a tests/test_*.py module."""
    found = [f"{path.relative_to(ROOT)}:{line} imports {target}"
             for path in sorted((ROOT / "tests").glob("*.py")) for line, target in imports_of_test_modules(path)]
    assert not found, "\n".join(found)


def test_the_rules_catch_what_they_forbid(tmp_path):
    """The checks above on made-up sources: an upward import, a private import and imports of test modules
    are seen."""
    assert layer("specjax.models.llama") == 1 and layer("specjax.drafters.ddtree") == 3 and layer("specjax.cli") == 8
    source = tmp_path / "made_up.py"
    source.write_text("from specjax.decode import generate\nfrom specjax.models.model import _merge\nimport specjax.cli\n")
    found = list(imports(source))
    assert [t for _, t, _ in found] == ["specjax.decode", "specjax.models.model", "specjax.cli"]
    assert layer(found[0][1]) > layer("specjax.models.llama")  # a model port importing the loop: upward
    assert found[1][2] == "_merge"
    tests_source = tmp_path / "made_up_test.py"
    t = "test" + "_"  # in pieces: a grep of tests/ for imports of test modules does not match this file
    tests_source.write_text(f"from tests.fixtures import MAX_NEW\nfrom tests.{t}decode import PAIRS\n"
                            f"import tests.{t}zoo\nfrom tests import {t}dflash, tiny_models\n"
                            f"from {t}ddtree import slot_paths\n"
                            f"from tiny_models import perturbed\nfrom .{t}assets import registry\n"
                            f"def f():\n    from tests.{t}eagle3 import eagle_cfg\n")
    assert sorted(imports_of_test_modules(tests_source)) == [
        (2, "tests.test_decode"), (3, "tests.test_zoo"), (4, "tests.test_dflash"), (5, "test_ddtree"),
        (7, "tests.test_assets"), (9, "tests.test_eagle3")]
