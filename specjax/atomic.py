"""Atomic file writes: a save either completes or leaves what was there before, unchanged.

Every file is first written in full to a fresh temporary name beside its target (same directory,
so the final `os.replace` is a rename on one file system), flushed and fsync'ed; only when every
file of a save is written (and, optionally, verified) are they renamed into place, in the order
given, and stale files the new save no longer lists are removed. A writer that fails -- a full
disk, an exception half way through a file -- leaves only the temporary files, which are removed:
the previous files keep their bytes.

    write_bytes(path, data)                    one file
    write_files(directory, files, verify=...)  several files, renamed in dependency order
    replace_directory(staged, target)          a whole directory written beside `target` (training
                                               checkpoints: the staged copy swaps in by two renames)
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

__all__ = ["replace_directory", "staging_path", "write_bytes", "write_files"]

Writer = Callable[[Path], None]  # writes the whole file at the path it is given


def _write_all(path: Path, data: bytes) -> None:
    """Write `data` as the whole of the (new) file `path` and fsync it: the one place bytes reach a file."""
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def staging_path(target: str | os.PathLike, kind: str = "tmp") -> Path:
    """A fresh, unused name beside `target` (same directory): `.<name>.<kind>-XXXXXXXX`."""
    target = Path(target)
    fd, name = tempfile.mkstemp(prefix=f".{target.name}.{kind}-", dir=target.parent)
    os.close(fd)
    os.unlink(name)
    return Path(name)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Replace the file `path` with `data` atomically (readers see the old bytes or the new, never a part)."""
    write_files(Path(path).parent, {Path(path).name: bytes(data)})


def write_files(directory: str | os.PathLike, files: Mapping[str, bytes | Writer], *,
                verify: Callable[[dict[str, Path]], None] | None = None, stale: Iterable[str] = ()) -> None:
    """Write every file of `files` ({name in `directory`: bytes, or a writer called with the path to
    write}) to a temporary name, call `verify({name: temporary path})` (it raises to refuse the
    save), remove the `stale` names (files of an older save that the new one does not list: removed
    before the renames, so that an interrupted save can leave no stale file to win over new ones),
    then rename the new files into place in the order given. Any failure before that removes the
    temporary files and leaves `directory` as it was (a failed rename: the files renamed before it are
    new, the rest old; renames do not fail short of a broken file system)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    staged: dict[str, Path] = {}
    try:
        for name, content in files.items():
            if Path(name).name != name:
                raise ValueError(f"write_files writes plain file names inside {directory}, got {name!r}")
            staged[name] = staging_path(directory / name)
            if isinstance(content, (bytes, bytearray, memoryview)):
                _write_all(staged[name], bytes(content))
            else:
                content(staged[name])
                with open(staged[name], "rb") as f:
                    os.fsync(f.fileno())
        if verify is not None:
            verify(dict(staged))
        for name in stale:  # first: a stale file that wins on load (a shard index) must not outlive the old files
            if name not in staged:
                _remove(directory / name)
        for name, tmp in staged.items():
            os.replace(tmp, directory / name)
    except BaseException:
        for tmp in staged.values():  # those not renamed yet (a renamed one is no longer there)
            _remove(tmp)
        raise


def replace_directory(staged: str | os.PathLike, target: str | os.PathLike) -> None:
    """Swap the fully written directory `staged` (a `staging_path(target)`) into place as `target`:
    the old `target` is renamed aside, `staged` renamed onto it, then the old one removed. If the
    second rename fails the old directory is renamed back. Readers see the old or the new
    directory, except for the instant between the two renames."""
    staged, target = Path(staged), Path(target)
    if not staged.is_dir():
        raise FileNotFoundError(f"replace_directory: the staged directory {staged} does not exist")
    if not target.exists():
        os.replace(staged, target)
        return
    old = staging_path(target, "old")
    os.replace(target, old)
    try:
        os.replace(staged, target)
    except BaseException:
        os.replace(old, target)
        raise
    _remove(old)
