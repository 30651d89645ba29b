"""Every dotted `specjax.x.y` name an error message tells the user to call or read exists (issue 52 item 5).

An error that names the fix must name one that is there: `specjax.drafters.eagle3.with_own_head` was
quoted for a function that lives in `specjax.models.eagle3_net`. This test reads every module under
specjax/ (its syntax tree; nothing is executed but the imports of the names found), collects the text
of every error message -- the strings inside a `raise` statement, a call to an `...Error` /
`...Exception` / `...Warning` class, or `warnings.warn` -- and imports each dotted name it quotes
(backquoted or not): the longest importable module prefix, then attributes for the rest.
"""

import ast
import importlib
import pathlib
import re

import pytest

import specjax

ROOT = pathlib.Path(specjax.__file__).parent
NAME = re.compile(r"\bspecjax(?:\.[A-Za-z_]\w*)+")
_MESSAGE_CALL = re.compile(r"(Error|Exception|Warning)$")


def _text(node: ast.AST) -> str:
    """The literal text of a string expression: constants joined, each f-string field as "{}"."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
    return ""


def _call_name(call: ast.Call) -> str:
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def message_names(source: str, filename: str = "<string>") -> list[tuple[int, str]]:
    """(line, dotted name) of every `specjax.` name quoted in an error message of `source`: the
    strings under a `raise`, a call to a class named ...Error / ...Exception / ...Warning, or `warn`."""
    roots: list[ast.AST] = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Raise) and node.exc is not None:
            roots.append(node.exc)
        elif isinstance(node, ast.Call) and (_MESSAGE_CALL.search(_call_name(node)) or _call_name(node) == "warn"):
            roots.append(node)
    found = set()
    for root in roots:
        for node in ast.walk(root):
            for name in NAME.findall(_text(node)):
                found.add((node.lineno, name))
    return sorted(found)


def resolves(dotted: str) -> bool:
    """Whether `dotted` is an importable module, or attributes of the longest importable module prefix."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def all_message_names() -> list[tuple[str, int, str]]:
    out = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT.parent).as_posix()
        out += [(rel, line, name) for line, name in message_names(path.read_text(), rel)]
    return out


def test_the_scan_finds_and_rejects_a_name_that_does_not_exist():
    """The checker itself: it reads raise / ...Error(...) / warn strings, f-strings and implicit
    concatenations across lines, and ignores strings that are not messages."""
    src = ('def f(x):\n'
           '    note = "see specjax.not_a_module.anything"  # not a message: ignored\n'
           '    if x:\n'
           '        raise ValueError(f"{x}: convert it with specjax.drafters.eagle3."\n'
           '                         "with_own_head(params) first")\n'
           '    warnings.warn("use `specjax.models.eagle3_net.with_own_head`")\n'
           '    return CheckpointError("see specjax.models.loading.save_checkpoint.")\n')
    found = message_names(src)
    assert [n for _, n in found] == ["specjax.drafters.eagle3.with_own_head", "specjax.models.eagle3_net.with_own_head",
                                     "specjax.models.loading.save_checkpoint"]
    assert [resolves(n) for _, n in found] == [False, True, True]
    assert not resolves("specjax.no_such_module") and resolves("specjax.models") and resolves("specjax.train")


def test_every_dotted_name_in_an_error_message_exists():
    names = all_message_names()
    assert len(names) >= 10, "the scan found almost no quoted names: is it still reading the sources?"
    missing = [f"{path}:{line}: {name}" for path, line, name in names if not resolves(name)]
    if missing:
        pytest.fail("error messages quote names that do not exist:\n  " + "\n  ".join(missing))
