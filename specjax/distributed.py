"""Several processes, one program: `jax.distributed` for drafter training and sharded decoding.

JAX scales past one machine with one process per host (a GPU node, a TPU VM), all joined by
`jax.distributed.initialize`: afterwards `jax.devices()` lists the devices of *every* process
(global devices), `jax.local_devices()` this process's, and a `Mesh` over the global devices
spans the processes. Every process runs the same program; a jitted function over arrays placed
on such a mesh runs as one SPMD program across them (XLA inserts the collectives: NCCL on GPUs,
ICI / DCN on TPUs, gloo over TCP on CPUs).

    from specjax import distributed, sharding
    distributed.init()                                  # before any other JAX call
    mesh = sharding.make_mesh(data=2, model=1)          # over all processes' devices
    rows = distributed.local_rows(batch_sharding(mesh), n)   # this process's rows of a global [n, ...] batch
    batch = distributed.global_batch(read_rows(rows), batch_sharding(mesh), n)

What each process contributes:
  * host values that are the same on every process (params read from one checkpoint, a prompt
    batch) are placed with the ordinary `jax.device_put` / `specjax.sharding.shard_params` /
    `replicate` / `shard_batch`: each process transfers the shards its own devices hold;
  * values that differ per process (each process's slice of the training data) are assembled
    with `global_batch` (`jax.make_array_from_process_local_data`): no process ever holds the
    global batch;
  * results: a replicated array (a loss, params) reads on every process like a local one;
    `gather` returns a row-sharded one (generated tokens on a "data" axis across processes)
    whole on every process.

`init` reads, in this order: arguments; SPECJAX_COORDINATOR (host:port) / SPECJAX_NUM_PROCESSES /
SPECJAX_PROCESS_ID (set by `python -m specjax.launch`, or by hand on each host); else, under
a cluster JAX detects (SLURM with more than one task, Open MPI, Cloud TPU VMs; or
SPECJAX_DISTRIBUTED=auto), `jax.distributed.initialize()` with its auto-detection; else it
does nothing (one process). On CPU it selects the gloo collectives (cross-process
all-reduces over TCP). A coordinator on a loopback address listens on loopback only.

Joining on one machine fails politely (`JoinError`, within `join_timeout` seconds, 25 by default)
instead of JAX's 120 s wait that ends in a C++ abort: with a loopback coordinator the processes
first meet at the coordinator's port (`rendezvous`; process 0 listens, the others say who they are),
so a port already in use, processes started with different SPECJAX_NUM_PROCESSES, two processes with
one id, or fewer processes than SPECJAX_NUM_PROCESSES (naming both counts) are named on every process
before `jax.distributed.initialize` runs.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import socket
import time
from typing import Any, Mapping, Sequence

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding

ENV_COORDINATOR = "SPECJAX_COORDINATOR"  # host:port of process 0's coordinator service
ENV_NUM_PROCESSES = "SPECJAX_NUM_PROCESSES"
ENV_PROCESS_ID = "SPECJAX_PROCESS_ID"
ENV_MODE = "SPECJAX_DISTRIBUTED"  # "auto": jax.distributed.initialize()'s cluster detection; "off": never join
# A cluster whose launcher sets these runs one task per process; JAX's auto-detection reads them.
_CLUSTER_SIZE_VARS = ("SLURM_NTASKS", "SLURM_STEP_NUM_TASKS", "OMPI_COMM_WORLD_SIZE")
_TPU_VARS = ("TPU_WORKER_HOSTNAMES", "CLOUD_TPU_TASK_ID", "MEGASCALE_COORDINATOR_ADDRESS")
LOOPBACK = "127.0.0.1"  # the address processes of one machine join over
JOIN_TIMEOUT_S = 25.0  # `rendezvous`: how long process 0 waits for the others (a wrong count fails within it)


class JoinError(RuntimeError):
    """The processes could not join: the coordinator's port is in use, they disagree on the process count,
    two share an id, or not all of them arrived in time (the message names which, with both counts)."""


@dataclasses.dataclass(frozen=True)
class Topology:
    """Where this process stands after `init`.

    Fields:
      process_index: this process's id, 0 .. process_count - 1 (process 0 writes checkpoints, logs).
      process_count: processes in the run (1 without `jax.distributed`).
      local_devices: devices this process drives (`jax.local_device_count()`).
      devices: devices of all processes (`jax.device_count()`): a global mesh has this many.
      coordinator: the coordinator's host:port, or None (auto-detected, or one process).
    """

    process_index: int
    process_count: int
    local_devices: int
    devices: int
    coordinator: str | None = None

    @property
    def is_main(self) -> bool:
        return self.process_index == 0


_COORDINATOR: list[str | None] = [None]  # what this process joined with (init is idempotent)


def _int_var(environ: Mapping[str, str], name: str) -> int:
    try:
        return int(environ[name])
    except ValueError:
        raise ValueError(f"{name}={environ[name]!r} is not an integer") from None


def settings_from_env(environ: Mapping[str, str] | None = None) -> tuple[str, int, int] | None:
    """(coordinator "host:port", process count, process id) from SPECJAX_COORDINATOR /
    SPECJAX_NUM_PROCESSES / SPECJAX_PROCESS_ID, or None when SPECJAX_COORDINATOR is unset.
    Raises naming the variable that is missing or malformed."""
    environ = os.environ if environ is None else environ
    if not environ.get(ENV_COORDINATOR):
        return None
    address = environ[ENV_COORDINATOR]
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"{ENV_COORDINATOR}={address!r}: expected host:port (e.g. 127.0.0.1:12345)")
    missing = [v for v in (ENV_NUM_PROCESSES, ENV_PROCESS_ID) if v not in environ]
    if missing:
        raise ValueError(f"{ENV_COORDINATOR} is set but {' and '.join(missing)} are not: set all three on every "
                         f"process (python -m specjax.launch does)")
    count, pid = _int_var(environ, ENV_NUM_PROCESSES), _int_var(environ, ENV_PROCESS_ID)
    if count < 1 or not 0 <= pid < count:
        raise ValueError(f"{ENV_PROCESS_ID}={pid} must lie in [0, {ENV_NUM_PROCESSES}={count})")
    return address, count, pid


def cluster_detected(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the environment is a multi-process cluster launch `jax.distributed.initialize()`
    detects by itself: SLURM or Open MPI with more than one task, a Cloud TPU VM slice, or
    SPECJAX_DISTRIBUTED=auto. A plain machine is not (nothing is contacted to find out)."""
    environ = os.environ if environ is None else environ
    if environ.get(ENV_MODE) == "auto":
        return True
    sizes = [environ.get(v, "") for v in _CLUSTER_SIZE_VARS]
    return any(s.isdigit() and int(s) > 1 for s in sizes) or any(environ.get(v) for v in _TPU_VARS)


def _is_loopback(host: str) -> bool:
    return host in ("localhost", "::1", "[::1]") or host.startswith("127.")


def _use_gloo_on_cpu() -> None:
    # The cross-process collectives of the CPU backend (a no-op for GPU / TPU backends).
    if hasattr(jax.config, "jax_cpu_collectives_implementation"):
        jax.config.update("jax_cpu_collectives_implementation", "gloo")


def _bare(host: str) -> str:
    return host.strip("[]")  # "[::1]" -> "::1" for socket calls


def _listener(host: str, port: int, backlog: int = 1) -> socket.socket:
    """A socket listening on host:port, bound as the coordinator's server binds (SO_REUSEADDR: a closed
    connection of an earlier run still in TIME_WAIT is no conflict, a socket listening there is)."""
    s = socket.socket(socket.AF_INET6 if ":" in _bare(host) else socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((_bare(host), port))
        s.listen(backlog)
    except BaseException:
        s.close()
        raise
    return s


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port free on `host` now (bound and released: a coordinator binds it next)."""
    with _listener(host, 0) as s:
        return s.getsockname()[1]


def port_in_use(host: str, port: int) -> bool:
    """Whether a coordinator could not listen on host:port now (another socket listens there)."""
    try:
        with _listener(host, port):
            return False
    except OSError as e:
        if e.errno == errno.EADDRINUSE:
            return True
        raise


def _read_line(conn: socket.socket, limit: int = 4096) -> str:
    """One line (without its newline) from `conn`, at most `limit` bytes; what came before EOF otherwise."""
    data = b""
    while not data.endswith(b"\n") and len(data) < limit:
        chunk = conn.recv(limit - len(data))
        if not chunk:
            break
        data += chunk
    return data.decode(errors="replace").strip()


def _port_in_use_error(host: str, port: int) -> JoinError:
    return JoinError(f"port {port} on {host} is in use, so the coordinator cannot listen there; pass --port with "
                     f"a free port to the launcher (or leave --port out), or set {ENV_COORDINATOR} to a free host:port")


def _gather(host: str, port: int, count: int, timeout: float, deadline: float) -> None:
    """Process 0's side of `rendezvous`: listen, collect the others' (id, count), answer each."""
    try:
        listener = _listener(host, port, backlog=count)
    except OSError as e:
        if e.errno != errno.EADDRINUSE:
            raise
        raise _port_in_use_error(host, port) from None
    peers: list[tuple[socket.socket, int]] = []
    problem = None
    with listener:
        while len(peers) < count - 1 and problem is None:
            left = deadline - time.monotonic()
            if left <= 0:
                joined = sorted([0] + [pid for _, pid in peers])
                problem = (f"{ENV_NUM_PROCESSES}={count} but {len(joined)} process(es) joined within {timeout:g} s "
                           f"(process ids {joined}): start {count} processes, or set {ENV_NUM_PROCESSES} to the "
                           f"{len(joined)} started")
                break
            listener.settimeout(left)
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            try:
                conn.settimeout(max(deadline - time.monotonic(), 1.0))
                hello = json.loads(_read_line(conn))
                pid, n = int(hello["process_id"]), int(hello["num_processes"])
            except (OSError, ValueError, KeyError, TypeError):
                conn.close()  # not a process of this run (a stray client): ignored
                continue
            if n != count:
                problem = (f"process {pid} was started with {ENV_NUM_PROCESSES}={n} but process 0 with "
                           f"{ENV_NUM_PROCESSES}={count}: give every process the same count")
            elif pid in [0] + [p for _, p in peers]:
                problem = (f"two processes have {ENV_PROCESS_ID}={pid}: give each of the {count} processes its own "
                           f"id in [0, {count})")
            peers.append((conn, pid))
        reply = (f"error {problem}" if problem else "ok") + "\n"
        for conn, _ in peers:
            try:
                conn.sendall(reply.encode())
                conn.settimeout(5.0)
                conn.recv(1)  # the peer closes first: no TIME_WAIT is left on the port the coordinator binds next
            except OSError:
                pass
            finally:
                conn.close()
    if problem:
        raise JoinError(problem)


def _report(host: str, port: int, count: int, pid: int, timeout: float, deadline: float) -> None:
    """The side of `rendezvous` of a process other than 0: connect (retrying until `deadline`), say
    (id, count), wait for process 0's verdict."""
    while True:
        try:
            conn = socket.create_connection((_bare(host), port), timeout=max(deadline - time.monotonic(), 0.1))
            break
        except OSError:
            if time.monotonic() >= deadline:
                raise JoinError(f"process {pid}: nothing answered at {host}:{port} within {timeout:g} s: start "
                                f"process 0 of the {count} ({ENV_NUM_PROCESSES}={count}) with {ENV_COORDINATOR}="
                                f"{host}:{port}") from None
            time.sleep(0.1)
    with conn:
        conn.sendall((json.dumps({"process_id": pid, "num_processes": count}) + "\n").encode())
        conn.settimeout(timeout + 10.0)  # process 0 answers when all are there, or at its own deadline
        try:
            reply = _read_line(conn)
        except OSError:
            reply = ""
    if reply == "ok":
        return
    if reply.startswith("error "):
        raise JoinError(reply[len("error "):])
    raise JoinError(f"process {pid}: what listens at {host}:{port} did not answer the join (process 0 stopped, or "
                    f"the port belongs to another program: set {ENV_COORDINATOR} to a free port)")


def rendezvous(address: str, count: int, process_id: int, timeout: float = JOIN_TIMEOUT_S) -> None:
    """Meet the other processes at the coordinator's host:port before `jax.distributed.initialize` does,
    so that what JAX would report after 120 s as a C++ abort fails within `timeout` seconds, named.

    Process 0 listens on `address` and waits for the other count - 1 processes; each of them connects
    (retrying until `timeout`), says its id and its count, and reads process 0's verdict. Raises
    `JoinError` on every process that is there, naming the problem: the port in use (on process 0), a
    process started with another count (both counts), two processes with one id, or fewer processes than
    `count` after `timeout` seconds (both counts, and the ids that came). Returns when all `count`
    processes are there; the port is free again for the coordinator (only TCP on `address`: a loopback
    address for processes of one machine)."""
    host, _, port = address.rpartition(":")
    deadline = time.monotonic() + timeout
    if process_id == 0:
        _gather(host, int(port), count, timeout, deadline)
    else:
        _report(host, int(port), count, process_id, timeout, deadline)


def init(coordinator: str | None = None, num_processes: int | None = None, process_id: int | None = None, *,
         local_device_ids: Sequence[int] | None = None, environ: Mapping[str, str] | None = None,
         initialization_timeout: int = 120, join_timeout: float = JOIN_TIMEOUT_S) -> Topology:
    """Join this process to the run (`jax.distributed.initialize`) and return its `Topology`.

    Call it first, before any other JAX call (JAX fixes its devices when its backend starts).
    Arguments win over SPECJAX_COORDINATOR / SPECJAX_NUM_PROCESSES / SPECJAX_PROCESS_ID (all
    three or none), which win over a detected cluster (`cluster_detected`: SLURM, Open MPI, TPU
    VMs, SPECJAX_DISTRIBUTED=auto); with none of these, or SPECJAX_DISTRIBUTED=off, it is one
    process and nothing is initialised. Idempotent: a second call returns the same topology.
    `local_device_ids`: the local devices this process drives (e.g. one GPU of a node each).
    A loopback coordinator (one machine) is met first through `rendezvous` (`join_timeout` seconds):
    a port in use or a wrong process count raises `JoinError` on every process, naming it.
    """
    environ = os.environ if environ is None else environ
    if not jax.distributed.is_initialized() and environ.get(ENV_MODE) != "off":
        given = (coordinator, num_processes, process_id)
        if any(v is not None for v in given) and any(v is None for v in given):
            raise ValueError("init: pass coordinator, num_processes and process_id together (or none)")
        settings = given if coordinator is not None else settings_from_env(environ)
        if settings is not None:
            address, count, pid = settings
            host, _, port = address.rpartition(":")
            if _is_loopback(host) and count > 1:
                rendezvous(address, count, pid, join_timeout)
            _use_gloo_on_cpu()
            jax.distributed.initialize(coordinator_address=address, num_processes=count, process_id=pid,
                                       local_device_ids=local_device_ids,
                                       initialization_timeout=initialization_timeout,
                                       # a loopback run listens on loopback only (JAX's default is [::])
                                       coordinator_bind_address=address if _is_loopback(host) else None)
            _COORDINATOR[0] = address
        elif cluster_detected(environ):
            _use_gloo_on_cpu()
            jax.distributed.initialize(local_device_ids=local_device_ids,
                                       initialization_timeout=initialization_timeout)
    return topology()


def topology() -> Topology:
    """This process's `Topology` now (starts JAX's backend if it has not started)."""
    return Topology(process_index=jax.process_index(), process_count=jax.process_count(),
                    local_devices=jax.local_device_count(), devices=jax.device_count(),
                    coordinator=_COORDINATOR[0])


def is_main() -> bool:
    """True on process 0 (the one that writes checkpoints and logs), and without `jax.distributed`."""
    return jax.process_index() == 0


def process_slice(n: int, process_index: int | None = None, process_count: int | None = None) -> slice:
    """This process's contiguous share of n items (data shards, files, prompts): process p of P
    gets [p * n // P, (p + 1) * n // P), so the shares tile 0..n-1 in process order and differ
    in size by at most one. Deterministic: a function of (n, p, P) only."""
    p = jax.process_index() if process_index is None else process_index
    count = jax.process_count() if process_count is None else process_count
    if not 0 <= p < count:
        raise ValueError(f"process_index {p} is not in [0, {count})")
    return slice(p * n // count, (p + 1) * n // count)


def spans_processes(mesh: Mesh | None) -> bool:
    """True iff `mesh` has devices of another process (a computation on it is multi-process)."""
    return mesh is not None and any(d.process_index != jax.process_index() for d in mesh.devices.flat)


def leading_parts(sharding: NamedSharding) -> int:
    """How many blocks `sharding` cuts an array's leading axis into (the product of the sizes of the mesh
    axes its spec names there; 1 when the axis is not sharded): a batch's rows must be a multiple of it."""
    spec = tuple(sharding.spec)
    names = spec[0] if spec else None
    names = () if names is None else (names,) if isinstance(names, str) else tuple(names)
    return int(np.prod([sharding.mesh.shape[a] for a in names], dtype=np.int64))


def local_rows(sharding: NamedSharding, n: int) -> slice:
    """The rows of a global [n, ...] array, sharded on its leading axis by `sharding`, that this
    process's devices hold: the rows its share of the data must provide to `global_batch`
    (contiguous: a mesh's devices of one process sit in one block of its data axis, as
    `jax.make_mesh` orders them). All n rows on one process, or when the axis is not sharded. Raises
    ValueError naming the batch size and the axis size when the axis does not divide n (before anything
    is placed or compiled)."""
    parts = leading_parts(sharding)
    if n % parts:
        raise ValueError(f"a batch of {n} rows does not split over the {parts} devices of the mesh's "
                         f"{sharding.spec[0]!r} axis: make the batch size (batch_size; --batch-size of python -m "
                         f"specjax.train) a multiple of {parts}")
    index = sharding.addressable_devices_indices_map((n,))
    spans = sorted({(ix[0].start or 0, n if ix[0].stop is None else ix[0].stop) for ix in index.values()})
    start, stop = spans[0][0], spans[0][1]
    for a, b in spans[1:]:
        if a > stop:
            raise ValueError(f"this process's devices hold rows {spans} of the {n}-row batch, not one block: "
                             f"build the mesh with jax.make_mesh / specjax.sharding.make_mesh (process-contiguous)")
        stop = max(stop, b)
    return slice(start, stop)


def global_batch(local: Any, sharding: NamedSharding, n: int) -> Any:
    """A pytree of global arrays [n, ...] from this process's rows (`local_rows(sharding, n)`):
    every leaf of `local` is a host array [rows of this process, ...] with the same trailing
    shape on every process (`jax.make_array_from_process_local_data`; one process: a plain
    placement of all n rows)."""
    rows = local_rows(sharding, n)
    want = rows.stop - rows.start

    def one(x):
        x = np.asarray(x)
        if x.ndim == 0 or x.shape[0] != want:
            raise ValueError(f"a local batch leaf has shape {x.shape}; this process holds rows {rows.start}:"
                             f"{rows.stop} of {n}, so its leading axis must be {want}")
        return jax.make_array_from_process_local_data(sharding, x, (n, *x.shape[1:]))

    return jax.tree.map(one, local)


def gather(x: jax.Array) -> np.ndarray:
    """A global array whole on this process as numpy (the same on every process): local or
    replicated arrays are read directly, others all-gathered across processes."""
    if getattr(x, "is_fully_addressable", True) or x.is_fully_replicated:
        return np.asarray(x)
    return np.asarray(multihost_utils.process_allgather(x, tiled=True))


def barrier(name: str) -> None:
    """Wait until every process reaches the barrier `name` (a no-op with one process): e.g. after
    process 0 wrote a checkpoint the others may read."""
    if jax.process_count() > 1:
        multihost_utils.sync_global_devices(name)


__all__ = ["ENV_COORDINATOR", "ENV_NUM_PROCESSES", "ENV_PROCESS_ID", "ENV_MODE", "JOIN_TIMEOUT_S", "LOOPBACK",
           "JoinError", "Topology", "free_port", "init", "leading_parts", "port_in_use", "rendezvous", "topology",
           "is_main", "settings_from_env", "cluster_detected", "process_slice", "spans_processes", "local_rows",
           "global_batch", "gather", "barrier"]
