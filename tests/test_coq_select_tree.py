"""specjax's `select_tree` equals the selection that Coq computes and has proved correct
(issue 39 items 2 and 4; proofs/coq/DDTreeSelect.v and DDTreeHeap.v, rows DD2, DD4 and DD5
of proofs/README.md).

`DDTreeSelect.select tbl V L N` is a Coq program (insertion sort of every prefix by the
proved order `≺`, then the first N, mapped from ranks to tokens) about which
DDTreeSelect.v proves `select_spec` (it is the first N prefixes of the order) and
`select_proposition2` (valid, optimal). This test draws small random instances with
rational marginals, evaluates `select` inside Coq with `Eval vm_compute`, and checks that
`select_tree` (both methods) on the float32 log-probabilities of the same marginals returns
the same prefixes, node for node, in the same order, with the same parents.

Coq also runs its model of the levels algorithm (`select_levels`, equal to `select` by
`select_levels_spec`) and of the best-first heap (`DDTreeHeap.select_heap`, equal to `select`
by `select_heap_spec`, Proposition 3), compared node for node with `method="pops"`. The Coq side is exact; the code compares float32 sums of
logarithms. An instance is kept only if float32 compares every pair of prefixes as the
exact products do (equal products that float32 also sees equal are kept: they exercise the
tie rule). Needs `coqc`; uses the
`.vo` files of `make proofs` when they are current, else compiles the modules it needs in a
temporary directory.

Besides the random instances, the cases hold (issue 50):

* the depth-rule table `[[1/2,1/4,1/4],[1/8,1/4,5/8],[1/4,1/4,1/2]]`, N = 5
  (`DEPTH_RULE_CASE`): the prefixes (1,2), (2,2) and (0,2,2) all have q = 5/32 and tie for
  the fifth place; rule (2) (depth ascending) puts (1,2) fifth, and Coq, the heap model and
  the code give `(0),(0,2),(1),(2),(1,2)`; an order without rule (2), or with rule (3) (the
  parent's pop index) before it, puts (0,2,2) fifth (its parent (0,2) was popped second);
* rows with q in {0, 1} (`degenerate_instances`), i.e. log-scores -inf and 0: a one-hot row
  (a child exactly as probable as its parent: in the order only rule (2) puts the parent
  first) and rows with zero entries (prefixes of score -inf, all tied in float32 as in the
  exact order).

Mutation check (run by hand for issue 50 on `_select_row_pops` in
specjax/drafters/ddtree.py, then restored; see proofs/README.md, DD4):

* M1, rule (2) dropped (`for key in ("parent", "rank")`): killed by
  `test_depth_rule_known_answer[pops]`, `test_select_tree_equals_coq_select[pops]` and
  `test_select_tree_pops_equals_coq_heap` (the depth-rule case pops (0,2,2) fifth);
  the random instances alone did not kill it;
* M2, rule (3) before rule (2) (`for key in ("parent", "depth", "rank")`): killed by the
  same three tests, for the same reason; the random instances alone did not kill it (the
  version of this file before issue 50 passed, 6 tests, under M1 and under M2);
* M3, rule (3) dropped (`for key in ("depth", "rank")`): killed by
  `test_select_tree_equals_coq_select[pops]` and `test_select_tree_pops_equals_coq_heap`;
* not killed: M4, rule (4) dropped (`for key in ("depth", "parent")`) passes every test here.
  It is equivalent, not merely missed: a popped slot is reused by its next sibling and only
  the first child is pushed, so at most one live slot has a given parent
  (proofs/coq/DDTreeSlots.v, `slots_invariant`, issue 61), and the parent already singles
  out one slot.
"""

from __future__ import annotations

import itertools
import math
import pathlib
import re
import shutil
import subprocess
from fractions import Fraction

import numpy as np
import pytest
from tests.coq_build import compile_copy, compiled_in_repo

from specjax.drafters.ddtree import select_tree

ROOT = pathlib.Path(__file__).resolve().parent.parent
COQ = ROOT / "proofs" / "coq"
MODULE = "DDTreeSelect"
LAST_MODULE = "DDTreeHeap"  # the last module the script imports (it requires MODULE)
PROGRAMS = ("select", "select_levels", "select_heap")
SEED = 39
# (L, V, N, want): depth 2-3, vocabulary 3-4, budgets from 1 to past the number of prefixes
# (3+9 = 12). want "cut": the table is redrawn until the N-th and (N+1)-th largest q(u) are
# equal, so that which prefixes are selected (not only their order) depends on the tie rule;
# "parent": until two equally probable prefixes of one depth among the first N are ordered by
# rule (3) (the parents' scores) otherwise than by their tokens.
SHAPES = [(2, 3, 1, None), (2, 3, 5, "cut"), (2, 3, 13, None), (3, 3, 8, "cut"), (2, 4, 6, "parent"),
          (3, 4, 8, "parent"), (3, 4, 3, "cut"), (3, 3, 7, "cut")]
DENOMINATORS = (6, 8, 10, 12)


def needed_modules() -> list[str]:
    """The files of _CoqProject up to and including DDTreeHeap.v (its dependencies come first)."""
    files = [f for f in (COQ / "_CoqProject").read_text().split() if f.endswith(".v")]
    return files[: files.index(f"{LAST_MODULE}.v") + 1]


# ---------------------------------------------------------------- instances


def random_row(rng: np.random.Generator, vocab: int) -> list[Fraction]:
    """vocab positive rationals with a small common denominator, summing to 1, in random token order."""
    den = int(rng.choice(DENOMINATORS))
    cuts = np.sort(rng.choice(np.arange(1, den), size=vocab - 1, replace=False))
    parts = np.diff(np.concatenate([[0], cuts, [den]]))
    return [Fraction(int(p), den) for p in rng.permutation(parts)]


def float_log_q(table: list[list[Fraction]]) -> np.ndarray:
    """f32[L, V]: what a drafter would hand to select_tree (log of the same marginals; log 0 = -inf)."""
    return np.array([[math.log(x) if x > 0 else -math.inf for x in row] for row in table], np.float32)


def sign(a, b) -> int:
    return int(a > b) - int(a < b)


def all_prefixes(depth: int, vocab: int):
    return [u for d in range(1, depth + 1) for u in itertools.product(range(vocab), repeat=d)]


def float_agrees_with_exact(table: list[list[Fraction]]) -> bool:
    """float32 sigma (accumulated depth by depth, as select_tree does) orders every pair of
    prefixes, and every pair of tokens of a depth, as the exact q does (ties included)."""
    lq = float_log_q(table)
    depth, vocab = lq.shape
    for d in range(depth):
        for v, w in itertools.combinations(range(vocab), 2):
            if sign(table[d][v], table[d][w]) != sign(lq[d, v], lq[d, w]):
                return False
    exact_q, sigma = {}, {}
    for u in all_prefixes(depth, vocab):
        exact_q[u] = (exact_q[u[:-1]] if len(u) > 1 else Fraction(1)) * table[len(u) - 1][u[-1]]
        sigma[u] = np.float32((sigma[u[:-1]] if len(u) > 1 else np.float32(0.0)) + lq[len(u) - 1, u[-1]])
    us = list(exact_q)
    for u, w in itertools.combinations(us, 2):
        if sign(exact_q[u], exact_q[w]) != sign(sigma[u], sigma[w]):
            return False
    return True


def prefix_probs(table: list[list[Fraction]]) -> dict[tuple[int, ...], Fraction]:
    depth, vocab = len(table), len(table[0])
    q: dict[tuple[int, ...], Fraction] = {}
    for u in all_prefixes(depth, vocab):
        q[u] = (q[u[:-1]] if len(u) > 1 else Fraction(1)) * table[len(u) - 1][u[-1]]
    return q


def tie_at_cut(table: list[list[Fraction]], budget: int) -> bool:
    values = sorted(prefix_probs(table).values(), reverse=True)
    return budget < len(values) and values[budget - 1] == values[budget]


def parent_rule_matters(table: list[list[Fraction]], budget: int) -> bool:
    q = prefix_probs(table)
    values = sorted(q.values(), reverse=True)
    bar = values[min(budget, len(values)) - 1]
    for u, w in itertools.combinations(q, 2):
        if len(u) == len(w) and q[u] == q[w] >= bar:
            by_parents = sign([-q[u[:j]] for j in range(len(u) - 1, 0, -1)], [-q[w[:j]] for j in range(len(w) - 1, 0, -1)])
            if by_parents != 0 and by_parents != sign(u, w):
                return True
    return False


WANT = {None: lambda table, budget: True, "cut": tie_at_cut, "parent": parent_rule_matters}


def instances() -> list[tuple[int, int, int, list[list[Fraction]]]]:
    """(L, V, N, table) for each shape; a table is redrawn until float32 agrees with the exact
    order (and, where asked, a tie straddles the cut)."""
    rng = np.random.default_rng(SEED)
    out = []
    for depth, vocab, budget, want in SHAPES:
        for _ in range(5000):
            table = [random_row(rng, vocab) for _ in range(depth)]
            if WANT[want](table, budget) and float_agrees_with_exact(table):
                break
        else:
            raise AssertionError(f"no float32-consistent table for L={depth}, V={vocab}")
        out.append((depth, vocab, budget, table))
    return out + [DEPTH_RULE_CASE] + degenerate_instances()


# The depth-rule case of issue 50 and the selection that rules (1)-(4) give for it.
DEPTH_RULE_CASE = (3, 3, 5, [[Fraction(1, 2), Fraction(1, 4), Fraction(1, 4)],
                             [Fraction(1, 8), Fraction(1, 4), Fraction(5, 8)],
                             [Fraction(1, 4), Fraction(1, 4), Fraction(1, 2)]])
DEPTH_RULE_ANSWER = [(0,), (0, 2), (1,), (2,), (1, 2)]
# (L, V, N) of the tables with rows whose entries are 0 or 1 (log-scores -inf and 0).
DEGENERATE_SHAPES = [(2, 3, 6), (3, 3, 9), (3, 4, 10), (2, 4, 13), (3, 3, 20)]


def degenerate_row(rng: np.random.Generator, vocab: int, kind: str) -> list[Fraction]:
    """kind "one-hot": q = 1 on one random token, 0 elsewhere; "zeros": a row summing to 1
    with one or two zero entries (at random tokens); "plain": random_row."""
    if kind == "one-hot":
        row = [Fraction(0)] * vocab
        row[int(rng.integers(vocab))] = Fraction(1)
        return row
    if kind == "zeros":
        zeros = int(rng.integers(1, vocab - 1))
        row = random_row(rng, vocab - zeros) + [Fraction(0)] * zeros
        return [row[i] for i in rng.permutation(vocab)]
    return random_row(rng, vocab)


def degenerate_instances() -> list[tuple[int, int, int, list[list[Fraction]]]]:
    """Tables whose rows include a one-hot row and a row with zeros (each table has both)."""
    rng = np.random.default_rng(SEED + 50)
    out = []
    for i, (depth, vocab, budget) in enumerate(DEGENERATE_SHAPES):
        kinds = ["one-hot", "zeros"] + ["plain"] * (depth - 2)
        kinds = kinds[i % depth:] + kinds[: i % depth]  # the one-hot row at a different depth each time
        for _ in range(5000):
            table = [degenerate_row(rng, vocab, kind) for kind in kinds]
            if float_agrees_with_exact(table):
                break
        else:
            raise AssertionError(f"no float32-consistent degenerate table for L={depth}, V={vocab}")
        out.append((depth, vocab, budget, table))
    return out


def heap_model(table: list[list[Fraction]], budget: int, rules=("depth", "parent", "rank")) -> list[tuple[int, ...]]:
    """Exact Python model of the best-first selection (DDTreeHeap.select_heap's algorithm), with
    the tie rules after "score descending" given by `rules`; the default is the code's
    (rules (2), (3), (4)); a mutant drops or reorders them. Returns token tuples in pop order."""
    depth, vocab = len(table), len(table[0])
    order = [sorted(range(vocab), key=lambda v: (-table[d][v], v)) for d in range(depth)]  # top_k's ranks
    k = min(budget, vocab)
    # entry: (q, depth, parent pop index (-1 at depth 1), rank, parent token tuple)
    frontier = [(table[0][order[0][0]], 1, -1, 0, ())]
    popped: list[tuple[int, ...]] = []
    popped_q: list[Fraction] = []
    while frontier and len(popped) < budget:
        def key(e):
            fields = {"depth": e[1], "parent": e[2], "rank": e[3]}
            return (-e[0],) + tuple(fields[r] for r in rules)
        best = min(frontier, key=key)
        frontier.remove(best)
        q, d, par, r, base = best
        u = base + (order[d - 1][r],)
        t = len(popped)
        popped.append(u)
        popped_q.append(q)
        parent_q = popped_q[par] if par >= 0 else Fraction(1)
        if r + 1 < k:
            frontier.append((parent_q * table[d - 1][order[d - 1][r + 1]], d, par, r + 1, base))
        if d < depth:
            frontier.append((q * table[d][order[d][0]], d + 1, t, 0, u))
    return popped


# ---------------------------------------------------------------- Coq side


def coq_q(x: Fraction) -> str:
    return f"({x.numerator} # {x.denominator})"


def coq_script(cases) -> str:
    lines = [
        "From Coq Require Import List QArith.",
        f"From Specjax Require Import {MODULE} {LAST_MODULE}.",
        "Import ListNotations.",
        "Local Open Scope Q_scope.",
    ]
    for i, (depth, vocab, budget, table) in enumerate(cases):
        rows = "; ".join("[" + "; ".join(coq_q(x) for x in row) + "]" for row in table)
        lines.append(f"Definition tbl{i} : list (list Q) := [{rows}].")
        for program in PROGRAMS:
            lines.append(f"Eval vm_compute in {program} tbl{i} {vocab}%nat {depth}%nat {budget}%nat.")
    return "\n".join(lines) + "\n"


def parse_results(stdout: str, count: int) -> list[list[tuple[int, ...]]]:
    """The printed values `= [[0%nat]; [1%nat; 0%nat]; ...] : list (list nat)`, in order."""
    blocks = re.findall(r"=\s*(\[.*?\])\s*:\s*list\s*\(list\s+nat\)", stdout, re.DOTALL)
    assert len(blocks) == count, stdout
    results = []
    for block in blocks:
        text = re.sub(r"%nat|\s", "", block)
        inner = text[1:-1]
        prefixes = re.findall(r"\[([0-9;]*)\]", inner) if inner else []
        results.append([tuple(int(t) for t in p.split(";")) for p in prefixes])
    return results


def run_coq(cases, workdir: pathlib.Path):
    script = workdir / "SelectCheck.v"
    script.write_text(coq_script(cases))
    libs = [COQ] if compiled_in_repo(needed_modules()) else []
    for attempt in range(2):
        lib = libs[0] if libs else compile_copy(workdir, needed_modules())
        res = subprocess.run(["coqc", "-Q", str(lib), "Specjax", script.name], cwd=workdir,
                             capture_output=True, text=True, timeout=300)
        if res.returncode == 0:
            k = len(PROGRAMS)
            printed = parse_results(res.stdout, k * len(cases))
            return tuple(printed[i::k] for i in range(k))  # (select, select_levels, select_heap) per case
        if not libs:  # already our own fresh compile: a real failure
            break
        libs = []  # the tree's .vo files did not load (another coqc version?): compile a copy
    raise AssertionError(f"coqc failed on {script}:\n{res.stdout}\n{res.stderr}")


# ---------------------------------------------------------------- the test


def python_selection(log_q: np.ndarray, budget: int, method: str) -> list[tuple[int, ...]]:
    """select_tree's valid nodes as token tuples, slot order; checks the parent links on the way."""
    tree = select_tree(log_q[None], budget, method=method)
    tokens, parents, depth, valid = (np.asarray(a)[0] for a in (tree.tokens, tree.parents, tree.depth, tree.valid))
    out: list[tuple[int, ...]] = []
    for i in range(budget):
        if not valid[i]:
            assert not valid[i:].any(), "padding is at the end"
            break
        p = int(parents[i])
        assert -1 <= p < i, "a parent comes before its child"
        base = () if p < 0 else out[p]
        out.append(base + (int(tokens[i]),))
        assert len(out[-1]) == int(depth[i])
    return out


@pytest.fixture(scope="module")
def coq_results(tmp_path_factory):
    if shutil.which("coqc") is None:
        pytest.skip("coqc is not installed: the Coq side of this test cannot run (CI installs Coq; `make proofs`)")
    cases = instances()
    return cases, run_coq(cases, tmp_path_factory.mktemp("coq_select"))


@pytest.mark.parametrize("method", ["levels", "pops"])
def test_select_tree_equals_coq_select(coq_results, method):
    cases, (results, _, _) = coq_results
    for (depth, vocab, budget, table), coq_sel in zip(cases, results):
        n = min(budget, sum(vocab**d for d in range(1, depth + 1)))
        assert len(coq_sel) == n
        got = python_selection(float_log_q(table), budget, method)
        assert got == coq_sel, (depth, vocab, budget, [[str(x) for x in row] for row in table])


def test_coq_levels_program_equals_coq_select(coq_results):
    """DDTreeSelect.select_levels (the levels algorithm, proved equal to select by
    select_levels_spec) prints the same selection as select on every instance."""
    _, (results, levels, _) = coq_results
    assert levels == results


def test_coq_heap_program_equals_coq_select(coq_results):
    """DDTreeHeap.select_heap (the best-first heap with the code's key, proved equal to select
    by select_heap_spec) prints the same selection as select on every instance."""
    _, (results, _, heap) = coq_results
    assert heap == results


def test_select_tree_pops_equals_coq_heap(coq_results):
    """select_tree(method="pops") pops what Coq's model of it pops, node for node, in order."""
    cases, (_, _, heap) = coq_results
    for (depth, vocab, budget, table), coq_heap in zip(cases, heap):
        got = python_selection(float_log_q(table), budget, "pops")
        assert got == coq_heap, (depth, vocab, budget, [[str(x) for x in row] for row in table])


def test_instances_exercise_ties(coq_results):
    """The instances are not tie-free: the tie rule decides the selected set in several of them
    (a tie straddles the cut, seen as a tie by float32 too), and N > #prefixes occurs."""
    cases, (results, _, _) = coq_results
    cut = [(case, sel) for case, sel in zip(cases, results) if tie_at_cut(case[3], case[2])]
    assert len(cut) >= 4
    assert sum(parent_rule_matters(table, budget) for _, _, budget, table in cases) >= 2
    for (depth, vocab, budget, table), sel in cut:
        q = prefix_probs(table)
        left_out = [u for u in q if u not in sel]
        assert q[sel[-1]] == max(q[u] for u in left_out)
    assert any(budget > sum(vocab**d for d in range(1, depth + 1)) for depth, vocab, budget, _ in cases)


@pytest.mark.parametrize("method", ["levels", "pops"])
def test_depth_rule_known_answer(coq_results, method):
    """Issue 50's depth-rule table: Coq's three programs and select_tree give
    (0),(0,2),(1),(2),(1,2); the exact heap model with rule (2) dropped, or with rule (3)
    before it (the mutants M1, M2 of the module docstring), pops (0,2,2) fifth instead, so
    this case separates the rule from both mutants."""
    cases, (results, levels, heap) = coq_results
    i = cases.index(DEPTH_RULE_CASE)
    depth, vocab, budget, table = DEPTH_RULE_CASE
    assert results[i] == levels[i] == heap[i] == DEPTH_RULE_ANSWER
    assert heap_model(table, budget) == DEPTH_RULE_ANSWER
    for mutant in (("parent", "rank"), ("parent", "depth", "rank")):
        assert heap_model(table, budget, mutant)[4] == (0, 2, 2)
    assert float_agrees_with_exact(table)
    assert python_selection(float_log_q(table), budget, method) == DEPTH_RULE_ANSWER


def test_degenerate_rows_are_drawn_and_agree(coq_results):
    """The q in {0, 1} tables are among the cases (so the tests above compare them with Coq):
    each has a one-hot row and a zero entry, i.e. log-scores 0 and -inf, and the exact heap
    model agrees with Coq's select on them."""
    cases, (results, _, _) = coq_results
    degenerate = degenerate_instances()
    assert len(degenerate) == len(DEGENERATE_SHAPES)
    for case in degenerate:
        depth, vocab, budget, table = case
        lq = float_log_q(table)
        assert (lq == 0).any() and np.isneginf(lq).any()
        i = cases.index(case)
        assert heap_model(table, budget) == results[i]
        assert len(results[i]) == min(budget, sum(vocab**d for d in range(1, depth + 1)))


def test_heap_model_equals_coq_select(coq_results):
    """The exact Python heap model used above (for the mutants) is the selection Coq proves
    optimal, on every case."""
    cases, (results, _, _) = coq_results
    for (depth, vocab, budget, table), sel in zip(cases, results):
        assert heap_model(table, budget) == sel
