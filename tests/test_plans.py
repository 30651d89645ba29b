"""Plans make their own flags (`specjax.cli.plans`): one flag per field, typed by its annotation, its help from the
docstring, the plan built back from the flags, and a plan's own error renamed to the flags."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from specjax.bench.suite import BenchPlan
from specjax.cli.common import UsageError
from specjax.cli.main import parser as cli_parser
from specjax.cli.plans import as_flags, flags_of, plan_from
from specjax.cli.train import parser as train_parser
from specjax.recipe import RecipeConfig
from specjax.train.run import TRAINERS, TrainPlan


def _pair(text: str) -> tuple[int, int]:
    a, b = text.split("x")
    return int(a), int(b)


@dataclasses.dataclass(frozen=True)
class Toy:
    """A plan.

    Fields:
      name: what it is called.
      size: how big, in
        units.
      scale: a factor (None: none).
      tags: labels.
      shape: rows x columns.
      loud: speak up.
      quiet: keep the `size` down.
      texts: one per flag.
    """

    name: str
    size: int = 3
    scale: float | None = None
    tags: tuple[str, ...] = ("a",)
    shape: tuple[int, int] = dataclasses.field(default=(1, 2), metadata={"parse": _pair})
    loud: bool = False
    quiet: bool = True
    texts: tuple[str, ...] | None = dataclasses.field(default=None, metadata={"flag": "text", "repeat": True})


def _parser():
    ap = argparse.ArgumentParser()
    flags_of(ap, Toy)
    return ap


def test_each_field_is_a_flag_typed_by_its_annotation_and_read_back():
    args = _parser().parse_args(["--name", "n", "--size", "5", "--scale", "0.5", "--tags", "x, y", "--shape", "3x4",
                                 "--loud", "--no-quiet", "--text", "one", "--text", "two"])
    assert plan_from(args, Toy) == Toy("n", 5, 0.5, ("x", "y"), (3, 4), True, False, ("one", "two"))
    assert plan_from(_parser().parse_args(["--name", "n"]), Toy) == Toy("n")  # every default is the plan's
    assert plan_from(_parser().parse_args(["--name", "n"]), Toy, size=9).size == 9  # given fields win
    with pytest.raises(SystemExit):
        _parser().parse_args([])  # a field without a default is a required flag
    with pytest.raises(SystemExit):
        _parser().parse_args(["--name", "n", "--size", "nan"])
    with pytest.raises(UsageError, match="--shape: "):
        plan_from(_parser().parse_args(["--name", "n", "--shape", "3by4"]), Toy)


def test_help_comes_from_the_docstring_with_the_default():
    helps = {a.dest: a.help for a in _parser()._actions if a.dest != "help"}
    assert helps["size"] == "how big, in units. (default: 3)"
    assert helps["scale"] == "a factor (default: none)."
    assert helps["tags"] == "labels. (default: a)"
    assert helps["quiet"] == "turns off what is on by default: keep the --size down."


def test_a_plans_error_is_renamed_to_its_flags():
    assert as_flags("size must be >= 1, got 0", Toy) == "--size must be >= 1, got 0"
    assert as_flags("need `texts` and `shape`: the size is wrong", Toy) == "need --text and --shape: the size is wrong"
    assert as_flags("every size is wrong", Toy) == "every size is wrong"  # only the head word or backticks


def test_every_plan_field_has_its_flag_on_the_command_line():
    """BenchPlan on `specjax bench`, TrainPlan and each kind's configs on `python -m specjax.train KIND`,
    RecipeConfig on `recipe`: no field is left without a flag (TrainPlan's `command` is the command line)."""
    def dests(ap, command):
        sub = next(a for a in ap._actions if a.__class__.__name__ == "_SubParsersAction").choices[command]
        return {a.dest for a in sub._actions}

    fields = lambda cls: {f.name for f in dataclasses.fields(cls)}  # noqa: E731
    assert fields(BenchPlan) <= dests(cli_parser(), "bench")
    assert fields(RecipeConfig) <= dests(train_parser(), "recipe")
    for kind, t in TRAINERS.items():
        assert fields(TrainPlan) - {"command"} | fields(t.arch) | fields(t.train_config) <= dests(train_parser(), kind)
    # the bench's defaults are BenchPlan's (but the prompt count, which follows the --prompt texts)
    args = cli_parser().parse_args(["bench"])
    assert plan_from(args, BenchPlan, num_prompts=10) == BenchPlan()
