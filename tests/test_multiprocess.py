"""Several JAX processes joined by `jax.distributed` (`specjax.distributed`, `specjax.launch`),
tested with real processes: 2 processes x 1 CPU device on loopback, the embedded zoo pair.

One module-scoped run starts, side by side, the one-process reference
(`python tests/multiprocess_worker.py JOBS OUT` with 2 CPU devices, no distributed variables: the
same (data=2) / (model=2) meshes within one process) and the same jobs as two joined processes
(`specjax launch --processes 2 -- python tests/multiprocess_worker.py JOBS OUT`); each process writes
what it computed, and every test compares every process with the reference:
  (a) drafter training data-parallel across the processes = the one-process run bit for bit (every
      logged loss, every param: docs/sharding.md says why two data shards are exact), and its
      stop-and-resume is bit-exact;
  (b) greedy AR and DDTree with the target tensor-parallel across the processes, and AR with the
      prompt rows split across them, = one process, token for token, on every process;
  (c) a process that dies fails the launch (its exit status, naming the rank) within the timeout,
      and no process outlives the launcher;
  (d) mistakes fail politely and early: a coordinator port in use is named before any process starts,
      processes that disagree on their count (or are too few) fail naming both counts within the join
      timeout (not JAX's 120 s wait and C++ abort), a batch the data axis does not divide is a named
      ValueError before anything compiles, and `python` in the command is the launcher's interpreter.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from specjax import distributed, launch
from specjax.cli import launch as cli_launch
from specjax.cli.main import main as specjax_main

WORKER = Path(__file__).with_name("multiprocess_worker.py")
REPO = WORKER.parent.parent
JOBS = ["indivisible", "train", "ar_tp", "rows", "ddtree_tp"]  # ddtree_tp last: an XLA abort there ends the process
TIMEOUT_S = 420  # a guard against a hang: the run takes ~30-45 s cold on 2 idle cores, ~4 min at load 7 on 2 cores


def _env() -> dict[str, str]:
    flags = re.sub(r"--xla_force_host_platform_device_count=\S+", "", os.environ.get("XLA_FLAGS", ""))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPECJAX_COORDINATOR", "SPECJAX_NUM_PROCESSES",
                                                                    "SPECJAX_PROCESS_ID"))}
    return {**env, "XLA_FLAGS": flags.strip(), "JAX_PLATFORMS": "cpu", "SPECJAX_DISTRIBUTED": "off",
            "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """{"ref": dir, "mp": dir, "rc": launcher status, "log": launcher output} of one run of JOBS in one
    process with 2 CPU devices and in two joined processes of 1 device each, started together (3
    processes on the cores). The launch goes through `specjax launch` with a bare `python` command."""
    ref, mp = tmp_path_factory.mktemp("one-process"), tmp_path_factory.mktemp("two-processes")
    env = _env()
    two_devices = {**env, "XLA_FLAGS": f"{env['XLA_FLAGS']} --xla_force_host_platform_device_count=2".strip()}
    one = subprocess.Popen([sys.executable, str(WORKER), *JOBS, str(ref)], env=two_devices, cwd=REPO,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    two = subprocess.run([sys.executable, "-m", "specjax", "launch", "--processes", "2", "--timeout", str(TIMEOUT_S),
                          "--", "python", str(WORKER), *JOBS, str(mp)], env=env, cwd=REPO,
                         capture_output=True, text=True, timeout=TIMEOUT_S + 30)
    one_out = one.communicate(timeout=TIMEOUT_S)[0]
    assert one.returncode == 0, f"the one-process reference failed:\n{one_out[-4000:]}"
    return {"ref": ref, "mp": mp, "rc": two.returncode, "log": two.stdout + two.stderr}


def _results(runs, job: str) -> tuple[dict, list[dict], list[dict]]:
    """(reference arrays, [arrays of process 0, 1], [infos of process 0, 1]) of `job`; fails with the
    launcher's output when a process did not finish it."""
    for rank in (0, 1):
        error = runs["mp"] / f"{job}-{rank}.error"
        if error.exists():
            raise AssertionError(f"{job} failed on process {rank}: {error.read_text()}")
    missing = [r for r in (0, 1) if not (runs["mp"] / f"{job}-{r}.npz").exists()]
    assert not missing, (f"{job}: no result from process(es) {missing}; launcher exit {runs['rc']}:\n"
                         f"{runs['log'][-6000:]}")
    ref = dict(np.load(runs["ref"] / f"{job}-0.npz"))
    got = [dict(np.load(runs["mp"] / f"{job}-{r}.npz")) for r in (0, 1)]
    infos = [json.loads((runs["mp"] / f"{job}-{r}.json").read_text()) for r in (0, 1)]
    assert all(i["processes"] == 2 and i["devices"] == 2 for i in infos)
    return ref, got, infos


def test_training_across_two_processes_equals_one_process_bit_for_bit_and_resumes_bit_exactly(runs):
    """(a) 4 steps of a DFlash drafter of the zoo target, batch 4 split 2 + 2 over the processes: every
    logged loss and every param bit-equal to one process running the same (data=2) mesh on 2 local
    devices (docs/sharding.md, "equal to one process"); stopped after 2 steps and resumed (process 0
    wrote the checkpoint, both read it): bit-equal to the uninterrupted run."""
    ref, got, infos = _results(runs, "train")
    ref_info = json.loads((runs["ref"] / "train-0.json").read_text())
    strip = lambda log: [{k: v for k, v in r.items() if k not in ("seconds", "eval_seconds")} for r in log]  # noqa: E731
    for rank, (arrays, info) in enumerate(zip(got, infos)):
        assert strip(info["log"]) == strip(ref_info["log"]), f"process {rank}: the log differs from one process's"
        assert sorted(arrays) == sorted(ref), rank
        unequal = [name for name, value in ref.items() if not np.array_equal(arrays[name], value)]
        assert not unequal, f"process {rank}: params not bit-equal to one process's: {unequal}"
        for name in arrays:
            if name.startswith("resumed"):
                assert np.array_equal(arrays[name], arrays["whole" + name[len("resumed"):]]), (rank, name)
        assert strip(info["resumed_log"]) == strip(info["log"]), f"process {rank}: the resumed log differs"


def test_ar_over_a_target_sharded_across_processes_equals_one_process(runs):
    """(b) greedy generate_ar, the zoo target tensor-parallel on a (data=1, model=2) mesh spanning
    the processes: the same tokens as one process, on both."""
    ref, got, _ = _results(runs, "ar_tp")
    for rank, arrays in enumerate(got):
        np.testing.assert_array_equal(arrays["tokens"], ref["tokens"], err_msg=f"process {rank}")


def test_ddtree_over_a_target_sharded_across_processes_equals_one_process(runs):
    """(b) greedy DDTree over the zoo's DFlash drafter, the target tensor-parallel across the
    processes: the same tokens and rounds as one process, on both."""
    ref, got, _ = _results(runs, "ddtree_tp")
    for rank, arrays in enumerate(got):
        np.testing.assert_array_equal(arrays["tokens"], ref["tokens"], err_msg=f"process {rank}")
        np.testing.assert_array_equal(arrays["rounds"], ref["rounds"], err_msg=f"process {rank}")


def test_decoding_with_rows_split_across_processes_equals_one_process(runs):
    """(b) greedy AR and DDTree with one prompt row on each process ((data=2, model=1)): the tokens,
    gathered, are one process's on both."""
    ref, got, _ = _results(runs, "rows")
    for rank, arrays in enumerate(got):
        for key in ("ar", "ddtree"):
            np.testing.assert_array_equal(arrays[key], ref[key], err_msg=f"process {rank} {key}")


def test_a_process_that_dies_fails_the_launch_naming_its_rank(tmp_path):
    """(c) rank 1 exits with status 3 while rank 0 waits for it in a barrier: the launcher stops
    rank 0, exits 3 naming rank 1, well within its timeout; neither process outlives it."""
    timeout = 60
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "specjax.launch", "--processes", "2", "--timeout", str(timeout),
                           "--", sys.executable, str(WORKER), "die", str(tmp_path)], env=_env(), cwd=REPO,
                          capture_output=True, text=True, timeout=timeout + 30)
    elapsed = time.monotonic() - start
    assert proc.returncode == 3, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "rank 1 exited with code 3" in proc.stderr, proc.stderr
    assert "[rank 1] dying with status 3 on purpose" in proc.stdout
    assert elapsed < timeout, f"took {elapsed:.0f} s: rank 0 was not stopped when rank 1 died"
    for rank in (0, 1):
        pid = int((tmp_path / f"pid-{rank}").read_text())
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_the_launcher_times_out_and_checks_its_arguments():
    """Past --timeout every process is stopped and the launch exits 124; bad arguments are named."""
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "specjax.launch", "--processes", "2", "--timeout", "1", "--",
                           "sleep", "30"], env=_env(), cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 124 and "timed out after 1 s" in proc.stderr, proc.stderr
    assert time.monotonic() - start < 25
    with pytest.raises(ValueError, match="--processes"):
        launch.launch(["sleep", "1"], 0)
    with pytest.raises(ValueError, match="no command"):
        launch.launch([], 2)


def test_settings_slices_and_commands():
    """The environment contract of `distributed.init`, `process_slice`, and which commands the
    launcher runs in a joined interpreter."""
    env = {"SPECJAX_COORDINATOR": "127.0.0.1:1234", "SPECJAX_NUM_PROCESSES": "2", "SPECJAX_PROCESS_ID": "1"}
    assert distributed.settings_from_env(env) == ("127.0.0.1:1234", 2, 1)
    assert distributed.settings_from_env({}) is None
    with pytest.raises(ValueError, match="SPECJAX_PROCESS_ID"):
        distributed.settings_from_env({**env, "SPECJAX_PROCESS_ID": "2"})
    with pytest.raises(ValueError, match="SPECJAX_NUM_PROCESSES"):
        distributed.settings_from_env({"SPECJAX_COORDINATOR": "127.0.0.1:1234", "SPECJAX_PROCESS_ID": "0"})
    with pytest.raises(ValueError, match="host:port"):
        distributed.settings_from_env({**env, "SPECJAX_COORDINATOR": "127.0.0.1"})
    assert distributed.cluster_detected({"SLURM_NTASKS": "4"})
    assert not distributed.cluster_detected({"SLURM_NTASKS": "1"})
    assert not distributed.cluster_detected({})
    for n, count in ((10, 3), (2, 2), (1, 2), (7, 1)):
        shares = [distributed.process_slice(n, p, count) for p in range(count)]
        assert [i for s in shares for i in range(n)[s]] == list(range(n))
        assert max(s.stop - s.start for s in shares) - min(s.stop - s.start for s in shares) <= 1
    assert launch.python_target(["python", "-m", "specjax.train", "dflash"]) == (
        "module", "specjax.train", ["specjax.train", "dflash"])
    assert launch.python_target([sys.executable, "w.py", "a"]) == ("path", "w.py", ["w.py", "a"])
    assert launch.python_target(["specjax", "bench"]) == ("module", "specjax", ["specjax", "bench"])
    assert launch.python_target(["sleep", "1"]) is None
    child = launch.child_env({"XLA_FLAGS": "--a --xla_force_host_platform_device_count=8"}, 1, 2, 999, 4)
    assert child["SPECJAX_COORDINATOR"] == "127.0.0.1:999" and child["SPECJAX_PROCESS_ID"] == "1"
    assert child["XLA_FLAGS"] == "--a --xla_force_host_platform_device_count=4"


def test_a_batch_the_data_axis_does_not_divide_is_named_before_anything_is_placed(runs):
    """(d) 3 rows on a (data=2) mesh, as the training loop places a batch: a ValueError naming the batch
    size, --batch-size and the axis size 2, on the one-process run and on both joined processes (before:
    JAX's raw IndivisibleError about "per-dimension tiling factors"). The joined processes ran under the
    launcher's own interpreter although the command said `python`."""
    for where in (runs["ref"] / "indivisible-0.json", runs["mp"] / "indivisible-0.json",
                  runs["mp"] / "indivisible-1.json"):
        assert where.exists(), f"no {where.name}; launcher exit {runs['rc']}:\n{runs['log'][-4000:]}"
        info = json.loads(where.read_text())
        assert info["error"] == ("a batch of 3 rows does not split over the 2 devices of the mesh's 'data' axis: "
                                 "make the batch size (batch_size; --batch-size of python -m specjax.train) a "
                                 "multiple of 2"), info
        assert info["executable"] == sys.executable and info["devices"] == 2


def _listening_socket() -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind((distributed.LOOPBACK, 0))
    s.listen()
    return s


def test_a_coordinator_port_in_use_is_named_before_any_process_starts(tmp_path, capsys):
    """(d) --port of a port something listens on: one line naming the port and --port, exit 2, from
    `specjax launch` and `python -m specjax.launch` alike, and no process started (before: rank 0
    segfaulted after "Failed to add port to server"). Process 0 joining by hand on such a port is told
    the same (`distributed.rendezvous`, before `jax.distributed.initialize`)."""
    marker = tmp_path / "started"
    with _listening_socket() as busy:
        port = busy.getsockname()[1]
        command = ["--", "python", "-c", f"open({str(marker)!r}, 'w')"]
        assert specjax_main(["launch", "--processes", "2", "--port", str(port), *command]) == 2
        err = capsys.readouterr().err.strip()
        assert err == (f"specjax launch: error: port {port} on 127.0.0.1 is in use; pass --port with a free port, "
                       f"or leave --port out (a free one is picked)"), err
        with pytest.raises(SystemExit) as exit_:
            cli_launch.main(["--processes", "2", "--port", str(port), *command])
        assert exit_.value.code == 2 and f"port {port} on 127.0.0.1 is in use; pass --port" in capsys.readouterr().err
        with pytest.raises(distributed.JoinError, match=f"port {port} on 127.0.0.1 is in use.*--port"):
            distributed.rendezvous(f"127.0.0.1:{port}", 2, 0, timeout=5)
    assert not marker.exists(), "a process was started"
    assert not distributed.port_in_use(distributed.LOOPBACK, port)  # the check itself holds nothing
    with pytest.raises(ValueError, match="--port must be a TCP port"):
        launch.launch(["true"], 2, port=70000)


def _rendezvous_all(address: str, counts: list[int], ids: list[int], timeout: float) -> dict[int, str]:
    """`distributed.rendezvous` of one thread per process (its count and id): {thread: "ok" or the error}."""
    results: dict[int, str] = {}

    def one(i: int) -> None:
        try:
            distributed.rendezvous(address, counts[i], ids[i], timeout)
            results[i] = "ok"
        except distributed.JoinError as e:
            results[i] = str(e)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(counts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout + 20)
    return results


def test_processes_that_disagree_on_their_count_fail_naming_both_counts_within_the_join_timeout():
    """(d) The join every loopback run makes before `jax.distributed.initialize`: the right count joins
    and leaves the port free for the coordinator; too few processes fail on every process within the
    timeout naming both counts and who came; two counts, or one id twice, fail at once (before: a 120 s
    wait that ended in a C++ abort, DEADLINE_EXCEEDED ... RegisterTask)."""
    def run(counts, ids, timeout=20.0):
        port = distributed.free_port()
        start = time.monotonic()
        results = _rendezvous_all(f"127.0.0.1:{port}", counts, ids, timeout)
        assert not distributed.port_in_use(distributed.LOOPBACK, port)
        return results, time.monotonic() - start

    results, seconds = run([3, 3, 3], [0, 1, 2])
    assert results == {0: "ok", 1: "ok", 2: "ok"} and seconds < 10
    results, seconds = run([3, 3], [0, 1], timeout=2.0)
    too_few = ("SPECJAX_NUM_PROCESSES=3 but 2 process(es) joined within 2 s (process ids [0, 1]): start 3 "
               "processes, or set SPECJAX_NUM_PROCESSES to the 2 started")
    assert results == {0: too_few, 1: too_few} and 2.0 <= seconds < 10, (results, seconds)
    results, seconds = run([2, 3], [0, 1])
    both = ("process 1 was started with SPECJAX_NUM_PROCESSES=3 but process 0 with SPECJAX_NUM_PROCESSES=2: give "
            "every process the same count")
    assert results == {0: both, 1: both} and seconds < 10, results
    results, _ = run([3, 3, 3], [0, 1, 1])
    assert all("two processes have SPECJAX_PROCESS_ID=1" in r for r in results.values()), results
    results, seconds = run([2], [1], timeout=1.0)
    assert "nothing answered at 127.0.0.1:" in results[0] and "start process 0 of the 2" in results[0], results


def test_init_joins_through_the_named_checks(tmp_path):
    """(d) Two real processes started by hand whose SPECJAX_NUM_PROCESSES differ (2 and 3): both exit
    with the JoinError naming both counts, as soon as both are up: `distributed.init` meets the others
    before `jax.distributed.initialize` (which would wait 120 s and abort)."""
    port = distributed.free_port()
    code = "from specjax import distributed; distributed.init()"
    env = {**_env(), "SPECJAX_COORDINATOR": f"127.0.0.1:{port}"}
    env.pop("SPECJAX_DISTRIBUTED")
    procs = [subprocess.Popen([sys.executable, "-c", code], env={**env, "SPECJAX_NUM_PROCESSES": str(count),
                                                                   "SPECJAX_PROCESS_ID": str(rank)},
                              cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for rank, count in enumerate((2, 3))]
    try:  # JAX's own wait would be 120 s: a hang fails here first
        outs = [p.communicate(timeout=distributed.JOIN_TIMEOUT_S + 90)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for p, out in zip(procs, outs):
        assert p.returncode == 1, out[-2000:]
        assert ("specjax.distributed.JoinError: process 1 was started with SPECJAX_NUM_PROCESSES=3 but process 0 "
                "with SPECJAX_NUM_PROCESSES=2") in out, out[-2000:]


def test_python_in_a_command_is_the_launchers_interpreter(capsys):
    """(d) A command naming `python` runs with `sys.executable` (the interpreter that has JAX), never the
    first `python` on PATH: through the joined runner for `python -m` / `python x.py` / `python -c`,
    directly for anything else (`python -u ...`)."""
    assert launch.child_argv(["python", "-u", "x.py"]) == [sys.executable, "-u", "x.py"]
    assert launch.child_argv(["python3.11", "-c", "pass"]) == [sys.executable, "-m", "specjax.launch", "--run-joined",
                                                               "--", "python3.11", "-c", "pass"]
    assert launch.child_argv(["sleep", "1"]) == ["sleep", "1"]
    assert launch.python_target(["python", "-c", "print(1)", "a"]) == ("code", "print(1)", ["-c", "a"])
    assert specjax_main(["launch", "--processes", "2", "--timeout", "60", "--", "python", "-u", "-c",
                              "import sys; print(sys.executable)"]) == 0
    lines = sorted(capsys.readouterr().out.splitlines())
    assert lines == [f"[rank 0] {sys.executable}", f"[rank 1] {sys.executable}"], lines
