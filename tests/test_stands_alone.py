"""The repository stands alone (issue 37 item 6): no file points at material outside it.

Papers are cited by title, arXiv id and section (or a reference implementation by repository
and file), and the architecture description lives in `docs/architecture.md`. This test reads
every text file git knows about (tracked, plus new files not ignored) and fails naming each
file and line that refers to the notes, the architecture guide or the paper texts that sat
beside the repository while it was written. The patterns are assembled from pieces so that
this file does not match them itself.
"""

from __future__ import annotations

import pathlib
import re
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent

# Each: (what it points to, regex). Case-sensitive: `docs/architecture.md` is ours and fine.
OUTSIDE = [
    ("the paper notes", re.compile(re.escape("PAPER" + "_NOTES"))),
    ("the outside architecture guide", re.compile(r"\b" + re.escape("ARCHITECTURE" + ".md"))),
    ("a directory beside the repository", re.compile(re.escape(".." + "/shared"))),
    ("the paper texts", re.compile(re.escape("shared" + "/papers"))),
]


def repository_files() -> list[pathlib.Path]:
    """Files git tracks or would track (untracked but not ignored), that exist in the work tree."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the file list comes from git")
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                         cwd=ROOT, check=True, capture_output=True).stdout
    names = sorted({n for n in out.decode("utf-8", "surrogateescape").split("\0") if n})
    return [ROOT / n for n in names if (ROOT / n).is_file()]


def text_of(path: pathlib.Path) -> str | None:
    """The file's text, or None for a binary file (a NUL byte, or not UTF-8)."""
    data = path.read_bytes()
    if b"\0" in data[:8192]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def outside_references(text: str) -> list[tuple[int, str, str]]:
    """(line number, what, the line) for every line of `text` pointing outside the repository."""
    hits = []
    for number, line in enumerate(text.splitlines(), 1):
        for what, pattern in OUTSIDE:
            if pattern.search(line):
                hits.append((number, what, line.strip()))
    return hits


def test_patterns_catch_what_they_should_and_nothing_else():
    bad = ["see " + "PAPER" + "_NOTES §1.4", "as " + "ARCHITECTURE" + ".md asks",
           "(`" + ".." + "/shared" + "/papers/graft.txt`)", "in " + "shared" + "/papers"]
    for line in bad:
        assert outside_references(line), line
    good = ["docs/architecture.md", "DDTree (arXiv 2604.12989, §4.4)", "shared by every method",
            "z-lab/dflash, model.py", "../docs/architecture.md"]
    for line in good:
        assert not outside_references(line), line


def test_no_file_refers_outside_the_repository():
    files = repository_files()
    assert any(p.name == "README.md" for p in files)
    found = []
    for path in files:
        text = text_of(path)
        if text is None:
            continue
        rel = path.relative_to(ROOT)
        found += [f"{rel}:{number}: {what}: {line[:160]}" for number, what, line in outside_references(text)]
    assert not found, ("files refer to material outside the repository (cite the paper by title, arXiv id "
                       "and section, or the reference implementation by repository and file):\n"
                       + "\n".join(found))


def test_the_architecture_description_is_in_the_repository():
    doc = ROOT / "docs" / "architecture.md"
    assert doc.is_file(), "docs/architecture.md describes the package's layers, the Drafter protocol and the loop"
    text = doc.read_text(encoding="utf-8")
    for needed in ("Drafter", "decode.py", "tree.py", "verify.py", "drafters/"):
        assert needed in text, f"docs/architecture.md does not mention {needed}"
    assert "docs/architecture.md" in (ROOT / "README.md").read_text(encoding="utf-8"), \
        "README.md links the architecture description"
