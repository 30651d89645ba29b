"""More than one device (`specjax.sharding`): the target tensor-parallel on "model", the
batch data-parallel on "data", greedy output identical to one device.

XLA fixes its device count when JAX starts, and this process already has one CPU device,
so every check runs in a fresh interpreter with 4 emulated CPU devices
(XLA_FLAGS=--xla_force_host_platform_device_count=4, JAX_PLATFORMS=cpu):
`tests/sharding_checks.py GROUP` holds the checks, one group per test here.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

CHECKS = Path(__file__).with_name("sharding_checks.py")
REPO = CHECKS.parent.parent


def run_on_four_cpu_devices(group: str) -> str:
    """Run one group of `tests/sharding_checks.py` in a subprocess with 4 CPU devices; its stdout."""
    flags = re.sub(r"--xla_force_host_platform_device_count=\d+", "", os.environ.get("XLA_FLAGS", ""))
    env = {**os.environ, "XLA_FLAGS": f"{flags} --xla_force_host_platform_device_count=4".strip(),
           "JAX_PLATFORMS": "cpu",  # this worktree's specjax first, whatever is installed
           "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
    proc = subprocess.run([sys.executable, str(CHECKS), group], env=env, cwd=REPO, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, f"sharding checks {group!r} failed:\n{proc.stdout}\n{proc.stderr[-6000:]}"
    assert f"OK {group}" in proc.stdout, proc.stdout
    print(proc.stdout)
    return proc.stdout


def test_mesh_errors_and_the_spec_of_every_param_leaf():
    """(a) make_mesh and its named errors, param_specs' errors; (b) every leaf of GPT-NeoX,
    Qwen3 and a biased tied Llama gets its intended spec; placed shards have the split shapes;
    the compiled sharded generate_ar all-reduces activations and gathers no weight or cache."""
    run_on_four_cpu_devices("layout")


def test_generate_ar_sharded_equals_one_device():
    """(c) both architectures on (data=2, model=2) and (data=1, model=4): token for token
    (and sampling with the same key on (2, 2))."""
    out = run_on_four_cpu_devices("ar")
    assert out.count(": identical") == 5  # 2 architectures x 2 meshes, greedy; 1 sampled


@pytest.mark.slow
@pytest.mark.parametrize("group", ["dflash", "eagle3", "graft"])
def test_generate_sharded_equals_one_device(group):
    """(d) DDTree over DFlash and a draft-LM chain; the EAGLE-3 dynamic tree; Graft:
    batch of 4 ragged prompts on (data=2, model=2), token for token."""
    out = run_on_four_cpu_devices(group)
    assert out.count(": identical") == {"dflash": 2, "eagle3": 1, "graft": 1}[group]
