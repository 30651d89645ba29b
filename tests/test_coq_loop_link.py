"""specjax's decode loop equals the loop that Coq computes and has proved lossless (issue 61,
item 1; proofs/coq/LoopLink.v on LoopSlots.v, rows V1 and V2 of proofs/README.md).

`LoopLink.toy_run tbl V D L prompt R` is LoopSlots' `loop` (the slot-level loop that
`loop_lossless_slots` proves equal to greedy decoding: the tree of a drafter with state, one
verify forward with the ancestor mask and positions len + depth, the slot walk, the emission,
the commit of the path slots, observe) on a concrete target and drafter: LoopLink's toy model
(a table-driven target whose token depends on the last token, its position and every KV entry
it sees) and toy drafter (a chain along the target's greedy rollout, corrupted at a depth that
a round counter picks, a duplicate sibling and a branch from a bigram memory learnt from the
committed text, an invalid node). `toy_loop_lossless` instantiates the loop theorem on it.

tests/coq_loop_reference.py writes the same target as a specjax model family (a real KV cache
and the real attention mask, in float32 holding small integers) and the same drafter as a
specjax drafter. This test draws random tables and ragged prompts, runs `specjax.generate`
(the real jitted `lax.while_loop`), evaluates `toy_run` and its round boundaries (`toy_counts`)
inside Coq with `Eval vm_compute`, and compares them token for token and round for round.
With an EOS id the rows are compared with LoopTrunc.v's `loop_trunc` (the code's keep rule:
at most max_new_tokens, through the first EOS; `loop_trunc_lossless`), computed the same way.
The depth-limited `ancestor_mask(tree, max_depth)` is compared entry for entry with MaskHops.v's
`hop_mask` (proved equal to the exact mask up to depth max(D, 1), `hop_mask_exact`) on random
trees. Needs `coqc`; uses the `.vo` files of `make proofs` when they are current, else compiles
the modules it needs in a temporary directory (as tests/test_coq_select_tree.py does).

Mutants killed (each applied by the test itself to a patched copy of the function, never in the
library, and asserted to make generate depart from Coq):

* C1, commit off by one (specjax/decode.py, `speculative_round`: `commit(tp.cache,
  result.path_slots, keep)` -> `keep + 1`, the cache keeps one slot too many):
  `test_commit_off_by_one_mutant_departs_from_coq`;
* M1, depth-limited ancestor mask one hop short (specjax/tree.py, `ancestor_mask` with
  max_depth: `range(max(int(max_depth), 1))` -> `... - 1`, nodes at depth D lose the root):
  `test_depth_limited_mask_mutant_departs_from_coq` (and, by construction, the entrywise
  `test_depth_limited_mask_equals_coq_hop_mask`).

Measured when these tests were written: C1 makes all 15 rows depart (first difference at
tokens 2-6), M1 13 of 15 (tokens 4-14); a patch that changes nothing makes none depart.

Both survive every test of tests/test_coq_select_tree.py (which links only the selection).
"""

from __future__ import annotations

import inspect
import pathlib
import re
import shutil
import subprocess

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import specjax.decode as decode_module
import specjax.tree as tree_module
import specjax.verify as verify_module
from specjax.decode import generate
from specjax.models import pad_prompts
from specjax.tree import ancestor_mask, tree_from_lists
from tests.coq_loop_reference import MODA, MODP, ToyConfig, ToyMemoryDrafter, registered_toy, toy_greedy, toy_params
from tests.coq_build import compile_copy, compiled_in_repo

ROOT = pathlib.Path(__file__).resolve().parent.parent
COQ = ROOT / "proofs" / "coq"
MODULE = "LoopLink"
SEED = 61
VOCAB, LAYERS, DEPTH = 6, 2, 3
MAX_NEW = 16
PROMPT_WIDTH = 6
TABLES = 5  # instances; each a batch of ROWS ragged prompts
ROWS = 3

COMMIT_LINE = "cache = commit(tp.cache, result.path_slots, keep)"
MASK_LINE = "for _ in range(max(int(max_depth), 1)):"


def needed_modules() -> list[str]:
    """LoopLink.v, MaskHops.v, LoopTrunc.v and the files they require (GreedyWalk, TreeAttention,
    LoopSlots), in _CoqProject's order."""
    files = [f for f in (COQ / "_CoqProject").read_text().split() if f.endswith(".v")]
    return [f for f in files
            if f in ("GreedyWalk.v", "TreeAttention.v", "LoopSlots.v", f"{MODULE}.v", "MaskHops.v", "LoopTrunc.v")]


# ---------------------------------------------------------------- instances


def instances() -> list[tuple[np.ndarray, list[list[int]]]]:
    """(table int[V, 3, 7], ROWS prompts of 1..PROMPT_WIDTH tokens) per instance."""
    rng = np.random.default_rng(SEED)
    out = []
    for _ in range(TABLES):
        tbl = rng.integers(0, VOCAB, size=(VOCAB, MODP, MODA))
        prompts = [rng.integers(0, VOCAB, size=int(rng.integers(1, PROMPT_WIDTH + 1))).tolist() for _ in range(ROWS)]
        out.append((tbl, prompts))
    return out


def run_specjax(cases, drafter, eos=None) -> list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    """generate on each instance (EOS eos[i] for instance i, or none): (tokens [B, M], num_tokens [B],
    accepted [B, R], num_rounds [B])."""
    cfg = ToyConfig(VOCAB, LAYERS)
    results = []
    for i, (tbl, prompts) in enumerate(cases):
        tokens, lengths = pad_prompts(prompts, PROMPT_WIDTH)
        # check_trees=False: the plain loop program (the checked one takes ~3x as long to compile)
        out = generate(toy_params(tbl, LAYERS), cfg, drafter, jnp.asarray(tbl, jnp.int32), tokens, lengths, MAX_NEW,
                       eos_ids=() if eos is None else (int(eos[i]),), check_trees=False)
        results.append(tuple(np.asarray(x) for x in (out.tokens, out.num_tokens, out.stats.accepted,
                                                     out.stats.num_rounds)))
    return results


# ---------------------------------------------------------------- Coq side


def coq_list(xs) -> str:
    return "[" + "; ".join(str(int(x)) for x in xs) + "]"


def coq_script(cases, rounds) -> str:
    lines = ["From Coq Require Import List.", f"From Specjax Require Import {MODULE}.", "Import ListNotations."]
    for i, ((tbl, prompts), rs) in enumerate(zip(cases, rounds)):
        rows = "; ".join("[" + "; ".join(coq_list(a) for a in plane) + "]" for plane in tbl)
        lines.append(f"Definition tbl{i} : list (list (list nat)) := [{rows}].")
        for prompt, r in zip(prompts, rs):
            args = f"tbl{i} {VOCAB} {DEPTH} {LAYERS} {coq_list(prompt)} {int(r)}"
            lines.append(f"Eval vm_compute in toy_run {args}.")
            lines.append(f"Eval vm_compute in toy_counts {args}.")
    return "\n".join(lines) + "\n"


def parse_lists(stdout: str, count: int) -> list[list[int]]:
    """The printed values `= [1; 0; ...] : list nat`, in order."""
    blocks = re.findall(r"=\s*\[([0-9;\s]*)\]\s*:\s*list\s+nat", stdout)
    assert len(blocks) == count, stdout
    return [[int(x) for x in b.replace(";", " ").split()] for b in blocks]


def run_coqc(text: str, workdir: pathlib.Path) -> str:
    """coqc on a script (against the tree's .vo files when current, else a compiled copy): its stdout."""
    script = workdir / "LoopCheck.v"
    script.write_text(text)
    libs = [COQ] if compiled_in_repo(needed_modules()) else []
    for _ in range(2):
        lib = libs[0] if libs else compile_copy(workdir, needed_modules())
        res = subprocess.run(["coqc", "-Q", str(lib), "Specjax", script.name], cwd=workdir,
                             capture_output=True, text=True, timeout=600)
        if res.returncode == 0:
            return res.stdout
        if not libs:
            break
        libs = []  # the tree's .vo files did not load (another coqc version?): compile a copy
    raise AssertionError(f"coqc failed on {script}:\n{res.stdout}\n{res.stderr}")


def run_coq(cases, rounds, workdir: pathlib.Path):
    """Per instance, per row: (Coq's stream toy_run, its cumulative counts toy_counts)."""
    printed = parse_lists(run_coqc(coq_script(cases, rounds), workdir), 2 * ROWS * len(cases))
    pairs = list(zip(printed[0::2], printed[1::2]))
    return [pairs[i * ROWS:(i + 1) * ROWS] for i in range(len(cases))]


@pytest.fixture(scope="module")
def link(tmp_path_factory):
    """(cases, specjax results, Coq results)."""
    if shutil.which("coqc") is None:
        pytest.skip("coqc is not installed: the Coq side of this test cannot run (CI installs Coq; `make proofs`)")
    cases = instances()
    with registered_toy():
        ours = run_specjax(cases, ToyMemoryDrafter(VOCAB, DEPTH, LAYERS))
    # Coq runs as many rounds as the loop did for each row: enough for MAX_NEW tokens.
    return cases, ours, run_coq(cases, [res[3] for res in ours], tmp_path_factory.mktemp("coq_loop"))


def departures(cases, ours, coq) -> list[tuple[int, int, int]]:
    """(instance, row, first differing index) of every row whose output is not Coq's stream."""
    out = []
    for i, ((tokens, num, _, _), rows) in enumerate(zip(ours, coq)):
        for b, (stream, _) in enumerate(rows):
            got = tokens[b, : num[b]].tolist()
            want = stream[:MAX_NEW]
            if got != want:
                out.append((i, b, next((k for k, (x, y) in enumerate(zip(got, want)) if x != y), len(got))))
    return out


# ---------------------------------------------------------------- the tests


def test_generate_equals_coq_loop(link):
    """Every row: generate's MAX_NEW tokens are the first MAX_NEW of Coq's toy_run."""
    cases, ours, coq = link
    for (tokens, num, _, rounds), rows in zip(ours, coq):
        for b, (stream, _) in enumerate(rows):
            assert num[b] == MAX_NEW
            assert len(stream) >= MAX_NEW  # R rounds emit at least R tokens after the first
    assert departures(cases, ours, coq) == []


def test_rounds_equal_coq_rounds(link):
    """Round by round: the tokens each round kept (accepted + 1) are the emissions of Coq's
    rounds (toy_counts: tokens after r rounds); only the last round may be cut at MAX_NEW."""
    _, ours, coq = link
    for (_, _, accepted, rounds), rows in zip(ours, coq):
        for b, (_, counts) in enumerate(rows):
            r = int(rounds[b])
            ours_counts = (1 + np.concatenate([[0], np.cumsum(accepted[b, :r] + 1)])).tolist()
            assert len(counts) == r + 1
            assert ours_counts[:-1] == counts[:-1]
            assert ours_counts[-1] == MAX_NEW <= counts[-1]


def test_coq_stream_is_the_toy_greedy_rollout(link):
    """Coq's stream (greedy by toy_loop_lossless) is also the toy target's rollout computed from its
    definition in Python (`toy_greedy`): the Coq model and the specjax family are one model."""
    cases, _, coq = link
    for (tbl, prompts), rows in zip(cases, coq):
        seq, lengths = pad_prompts(prompts, PROMPT_WIDTH + MAX_NEW + 1)
        ref = np.asarray(jax.jit(toy_greedy, static_argnums=(3, 4))(jnp.asarray(tbl), jnp.asarray(seq),
                                                                    jnp.asarray(lengths), LAYERS, MAX_NEW))
        for b, (stream, _) in enumerate(rows):
            assert stream[:MAX_NEW] == ref[b].tolist()


def test_instances_exercise_the_loop(link):
    """The rounds are not all alike: full-depth acceptances (the depth-D rows of the mask matter),
    partial ones and rejections at the first node all occur, in several rounds per row."""
    _, ours, _ = link
    acc = np.concatenate([a[b, : r[b]] for _, _, a, r in ours for b in range(ROWS)])
    assert (acc == DEPTH).sum() >= 5
    assert ((acc > 0) & (acc < DEPTH)).sum() >= 5
    assert (acc == 0).sum() >= 3
    assert min(int(r.min()) for *_, r in ours) >= 3


TRUNC_SCRIPT = """From Coq Require Import List.
From Specjax Require Import GreedyWalk TreeAttention LoopSlots LoopLink LoopTrunc.
Import ListNotations.
(* The whole row as generate emits it: the first token, then LoopTrunc.loop_trunc with the
   tokens left (m - 1), nothing more when the first token is an EOS. *)
Definition toy_trunc tbl V D L (eos : nat -> bool) prompt m R : list nat :=
  let root := toy_g tbl L prompt in
  root :: (if eos root then [] else
           loop_trunc toy_model (toy_head tbl) L (toy_drafter tbl V D L) D eos (toy_init V prompt)
                      (fun l => ents toy_model l prompt) prompt root (m - 1) R).
"""


def test_generate_with_eos_equals_coq_truncated_loop(link, tmp_path):
    """With an EOS id (per instance, a token of the stream's first rows), generate's rows equal
    LoopTrunc.loop_trunc computed in Coq (the loop with the code's keep rule: at most max_new_tokens,
    through the first EOS; proved to be the greedy decode cut there by loop_trunc_lossless), token
    for token and in length."""
    cases, _, coq = link
    eos = [rows[0][0][6] for rows in coq]  # row 0's seventh token: row 0 ends early
    with registered_toy():
        ours = run_specjax(cases, ToyMemoryDrafter(VOCAB, DEPTH, LAYERS), eos=eos)
    lines = [TRUNC_SCRIPT]
    for i, ((tbl, prompts), (*_, rounds)) in enumerate(zip(cases, ours)):
        rows = "; ".join("[" + "; ".join(coq_list(a) for a in plane) + "]" for plane in tbl)
        lines.append(f"Definition tbl{i} : list (list (list nat)) := [{rows}].")
        for prompt, r in zip(prompts, rounds):
            lines.append(f"Eval vm_compute in toy_trunc tbl{i} {VOCAB} {DEPTH} {LAYERS} (fun t => Nat.eqb t {eos[i]}) "
                         f"{coq_list(prompt)} {MAX_NEW} {int(r)}.")
    printed = parse_lists(run_coqc("\n".join(lines) + "\n", tmp_path), ROWS * len(cases))
    ended_early = 0
    for i, (tokens, num, _, _) in enumerate(ours):
        for b in range(ROWS):
            want = printed[i * ROWS + b]
            assert tokens[b, : num[b]].tolist() == want, (i, b)
            assert want[-1] == eos[i] or len(want) == MAX_NEW
            ended_early += int(len(want) < MAX_NEW)
    assert ended_early >= len(cases)  # row 0 of every instance at least


def patched(func, module, line: str, mutant_line: str):
    """A copy of `func` with `line` of its source replaced by `mutant_line`, defined in a copy of
    `module`'s namespace (the library is not touched)."""
    src = inspect.getsource(func)
    assert src.count(line) == 1, f"{func.__name__} no longer has the line {line!r}: update the mutant"
    namespace = dict(vars(module))
    exec(compile(src.replace(line, mutant_line), f"<mutant of {func.__name__}>", "exec"), namespace)
    return namespace[func.__name__]


def test_commit_off_by_one_mutant_departs_from_coq(link, monkeypatch):
    """Mutant C1: the loop commits keep + 1 path slots (one too many): generate departs from Coq."""
    cases, _, coq = link
    mutant = patched(decode_module.speculative_round, decode_module, COMMIT_LINE,
                     COMMIT_LINE.replace("keep)", "keep + 1)"))
    monkeypatch.setattr(decode_module, "speculative_round", mutant)
    with registered_toy():  # a distinct static drafter: a fresh trace of the loop, with the mutant
        ours = run_specjax(cases, ToyMemoryDrafter(VOCAB, DEPTH, LAYERS, tag="mutant C1"))
    assert len(departures(cases, ours, coq)) >= 3


def test_depth_limited_mask_mutant_departs_from_coq(link, monkeypatch):
    """Mutant M1: the depth-limited ancestor mask takes max_depth - 1 pointer steps, so a node at
    depth D does not see the root: generate departs from Coq (a full-depth path is verified)."""
    cases, _, coq = link
    mutant = patched(tree_module.ancestor_mask, tree_module, MASK_LINE,
                     MASK_LINE.replace("1)):", "1) - 1):"))
    monkeypatch.setattr(verify_module, "ancestor_mask", mutant)
    with registered_toy():
        ours = run_specjax(cases, ToyMemoryDrafter(VOCAB, DEPTH, LAYERS, tag="mutant M1"))
    assert len(departures(cases, ours, coq)) >= 3


# ---------------------------------------------------------------- the depth-limited mask


MASK_TREES = 12  # random trees of MASK_NODES nodes, each with a max_depth D in 1..3
MASK_NODES = 7


def mask_instances() -> list[tuple[list[int], int]]:
    """(parents [N] with parents[i] in [-1, i), max_depth D): deep chains drawn often, so that
    rows deeper than D (the code's inexact rows) occur."""
    rng = np.random.default_rng(SEED + 1)
    out = []
    for _ in range(MASK_TREES):
        parents = [int(rng.integers(max(-1, i - 2), i)) if rng.random() < 0.7 else int(rng.integers(-1, i))
                   for i in range(MASK_NODES)]
        out.append((parents, int(rng.integers(1, 4))))
    return out


def test_depth_limited_mask_equals_coq_hop_mask(tmp_path):
    """MaskHops.hop_mask (the Coq model of ancestor_mask(tree, max_depth=D), proved equal to the exact
    ancestor rows up to depth max(D, 1) by hop_mask_exact) equals specjax.tree.ancestor_mask(tree, D)
    entry for entry on random trees, deep rows included; TreeAttention.ancestor_mask equals
    ancestor_mask(tree, None)."""
    if shutil.which("coqc") is None:
        pytest.skip("coqc is not installed: the Coq side of this test cannot run (CI installs Coq; `make proofs`)")
    cases = mask_instances()
    n = MASK_NODES + 1
    lines = ["From Coq Require Import List.", "From Specjax Require Import TreeAttention MaskHops.",
             "Import ListNotations."]
    for i, (parents, depth) in enumerate(cases):
        slots = coq_list([0] + [p + 1 for p in parents])
        lines.append(f"Definition par{i} (s : nat) : nat := nth s {slots} 0.")
        lines.append(f"Eval vm_compute in map (fun i => map (fun j => hop_mask par{i} {depth} i j) (seq 0 {n})) "
                     f"(seq 0 {n}).")
        lines.append(f"Eval vm_compute in map (fun i => map (fun j => ancestor_mask par{i} i j) (seq 0 {n})) "
                     f"(seq 0 {n}).")
    out = run_coqc("\n".join(lines) + "\n", tmp_path)
    blocks = re.findall(r"=\s*(\[\[.*?\]\])\s*:\s*list\s*\(list\s+bool\)", out, re.DOTALL)
    assert len(blocks) == 2 * len(cases), out
    grids = [np.array([[w == "true" for w in re.findall(r"true|false", row)]
                       for row in re.findall(r"\[([a-z;\s]*)\]", b[1:-1])]) for b in blocks]
    deep_rows = 0
    for (parents, depth), hops, exact in zip(cases, grids[0::2], grids[1::2]):
        tree = tree_from_lists([[0] * MASK_NODES], [parents])
        code = np.asarray(ancestor_mask(tree, max_depth=depth))[0]
        assert (code == hops).all(), (parents, depth)
        assert (np.asarray(ancestor_mask(tree))[0] == exact).all(), parents
        node_depth = np.concatenate([[0], np.asarray(tree.depth)[0]])
        deep = node_depth > max(depth, 1)
        assert (hops[~deep] == exact[~deep]).all()  # hop_mask_exact, on the instance
        assert not hops[deep, 0].any()  # hop_mask_deep_row: deep rows do not see the root
        deep_rows += int(deep.sum())
    assert deep_rows >= 5
