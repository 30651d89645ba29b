"""The jupytext notebooks in notebooks/ run headless and their paired .ipynb stay in sync.

A notebook is a `notebooks/<name>.py` file in jupytext `py:percent` format whose header
declares `formats: ipynb,py:percent`, paired with `notebooks/<name>.ipynb` (see
notebooks/README.md). Helper `.py` files without a jupytext header are ignored, and an
empty notebooks/ directory collects no tests at all.

- `test_notebook_pairing_in_sync` (fast): the `.ipynb` exists and its code cells equal the `.py`'s.
- `test_runner_writes_executed_copies_to_out_and_leaves_the_notebook_alone` (a few seconds: one kernel on a
  one-cell notebook): the script's default mode writes to `--out` only.
- `test_notebook_executes` (slow): every cell runs in a fresh kernel of *this* interpreter
  (sys.executable, whatever `python3` kernelspecs are installed elsewhere), cwd notebooks/,
  with SPECJAX_PROFILE=ci (SPECJAX_NOTEBOOK_PROFILE=<profile> picks another, e.g. cpu-smollm2),
  MPLBACKEND=Agg and SPECJAX_NOTEBOOK_OUT=<tmp_path>. A failing cell is reported with its
  source, its line in the `.py` and the traceback. Every notebook defines the `ci` profile:
  the smallest run that still executes every cell, method, table, figure and losslessness
  check (one counted prompt, one dataset, short generations, two-point sweeps, shapes shared
  between cells so that few programs compile); it is a smoke test, its numbers are not results.

Run as a script, this module executes every notebook (or those named) with profile `cpu-smollm2`
(SmolLM2-135M-Instruct and its zoo drafters; the DynaTree notebook, which has no SmolLM2 draft LM,
says so and runs `cpu-tiny`) unless --profile says otherwise. By default nothing committed is
touched: each executed copy goes to `--out DIR/<name>.executed.ipynb` with the notebook's outputs
(figures, JSON) in DIR (default notebooks/results/, gitignored). `--in-place` (`make notebooks`,
the committed outputs) instead runs `jupytext --sync` and writes each `notebooks/<name>.ipynb`
back with its outputs.
    python tests/test_notebooks.py [--profile cpu-tiny] [--out DIR | --in-place] [notebooks/<name>.py ...]
"""

from __future__ import annotations

import difflib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK_DIR = ROOT / "notebooks"
DEFAULT_PROFILE = "cpu-smollm2"  # `make notebooks`: the committed outputs (dynatree: its SmolLM2 draft LM, smollm2-135m-draft)
# What `test_notebook_executes` runs: the notebooks' smoke-test profile.
TEST_PROFILE = os.environ.get("SPECJAX_NOTEBOOK_PROFILE", "ci")
# Per-cell limit in seconds (nbclient's `timeout`); a whole notebook may take longer. `make notebooks`
# (`main`) allows MAKE_CELL_TIMEOUT: cpu-smollm2's Table 1 cells run ~10 minutes on 2 cores.
CELL_TIMEOUT = int(os.environ.get("SPECJAX_NOTEBOOK_TIMEOUT", "900"))
MAKE_CELL_TIMEOUT = int(os.environ.get("SPECJAX_NOTEBOOK_TIMEOUT", "3600"))

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def has_jupytext_header(path: Path) -> bool:
    """True if `path` opens with a `# ---` ... `# ---` YAML header that has a `jupytext:` key."""
    lines = path.read_text(encoding="utf-8").splitlines()
    while lines and (not lines[0].strip() or lines[0].startswith("#!") or re.match(r"^#.*coding[:=]", lines[0])):
        lines.pop(0)
    if not lines or lines[0].rstrip() != "# ---":
        return False
    for line in lines[1:]:
        if line.rstrip() == "# ---":
            return False
        if re.match(r"^#\s+jupytext:\s*$", line):
            return True
    return False


def discover_notebooks(directory: Path = NOTEBOOK_DIR) -> list[Path]:
    return sorted(p for p in directory.glob("*.py") if has_jupytext_header(p))


def _rel(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def _kernel_manager_class():
    """An AsyncKernelManager whose `python3` kernel is `sys.executable -m ipykernel_launcher`.

    The default lookup takes the first `python3` kernelspec on the Jupyter path
    (JUPYTER_PATH, ~/.local/share/jupyter, then sys.prefix), which may belong to another
    interpreter; the notebooks must run against the specjax installed here.
    """
    from jupyter_client import AsyncKernelManager
    from jupyter_client.kernelspec import KernelSpec, KernelSpecManager
    from traitlets import default

    class ThisInterpreterKernelSpecManager(KernelSpecManager):
        def get_kernel_spec(self, kernel_name):
            return KernelSpec(
                argv=[sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                display_name=f"Python 3 ({sys.prefix})",
                language="python",
                resource_dir=str(NOTEBOOK_DIR),
                metadata={"debugger": True},
            )

    class ThisInterpreterKernelManager(AsyncKernelManager):
        @default("kernel_spec_manager")
        def _kernel_spec_manager_default(self):
            return ThisInterpreterKernelSpecManager(data_dir=self.data_dir)

    return ThisInterpreterKernelManager


class NotebookCellError(Exception):
    """A cell raised; str() has the notebook, the cell's source and line, and the traceback."""


def _describe_failure(nb, notebook_py: Path | None, name: str) -> str:
    text = notebook_py.read_text(encoding="utf-8") if notebook_py is not None else ""
    for index, cell in enumerate(nb.cells):
        errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        if not errors:
            continue
        err = errors[0]
        where = f"{name} cell {index}"
        offset = text.find(cell.source) if cell.source else -1
        if offset >= 0:
            where = f"{_rel(notebook_py)} line {text.count(chr(10), 0, offset) + 1} (cell {index})"
        streams = "".join(o.get("text", "") for o in cell.outputs if o.get("output_type") == "stream")
        parts = [
            f"{where} raised {err.get('ename')}: {err.get('evalue')}",
            "----- cell source -----",
            cell.source,
        ]
        if streams.strip():
            parts += ["----- cell output (last 2000 chars) -----", streams[-2000:].rstrip()]
        parts += ["----- traceback -----", _ANSI.sub("", "\n".join(err.get("traceback", [])))]
        return "\n".join(parts)
    return f"{name}: a cell failed but no error output was recorded"


def execute_notebook(nb, *, env: dict[str, str], name: str, notebook_py: Path | None = None, timeout: int = CELL_TIMEOUT):
    """Execute `nb` (nbformat v4, modified in place) in a fresh kernel of this interpreter.

    The kernel runs in notebooks/ with os.environ updated by `env`. A cell error raises
    NotebookCellError; timeouts and dead kernels propagate as nbclient raises them.
    """
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name="python3",
        kernel_manager_class=_kernel_manager_class(),
        resources={"metadata": {"path": str(NOTEBOOK_DIR)}},
    )
    try:
        client.execute(env={**os.environ, **env})
    except CellExecutionError:
        raise NotebookCellError(_describe_failure(nb, notebook_py, name)) from None
    return nb


# Figures: Agg under pytest (nothing to look at, no PNGs in the outputs); under `make notebooks`
# ipykernel's inline backend, which is headless too and embeds the figures in the .ipynb.
INLINE_BACKEND = "module://matplotlib_inline.backend_inline"


def notebook_env(profile: str = DEFAULT_PROFILE, out_dir: Path | None = None, mpl_backend: str = "Agg") -> dict[str, str]:
    env = {"SPECJAX_PROFILE": profile, "MPLBACKEND": mpl_backend}
    if out_dir is not None:
        env["SPECJAX_NOTEBOOK_OUT"] = str(out_dir)
    return env


def _code_cells(nb) -> list[str]:
    return [cell.source.rstrip() for cell in nb.cells if cell.cell_type == "code"]


# ------------------------------------------------------------------------------- tests

NOTEBOOKS = discover_notebooks()


def _only_with_notebooks(test):
    # An empty parameter set would still collect one skipped test; `__test__ = False`
    # makes pytest collect nothing when notebooks/ has no jupytext notebook.
    test.__test__ = bool(NOTEBOOKS)
    return test


@_only_with_notebooks
@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_pairing_in_sync(notebook: Path):
    import jupytext
    import nbformat

    rel = _rel(notebook)
    text_nb = jupytext.read(notebook)
    formats = str(text_nb.metadata.get("jupytext", {}).get("formats", ""))
    if not {"ipynb", "py:percent"} <= set(formats.split(",")):
        pytest.fail(
            f"{rel}: the jupytext header must pair the notebook (`formats: ipynb,py:percent`, found {formats!r});"
            f" run `jupytext --set-formats ipynb,py:percent {rel}`",
            pytrace=False,
        )
    ipynb = notebook.with_suffix(".ipynb")
    fix = f"run `jupytext --sync {rel}` and commit {_rel(ipynb)}"
    if not ipynb.is_file():
        pytest.fail(f"{_rel(ipynb)} (paired with {rel}) is missing; {fix}", pytrace=False)
    py_cells, ipynb_cells = _code_cells(text_nb), _code_cells(nbformat.read(ipynb, as_version=4))
    if py_cells != ipynb_cells:
        diff = "\n".join(
            difflib.unified_diff(
                "\n\n# %%\n".join(ipynb_cells).splitlines(),
                "\n\n# %%\n".join(py_cells).splitlines(),
                fromfile=f"{_rel(ipynb)} (code cells)",
                tofile=f"{rel} (code cells)",
                lineterm="",
            )
        )
        pytest.fail(f"{_rel(ipynb)} is out of sync with {rel}; {fix}\n{diff}", pytrace=False)


@_only_with_notebooks
@pytest.mark.slow
@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_executes(notebook: Path, tmp_path: Path):
    """Executes the notebook (profile TEST_PROFILE, `ci` unless SPECJAX_NOTEBOOK_PROFILE says
    otherwise) in a child process (`--check`): the kernel client's zmq and tornado threads
    never enter the test process, which goes on compiling XLA programs."""
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--profile", TEST_PROFILE,
                           "--out", str(tmp_path), "--timeout", str(CELL_TIMEOUT), str(notebook)],
                          capture_output=True, text=True, timeout=CELL_TIMEOUT * 4)
    if proc.returncode != 0:
        pytest.fail(f"{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}\n(profile {TEST_PROFILE}; executed copy: "
                    f"{tmp_path / (notebook.stem + '.executed.ipynb')})", pytrace=False)


_TINY_NOTEBOOK = """# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %%
import os
from pathlib import Path

Path(os.environ["SPECJAX_NOTEBOOK_OUT"], "ran.txt").write_text(os.environ["SPECJAX_PROFILE"])
print("profile", os.environ["SPECJAX_PROFILE"])
"""


def test_runner_writes_executed_copies_to_out_and_leaves_the_notebook_alone(tmp_path: Path):
    """`python tests/test_notebooks.py` without --in-place: the executed copy and the outputs go to --out; no
    .ipynb appears beside the .py (--in-place's jupytext --sync would write one)."""
    import nbformat

    notebook = tmp_path / "tiny.py"
    notebook.write_text(_TINY_NOTEBOOK)
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--profile", "ci", "--out", str(out),
                           "--timeout", "120", str(notebook)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (out / "ran.txt").read_text() == "ci"
    executed = nbformat.read(out / "tiny.executed.ipynb", as_version=4)
    assert "profile ci" in executed.cells[0].outputs[0]["text"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "tiny.py"]


def check_notebook(notebook: Path, out_dir: Path, profile: str = TEST_PROFILE, timeout: int = CELL_TIMEOUT) -> int:
    """Execute `notebook` (SPECJAX_PROFILE=`profile`, outputs under `out_dir`) without touching
    its files; the executed copy goes to `out_dir`. Returns 1 with the failing cell on stderr."""
    import jupytext
    import nbformat

    nb = jupytext.read(notebook)
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        execute_notebook(nb, env=notebook_env(profile, out_dir), name=_rel(notebook), notebook_py=notebook,
                         timeout=timeout)
    except NotebookCellError as e:
        print(e, file=sys.stderr)
        return 1
    finally:
        nbformat.write(nb, out_dir / f"{notebook.stem}.executed.ipynb")
    return 0


# ------------------------------------------------------------------------------- make notebooks


def main(argv: list[str] | None = None) -> int:
    import argparse

    import nbformat
    from jupytext.cli import jupytext as jupytext_cli

    parser = argparse.ArgumentParser(description="Execute the jupytext notebooks: executed copies to --out DIR, "
                                                 "or (--in-place) back into the committed notebooks/<name>.ipynb.")
    parser.add_argument("--profile", default=None,
                        help=f"SPECJAX_PROFILE for the notebooks (default: $SPECJAX_PROFILE, else {DEFAULT_PROFILE})")
    parser.add_argument("notebooks", nargs="*", type=Path, help="notebooks/<name>.py (default: all)")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--out", type=Path, metavar="DIR", default=NOTEBOOK_DIR / "results",
                       help="write each executed copy as DIR/<name>.executed.ipynb and the notebook's outputs "
                            "(SPECJAX_NOTEBOOK_OUT) to DIR; nothing in notebooks/ is touched (default: "
                            "notebooks/results/, gitignored)")
    where.add_argument("--in-place", action="store_true",
                       help="`jupytext --sync`, then write each executed notebook back to notebooks/<name>.ipynb "
                            "with its outputs (`make notebooks`: the committed outputs)")
    parser.add_argument("--timeout", type=int, default=MAKE_CELL_TIMEOUT,
                        help="per-cell limit in seconds (default: $SPECJAX_NOTEBOOK_TIMEOUT, else 3600)")
    args = parser.parse_args(argv)
    args.profile = args.profile or os.environ.get("SPECJAX_PROFILE", DEFAULT_PROFILE)
    notebooks = [p.resolve() for p in args.notebooks] or discover_notebooks()
    if not notebooks:
        print(f"no jupytext notebooks in {_rel(NOTEBOOK_DIR)}/")
        return 0
    if not args.in_place:
        status = 0
        for notebook in notebooks:
            print(f"executing {_rel(notebook)} (SPECJAX_PROFILE={args.profile}) into {_rel(args.out)}/", flush=True)
            status = max(status, check_notebook(notebook, args.out.resolve(), args.profile, args.timeout))
        return status
    failed = []
    for notebook in notebooks:
        rel, ipynb = _rel(notebook), notebook.with_suffix(".ipynb")
        jupytext_cli(["--sync", str(notebook)])
        if not ipynb.is_file():
            print(f"{rel} is not paired: run `jupytext --set-formats ipynb,py:percent {rel}`", file=sys.stderr)
            failed.append(rel)
            continue
        nb = nbformat.read(ipynb, as_version=4)
        print(f"executing {_rel(ipynb)} (SPECJAX_PROFILE={args.profile})", flush=True)
        try:
            execute_notebook(nb, env=notebook_env(args.profile, mpl_backend=INLINE_BACKEND), name=rel,
                             notebook_py=notebook, timeout=args.timeout)
        except NotebookCellError as e:
            print(e, file=sys.stderr)
            failed.append(rel)
            continue
        nbformat.write(nb, ipynb)
        os.utime(notebook)  # keep the text file the newer of the pair, as jupytext expects
        print(f"wrote {_rel(ipynb)}", flush=True)
    if failed:
        print(f"FAILED: {' '.join(failed)} (outputs not written to their .ipynb)", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
