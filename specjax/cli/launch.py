"""The launcher's command line: `python -m specjax.launch` and `specjax launch` (the launcher itself is
`specjax.launch`: what it starts, how it fails, docs/sharding.md).

    python -m specjax.launch --processes 2 [--cpu-devices K] [--timeout S] [--port P] -- python -m specjax.train ...
    specjax launch --processes 2 -- python tests/multiprocess_worker.py train /tmp/out

Inside a launched process, `python -m specjax.launch --run-joined -- COMMAND` (what `specjax.launch`
starts for a Python command) joins the run (`specjax.distributed.init`) and then runs COMMAND in this
interpreter, as `python -m` / `python script.py` / `python -c` would (its exit status is the process's).
"""

from __future__ import annotations

import argparse
import os
import runpy
import signal
import sys
from typing import Sequence

from specjax import distributed
from specjax import launch as launcher
from specjax.cli.common import UsageError

__all__ = ["add_parser", "main", "parser", "run", "run_joined"]

DESCRIPTION = ("Run a command as N local JAX processes joined by jax.distributed (coordinator on 127.0.0.1); "
               "fails as a whole if one process fails.")


def _add_flags(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--processes", type=int, required=True, help="N, processes to start (>= 1)")
    ap.add_argument("--cpu-devices", type=int, default=None,
                    help="K CPU devices per process (JAX_PLATFORMS=cpu, emulated devices); default: JAX's own")
    ap.add_argument("--timeout", type=float, default=None, help="seconds before every process is stopped (exit 124)")
    ap.add_argument("--port", type=int, default=None,
                    help="the coordinator's port on 127.0.0.1 (default: a free one); one in use is refused")
    ap.add_argument("child_command", nargs=argparse.REMAINDER, metavar="-- COMMAND",
                    help="-- then the command every process runs (`python` in it is this interpreter)")


def parser() -> argparse.ArgumentParser:
    """`python -m specjax.launch`'s command line (`main`)."""
    ap = argparse.ArgumentParser(prog="python -m specjax.launch", description=DESCRIPTION)
    _add_flags(ap)
    return ap


def add_parser(sub) -> None:
    """`specjax launch`: the same flags as `python -m specjax.launch`."""
    ap = sub.add_parser("launch", help="run a command as N local JAX processes joined by jax.distributed",
                        description=DESCRIPTION)
    _add_flags(ap)
    ap.set_defaults(run=run)


def run(args) -> int:
    """Launch what `args` says; a bad argument raises the CLI's one-line usage error (nothing started)."""
    try:
        return _launch(args)
    except ValueError as e:
        raise UsageError(str(e)) from None


def _launch(args) -> int:
    command = args.child_command[1:] if args.child_command[:1] == ["--"] else args.child_command
    previous = signal.signal(signal.SIGTERM, _terminate)  # stopping the launcher stops its processes (launch's finally)
    try:
        return launcher.launch(command, args.processes, cpu_devices=args.cpu_devices, timeout=args.timeout,
                               port=args.port)
    finally:
        signal.signal(signal.SIGTERM, previous)  # as it was (`specjax launch` may run inside another program)


def run_joined(command: Sequence[str]) -> None:
    """In a launched process: `distributed.init()`, then the Python command in this interpreter (as
    `python -m` / `python script.py` / `python -c` would run it; its exit status is this process's)."""
    target = launcher.python_target(command)
    if target is None:
        raise ValueError(f"not a Python command: {list(command)[:3]} (expected python -m module ..., "
                         f"python script.py ..., python -c CODE ..., or specjax ...)")
    distributed.init()
    kind, name, argv = target
    sys.argv = argv
    if kind == "module":
        sys.path.insert(0, os.getcwd())
        runpy.run_module(name, run_name="__main__", alter_sys=True)
    elif kind == "code":
        sys.path.insert(0, "")
        exec(compile(name, "<string>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
    else:
        sys.path.insert(0, os.path.dirname(os.path.abspath(name)))
        runpy.run_path(name, run_name="__main__")


def _terminate(signum, frame):
    raise SystemExit(128 + signum)


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m specjax.launch ...` (`parser`); returns the exit status (2 for a bad argument)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:2] == ["--run-joined", "--"]:  # inside a launched process
        run_joined(argv[2:])
        return 0
    args = parser().parse_args(argv)
    try:
        return _launch(args)
    except ValueError as e:
        parser().error(str(e))
        return 2
