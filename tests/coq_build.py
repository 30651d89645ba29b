"""Compiled Coq modules for the tests that evaluate the proofs' programs (`Eval vm_compute`): the repository's own
`make proofs` output where it is current, else a private copy compiled under a temporary directory."""

from __future__ import annotations

import pathlib
import shutil
import subprocess

COQ = pathlib.Path(__file__).resolve().parents[1] / "proofs" / "coq"


def compiled_in_repo(modules: list[str]) -> bool:
    """`make proofs` has compiled every one of `modules` (file names, in dependency order) since its source last
    changed."""
    for f in modules:
        src, vo = COQ / f, COQ / (f[:-2] + ".vo")
        if not vo.is_file() or vo.stat().st_mtime < src.stat().st_mtime:
            return False
    return True


def compile_copy(workdir: pathlib.Path, modules: list[str]) -> pathlib.Path:
    """Compile `modules` (dependency order) in a copy under workdir (the tree's proofs/coq is not touched)."""
    lib = workdir / "coq"
    lib.mkdir()
    for f in modules:
        shutil.copy(COQ / f, lib / f)
        res = subprocess.run(["coqc", "-Q", ".", "Specjax", f], cwd=lib, capture_output=True, text=True)
        assert res.returncode == 0, f"coqc {f} failed:\n{res.stdout}\n{res.stderr}"
    return lib
