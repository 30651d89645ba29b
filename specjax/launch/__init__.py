"""Run a command as N JAX processes on this machine, joined by `jax.distributed` (a multi-host run, locally).

    from specjax import launch
    status = launch.launch(["python", "-m", "specjax.train", "dflash", ...], processes=2, cpu_devices=1)

The command line is `python -m specjax.launch` or `specjax launch` (`specjax.cli.launch` parses it):

    python -m specjax.launch --processes 2 [--cpu-devices K] [--timeout S] [--port P] -- python -m specjax.train ...
    specjax launch --processes 2 -- python tests/multiprocess_worker.py train /tmp/out

`launch` starts N processes, each with SPECJAX_COORDINATOR=127.0.0.1:<port> (process 0's coordinator,
listening on loopback only; a free port unless one is given, which must be free: checked before any
process starts), SPECJAX_NUM_PROCESSES=N and SPECJAX_PROCESS_ID=i, so `specjax.distributed.init()`
joins them. A Python command (`python -m module ...`, `python script.py ...`, `python -c CODE ...`,
`specjax ...`) runs after `init()` in the child's interpreter (`python -m specjax.launch --run-joined
-- COMMAND`); any other command that names `python` (`python -u x.py`, `python3.12 ...`) runs with the
launcher's own interpreter (`sys.executable`: the one that has JAX and specjax), never the first `python`
on PATH; any other executable runs as it is, with the variables (it calls `init()` itself).
`cpu_devices=K` gives each process K CPU devices (JAX_PLATFORMS=cpu and XLA's
--xla_force_host_platform_device_count=K): N * K global devices.

Every line a process prints is forwarded to this process's stdout prefixed with "[rank i] ". The run
fails as a whole: when a process exits non-zero, the others are stopped (their whole process groups:
SIGTERM, then SIGKILL) and `launch` returns that code (1 for a signal), naming the rank on stderr; past
`timeout` seconds every process is stopped and it returns 124. Nothing outlives it.

On a cluster the launcher is not needed: the cluster starts one process per host with the same
command, and `specjax.distributed.init()` reads SLURM / TPU VM variables (docs/sharding.md).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from typing import IO, Sequence

from specjax import distributed

LOOPBACK = distributed.LOOPBACK
TIMED_OUT = 124  # the exit status past `timeout` (as coreutils' timeout)
_PYTHONS = re.compile(r"^python(\d+(\.\d+)?)?$")  # python, python3, python3.12 (a name, not a path)


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (bound and released: the coordinator binds it next)."""
    return distributed.free_port(LOOPBACK)


def check_port(port: int) -> None:
    """Raise ValueError naming `port` when it is not a TCP port number or is in use on 127.0.0.1 (the
    coordinator could not listen on it: JAX would fail later with a segfault, not a message)."""
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise ValueError(f"--port must be a TCP port in [1, 65535], got {port!r}")
    if distributed.port_in_use(LOOPBACK, port):
        raise ValueError(f"port {port} on {LOOPBACK} is in use; pass --port with a free port, or leave --port out "
                         f"(a free one is picked)")


def names_python(command: Sequence[str]) -> bool:
    """Whether the command's executable is a Python interpreter: `python`, `python3`, `python3.12` or this
    interpreter's own path."""
    return bool(command) and (bool(_PYTHONS.match(command[0])) or command[0] == sys.executable)


def python_target(command: Sequence[str]) -> tuple[str, str, list[str]] | None:
    """(kind, name, argv) of a Python command the launcher runs after `distributed.init()` in the child's
    own interpreter: ("module", mod, [mod, *args]) for `python -m mod args`, `-m mod args` and
    `specjax args`; ("path", script, [script, *args]) for `python script.py args`; ("code", CODE,
    ["-c", *args]) for `python -c CODE args`. None for any other command (interpreter options such as
    `python -u`, or another executable)."""
    cmd = list(command)
    if cmd and cmd[0] == "specjax":
        return "module", "specjax", ["specjax", *cmd[1:]]
    if names_python(cmd):
        cmd = cmd[1:]
    elif not cmd or cmd[0] != "-m":
        return None
    if len(cmd) >= 2 and cmd[0] == "-m":
        return "module", cmd[1], [cmd[1], *cmd[2:]]
    if len(cmd) >= 2 and cmd[0] == "-c":
        return "code", cmd[1], ["-c", *cmd[2:]]
    if cmd and cmd[0].endswith(".py"):
        return "path", cmd[0], cmd
    return None


def child_argv(command: Sequence[str]) -> list[str]:
    """What each process executes for `command`: a Python command (`python_target`) through
    `python -m specjax.launch --run-joined -- COMMAND` in this interpreter (it joins first); any other
    command naming `python` with this interpreter (`sys.executable`) in its place; anything else as it is."""
    if python_target(command) is not None:
        return [sys.executable, "-m", "specjax.launch", "--run-joined", "--", *command]
    if names_python(command):
        return [sys.executable, *command[1:]]
    return list(command)


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


def _say(message: str) -> None:
    print(f"specjax.launch: {message}", file=sys.stderr, flush=True)


def check(command: Sequence[str], processes: int, cpu_devices: int | None = None, timeout: float | None = None,
          port: int | None = None) -> None:
    """Raise ValueError naming the first bad argument of `launch` (nothing is started)."""
    if isinstance(processes, bool) or not isinstance(processes, int) or processes < 1:
        raise ValueError(f"--processes must be an integer >= 1, got {processes!r}")
    if cpu_devices is not None and (isinstance(cpu_devices, bool) or not isinstance(cpu_devices, int)
                                    or cpu_devices < 1):
        raise ValueError(f"--cpu-devices must be an integer >= 1, got {cpu_devices!r}")
    if timeout is not None and not timeout > 0:
        raise ValueError(f"--timeout must be a number of seconds > 0, got {timeout!r}")
    if not command:
        raise ValueError("no command: put it after --, e.g. python -m specjax.launch --processes 2 -- "
                         "python -m specjax.train dflash ...")
    if port is not None:
        check_port(port)


def launch(command: Sequence[str], processes: int, *, cpu_devices: int | None = None, timeout: float | None = None,
           port: int | None = None) -> int:
    """Run `command` as `processes` joined processes (module docstring); returns the exit status (0: every
    process succeeded; a failed process's status; 124 past `timeout`). Raises ValueError (`check`) before
    anything starts: a bad count, no command, a `port` in use."""
    check(command, processes, cpu_devices, timeout, port)
    port = free_port() if port is None else port
    argv = child_argv(command)
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
                return TIMED_OUT
            time.sleep(0.05)
    finally:
        _stop(procs)  # also on KeyboardInterrupt / SIGTERM of the launcher: no orphans
        for t in threads:
            t.join(timeout=2)


__all__ = ["LOOPBACK", "TIMED_OUT", "check", "check_port", "child_argv", "child_env", "free_port", "launch",
           "names_python", "python_target"]
