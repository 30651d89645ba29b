"""specjax/zoo/TRAINING.md's commands run as written: every `python -m specjax.train ...` command of its
fenced bash blocks parses with the real command line (`specjax.cli.train.parser`), placeholders (DIR,
DATA, RUN, ...) replaced by scratch paths and shell variables of the same block (COMMON="...") expanded.
Parse only: nothing trains, loads or generates, so the whole module takes about a second.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest

from specjax import zoo
from specjax.cli.train import parser

TRAINING_MD = zoo.ZOO_DIR / "TRAINING.md"
PLACEHOLDER = re.compile(r"\b[A-Z][A-Z0-9_]*[A-Z0-9]\b")  # DIR, DATA, RUN, OUT_DIR: a word in capitals
SHELL_END = {"&", "&&", "|", "||", ";"}


def commands(text: str) -> list[tuple[str, list[str]]]:
    """(the command as written, its argv after `python -m specjax.train`) for every such command of the fenced
    bash blocks of `text`: continuation lines joined, comments dropped, `NAME="..."` variables of the block
    expanded, the command cut at a redirection or a shell operator, optional `[--flag VALUE]` kept as given."""
    out = []
    for block in re.findall(r"^```bash\n(.*?)^```", text, re.S | re.M):
        variables: dict[str, str] = {}
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():
            words = shlex.split(line, comments=True)
            if len(words) == 1 and re.fullmatch(r"[A-Z_]+=.*", words[0]):
                name, value = words[0].split("=", 1)
                variables[name] = value
                continue
            if "specjax.train" not in words:
                continue
            argv = []
            for word in words[words.index("specjax.train") + 1:]:
                if word in SHELL_END or word.startswith((">", "<", "2>")):
                    break
                if word.startswith("$"):
                    argv += shlex.split(variables[word[1:]])
                else:
                    argv.append(word.strip("[]"))
            out.append((line.split("#")[0].strip(), [a for a in argv if a]))
    return out


COMMANDS = commands(TRAINING_MD.read_text())


def test_training_md_has_its_commands():
    """The extraction finds the recipe, data, lm, eval and every drafter kind's command."""
    kinds = {argv[0] for _, argv in COMMANDS}
    assert {"recipe", "data", "tokenizer", "lm", "eval", "dflash", "eagle3", "domino"} <= kinds, kinds
    assert len(COMMANDS) >= 20, len(COMMANDS)


@pytest.mark.parametrize("written, argv", COMMANDS, ids=[f"{i}-{a[0]}" for i, (_, a) in enumerate(COMMANDS)])
def test_training_md_command_parses(written, argv, tmp_path: Path):
    argv = [PLACEHOLDER.sub(lambda m: str(tmp_path / m.group(0).lower()), a) for a in argv]
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            parser().parse_args(argv)
    except SystemExit:
        failed = (err.getvalue().strip().splitlines() or ["(no message)"])[-1]
    else:
        return
    pytest.fail(f"TRAINING.md command does not parse: {written}\n  {failed}", pytrace=False)
