"""The README's "Reusing the pieces" snippets run as written (issue 18): every ```python
block of that section is executed in order in one namespace; their own asserts check
what they claim (lossless output, accepted paths, valid trees)."""

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent


def reuse_blocks() -> list[str]:
    text = (ROOT / "README.md").read_text()
    start = text.index("## Reusing the pieces")
    end = text.index("\n## ", start + 1) if "\n## " in text[start + 1:] else len(text)
    return re.findall(r"```python\n(.*?)```", text[start:end], re.S)


def test_reuse_snippets_run():
    blocks = reuse_blocks()
    assert len(blocks) == 3, "the section shows three reuse cases"
    namespace: dict = {"__name__": "readme"}
    for i, block in enumerate(blocks):
        exec(compile(block, f"README.md reuse block {i + 1}", "exec"), namespace)  # noqa: S102
    drafter_lines = blocks[2].split("drafter = RepeatRootDrafter()")[0].strip().splitlines()
    assert len(drafter_lines) <= 50, "a new drafter in <= 50 lines"
