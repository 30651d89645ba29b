"""environment.yml (conda users) lists exactly what pyproject.toml declares, so neither
install path silently lacks a dependency the other has (issue 18)."""

import ast
import pathlib
import re
import sys
import tomllib

ROOT = pathlib.Path(__file__).resolve().parent.parent


def name_of(requirement: str) -> str:
    return re.split(r"[<>=!~\[ ;]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def conda_pip_requirements() -> dict[str, str]:
    """The `pip:` list of environment.yml (a flat YAML list of quoted strings), by name."""
    lines = (ROOT / "environment.yml").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "- pip:")
    reqs = []
    for line in lines[start + 1:]:
        m = re.fullmatch(r"\s+- \"?([^\"]+)\"?\s*", line)
        if not m:
            break
        reqs.append(m.group(1))
    assert reqs, "environment.yml has no pip requirements"
    return {name_of(r): r for r in reqs if r != "-e ."}


def test_environment_yml_parses_and_installs_the_package():
    text = (ROOT / "environment.yml").read_text()
    assert re.search(r"^name: specjax$", text, re.M) and re.search(r"^\s+- python=3\.11$", text, re.M)
    assert '"-e ."' in text


def test_environment_yml_lists_exactly_the_declared_dependencies():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = {name_of(r): r for r in project["dependencies"]}
    for extra in project["optional-dependencies"].values():
        declared.update({name_of(r): r for r in extra})
    conda = conda_pip_requirements()
    assert set(conda) == set(declared), (f"only in environment.yml: {sorted(set(conda) - set(declared))}; "
                                         f"only in pyproject.toml: {sorted(set(declared) - set(conda))}")
    for name, req in conda.items():  # same bounds, except torch, pinned to the CPU wheel the Makefile installs
        if name != "torch":
            assert req.replace(" ", "") == declared[name].replace(" ", ""), f"{name}: {req} vs {declared[name]}"


def imported_modules(indented: bool) -> set[str]:
    """Third-party top-level modules specjax imports: at module level (column 0), or anywhere."""
    found = set()
    for path in (ROOT / "specjax").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.Import, ast.ImportFrom)) and (indented or node.col_offset == 0):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                found |= {n.split(".")[0] for n in names if n and not getattr(node, "level", 0)}
    return {m for m in found if m not in sys.stdlib_module_names and m != "specjax"}


def dist(module: str) -> str:
    return {"jaxlib": "jax"}.get(module, module).lower().replace("_", "-")  # jaxlib comes with jax


def test_declared_dependencies_are_used_and_used_ones_declared():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = {name_of(r) for r in project["dependencies"]}
    extras = {name_of(r) for extra in project["optional-dependencies"].values() for r in extra}
    unused = sorted(core - {dist(m) for m in imported_modules(indented=True)})
    assert not unused, f"pyproject.toml declares dependencies specjax never imports: {unused}"
    undeclared = sorted({dist(m) for m in imported_modules(indented=False)} - core)
    assert not undeclared, f"specjax imports at module level what pyproject.toml does not declare: {undeclared}"
    optional = sorted({dist(m) for m in imported_modules(indented=True)} - core - extras)
    assert not optional, f"specjax imports (lazily) what no dependency list declares: {optional}"
