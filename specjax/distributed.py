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
"""

from __future__ import annotations

import dataclasses
import os
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


def init(coordinator: str | None = None, num_processes: int | None = None, process_id: int | None = None, *,
         local_device_ids: Sequence[int] | None = None, environ: Mapping[str, str] | None = None,
         initialization_timeout: int = 120) -> Topology:
    """Join this process to the run (`jax.distributed.initialize`) and return its `Topology`.

    Call it first, before any other JAX call (JAX fixes its devices when its backend starts).
    Arguments win over SPECJAX_COORDINATOR / SPECJAX_NUM_PROCESSES / SPECJAX_PROCESS_ID (all
    three or none), which win over a detected cluster (`cluster_detected`: SLURM, Open MPI, TPU
    VMs, SPECJAX_DISTRIBUTED=auto); with none of these, or SPECJAX_DISTRIBUTED=off, it is one
    process and nothing is initialised. Idempotent: a second call returns the same topology.
    `local_device_ids`: the local devices this process drives (e.g. one GPU of a node each).
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


def local_rows(sharding: NamedSharding, n: int) -> slice:
    """The rows of a global [n, ...] array, sharded on its leading axis by `sharding`, that this
    process's devices hold: the rows its share of the data must provide to `global_batch`
    (contiguous: a mesh's devices of one process sit in one block of its data axis, as
    `jax.make_mesh` orders them). All n rows on one process, or when the axis is not sharded."""
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


__all__ = ["ENV_COORDINATOR", "ENV_NUM_PROCESSES", "ENV_PROCESS_ID", "ENV_MODE", "Topology", "init", "topology",
           "is_main", "settings_from_env", "cluster_detected", "process_slice", "spans_processes", "local_rows",
           "global_batch", "gather", "barrier"]
