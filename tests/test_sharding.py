"""More than one device (`specjax.sharding`): the target tensor-parallel on "model", the
batch data-parallel on "data", greedy output identical to one device.

XLA fixes its device count when JAX starts, and this process already has one CPU device,
so the checks run in a fresh interpreter with 4 emulated CPU devices
(XLA_FLAGS=--xla_force_host_platform_device_count=4, JAX_PLATFORMS=cpu):
`tests/sharding_checks.py` holds them, one group per test here; the groups of the selected
tests run in one interpreter (one JAX start-up; they share the one-device references' programs).
"""

import os
import re
import sys
from pathlib import Path

import pytest

from tests.child_groups import child_group_fixture, run_child_groups

CHECKS = Path(__file__).with_name("sharding_checks.py")
REPO = CHECKS.parent.parent


def run_on_four_cpu_devices(groups: list[str]) -> dict[str, str]:
    """Run groups of `tests/sharding_checks.py` in one subprocess with 4 CPU devices; {group: its output}."""
    flags = re.sub(r"--xla_force_host_platform_device_count=\d+", "", os.environ.get("XLA_FLAGS", ""))
    env = {**os.environ, "XLA_FLAGS": f"{flags} --xla_force_host_platform_device_count=4".strip(),
           "JAX_PLATFORMS": "cpu",  # this worktree's specjax first, whatever is installed
           "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
    return run_child_groups([sys.executable, str(CHECKS)], groups, env=env, cwd=REPO)


def _group(item) -> str:
    return item.callspec.params["group"] if hasattr(item, "callspec") else GROUP_OF[item.originalname]


four_devices = child_group_fixture(_group, run_on_four_cpu_devices)


def test_mesh_errors_and_the_spec_of_every_param_leaf(four_devices):
    """(a) make_mesh and its named errors, param_specs' errors; (b) every leaf of GPT-NeoX,
    Qwen3 and a biased tied Llama gets its intended spec; placed shards have the split shapes;
    the compiled sharded generate_ar all-reduces activations and gathers no weight or cache."""
    four_devices("layout")


def test_generate_ar_sharded_equals_one_device(four_devices):
    """(c) both architectures on (data=2, model=2) and (data=1, model=4): token for token
    (and sampling with the same key on (2, 2))."""
    out = four_devices("ar")
    assert out.count(": identical") == 5  # 2 architectures x 2 meshes, greedy; 1 sampled


@pytest.mark.slow
@pytest.mark.parametrize("group", ["dflash", "eagle3", "graft"])
def test_generate_sharded_equals_one_device(group, four_devices):
    """(d) DDTree over DFlash and a draft-LM chain; the EAGLE-3 dynamic tree; Graft:
    batch of 4 ragged prompts on (data=2, model=2), token for token."""
    out = four_devices(group)
    assert out.count(": identical") == {"dflash": 2, "eagle3": 1, "graft": 1}[group]


def test_training_step_sharded_equals_one_device(four_devices):
    """The drafter trainer with a mesh (batch on "data", the target head vocab-parallel on "model"):
    DFlash with a draft vocabulary on (2, 2), EAGLE-3 on (4, 1): losses and params = one device."""
    out = four_devices("train")
    assert out.count("equal to one device") == 2


GROUP_OF = {test_mesh_errors_and_the_spec_of_every_param_leaf.__name__: "layout",
            test_generate_ar_sharded_equals_one_device.__name__: "ar",
            test_training_step_sharded_equals_one_device.__name__: "train"}
