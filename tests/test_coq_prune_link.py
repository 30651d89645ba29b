"""specjax.tree.prune equals the pruning that Coq computes and has proved valid (issue 61; row DY2
of proofs/README.md, proofs/coq/TreePrune.v).

`TreePrune.prune_alive par valid keep n` is the Coq model of `prune`'s `fori_loop` (node i
survives iff it is valid, kept and its parent is the root or survives: `prune_alive_spec`),
about which TreePrune.v proves `prune_valid_tree` (the pruned, normalised tree keeps every
rule of `TREE_RULES`) and `prune_leaf_valid` (pruning a leaf removes exactly that leaf). This
test draws random small rows (any parents before their nodes, valid and keep masks at random,
so subtrees below invalid or dropped nodes occur, and rows where one leaf is dropped), evaluates
`prune_alive` inside Coq with `Eval vm_compute`, and checks that `prune` returns the same
survivors and normalises the other slots as `TreePrune.normalised` does (parent -1, depth 0,
token 0). Needs `coqc` (TreePrune.v depends on the standard library only; it is compiled in a
temporary directory). A prune that drops the ancestor condition (`alive = valid & keep`) is
departed from: the instances include rows where Coq's survivors differ from `valid & keep`.
"""

from __future__ import annotations

import pathlib
import re
import shutil
import subprocess

import jax.numpy as jnp
import numpy as np
import pytest

from specjax.tree import Tree, prune

ROOT = pathlib.Path(__file__).resolve().parent.parent
COQ = ROOT / "proofs" / "coq"
SEED = 61
ROWS, NODES = 48, 8


def random_rows(rng: np.random.Generator):
    """(parents int[R, N] in [-1, i), depth, tokens, valid bool[R, N], keep bool[R, N]); the last
    quarter of the rows are prefix-closed trees with keep False at exactly one valid leaf."""
    parents = np.array([[rng.integers(-1, i) if i else -1 for i in range(NODES)] for _ in range(ROWS)], np.int32)
    depth = np.zeros((ROWS, NODES), np.int32)
    for i in range(NODES):
        depth[:, i] = np.where(parents[:, i] < 0, 1, depth[np.arange(ROWS), np.maximum(parents[:, i], 0)] + 1)
    tokens = rng.integers(0, 5, size=(ROWS, NODES)).astype(np.int32)
    valid = rng.random((ROWS, NODES)) < 0.8
    keep = rng.random((ROWS, NODES)) < 0.75
    for r in range(3 * ROWS // 4, ROWS):  # prefix-closed rows, one leaf dropped
        valid[r] = True
        leaves = [i for i in range(NODES) if not (parents[r] == i).any()]
        keep[r] = True
        keep[r, leaves[int(rng.integers(len(leaves)))]] = False
    return parents, depth, tokens, valid, keep


def coq_list(xs, bool_=False) -> str:
    return "[" + "; ".join(("true" if x else "false") if bool_ else str(int(x)) for x in xs) + "]"


def coq_alive(parents, valid, keep, workdir: pathlib.Path) -> np.ndarray:
    """bool[R, N]: Coq's prune_alive for every row (par i = parents[i] + 1, as in TreePrune.v)."""
    shutil.copy(COQ / "TreePrune.v", workdir / "TreePrune.v")
    res = subprocess.run(["coqc", "-Q", ".", "Specjax", "TreePrune.v"], cwd=workdir, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    lines = ["From Coq Require Import List.", "From Specjax Require Import TreePrune.", "Import ListNotations."]
    for p, v, k in zip(parents, valid, keep):
        lines.append(
            f"Eval vm_compute in map (prune_alive (fun i => nth i {coq_list(p + 1)} 0) "
            f"(fun i => nth i {coq_list(v, True)} false) (fun i => nth i {coq_list(k, True)} false) {NODES}) "
            f"(seq 0 {NODES}).")
    (workdir / "run_prune.v").write_text("\n".join(lines) + "\n")
    res = subprocess.run(["coqc", "-Q", ".", "Specjax", "run_prune.v"], cwd=workdir, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    found = re.findall(r"=\s*\[([^\]]*)\]\s*:\s*list bool", res.stdout)
    assert len(found) == len(parents), res.stdout
    return np.array([[w.strip() == "true" for w in row.split(";")] for row in found], bool)


def test_prune_equals_coq_prune_alive(tmp_path):
    if shutil.which("coqc") is None:
        pytest.skip("coqc is not installed: the Coq side of this test cannot run (CI installs Coq; `make proofs`)")
    parents, depth, tokens, valid, keep = random_rows(np.random.default_rng(SEED))
    want = coq_alive(parents, valid, keep, tmp_path)
    # the instances exercise the ancestor condition: Coq's survivors are not just valid & keep
    assert (want != (valid & keep)).any(axis=1).sum() >= 5
    tree = Tree(tokens=jnp.asarray(tokens), parents=jnp.asarray(parents), depth=jnp.asarray(depth),
                valid=jnp.asarray(valid))
    got = prune(tree, jnp.asarray(keep))
    np.testing.assert_array_equal(np.asarray(got.valid), want)
    # TreePrune.normalised: survivors keep their fields, the other slots become padding
    np.testing.assert_array_equal(np.asarray(got.parents), np.where(want, parents, -1))
    np.testing.assert_array_equal(np.asarray(got.depth), np.where(want, depth, 0))
    np.testing.assert_array_equal(np.asarray(got.tokens), np.where(want, tokens, 0))
    # prune_leaf_valid: on the prefix-closed rows exactly the dropped leaf goes
    rows = slice(3 * ROWS // 4, ROWS)
    np.testing.assert_array_equal(want[rows], valid[rows] & keep[rows])
