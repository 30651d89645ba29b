"""Checks that must run in a fresh interpreter (other XLA flags, another device count), grouped
so that one child process runs every group the selected tests need.

A child script defines GROUPS = {name: callable} and ends with `run_groups_main(GROUPS)`: it
runs the groups named on its command line (all when none), printing "=== <name>" before each
and "OK <name> (<s> s)" after it, or the traceback of its failure, and exits non-zero if any
group failed. The parent test module uses `child_group_fixture`: on first use it starts one
child for the groups of this run's selected tests of the module (one JAX start-up, and the
groups share compiled programs), then hands each test its group's section of the output.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
import traceback
from typing import Callable

import pytest


def run_groups_main(groups: dict[str, Callable[[], object]], argv: list[str] | None = None) -> None:
    """The child's entry point: run the named groups (argv, default sys.argv[1:]; none = all) in order."""
    names = (sys.argv[1:] if argv is None else argv) or list(groups)
    unknown = [g for g in names if g not in groups]
    if unknown:
        sys.exit(f"unknown group(s) {unknown}; groups: {list(groups)}")
    failed = []
    for name in names:
        print(f"=== {name}", flush=True)
        start = time.perf_counter()
        try:
            groups[name]()
        except Exception:  # report it under its group, run the others
            traceback.print_exc(file=sys.stdout)
            failed.append(name)
            continue
        print(f"OK {name} ({time.perf_counter() - start:.1f} s)", flush=True)
    sys.exit(f"failed: {failed}" if failed else 0)


def run_child_groups(command: list[str], groups: list[str], *, env: dict[str, str], cwd, timeout: int = 900
                     ) -> dict[str, str]:
    """`command + groups` in a subprocess; {group: its section of stdout} (the child's stderr tail for a group
    that printed nothing, e.g. when the child died before reaching it)."""
    proc = subprocess.run([*command, *groups], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    sections = dict(re.findall(r"^=== (\w+)\n(.*?)(?=^=== |\Z)", proc.stdout, re.M | re.S))
    return {g: sections.get(g, f"(no output; exit {proc.returncode})\n{proc.stderr[-6000:]}") for g in groups}


def child_group_fixture(group_of: Callable[[pytest.Item], str], run: Callable[[list[str]], dict[str, str]]):
    """A module-scoped fixture: `fixture(group) -> that group's output`, asserting the group passed.
    `group_of(item)` names the group a test of the module needs; `run(groups)` runs them in one child."""

    @pytest.fixture(scope="module")
    def fixture(request):
        groups = list(dict.fromkeys(group_of(i) for i in request.session.items if i.module is request.module))
        outputs = run(groups)

        def output_of(group: str) -> str:
            out = outputs[group]
            print(out)
            assert f"OK {group}" in out, f"child group {group!r} failed:\n{out}"
            return out

        return output_of

    return fixture
