"""The README is the front door (issue 37 item 7): at most 250 lines, exactly two set-up commands,
and every page it links exists; the long material lives in docs/, and its snippets still run.

`docs/reusing.md`'s snippets run as written (issue 18): every ```python block of that page is
executed in order in one namespace; their own asserts check what they claim (lossless output,
accepted paths, valid trees)."""

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
MAX_README_LINES = 250
LINK = re.compile(r"\]\(([^)\s]+)\)")  # markdown link targets


def section(text: str, heading: str) -> str:
    """The text of the `## heading` section of `text` (up to the next `## ` heading)."""
    start = text.index(f"## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start: end if end >= 0 else len(text)]


def reuse_blocks() -> list[str]:
    text = (ROOT / "docs" / "reusing.md").read_text()
    return re.findall(r"```python\n(.*?)```", text, re.S)


def test_reuse_snippets_run():
    blocks = reuse_blocks()
    # three reuse cases, then the property-testing example (run by tests/test_testing_kit.py), every check in
    # one call (`assert_drafter`: tests/test_assert_drafter.py makes the same call on a drafter of its own), then
    # your own method by name (run by tests/test_register.py)
    assert len(blocks) == 6 and "testing.assert_greedy_lossless" in blocks[3], "three reuse cases, then the kit"
    assert "testing.assert_drafter(" in blocks[4], "then every check in one call"
    assert "specjax.load_methods" in blocks[5], "then your own method, by name"
    namespace: dict = {"__name__": "readme"}
    for i, block in enumerate(blocks[:3]):
        exec(compile(block, f"docs/reusing.md block {i + 1}", "exec"), namespace)  # noqa: S102
    drafter_lines = blocks[2].split("drafter = RepeatRootDrafter()")[0].strip().splitlines()
    assert len(drafter_lines) <= 50, "a new drafter in <= 50 lines"


def test_readme_is_short():
    lines = README.read_text().splitlines()
    assert len(lines) <= MAX_README_LINES, (
        f"README.md has {len(lines)} lines (at most {MAX_README_LINES}): move details into docs/")


def test_readme_two_commands_are_make_run_and_make_test():
    blocks = re.findall(r"```(?:bash|sh)?\n(.*?)```", section(README.read_text(), "Two commands"), re.S)
    assert len(blocks) == 1, "the Two commands section has one code block"
    commands = [line.split("#")[0].strip() for line in blocks[0].splitlines() if line.split("#")[0].strip()]
    assert commands == ["make run", "make test"], commands


def test_readme_links_the_docs_pages_and_they_exist():
    text = README.read_text()
    pages = set(re.findall(r"\bdocs/[\w.-]+\.md\b", text))
    assert {"docs/architecture.md", "docs/results.md", "docs/reusing.md", "docs/usage.md"} <= pages
    missing = sorted(p for p in pages if not (ROOT / p).is_file())
    assert not missing, f"README.md links docs pages that do not exist: {missing}"
    unlinked = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md")
                      if p.relative_to(ROOT).as_posix() not in pages)
    assert not unlinked, f"docs pages the README does not link: {unlinked}"


def test_relative_links_in_readme_and_docs_resolve():
    """Every relative link target in README.md and docs/*.md names a file or folder that exists
    (relative to the page: text moved into docs/ links with ../)."""
    broken = []
    for page in [README, *sorted((ROOT / "docs").glob("*.md"))]:
        for target in LINK.findall(page.read_text()):
            path = target.split("#")[0]
            if not path or re.match(r"[a-z][a-z0-9+.-]*:", path):  # an anchor, or http:, mailto:, ...
                continue
            if not (page.parent / path).exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert not broken, f"broken relative links: {broken}"
