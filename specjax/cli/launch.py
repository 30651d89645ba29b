"""Run any specjax command as N joined JAX processes on this machine (a multi-host run, locally).

    python -m specjax.launch --processes 2 [--cpu-devices K] [--timeout S] -- python -m specjax.train dflash ...
    python -m specjax.launch --processes 2 -- python tests/multiprocess_worker.py train /tmp/out

Starts N processes, each with SPECJAX_COORDINATOR=127.0.0.1:<a free port> (process 0's
coordinator, listening on loopback only), SPECJAX_NUM_PROCESSES=N and SPECJAX_PROCESS_ID=i, so
`specjax.distributed.init()` joins them; a Python command (`python -m module ...`,
`python script.py ...`, `specjax ...`) is run after `init()` in the child's interpreter
(`run_joined`); any other executable runs as it is, with the variables (it calls `init()` itself).
`--cpu-devices K` gives each process K CPU devices (JAX_PLATFORMS=cpu and XLA's
--xla_force_host_platform_device_count=K): N * K global devices.

Every line a process prints is forwarded prefixed with "[rank i] ". The run fails as a whole:
when a process exits non-zero, the others are stopped (their whole process groups: SIGTERM,
then SIGKILL) and the launcher exits with that code (1 for a signal), naming the rank on
stderr; past --timeout seconds every process is stopped and it exits 124. Nothing outlives it.

On a cluster the launcher is not needed: the cluster starts one process per host with the same
command, and `specjax.distributed.init()` reads SLURM / TPU VM variables (docs/sharding.md).
"""

from __future__ import annotations

import argparse
import os
import re
import runpy
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import IO, Sequence

from specjax import distributed

LOOPBACK = "127.0.0.1"
_PYTHONS = re.compile(r"^(python(\d(\.\d+)?)?)$")


def parser() -> argparse.ArgumentParser:
    """The launcher's command line (`main`)."""
    ap = argparse.ArgumentParser(prog="python -m specjax.launch",
                                 description="Run a command as N local JAX processes joined by jax.distributed "
                                             "(coordinator on 127.0.0.1); fails as a whole if one process fails.")
    ap.add_argument("--processes", type=int, required=True, help="N, processes to start (>= 1)")
    ap.add_argument("--cpu-devices", type=int, default=None,
                    help="K CPU devices per process (JAX_PLATFORMS=cpu, emulated devices); default: JAX's own")
    ap.add_argument("--timeout", type=float, default=None, help="seconds before every process is stopped (exit 124)")
    ap.add_argument("--port", type=int, default=None, help="the coordinator's loopback port (default: a free one)")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command every process runs")
    return ap


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (bound and released: the coordinator binds it next)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def child_env(base: dict[str, str], rank: int, processes: int, port: int, cpu_devices: int | None) -> dict[str, str]:
    """The environment of process `rank`: `base` plus the SPECJAX_* variables `distributed.init` reads."""
    env = {**base, distributed.ENV_COORDINATOR: f"{LOOPBACK}:{port}", distributed.ENV_NUM_PROCESSES: str(processes),
           distributed.ENV_PROCESS_ID: str(rank), "PYTHONUNBUFFERED": "1"}
    env.pop(distributed.ENV_MODE, None)
    if cpu_devices is not None:
        flags = re.sub(r"--xla_force_host_platform_device_count=\S+", "", env.get("XLA_FLAGS", "")).split()
        env["XLA_FLAGS"] = " ".join(flags + [f"--xla_force_host_platform_device_count={cpu_devices}"])
        env["JAX_PLATFORMS"] = "cpu"
    return env


def python_target(command: Sequence[str]) -> tuple[str, str, list[str]] | None:
    """("module" | "path", name, argv) of a Python command (`python -m mod args`, `python x.py args`,
    `-m mod args`, `specjax args`), or None for any other executable."""
    cmd = list(command)
    if cmd and (_PYTHONS.match(os.path.basename(cmd[0])) or cmd[0] == sys.executable):
        cmd = cmd[1:]
    elif cmd and cmd[0] == "specjax":
        return "module", "specjax", ["specjax", *cmd[1:]]
    elif not cmd or cmd[0] != "-m":
        return None
    if len(cmd) >= 2 and cmd[0] == "-m":
        return "module", cmd[1], [cmd[1], *cmd[2:]]
    if cmd and cmd[0].endswith(".py"):
        return "path", cmd[0], cmd
    return None


def run_joined(command: Sequence[str]) -> None:
    """In a launched process: `distributed.init()`, then the Python command in this interpreter (as
    `python -m` / `python script.py` would run it; its exit status is this process's)."""
    target = python_target(command)
    if target is None:
        raise ValueError(f"not a Python command: {list(command)[:3]} (expected python -m module ..., "
                         f"python script.py ..., or specjax ...)")
    distributed.init()
    kind, name, argv = target
    sys.argv = argv
    if kind == "module":
        sys.path.insert(0, os.getcwd())
        runpy.run_module(name, run_name="__main__", alter_sys=True)
    else:
        sys.path.insert(0, os.path.dirname(os.path.abspath(name)))
        runpy.run_path(name, run_name="__main__")


def _forward(stream: IO[str], rank: int, lock: threading.Lock) -> None:
    for line in iter(stream.readline, ""):
        with lock:
            sys.stdout.write(f"[rank {rank}] {line}" if line.endswith("\n") else f"[rank {rank}] {line}\n")
            sys.stdout.flush()
    stream.close()


def _stop(procs: list[subprocess.Popen], grace: float = 3.0) -> None:
    """SIGTERM every still-running process's group, SIGKILL what remains after `grace` seconds."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        alive = [p for p in procs if p.poll() is None]
        for p in alive:
            try:
                os.killpg(p.pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace
        while any(p.poll() is None for p in alive) and time.monotonic() < deadline:
            time.sleep(0.05)
    for p in procs:  # reap
        if p.poll() is None:
            p.wait()


def launch(command: Sequence[str], processes: int, *, cpu_devices: int | None = None, timeout: float | None = None,
           port: int | None = None) -> int:
    """Run `command` as `processes` joined processes (module docstring); returns the exit status."""
    if processes < 1:
        raise ValueError(f"--processes must be >= 1, got {processes}")
    if cpu_devices is not None and cpu_devices < 1:
        raise ValueError(f"--cpu-devices must be >= 1, got {cpu_devices}")
    if not command:
        raise ValueError("no command: put it after --, e.g. python -m specjax.launch --processes 2 -- "
                         "python -m specjax.train dflash ...")
    port = free_port() if port is None else port
    # A Python command joins through `run_joined` in its own interpreter; any other runs as it is.
    argv = ([sys.executable, "-m", "specjax.launch", "--run-joined", "--", *command]
            if python_target(command) is not None else list(command))
    procs: list[subprocess.Popen] = []
    lock = threading.Lock()
    threads = []
    start = time.monotonic()
    try:
        for rank in range(processes):
            p = subprocess.Popen(argv, env=child_env(dict(os.environ), rank, processes, port, cpu_devices),
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 text=True, errors="replace",
                                 start_new_session=True)  # its own group: killpg stops its children too
            procs.append(p)
            threads.append(threading.Thread(target=_forward, args=(p.stdout, rank, lock), daemon=True))
            threads[-1].start()
        while True:
            codes = [p.poll() for p in procs]
            failed = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
            if failed:
                rank, code = failed[0]
                others = [r for r, c in enumerate(codes) if c is None]
                _stop(procs)
                _say(f"rank {rank} exited with code {code}"
                     f"{f'; stopped rank(s) {others}' if others else ''}")
                return code if code > 0 else 1
            if all(c == 0 for c in codes):
                return 0
            if timeout is not None and time.monotonic() - start > timeout:
                running = [r for r, c in enumerate(codes) if c is None]
                _stop(procs)
                _say(f"timed out after {timeout:g} s; stopped rank(s) {running}")
                return 124
            time.sleep(0.05)
    finally:
        _stop(procs)  # also on KeyboardInterrupt / SIGTERM of the launcher: no orphans
        for t in threads:
            t.join(timeout=2)


def _say(message: str) -> None:
    print(f"specjax.launch: {message}", file=sys.stderr, flush=True)


def _terminate(signum, frame):
    raise SystemExit(128 + signum)


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m specjax.launch ...` (`parser`); returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:2] == ["--run-joined", "--"]:  # inside a launched process
        run_joined(argv[2:])
        return 0
    args = parser().parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    signal.signal(signal.SIGTERM, _terminate)  # stopping the launcher stops its processes (finally: _stop)
    try:
        return launch(command, args.processes, cpu_devices=args.cpu_devices, timeout=args.timeout, port=args.port)
    except ValueError as e:
        parser().error(str(e))
        return 2


__all__ = ["parser", "main", "launch", "run_joined", "python_target", "child_env", "free_port", "LOOPBACK"]
