"""One method registry (issue 37 item 1): every method is declared by its drafter module, and the
README's table (written by `make methods-table`), the CLI's help and the unknown-method error are the
registry's, so they agree. Methods from outside the package: tests/test_register.py.

Also: every spec reads back to itself (its canonical name is a spec too), `specjax.method` builds
a runnable drafter from Python, nothing parses method names back out of strings, and the README's
five-line text example runs as written.
"""

from __future__ import annotations

import importlib
import pathlib
import re

import jax
import numpy as np
import pytest

import specjax
from specjax.bench import harness
from specjax.cli import main
from specjax.drafters import registry
from specjax.drafters.spec import MethodSpec

ROOT = pathlib.Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def readme_table() -> str:
    start = README.index("<!-- methods:")
    start = README.index("\n", start) + 1
    return README[start: README.index("<!-- /methods -->")].strip()


def test_readme_method_table_is_the_registry():
    table = registry.markdown_table(own=True)
    assert readme_table() == table, (
        "README.md's method table is stale: run `make methods-table`, or put exactly this between its "
        "<!-- methods: ... --> and <!-- /methods --> lines:\n\n" + table)
    assert registry.with_method_table(README) == README


def test_make_methods_table_rewrites_a_stale_table(tmp_path, capsys):
    """`make methods-table` = `specjax methods --readme README.md`: the stale lines between the markers
    become the registry's table, the rest of the file stays as it was."""
    assert "methods-table:" in (ROOT / "Makefile").read_text()
    assert "$(PY) -m specjax methods --readme README.md" in (ROOT / "Makefile").read_text()
    stale = README.replace("| `ar` |", "| `ar` (old) |").replace("| `tr` |", "| `tr2` |")
    path = tmp_path / "README.md"
    path.write_text(stale)
    assert main(["methods", "--readme", str(path)]) == 0
    assert path.read_text() == README and "method table rewritten" in capsys.readouterr().out
    assert main(["methods", "--readme", str(path)]) == 0 and "already up to date" in capsys.readouterr().out
    path.write_text("no markers here\n")
    assert main(["methods", "--readme", str(path)]) == 2
    assert "has no <!-- methods:" in capsys.readouterr().err


def test_cli_help_and_unknown_method_error_list_every_method(capsys):
    assert main(["generate", "--help"]) == 0
    help_text = "".join(capsys.readouterr().out.split())
    assert main(["generate", "--method", "beam4"]) == 2
    error = capsys.readouterr().err
    for spec in registry.METHOD_SPECS:
        assert "".join(spec.display().split()) in help_text, spec.name
        assert spec.display() in error, spec.name


def test_every_method_is_declared_by_its_own_module():
    """Each spec sits in the module whose drafter it builds (no central list to edit)."""
    for spec in registry.METHOD_SPECS:
        module = importlib.import_module(getattr(spec.build, "__module__", ""))
        assert spec in getattr(module, "METHODS", ()), f"{spec.name} is not in its module's METHODS"
        assert isinstance(spec, MethodSpec) and spec.help


def _example(spec: MethodSpec) -> str:
    values = {f.name: f.default if f.default is not None else 3 for f in spec.positional}
    values = {k: (2 if k == "P" else v) for k, v in values.items()}
    return re.sub(r"<(\w+)>", lambda m: str(values[m.group(1)]), re.sub(r"\[[^\]]*\]", "", spec.forms[0]))


@pytest.mark.parametrize("spec", registry.METHOD_SPECS, ids=lambda s: s.name)
def test_every_spec_reads_back_to_itself(spec):
    head = _example(spec)
    parsed = registry.parse(head)
    assert parsed.spec is spec and registry.parse(parsed.name).name == parsed.name
    if spec.fields:
        f = spec.fields[0]
        value = {int: "2", float: "0.5", str: "walk", bool: "true"}[f.kind]
        written = registry.parse(f"{head.upper()}:{f.name}={value}")
        assert written.given == {f.name: f.kind(value) if f.kind is not bool else True}
        assert registry.parse(written.name) == written


def test_aliases_and_presets():
    assert registry.parse("linear3").name == "chain3" and registry.parse("tree").name == "fixed5x2"
    zoo_preset = registry.parse("dynatree-zoo")
    assert zoo_preset.name.startswith("dynatree-p3:n_max=16")
    assert registry.parse("dynatree-zoo:tau=0.2").given["tau"] == 0.2  # a written field overrides the preset's


def test_method_builds_a_runnable_drafter_from_python():
    target, draft = harness.random_pair(vocab=64)
    m = specjax.method("chain3", target[0], draft=draft)
    assert m.name == "chain3" and m.params is draft[1] and m.needs == ("draft",)
    tokens, lengths = specjax.pad_prompts([[1, 2, 3]])
    out = specjax.generate(target[1], target[0], m.drafter, m.params, tokens, lengths, 6, eos_ids=())
    ar = specjax.generate_ar(target[1], target[0], tokens, lengths, 6, eos_ids=())
    np.testing.assert_array_equal(np.asarray(out.tokens), np.asarray(ar.tokens))
    assert specjax.method("ar").is_ar and specjax.method("pld:num=4", target[0]).params == {}
    with pytest.raises(ValueError, match="needs a DFlash drafter trained for this target"):
        specjax.method("ddtree-16", target[0], draft=draft)
    with pytest.raises(TypeError, match="unknown drafter kinds"):
        specjax.method("ddtree-16", target[0], medusa=draft)


def test_no_method_name_is_parsed_back_from_a_string():
    pattern = re.compile(r"\.name\.split\(")
    hits = [f"{p.relative_to(ROOT)}:{n}" for p in (ROOT / "specjax").rglob("*.py")
            for n, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert not hits, f"method names parsed back from strings (use Method.needs / the registry): {hits}"


def test_readme_five_lines_from_install_to_text():
    start = README.index("From `pip install -e .` to text")
    block = re.search(r"```python\n(.*?)```", README[start:], re.S).group(1)
    assert len([line for line in block.splitlines() if line.strip()]) <= 5
    namespace: dict = {}
    exec(compile(block, "README.md five lines", "exec"), namespace)  # noqa: S102
    out = namespace["out"]
    assert out[0].text and out[0].tau >= 1 and out[0].rounds >= 1
    jax.clear_caches()
