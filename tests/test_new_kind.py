"""A drafter kind is one declaration: a module outside the package declares a kind with its own network (config
class and family), its reader, method, trainer (what the recipe measures it with) and round split, and every
front door runs it by name, with no list of the package naming it (`specjax.declared`)."""

from __future__ import annotations

import json
import textwrap

from specjax import declared, zoo
from specjax.bench.round_split import split_of
from specjax.cli.main import main as cli_main
from specjax.cli.train import main as train_main
from specjax.drafters.registry import READERS, method, parse, registered
from specjax.models import load_checkpoint
from specjax.models.families import FAMILIES, MODEL_TYPES
from specjax.train.run import TRAINERS

KIND = '''
"""The "toy" kind: a DFlash-architecture network of its own model type, trained as "toy"."""
import dataclasses
import functools
import sys

import jax

from specjax.bench.round_split import RoundSplit, round_cost, state_after
from specjax.bench.timing import median_seconds
from specjax.drafters.dflash import DFlashDrafter
from specjax.drafters.spec import MethodSpec, Reader
from specjax.models.dflash import IGNORED_KEYS, Block, DFlashConfig, Outer, param_maps  # its network's parts
from specjax.models.families import register
from specjax.sampling import Sampling
from specjax.train import dflash as train_dflash
from specjax.train.trainer import Trainer


@dataclasses.dataclass(frozen=True)
class ToyConfig(DFlashConfig):
    model_type = "toy"

    def to_hf(self):
        return {**super().to_hf(), "model_type": "toy"}


FAMILY = register(sys.modules[__name__], ToyConfig, ("toy",))


@dataclasses.dataclass(frozen=True)
class ToyDrafter(DFlashDrafter):
    config_class = ToyConfig


def _build(b):
    cfg, params = b.need("toy")
    return ToyDrafter(cfg, b.target_cfg), params


READER = Reader("toy", "Toy", lambda cfg, params: f"toy, {cfg.num_layers} layer(s)")
METHODS = (MethodSpec("toy", ("toy",), "the toy kind's chain", _build, needs=("toy",)),)
TRAINER = Trainer(kind="toy", help="a toy drafter", train_config=train_dflash.DFlashTrainConfig,
                  arch=train_dflash.DFlashArch,
                  build_config=functools.partial(train_dflash.build_config, cls=ToyConfig),
                  make_step=train_dflash.make_step, layers=lambda dcfg, tcfg: train_dflash.feature_layers(dcfg),
                  drafter=ToyDrafter, init=lambda touter, tcfg, vocab: train_dflash.init_norm_from_target(touter),
                  measured=("toy",))


def toy_split(target, drafter, draft_params, tokens, lengths, *, rounds_before=2, reps=10, sampling=Sampling(),
              max_new=64, **kw):
    """The whole round and an AR step, and the drafter's proposal alone ("propose")."""
    state, _ = state_after(target, drafter, draft_params, tokens, lengths, rounds_before, max_new, sampling)
    propose = jax.jit(lambda ds, root, active: drafter.propose(ds, root, active, None, sampling)[0])
    jax.block_until_ready(propose(state.draft_state, state.root, ~state.done))
    ms = 1e3 * median_seconds(propose, state.draft_state, state.root, ~state.done, repeats=reps)
    return {"propose": ms, **round_cost(target, drafter, draft_params, tokens, lengths, rounds_before=rounds_before,
                                        reps=reps, sampling=sampling, max_new=max_new, **kw)}


ROUND_SPLITS = (RoundSplit(ToyDrafter, ("propose", "round", "ar_step"), toy_split),)
'''


def test_a_kind_declared_in_one_module_outside_the_package_runs_through_every_front_door(tmp_path, capsys):
    source = tmp_path / "toy_kind.py"
    source.write_text(textwrap.dedent(KIND))
    out = tmp_path / "recipe"
    with registered():
        # the recipe, through `python -m specjax.train --methods-from FILE recipe --kinds toy`: data, the toy
        # trained and exported, then measured with its own method (`Trainer.measured`) against AR
        assert train_main(["--methods-from", str(source), "recipe", "--target", "zoo", "--kinds", "toy", "--minutes",
                           "0.4", "--steps", "3", "--out", str(out), "--measure-prompts", "1", "--eval-prompts",
                           "1"]) == 0
        assert "toy" in TRAINERS and "toy" in READERS and parse("toy").spec.name == "toy"
        report = json.loads((out / "recipe.json").read_text())
        trained = report["phases"]["train"]["toy"]
        assert trained["steps_done"] >= 1 and trained["export"].endswith("zoo-toy")
        measured = report["phases"]["measure"]["methods"]
        assert set(measured) == {"ar", "toy"} and all(m["agrees_with_ar"] for m in measured.values())
        cfg, params = load_checkpoint(trained["export"])  # its own network, read back by its own family
        assert type(cfg).__name__ == "ToyConfig" and cfg.model_type == "toy"
        built = method("toy", load_checkpoint(zoo.path("tiny-neox-target"))[0], toy=(cfg, params))
        assert type(built.drafter).__name__ == "ToyDrafter" and split_of(built.drafter).parts[0] == "propose"

        # `python -m specjax.train toy`: its command, flags made from its dataclasses, on the recipe's data
        assert train_main(["toy", "--target", "zoo", "--data", str(out / "data"), "--out", str(tmp_path / "run"),
                           "--cache", str(out / "runs" / "features"), "--seq-len", "96", "--valid-rows", "4",
                           "--steps", "2", "--batch-size", "2", "--anchors", "2", "--layers", "1"]) == 0
        assert json.loads((tmp_path / "run" / "ckpt" / "state.json").read_text())["step"] == 2

        # `specjax bench --round-split`: the toy's own parts in the round-split table
        capsys.readouterr()
        assert cli_main(["bench", "--methods-from", str(source), "--methods", "ar,toy", "--toy", trained["export"],
                         "--prompt", "The river flows through the", "--prompt", "The city of Paris is", "--prompts",
                         "2", "--warmup", "1", "--max-new-tokens", "8", "--no-progress", "--no-ttft",
                         "--round-split"]) == 0
        text = capsys.readouterr().out
        row = next(line for line in text[text.index("what a round costs"):].splitlines() if line.startswith("toy "))
        assert "propose " in row and float(row.split("propose ")[1].split()[0].rstrip(",")) > 0
    # leaving `registered()` forgets the module: its kind is gone from every registry
    assert "toy" not in TRAINERS and "toy" not in READERS and not declared.added("TRAINER")
    assert "toy" not in MODEL_TYPES and all(f.module.__name__ != "toy_kind" for f in FAMILIES.values())


def test_the_round_split_of_a_drafter_is_its_nearest_declared_class():
    from specjax.bench.round_split import GRAFT_PARTS, PARTS, PROTOCOL_SPLIT
    from specjax.drafters import DDTreeDrafter, DFlashDrafter, GraftDrafter

    assert split_of(object.__new__(DDTreeDrafter)).parts == PARTS
    assert split_of(object.__new__(GraftDrafter)).parts == GRAFT_PARTS
    assert split_of(object.__new__(DFlashDrafter)) is PROTOCOL_SPLIT
