"""Trained drafter kinds declare themselves (`TRAINER` records collected by `specjax.train.run`), the
command line is made from their dataclasses, and a resumed run keeps its recipe unless told otherwise."""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import importlib.util
import json
import pkgutil
import textwrap
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import specjax.train as train_package
from specjax import declared, zoo
from specjax.cli import train as train_cli
from specjax.cli.plans import field_docs
from specjax.drafters.registry import needs_of
from specjax.models import init_params
from specjax.models.dflash_net import target_outer
from specjax.train import dflash as train_dflash
from specjax.train import loop as train_loop
from specjax.train.checkpoints import SEQUENCES_READ, load_sequences_read, save_sequences_read
from specjax.train.data import load_shards
from specjax.train.features import data_sha256
from specjax.train.loop import TrainSet, make_optimizer, online_steps
from specjax.train import run as run_module
from specjax.train.run import RUN_FILE, TRAINERS, TrainPlan, check_resume
from specjax.train.trainer import check_values
from tests.train_fixtures import (DRAFTER, TARGET, TARGET_PARAMS, add_tiny_shard, record_bars, tiny_data_directory,
                                  trainset)


def test_every_training_module_with_a_trainer_record_is_collected():
    """Every module of the package with a TRAINER (found here by importing them all, not by reading their
    syntax trees as `specjax.declared` does) is a kind of `TRAINERS`, and what the recipe measures a kind with
    (`Trainer.measured`) are methods that draft with that very kind's export (`Trainer.need`)."""
    declared_kinds = {importlib.import_module(f"specjax.train.{m.name}").TRAINER.kind
                      for m in pkgutil.iter_modules(train_package.__path__)
                      if not m.name.startswith("_") and m.name != "run"
                      and hasattr(importlib.import_module(f"specjax.train.{m.name}"), "TRAINER")}
    assert declared_kinds == set(TRAINERS) and len(TRAINERS) >= 4
    for kind, t in TRAINERS.items():
        assert t.kind == kind and dataclasses.is_dataclass(t.arch) and dataclasses.is_dataclass(t.train_config)
        assert t.measured and all(t.need in needs_of(m) for m in t.measured), (kind, t.measured)
    with pytest.raises(ValueError, match="measured must name the methods"):
        dataclasses.replace(TRAINERS["dflash"], measured=())


def test_a_new_kind_in_its_own_module_is_collected_and_gets_its_command(tmp_path):
    """Adding a kind is its own file: a module with a TRAINER added from outside the package (what
    ``--methods-from`` does, `specjax.declared.add`) becomes a trainer and a `python -m specjax.train toy` command
    whose flags are its dataclasses' fields; no list names it, and it is gone when the block ends."""
    (tmp_path / "toy_trainer_kind.py").write_text(textwrap.dedent('''
        import dataclasses
        from specjax.train.dflash import DFlashTrainConfig, build_config, make_step
        from specjax.train.trainer import Trainer, arch_field

        @dataclasses.dataclass(frozen=True)
        class ToyArch:
            width: int = arch_field(3, "the toy's width")
            tied: bool = arch_field(False, "tie the toy")

        TRAINER = Trainer(kind="toy", help="a toy drafter", train_config=DFlashTrainConfig, arch=ToyArch,
                          build_config=build_config, make_step=make_step, layers=lambda d, t: (),
                          drafter=lambda d, t: None, init=lambda touter, tcfg, vocab: (lambda p: p),
                          measured=("chain4",), loads_as="draft")
    '''))
    spec = importlib.util.spec_from_file_location("toy_trainer_kind", tmp_path / "toy_trainer_kind.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    before = set(TRAINERS)
    with declared.restoring():
        declared.add(module)
        assert set(TRAINERS) == before | {"toy"}
        assert TRAINERS["toy"].help == "a toy drafter"
        args = train_cli.parser().parse_args(["toy", "--data", "D", "--out", "O", "--width", "5", "--tied", "--lr",
                                              "0.5"])
        assert (args.width, args.tied, args.lr, args.gamma) == (5, True, 0.5, 7.0)
        declared.add(module)  # the same module again: nothing new
        assert list(TRAINERS).count("toy") == 1
    assert "toy" not in TRAINERS


def test_every_training_flag_says_what_it_does():
    """Each kind's training-config and architecture flags get their help from the docstrings' "Fields:"
    entries (a subclass's, else its base's) or `arch_field`: none falls back to a bare field name."""
    for kind, t in TRAINERS.items():
        docs = field_docs(t.train_config)
        assert set(docs) >= {f.name for f in dataclasses.fields(t.train_config)}, kind
        assert docs["lr"].startswith("peak learning rate") and "\n" not in docs["clip"]
        assert all(f.metadata.get("help") for f in dataclasses.fields(t.arch)), kind


def test_values_are_checked_by_type_and_range_naming_the_field():
    tc = TRAINERS["dflash"].train_config
    for bad, says in ((dict(lr=-1.0), "lr must be > 0"), (dict(batch_size=0), "batch_size must be > 0"),
                      (dict(steps=True), "steps must be an integer"), (dict(lr="1e-3"), "lr must be a number"),
                      (dict(warmup_frac=1.5), "warmup_frac must be <= 1"), (dict(gamma=float("nan")), "finite")):
        with pytest.raises(ValueError, match=says):
            check_values(tc(**bad))
    check_values(tc())
    with pytest.raises(ValueError, match="seq_len must be an integer >= 1"):
        TrainPlan(data=".", out="o", seq_len=0).check()
    with pytest.raises(ValueError, match="skip_sequences must be an integer >= 0"):
        TrainPlan(data=".", out="o", skip_sequences=-1).check()


def test_a_resumed_run_with_another_recipe_is_refused_unless_overridden(tmp_path):
    t = TRAINERS["dflash"]
    plan = TrainPlan(data="D", out=str(tmp_path))
    recipe = run_module._recipe("dflash", plan, t.arch(), t.train_config(seed=0))
    assert check_resume(tmp_path, recipe) == []  # a fresh directory: nothing to compare
    run_module._write_run(tmp_path, recipe, "python -m specjax.train dflash ... (first)", [])
    assert check_resume(tmp_path, recipe) == []
    changed = run_module._recipe("dflash", plan, t.arch(), t.train_config(seed=1, lr=5e-4))
    with pytest.raises(ValueError, match=r"train_config.lr .*train_config.seed .*--override lr,seed"):
        check_resume(tmp_path, changed)
    assert check_resume(tmp_path, changed, ("seed", "lr")) == ["train_config.lr", "train_config.seed"]
    run_module._write_run(tmp_path, changed, "python -m specjax.train dflash ... --resume --override seed,lr",
                          ["train_config.lr", "train_config.seed"])
    state = json.loads((tmp_path / RUN_FILE).read_text())
    assert [c["overrides"] for c in state["commands"]] == [[], ["train_config.lr", "train_config.seed"]]
    assert state["recipe"]["train_config"]["seed"] == 1  # the run's recipe now is the overridden one
    bigger = run_module._recipe("dflash", plan, t.arch(layers=2), t.train_config(seed=1, lr=5e-4))
    with pytest.raises(ValueError, match=r"arch.layers \(1 -> 2\)"):
        check_resume(tmp_path, bigger)


def _zoo_drafter_and_rows(kind: str, rows: int, seed: int):
    """The zoo target, a `kind` drafter config for it with its feature layers, and `rows` random sequences
    of 24 tokens whose loss region starts at position 5: (tcfg, tparams, trainer, dcfg, layers, tokens, mask)."""
    tcfg, tparams, _ = zoo.load("tiny-neox-target")
    t = TRAINERS[kind]
    dcfg = t.build_config(t.arch(), tcfg, tcfg.vocab_size - 1)
    tokens = np.random.default_rng(seed).integers(1, tcfg.vocab_size, (rows, 24)).astype(np.int32)
    mask = np.zeros(tokens.shape, bool)
    mask[:, 5:] = True
    return tcfg, tparams, t, dcfg, t.layers(dcfg, tcfg), tokens, mask


@pytest.mark.parametrize("kind,soft", [("dflash", 0.0), ("dflash", 0.5), ("eagle3", None)])
def test_features_computed_in_the_step_give_the_cached_loss(kind, soft):
    """`online_steps` (the target's features computed inside the step, the accelerator default) against the
    feature cache's features (computed once, `TrainSet.from_dense` -> `compute_features`): the same loss and
    metrics on the same batch, rtol 1e-5 in float32, and the same params after the step (rtol 1e-4); DFlash with
    soft labels too (the target's last layer after the drafter's: `Trainer.teacher_layers`)."""
    tcfg, tparams, t, dcfg, layers, tokens, mask = _zoo_drafter_and_rows(kind, rows=6, seed=0)
    tc = t.train_config(steps=10, batch_size=4, **({"anchors": 4, "soft_labels": soft} if kind != "eagle3" else {}))
    layers = (*layers, *(t.teacher_layers(tc, tcfg) if t.teacher_layers else ()))
    assert kind != "dflash" or layers == (*dcfg.target_layer_ids, *((tcfg.num_layers - 1,) if soft else ()))
    cached = TrainSet.from_dense((tcfg, tparams), tokens, mask, layers, valid_rows=2)
    online = dataclasses.replace(cached, features=None)
    rows = np.arange(4)
    opt, _ = make_optimizer(tc)
    touter = target_outer(tparams)
    dparams = init_params(dcfg, jax.random.key(0), jnp.float32)
    step, evaluate = t.make_step(dcfg, tcfg, opt, tc)
    ostep, oevaluate = online_steps(step, evaluate, tcfg, layers)
    key = jax.random.key(3)
    a = step(dparams, opt.init(dparams), touter, jax.tree.map(jnp.asarray, cached.batch(rows)), None, key, jnp.int32(0))
    b = ostep(dparams, opt.init(dparams), (touter, tparams), jax.tree.map(jnp.asarray, online.batch(rows)), None, key,
              jnp.int32(0))
    assert "features" not in online.batch(rows)
    np.testing.assert_allclose(float(a[2]), float(b[2]), rtol=1e-5)
    for name in a[3]:
        np.testing.assert_allclose(np.asarray(a[3][name]), np.asarray(b[3][name]), rtol=1e-5, atol=1e-6)
    jax.tree.map(lambda x, y: np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-4, atol=1e-6), a[0], b[0])
    ea = evaluate(dparams, touter, jax.tree.map(jnp.asarray, cached.valid_batch()), None, key)
    eb = oevaluate(dparams, (touter, tparams), jax.tree.map(jnp.asarray, online.valid_batch()), None, key)
    np.testing.assert_allclose(float(ea[0]), float(eb[0]), rtol=1e-5)


def test_a_bfloat16_target_forward_stays_within_its_rounding_bound():
    """`online_steps(..., target_dtype=bfloat16)` (the accelerator default for the frozen target's forward):
    the loss moves, so the forward did run in bfloat16, but by less than 2 (L + 1) u, u = 2^-8 bfloat16's
    unit roundoff and L + 1 rounded stages (the params' cast, then each of the L layers run, up to the deepest
    tapped one, rounding its inputs once; products accumulate in float32): L = 4 for layer 3. Measured:
    features 0.4-0.55 % RMS off float32 on the zoo target, about 1.1-1.4 u."""
    tcfg, tparams, t, dcfg, layers, tokens, mask = _zoo_drafter_and_rows("dflash", rows=4, seed=1)
    batch = {"tokens": jnp.asarray(tokens), "loss_mask": jnp.asarray(mask)}
    tc = t.train_config(steps=10, batch_size=4, anchors=4)
    opt, _ = make_optimizer(tc)
    dparams = init_params(dcfg, jax.random.key(0), jnp.float32)
    step, evaluate = t.make_step(dcfg, tcfg, opt, tc)
    target = (target_outer(tparams), tparams)
    losses = [float(online_steps(step, evaluate, tcfg, layers, dtype)[1](dparams, target, batch, None,
                                                                         jax.random.key(2))[0])
              for dtype in (None, jnp.bfloat16)]
    u, stages = 2.0 ** -8, max(layers) + 1 + 1
    assert losses[0] != losses[1] and abs(losses[1] - losses[0]) <= 2 * stages * u * abs(losses[0]), losses


@pytest.mark.parametrize("kind", ["dflash", "eagle3", "domino"])
def test_bfloat16_drafter_products_stay_within_their_rounding_bound_and_keep_float32_weights(kind):
    """`make_step(..., compute_dtype=bfloat16)` (the accelerator default, `TrainPlan.drafter_dtype`): the loss
    moves (the products did run in bfloat16) by less than 2 k u, u = 2^-8 and k = 6 rounded stages (the
    params' and the features' casts, the drafter's layer inputs, attention, MLP and head; products accumulate
    in float32, the log-softmax runs in float32); the weights and the optimizer state after a step are float32
    and within 5 % of the float32 step's update."""
    tcfg, tparams, t, dcfg, layers, tokens, mask = _zoo_drafter_and_rows(kind, rows=4, seed=2)
    cached = TrainSet.from_dense((tcfg, tparams), tokens, mask, layers, valid_rows=0)
    batch = jax.tree.map(jnp.asarray, cached.batch(np.arange(4)))
    tc = t.train_config(steps=10, batch_size=4, **({"anchors": 4} if kind != "eagle3" else {}))
    opt, _ = make_optimizer(tc)
    touter, key = target_outer(tparams), jax.random.key(4)
    dparams = init_params(dcfg, jax.random.key(0), jnp.float32)
    runs = [t.make_step(dcfg, tcfg, opt, tc, compute_dtype=dtype)[0](dparams, opt.init(dparams), touter, batch, None,
                                                                     key, jnp.int32(5))
            for dtype in (None, jnp.bfloat16)]
    (p32, _, l32, _), (p16, s16, l16, _) = runs
    u, stages = 2.0 ** -8, 6
    assert float(l32) != float(l16) and abs(float(l16) - float(l32)) <= 2 * stages * u * abs(float(l32)), (l32, l16)
    assert all(x.dtype == jnp.float32 for x in jax.tree.leaves((p16, s16)) if jnp.issubdtype(x.dtype, jnp.floating))
    d32 = np.concatenate([np.ravel(a - b) for a, b in zip(jax.tree.leaves(p32), jax.tree.leaves(dparams))])
    d16 = np.concatenate([np.ravel(a - b) for a, b in zip(jax.tree.leaves(p16), jax.tree.leaves(dparams))])
    assert np.linalg.norm(d16 - d32) <= 0.05 * np.linalg.norm(d32)


def test_a_resumed_runs_export_records_every_command_of_the_run(tmp_path):
    """A DFlash run on the zoo target stopped after one step (`stop_after`), then resumed to its end: the
    drafter exported by the resumed call names both commands in recipe.json, in order (run.json's), its batches
    grouped by length, and the sequences it skipped (a continuation on answers its warm start has not seen); a run warm-started from that
    export records the weights its first call read, by their sha256, even when the directory changed before the
    call that exports."""
    t = TRAINERS["dflash"]
    arch, tc = t.arch(block_size=4), t.train_config(steps=2, batch_size=2, anchors=2, log_every=100, ckpt_every=1)
    plan = TrainPlan(data=str(tiny_data_directory(tmp_path / "data")), out=str(tmp_path / "run"), target="zoo", seq_len=24,
                     valid_rows=2, features="online", skip_sequences=3, group_batches=2)
    first = "python -m specjax.train dflash ... --stop-after 1"
    second = "python -m specjax.train dflash ... --resume --export DIR"
    run_module.run("dflash", dataclasses.replace(plan, stop_after=1, command=first), arch, tc)
    one_shard = data_sha256(load_shards(plan.data))
    add_tiny_shard(tmp_path / "data")  # the generator wrote on meanwhile: the resumed call still reads one shard
    run_module.run("dflash", dataclasses.replace(plan, resume=True, export=str(tmp_path / "export"), command=second),
                   arch, tc)
    recipe = json.loads((tmp_path / "export" / "recipe.json").read_text())
    assert [c["command"] for c in recipe["commands"]] == [first, second]
    assert recipe["command"] == second and recipe["compute"]["steps"] == 2
    assert recipe["data"]["sha256"] == one_shard and recipe["data"]["sequences"] == 12
    assert recipe["data"]["train_sequences"] == 7 and recipe["data"]["skipped_sequences"] == 3
    assert recipe["data"]["grouped_batches"] == 2
    assert run_module.read_data_shards(plan.out) == 1
    fresh = run_module.run("dflash", dataclasses.replace(plan, out=str(tmp_path / "again"), stop_after=1), arch, tc)
    assert fresh["export"] is None and run_module.read_data_shards(tmp_path / "again") == 2  # a new run: all of it
    assert recipe["init"] is None
    weights = tmp_path / "export" / "model.safetensors"
    read = hashlib.sha256(weights.read_bytes()).hexdigest()
    warm = dataclasses.replace(plan, out=str(tmp_path / "warm"), init=str(tmp_path / "export"), data_shards=1)
    run_module.run("dflash", dataclasses.replace(warm, stop_after=1), arch, tc)
    weights.write_bytes(weights.read_bytes()[:-1] + b"!")  # the init directory overwritten between the calls
    done = run_module.run("dflash", dataclasses.replace(warm, resume=True, export=str(tmp_path / "warm-export")),
                          arch, tc)
    assert done["export"] is not None
    init = json.loads((tmp_path / "warm-export" / "recipe.json").read_text())["init"]
    assert init == {"directory": str(tmp_path / "export"), "weights_sha256": {"model.safetensors": read},
                    "sequences_read": recipe["data"]["sequences_read"]}


def test_the_progress_bar_times_the_steps_after_the_first_compiling_one(tmp_path, monkeypatch):
    """`train`'s bar (its rate, so its ETA) starts its clock once the first step, which compiles, has returned,
    at that step's count: the first step's compile no longer stretches the ETA."""
    bars, returned = record_bars(monkeypatch, train_loop), []

    def factory(*args, **kw):
        step, evaluate = train_dflash.make_step(*args, **kw)

        def timed(*a):
            out = step(*a)
            returned.append(time.time())
            return out
        return timed, evaluate

    tc = train_dflash.DFlashTrainConfig(steps=10, batch_size=4, anchors=4, log_every=100, ckpt_every=100)
    train_loop.train((TARGET, target_outer(TARGET_PARAMS)), DRAFTER, trainset(DRAFTER.target_layer_ids), tc, tmp_path,
                     step_factory=factory, progress=True, stop_after=2)  # 2 steps, no evaluation to compile
    (bar,) = bars
    assert len(returned) == 2 and returned[0] <= bar.start_t < returned[1], (returned, bar.start_t)
    assert bar.initial == 1 and bar.n == 2


def test_the_progress_bar_shows_the_held_out_tau_of_the_evaluation_just_made(tmp_path, monkeypatch):
    """At each evaluation the bar's "valid tau" is that evaluation's estimate (the log's), not the one before
    (which showed nan after the first evaluation and lagged a log interval behind after)."""
    bars = record_bars(monkeypatch, train_loop)
    tc = train_dflash.DFlashTrainConfig(steps=2, batch_size=4, anchors=4, log_every=2, ckpt_every=100)
    _, log = train_loop.train((TARGET, target_outer(TARGET_PARAMS)), DRAFTER, trainset(DRAFTER.target_layer_ids), tc,
                              tmp_path, step_factory=train_dflash.make_step, progress=True)
    (bar,) = bars
    assert [r["step"] for r in log] == [2]
    assert f"valid tau {log[-1]['valid_tau_estimate']:.2f}" in bar.postfix and "nan" not in bar.postfix


def test_a_field_added_after_a_run_began_resumes_at_its_default_and_only_there(tmp_path):
    """A run.json written before a recipe field existed (here `patience`, `train_tokens` and `answers`, removed
    from it) resumes while the field keeps its default; given another value, the resume is refused naming it."""
    t = TRAINERS["dflash"]
    plan = TrainPlan(data="D", out=str(tmp_path))
    defaults = run_module._recipe("dflash", plan, t.arch(), t.train_config())
    old = json.loads(json.dumps(defaults))
    del old["train_config"]["patience"], old["train_tokens"], old["answers"]
    run_module._write_run(tmp_path, old, "python -m specjax.train dflash ... (an older specjax)", [])
    assert check_resume(tmp_path, defaults, (), defaults) == []
    with pytest.raises(ValueError, match=r"train_config.patience \(0 -> 3\)"):
        check_resume(tmp_path, run_module._recipe("dflash", plan, t.arch(), t.train_config(patience=3)), (), defaults)
    with pytest.raises(ValueError, match=r"answers \('all' -> 'greedy'\)"):
        check_resume(tmp_path, run_module._recipe("dflash", dataclasses.replace(plan, answers="greedy"), t.arch(),
                                                  t.train_config()), (), defaults)


def test_a_chain_of_continuations_on_unseen_answers_never_reads_a_sequence_twice(tmp_path):
    """A run's export records the sequences its weights learned from (sequences_read.npy: the rows of its steps,
    with its warm start's); a continuation with unseen_only trains on the others only, even when its own export
    overwrites the directory it started from between its calls (it reads the copy its first call took), and its
    export records both; a run started anew (not resumed) in a used directory takes its own warm start's record.
    unseen_only without a warm start, or from one without a record, or on other data, is refused, naming the fix."""
    t = TRAINERS["dflash"]
    arch, tc = t.arch(block_size=4), t.train_config(steps=2, batch_size=2, anchors=2, log_every=100, ckpt_every=1)
    data = tiny_data_directory(tmp_path / "data", rows=14)
    plan = TrainPlan(data=str(data), out=str(tmp_path / "a"), target="zoo", seq_len=24, valid_rows=2,
                     features="online", skip_sequences=3, export=str(tmp_path / "zoo"))
    run_module.run("dflash", plan, arch, tc)
    checksums = [s["sha256"] for s in load_shards(plan.data).manifest["shards"]]
    first = json.loads((tmp_path / "zoo" / "recipe.json").read_text())["data"]["sequences_read"]
    a = load_sequences_read(tmp_path / "zoo" / SEQUENCES_READ, first, checksums)
    assert len(a) == 4 and a.min() >= 3 and a.max() < 12 and first["includes_init"] is None  # 2 steps x 2 rows
    # continued in place: stopped after one step, the directory overwritten by another export, then resumed
    cont = dataclasses.replace(plan, out=str(tmp_path / "b"), init=str(tmp_path / "zoo"), skip_sequences=0,
                               unseen_only=True)
    run_module.run("dflash", dataclasses.replace(cont, stop_after=1, export=None), arch, tc)
    run_module.run("dflash", dataclasses.replace(plan, out=str(tmp_path / "c"), skip_sequences=0), arch, tc)
    run_module.run("dflash", dataclasses.replace(cont, resume=True), arch, tc)
    recipe = json.loads((tmp_path / "zoo" / "recipe.json").read_text())
    assert recipe["data"]["train_sequences"] == 12 - 4 and recipe["data"]["unseen_only"]
    both = load_sequences_read(tmp_path / "zoo" / SEQUENCES_READ, recipe["data"]["sequences_read"], checksums)
    assert recipe["data"]["sequences_read"]["includes_init"] is True and len(both) == 8 and set(a) < set(both)
    trained = TrainSet(load_shards(plan.data), None, (), 24, 2).with_train_tokens(exclude=a)
    np.testing.assert_array_equal(np.setdiff1d(both, a), trained.sequences_read(2, 2, tc.seed))
    # a run started anew (not resumed) in the directory of another takes its own warm start, not the old run's
    anew_plan = dataclasses.replace(cont, out=plan.out, stop_after=1, export=None, command="anew")
    run_module.run("dflash", anew_plan, arch, tc)
    anew = json.loads((tmp_path / "a" / RUN_FILE).read_text())
    assert [c["command"] for c in anew["commands"]] == ["anew"] and anew["init_read"]["sequences_read"]["count"] == 8
    with pytest.raises(ValueError, match="unseen_only leaves out what a warm start learned from: give init"):
        dataclasses.replace(plan, unseen_only=True).check()
    with pytest.raises(ValueError, match="no exported drafter there"):
        dataclasses.replace(plan, init=str(tmp_path / "nowhere"), unseen_only=True).check()
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "recipe.json").write_text(json.dumps({"data": {}}))
    (bare / "config.json").write_text("{}")
    with pytest.raises(ValueError, match="has no record of the sequences it learned from .* give skip_sequences"):
        dataclasses.replace(plan, init=str(bare), unseen_only=True).check()
    other = [c[::-1] for c in checksums]
    with pytest.raises(ValueError, match="indexes the sequences of other data"):
        load_sequences_read(tmp_path / "zoo" / SEQUENCES_READ, recipe["data"]["sequences_read"], other)
    with pytest.raises(ValueError, match="the file and recipe.json disagree"):
        load_sequences_read(tmp_path / "zoo" / SEQUENCES_READ, {**first, "shards": len(checksums),
                                                                 "shards_sha256": recipe["data"]["sequences_read"][
                                                                     "shards_sha256"]}, checksums)
    grown = tmp_path / "grown"
    assert save_sequences_read(grown / "s.npy", [0, 5], 30, checksums + ["f" * 64])["count"] == 2
    np.testing.assert_array_equal(load_sequences_read(grown / "s.npy", json.loads(json.dumps(
        save_sequences_read(grown / "s.npy", [5, 0], 30, checksums))), checksums + ["e" * 64]), [0, 5])


def test_a_soft_label_run_reads_the_targets_last_layer_and_other_kinds_refuse_the_field(tmp_path):
    """`python -m specjax.train dflash --soft-labels 0.5`: the batches carry the target's last layer after the
    drafter's (recipe.json's features.layers), online as the accelerators run it; a value outside [0, 1] is
    refused before anything loads, and Domino, whose loss has no such term, refuses it rather than ignore it."""
    t = TRAINERS["dflash"]
    arch, tc = t.arch(block_size=4), t.train_config(steps=1, batch_size=2, anchors=2, log_every=100, ckpt_every=1,
                                                    soft_labels=0.5)
    plan = TrainPlan(data=str(tiny_data_directory(tmp_path / "data")), out=str(tmp_path / "run"), target="zoo",
                     seq_len=24, valid_rows=2, features="online", export=str(tmp_path / "export"))
    run_module.run("dflash", plan, arch, tc)
    recipe = json.loads((tmp_path / "export" / "recipe.json").read_text())
    tcfg = zoo.load("tiny-neox-target")[0]
    assert recipe["features"]["layers"][-1] == tcfg.num_layers - 1 and recipe["train_config"]["soft_labels"] == 0.5
    assert len(recipe["features"]["layers"]) == len(recipe["drafter"]["target_layer_ids"]) + 1
    for bad in (1.5, -0.1):
        with pytest.raises(ValueError, match="soft_labels must be"):
            check_values(t.train_config(soft_labels=bad))
    with pytest.raises(ValueError, match="Domino's loss has no target-distribution term"):
        TRAINERS["domino"].train_config(soft_labels=0.5)
