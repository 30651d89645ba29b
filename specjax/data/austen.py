"""Jane Austen's six novels from Debian's ``r-cran-janeaustenr``, read without R.

The Debian package stores the novels (one character vector of text lines per novel) in
an R *lazy-load database*: ``Rdata.rdx`` (a gzip-compressed serialized index
``list(variables = list(name = c(offset, length)), references, compressed)``) and
``Rdata.rdb`` (for each variable at ``offset``: a 4-byte big-endian uncompressed length,
then a zlib stream holding an R serialized object). This module implements the small
subset of R's XDR serialization format (versions 2 and 3) needed to read them: NULL,
symbols, pairlists, character/logical/integer/double/raw vectors, generic vectors,
attributes and back-references; anything else raises :class:`AssetError`.

``austen_novels()`` returns ``{title: [line, ...]}`` exactly as janeaustenr's data sets
(e.g. "Pride & Prejudice" has 13,030 lines). ``austen_corpus(split)`` returns chapters as
reflowed text (paragraphs joined by blank lines) with the deterministic split rule of
:mod:`specjax.data.prompts` applied to the key ``"<title>/<chapter index>"``.
"""

from __future__ import annotations

import functools
import gzip
import pathlib
import re
import struct
import zlib
from typing import Any

from specjax.data.assets import MANIFEST, AssetError, fetch
from specjax.data.prompts import check_split, split_of

__all__ = ["TITLES", "read_lazyload_db", "austen_novels", "austen_chapters", "austen_corpus"]

# janeaustenr variable -> the title austen_books() gives it
TITLES = {
    "sensesensibility": "Sense & Sensibility",
    "prideprejudice": "Pride & Prejudice",
    "mansfieldpark": "Mansfield Park",
    "emma": "Emma",
    "northangerabbey": "Northanger Abbey",
    "persuasion": "Persuasion",
}

_NIL, _REF = 254, 255
_SPECIALS = {253, 252, 251, 250, 242, 241}  # global/unbound/missing/base-namespace/empty/base env
_PAIRLIKE = {2, 3, 5, 6, 17, 239, 240}  # LIST, CLO, PROM, LANG, DOT, ATTRLIST, ATTRLANG


class _Unserializer:
    """Reader for R's XDR ("X\\n") serialization, enough for data vectors and lists."""

    def __init__(self, buf: bytes, where: str):
        self.buf, self.pos, self.refs, self.where = buf, 0, [], where
        if buf[:2] != b"X\n":
            self.fail(f"not an XDR R serialization (header {buf[:2]!r})")
        self.pos = 2
        version = self.int()
        self.int(), self.int()  # writer R version, minimal reader version
        if version == 3:
            n = self.int()  # native encoding name, skipped
            self.pos += n
        elif version != 2:
            self.fail(f"unsupported serialization version {version}")

    def fail(self, msg: str):
        raise AssetError(f"{self.where}: {msg} (at byte {self.pos})")

    def int(self) -> int:
        if self.pos + 4 > len(self.buf):
            self.fail("truncated data")
        (v,) = struct.unpack_from(">i", self.buf, self.pos)
        self.pos += 4
        return v

    def length(self) -> int:
        n = self.int()
        if n == -1:  # long vector: two more ints
            n = (self.int() << 32) + self.int()
        return n

    def array(self, code: str, size: int, n: int) -> list:
        out = list(struct.unpack_from(f">{n}{code}", self.buf, self.pos))
        self.pos += size * n
        return out

    def item(self) -> Any:
        flags = self.int()
        kind, has_attr, has_tag = flags & 0xFF, flags & (1 << 9), flags & (1 << 10)
        if kind == _NIL:
            return None
        if kind == _REF:
            index = flags >> 8 or self.int()
            return self.refs[index - 1]
        if kind in _SPECIALS:
            return ("special", kind)
        if kind == 1:  # SYMSXP: its name (a CHARSXP), remembered for back-references
            sym = ("symbol", self.item())
            self.refs.append(sym)
            return sym
        if kind in _PAIRLIKE:  # attribute, tag, car, cdr -> flattened to a list of (tag, value)
            out = []
            while True:
                if has_attr:
                    self.item()
                tag = self.item()[1] if has_tag else None
                out.append((tag, self.item()))
                nxt = self.int()
                if nxt & 0xFF not in _PAIRLIKE:
                    self.pos -= 4
                    if self.item() is not None:
                        self.fail("improper pairlist")
                    return out
                has_attr, has_tag = nxt & (1 << 9), nxt & (1 << 10)
        if kind == 9:  # CHARSXP
            n = self.int()
            if n == -1:
                return None  # NA_character_
            encoding = "latin-1" if (flags >> 12) & 4 else "utf-8"  # LATIN1_MASK in the levels bits
            s = self.buf[self.pos:self.pos + n].decode(encoding, errors="replace")
            self.pos += n
            return s
        if kind in (10, 13):  # logical, integer
            value = self.array("i", 4, self.length())
        elif kind == 14:  # double
            value = self.array("d", 8, self.length())
        elif kind == 24:  # raw
            n = self.length()
            value = self.buf[self.pos:self.pos + n]
            self.pos += n
        elif kind in (16, 19, 20):  # character vector, list, expression
            value = [self.item() for _ in range(self.length())]
        else:
            self.fail(f"unsupported R object type {kind}")
        if has_attr:
            attrs = dict(self.item())
            if "names" in attrs and kind in (16, 19, 20, 10, 13, 14):
                return dict(zip(attrs["names"], value))
        return value


def read_lazyload_db(rdx: pathlib.Path, rdb: pathlib.Path) -> dict[str, Any]:
    """All variables of an R lazy-load database (``.rdx`` index + ``.rdb`` data)."""
    index = _Unserializer(gzip.decompress(rdx.read_bytes()), str(rdx)).item()
    if not isinstance(index, dict) or "variables" not in index:
        raise AssetError(f"{rdx}: not a lazy-load index")
    data = rdb.read_bytes()
    out = {}
    for name, (offset, length) in index["variables"].items():
        blob = data[int(offset):int(offset) + int(length)]
        (raw_len,) = struct.unpack(">i", blob[:4])
        try:
            raw = zlib.decompress(blob[4:])  # compressed = TRUE (zlib); bzip2/xz dbs are not used here
        except zlib.error as e:
            raise AssetError(f"{rdb}: variable {name!r} is not zlib-compressed: {e}") from e
        if len(raw) != raw_len:
            raise AssetError(f"{rdb}: variable {name!r} has {len(raw)} bytes, header says {raw_len}")
        out[name] = _Unserializer(raw, f"{rdb}:{name}").item()
    return out


@functools.lru_cache(maxsize=2)
def _novels(rdx: pathlib.Path, rdb: pathlib.Path) -> dict[str, tuple[str, ...]]:
    db = read_lazyload_db(rdx, rdb)
    if set(db) != set(TITLES) or not all(isinstance(v, list) for v in db.values()):
        raise AssetError(f"{MANIFEST['austen_rdb'].describe()}: unexpected variables {sorted(db)}")
    return {TITLES[k]: tuple(line or "" for line in db[k]) for k in TITLES}


def austen_novels() -> dict[str, list[str]]:
    """``{title: lines}`` for the six novels, in janeaustenr's ``austen_books()`` order."""
    return {t: list(lines) for t, lines in _novels(fetch("austen_rdx"), fetch("austen_rdb")).items()}


_CHAPTER = re.compile(r"^chapter\s+[\divxlc]+\b", re.I)


def _reflow(lines: list[str]) -> str:
    paras, cur = [], []
    for line in lines:
        if line.strip():
            cur.append(line.strip())
        elif cur:
            paras.append(" ".join(cur))
            cur = []
    if cur:
        paras.append(" ".join(cur))
    return "\n\n".join(paras)


def austen_chapters() -> list[dict[str, Any]]:
    """Chapters: ``{"title", "chapter", "text", "split"}`` (chapter 0 = front matter)."""
    out = []
    for title, lines in austen_novels().items():
        starts = [0] + [i for i, line in enumerate(lines) if _CHAPTER.match(line)]
        bounds = list(zip(starts, starts[1:] + [len(lines)]))
        for k, (a, b) in enumerate(bounds):
            text = _reflow(lines[a:b])
            if text:
                out.append({"title": title, "chapter": k, "text": text, "split": split_of(f"{title}/{k}", "austen")})
    return out


def austen_corpus(split: str = "train") -> list[str]:
    """Chapter texts of ``split`` (see module doc for the split rule)."""
    check_split(split)
    return [c["text"] for c in austen_chapters() if c["split"] == split]
