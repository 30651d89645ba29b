"""The program tests/test_multiprocess.py runs, alone (the one-process reference) or as N joined
processes under `python -m specjax.launch` (not a test module):

    python tests/multiprocess_worker.py JOB OUT [JOB ...]
    python -m specjax.launch --processes 2 --timeout 50 -- python tests/multiprocess_worker.py JOB OUT

Every process calls `specjax.distributed.init()` (one process without the launcher's variables)
and runs the same program over a mesh of all processes' devices; each writes what it saw to
OUT/<job>-<process index>.npz (arrays) and .json (logs), so the test compares every process
with the reference. Jobs:

  train   a DFlash drafter of the zoo target (tiny-neox-target) trained STEPS steps, data-parallel
          over a (data=P, model=1) mesh (each process reads its rows of every batch); then the
          same run stopped after RESUME_AT steps and resumed (its params and log must be bit-equal)
  decode  greedy generate_ar and DDTree over the zoo's DFlash drafter, the target tensor-parallel
          over a (data=1, model=P) mesh, prompts replicated; then generate_ar with the batch rows
          split over a (data=P, model=1) mesh (tokens gathered to every process)
  time    median seconds of a training step (after compile) at the same global batch
  indivisible  a global batch of 3 rows placed on a (data=P, model=1) mesh: the named ValueError (raised
          before anything is placed or compiled) and the interpreter running the job (sys.executable)
  die     process P - 1 exits with status 3 right after joining; the others wait in a barrier
"""

from __future__ import annotations

import json
import os
import pathlib
import sys
import tempfile
import time

from specjax import distributed

TOPOLOGY = distributed.init()  # before any other JAX call: joins the launched processes

import jax  # noqa: E402
import numpy as np  # noqa: E402

from specjax import sharding as S, zoo  # noqa: E402
from specjax.decode import generate, generate_ar  # noqa: E402
from specjax.drafters.ddtree import DDTreeDrafter  # noqa: E402
from specjax.drafters.dflash import DFlashDrafter  # noqa: E402
from specjax.models import pad_prompts  # noqa: E402
from specjax.models.dflash import DFlashConfig  # noqa: E402
from specjax.models.dflash_net import target_outer  # noqa: E402
from specjax.train import dflash as TD  # noqa: E402
from specjax.train.loop import TrainSet, train  # noqa: E402

STEPS, RESUME_AT, BATCH, SEQ, ROWS, VALID = 4, 2, 4, 24, 20, 4
PROMPTS = ["The guitar is a stringed musical instrument", "Anime is animation originating from"]
PROMPT_WIDTH, MAX_NEW = 12, 16


def _data_mesh():
    return S.make_mesh(data=jax.device_count(), model=1) if jax.device_count() > 1 else None


def _trainset(tcfg, tparams, dcfg) -> TrainSet:
    """ROWS random sequences of the zoo vocabulary (responses from position 4), features computed now."""
    rng = np.random.default_rng(0)
    tokens = rng.integers(1, tcfg.vocab_size - 16, (ROWS, SEQ)).astype(np.int32)
    mask = np.zeros((ROWS, SEQ), bool)
    mask[:, 4:] = True
    return TrainSet.from_dense((tcfg, tparams), tokens, mask, dcfg.target_layer_ids, valid_rows=VALID)


def _drafter(tcfg) -> DFlashConfig:
    return DFlashConfig.for_target(tcfg, num_layers=1, target_layer_ids=(1, 3), block_size=4,
                                   mask_token_id=tcfg.vocab_size - 10)


def _flat(params) -> dict[str, np.ndarray]:
    return {jax.tree_util.keystr(k): np.asarray(v) for k, v in jax.tree_util.tree_leaves_with_path(params)}


def _write(out: pathlib.Path, job: str, arrays: dict, info: dict) -> None:
    rank = jax.process_index()
    np.savez(out / f"{job}-{rank}.npz", **arrays)
    (out / f"{job}-{rank}.json").write_text(json.dumps({**info, "processes": jax.process_count(),
                                                        "devices": jax.device_count()}))


def job_train(out: pathlib.Path) -> None:
    tcfg, tparams, _ = zoo.load("tiny-neox-target")
    dcfg = _drafter(tcfg)
    ts, mesh = _trainset(tcfg, tparams, dcfg), _data_mesh()
    # patience: the best evaluation's weights are kept (device_get on every process, written by process 0 with
    # the checkpoint) and returned, and the stop is read from the log every process keeps alike
    tc = TD.DFlashTrainConfig(steps=STEPS, batch_size=BATCH, anchors=4, log_every=1, ckpt_every=RESUME_AT, seed=0,
                              lr=2e-4, patience=2)
    target = (tcfg, target_outer(tparams))
    run = lambda d, **kw: train(target, dcfg, ts, tc, d, step_factory=TD.make_step, mesh=mesh,  # noqa: E731
                                progress=False, **kw)
    with tempfile.TemporaryDirectory() as whole:  # every process its own directory: none is shared here
        params, log = run(whole)
    shared = out / "run"  # one directory for all processes: process 0 writes the checkpoint, all resume from it
    run(shared, stop_after=RESUME_AT)
    resumed, resumed_log = run(shared, resume=True)
    arrays = {**{"whole" + k: v for k, v in _flat(params).items()},
              **{"resumed" + k: v for k, v in _flat(resumed).items()}}
    _write(out, "train", arrays, {"log": log, "resumed_log": resumed_log})


def _zoo_decode_inputs():
    tcfg, tparams, tok = zoo.load("tiny-neox-target")
    dcfg, dparams = zoo.load_drafter("tiny-neox-dflash")
    tokens, lengths = pad_prompts([zoo.encode(tok, p) for p in PROMPTS], PROMPT_WIDTH)
    return tcfg, tparams, DDTreeDrafter(DFlashDrafter(dcfg, tcfg), 8), dparams, tokens, lengths


def _on(mesh, tparams, tcfg, dparams, tokens, lengths):
    """The decode inputs placed on `mesh` (None: as they are): target params by the sharding rules,
    drafter params replicated, prompt rows on "data"."""
    if mesh is None:
        return tparams, dparams, tokens, lengths
    return (S.shard_params(tparams, tcfg, mesh), S.replicate(dparams, mesh), *S.shard_batch(tokens, lengths, mesh))


def _tp_mesh():
    return S.make_mesh(data=1, model=jax.device_count()) if jax.device_count() > 1 else None


def job_ar_tp(out: pathlib.Path) -> None:
    """Greedy AR with the target tensor-parallel across the processes (data=1, model=P)."""
    tcfg, tparams, _, dparams, tokens, lengths = _zoo_decode_inputs()
    params, _, tokens, lengths = _on(_tp_mesh(), tparams, tcfg, dparams, tokens, lengths)
    ar = generate_ar(params, tcfg, tokens, lengths, MAX_NEW, eos_ids=())
    _write(out, "ar_tp", {"tokens": distributed.gather(ar.tokens)}, {})


def job_ddtree_tp(out: pathlib.Path) -> None:
    """Greedy DDTree over the zoo's DFlash drafter, the target tensor-parallel across the processes."""
    tcfg, tparams, drafter, dparams, tokens, lengths = _zoo_decode_inputs()
    params, dparams, tokens, lengths = _on(_tp_mesh(), tparams, tcfg, dparams, tokens, lengths)
    tree = generate(params, tcfg, drafter, dparams, tokens, lengths, MAX_NEW, eos_ids=())
    _write(out, "ddtree_tp", {"tokens": distributed.gather(tree.tokens),
                              "rounds": distributed.gather(tree.stats.num_rounds)}, {})


def job_rows(out: pathlib.Path) -> None:
    """Greedy AR and DDTree with the prompt rows split across the processes (data=P, model=1)."""
    tcfg, tparams, drafter, dparams, tokens, lengths = _zoo_decode_inputs()
    mesh = S.make_mesh(data=jax.device_count(), model=1) if jax.device_count() > 1 else None
    params, dparams, tokens, lengths = _on(mesh, tparams, tcfg, dparams, tokens, lengths)
    ar = generate_ar(params, tcfg, tokens, lengths, MAX_NEW, eos_ids=())
    tree = generate(params, tcfg, drafter, dparams, tokens, lengths, MAX_NEW, eos_ids=())
    _write(out, "rows", {"ar": distributed.gather(ar.tokens), "ddtree": distributed.gather(tree.tokens)}, {})


def job_time(out: pathlib.Path, steps: int = 8, batch: int = 8) -> None:
    """Median wall seconds of one loop iteration of `train` (read + place the batch, the step, the
    loss to the host) at `batch` global rows, after 2 compile / warm-up steps: the time between
    consecutive step calls."""
    tcfg, tparams, _ = zoo.load("tiny-neox-target")
    dcfg = _drafter(tcfg)
    ts, mesh = _trainset(tcfg, tparams, dcfg), _data_mesh()
    tc = TD.DFlashTrainConfig(steps=steps + 3, batch_size=batch, anchors=4, log_every=10**6, ckpt_every=10**6)
    calls = []

    def timed_factory(*args):
        step, evaluate = TD.make_step(*args)

        def timed(*a):
            calls.append(time.perf_counter())
            return step(*a)

        return timed, evaluate

    with tempfile.TemporaryDirectory() as d:
        train((tcfg, target_outer(tparams)), dcfg, ts, tc, d, step_factory=timed_factory, mesh=mesh, progress=False)
    times = np.diff(calls)[2:]  # [steps]: the first two intervals hold the compile
    _write(out, "time", {"seconds": times}, {"median_s": float(np.median(times)), "batch": batch})


def job_indivisible(out: pathlib.Path) -> None:
    """Rows of a 3-row batch on a (data=P, model=1) mesh, as the training loop places them: P = 2 does
    not divide 3, so `distributed.global_batch` must refuse naming the batch size and the axis size."""
    sharding = jax.sharding.NamedSharding(S.make_mesh(data=jax.device_count(), model=1),
                                          jax.sharding.PartitionSpec("data"))
    try:
        distributed.global_batch({"tokens": np.zeros((3, 4), np.int32)}, sharding, 3)
        error = None
    except ValueError as e:
        error = str(e)
    _write(out, "indivisible", {}, {"error": error, "executable": sys.executable})


def job_die(out: pathlib.Path) -> None:
    """Process P - 1 dies (exit status 3, no clean-up: as a crash would); the others wait for it in a
    barrier. Every process first writes its pid to OUT/pid-<rank> (the test checks none outlives the launcher)."""
    (out / f"pid-{jax.process_index()}").write_text(str(os.getpid()))
    if jax.process_index() == jax.process_count() - 1:
        print("dying with status 3 on purpose", flush=True)
        os._exit(3)
    distributed.barrier("never-reached")  # the dead process never arrives: the launcher must stop this one
    print("the barrier passed without the dead process (unexpected)", flush=True)


JOBS = {"train": job_train, "ar_tp": job_ar_tp, "rows": job_rows, "ddtree_tp": job_ddtree_tp, "time": job_time,
        "die": job_die, "indivisible": job_indivisible}

if __name__ == "__main__":
    out_dir = pathlib.Path(sys.argv[-1])
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in sys.argv[1:-1]:
        start = time.perf_counter()
        try:
            JOBS[name](out_dir)
        except Exception as e:  # recorded for the test (the same on every process: the next job still runs)
            (out_dir / f"{name}-{jax.process_index()}.error").write_text(f"{type(e).__name__}: {e}")
            print(f"{name} failed: {type(e).__name__}: {e}", flush=True)
            continue
        print(f"{name} done in {time.perf_counter() - start:.1f} s on process {TOPOLOGY.process_index} of "
              f"{TOPOLOGY.process_count}", flush=True)
