"""proofs/README.md names the tests that check each claim: every one must exist, so a renamed
or deleted test cannot silently leave a claim unchecked."""

import ast
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent


def referenced_tests() -> list[tuple[str, str]]:
    """(test file, test function) for every `tests/f.py::name` and following `::name` in the index
    (table cells that start with "todo" name planned tests: skipped)."""
    out = []
    cells = [c for line in (ROOT / "proofs" / "README.md").read_text().splitlines() for c in line.split("|")]
    for cell in cells:
        current = None
        if cell.strip().startswith("todo"):
            continue
        for ref in re.findall(r"`([^`]*::[^`]*)`", cell):
            path, _, name = ref.partition("::")
            if path:
                current = path
            if current and current.startswith("tests/") and not name.startswith("todo"):
                out.append((current, name.split("[")[0]))
    return out


def test_every_test_named_in_the_proofs_index_exists():
    refs = referenced_tests()
    assert len(refs) > 40
    missing = []
    for path, name in refs:
        tree = ast.parse((ROOT / path).read_text())
        names = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        if name not in names:
            missing.append(f"{path}::{name}")
    assert not missing, f"proofs/README.md names tests that do not exist: {missing}"


PROOFS = ROOT / "proofs"
COQ_NAME = re.compile(r"^\s*(?:Theorem|Lemma|Corollary|Definition|Fixpoint|Record|Inductive)\s+([\w']+)", re.MULTILINE)


def proof_texts() -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(PROOFS.glob("*.md"))}


def test_quoted_equality_constants_equal_the_code():
    """The near-tie classifier's constants quoted in proofs/ (issue 61: the index said `c ≤ 20` and
    `128·u·s` after specjax.equality had moved to K = 192.96 and c = 21.44) are the code's: every
    `NAME = value` of a constant of specjax.equality, every numeric multiple `X·u·s` (the threshold K)
    and every measured float32 bound `c ≤ X` (the largest measured c)."""
    from specjax import equality

    named = {"K": equality.NEAR_TIE_FACTOR, "GAP_BOUND": equality.GAP_BOUND, "GAP_MARGIN": equality.GAP_MARGIN,
             "FLIP_FACTOR": equality.FLIP_FACTOR}
    c_max = max(equality.MEASURED_GAP["float32"].values())
    texts = proof_texts()
    seen = set()
    for name, text in texts.items():
        for const, value in re.findall(r"`(K|GAP_BOUND|GAP_MARGIN|FLIP_FACTOR) = ([0-9.]+)`", text):
            assert abs(float(value) - named[const]) < 5e-3, f"{name}: {const} = {value}, the code has {named[const]}"
            seen.add(const)
        for value in re.findall(r"(?<![\w.])([0-9][0-9.]*)·u·s", text):
            assert abs(float(value) - equality.NEAR_TIE_FACTOR) < 5e-3, f"{name}: threshold {value}·u·s is not K"
        for value in re.findall(r"`c ≤ ([0-9.]+)`", text):
            assert float(value) == c_max, f"{name}: c ≤ {value}, the largest measured float32 c is {c_max}"
    assert seen == set(named), f"the index quotes no value for {set(named) - seen}"
    readme = texts["README.md"]
    for cpu, c in equality.MEASURED_GAP["float32"].items():
        assert f"{c:g}" in readme or f"{c}" in readme, f"the measured c {c} ({cpu}) is not quoted"


def test_coq_names_in_the_index_exist():
    """Every backticked snake_case name in the Machine-checked (Coq) section of the index is a
    theorem, lemma or definition of proofs/coq, or a name of the Python code (a function, a field)."""
    readme = (PROOFS / "README.md").read_text()
    section = readme[readme.index("## Machine-checked (Coq)"):]
    coq = set(COQ_NAME.findall("\n".join(p.read_text() for p in (PROOFS / "coq").glob("*.v"))))
    python = "\n".join(p.read_text() for d in ("specjax", "tests") for p in (ROOT / d).rglob("*.py"))
    missing = []
    for name in sorted(set(re.findall(r"`([a-z][a-z0-9_']*_[a-z0-9_']*)`", section))):
        if re.fullmatch(r"[a-z]_[a-z0-9]", name):  # a subscript (s_j), not a name
            continue
        if name not in coq and not re.search(rf"\b{re.escape(name)}\b", python):
            missing.append(name)
    assert len(coq) > 300
    assert not missing, f"proofs/README.md names what neither proofs/coq nor the code defines: {missing}"
