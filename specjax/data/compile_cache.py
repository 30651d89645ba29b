"""A persistent XLA compilation cache for library, command-line and notebook users.

    from specjax.data import compile_cache
    compile_cache.enable()        # jax_compilation_cache_dir = <cache root>/xla, unless already set

A decode loop compiles for seconds (about 6 s on the embedded pair on a CPU, 14-21 s on
SmolLM2-135M); with the cache on, a later process (the next `specjax generate`, a restarted
notebook kernel) loads the compiled program from disk instead. `Pipeline.generate`, `specjax`
(`specjax.cli.main`) and `python -m specjax.train` call `enable()`; jax's cache key covers jax,
jaxlib, the backend, the XLA flags and the program, so a stale entry is never reused.

Rules, in order:

* ``SPECJAX_COMPILE_CACHE=0`` (or off / false / no) turns it off: `enable` does nothing;
* jax's own switch ``jax_enable_compilation_cache`` False is left alone (nothing enabled);
* a cache directory the user already configured (``JAX_COMPILATION_CACHE_DIR``, or
  ``jax.config.update("jax_compilation_cache_dir", ...)`` earlier) is kept, with its thresholds;
* otherwise the directory is `directory`, else ``<cache root>/xla`` (the cache root:
  ``$SPECJAX_CACHE`` or ``~/.cache/specjax``, `specjax.data.assets.cache_root`), and programs
  that compiled for at least `MIN_COMPILE_SECONDS` are written (the thresholds below; a
  threshold the user set, through its ``JAX_...`` variable or jax.config, is kept).

The cache grows without a bound (jax's ``jax_compilation_cache_max_size`` caps it); deleting
the directory is always safe. Like every jax compilation cache it is trusted: do not point it
at a directory others can write to.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import jax

from specjax.data.assets import cache_root

__all__ = ["ENV", "MIN_COMPILE_SECONDS", "MIN_ENTRY_BYTES", "enable", "is_wanted"]

ENV = "SPECJAX_COMPILE_CACHE"

# Programs that compile faster than this are not written: the eager ops jax compiles on the way
# (a slice, a convert, ~10-50 ms each) would cost more to read back than to compile; every decode
# loop, prefill and training step compiles for seconds.
MIN_COMPILE_SECONDS = 0.5
# No size floor (-1: jax applies none and lets no platform override it): compile time is the filter.
MIN_ENTRY_BYTES = -1

_OFF = ("0", "off", "false", "no")


def is_wanted() -> bool:
    """False when ``SPECJAX_COMPILE_CACHE`` is 0 / off / false / no (any case), else True."""
    return os.environ.get(ENV, "1").strip().lower() not in _OFF


def enable(directory: str | os.PathLike | None = None) -> Path | None:
    """Turn jax's persistent compilation cache on (module docstring); returns the directory in use,
    or None when it stays off (``SPECJAX_COMPILE_CACHE=0``, ``jax_enable_compilation_cache`` False, or a
    directory that cannot be created: a warning says so).

    directory: where to keep it (default ``<cache root>/xla``); created if missing. A directory the
    user already configured wins over it and is returned unchanged. Idempotent and cheap: callers
    call it on every entry (`Pipeline.generate` does, per call)."""
    if not is_wanted() or not jax.config.jax_enable_compilation_cache:
        return None
    configured = jax.config.jax_compilation_cache_dir
    if configured:
        return Path(configured)
    path = Path(directory).expanduser() if directory is not None else cache_root() / "xla"
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:  # a speed-up only: a read-only home must not stop a generation
        warnings.warn(f"no persistent compilation cache: cannot create {path} ({e.strerror}); pass another "
                      f"directory, set $SPECJAX_CACHE, or silence this with {ENV}=0", stacklevel=2)
        return None
    _unless_set("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_SECONDS)
    _unless_set("jax_persistent_cache_min_entry_size_bytes", MIN_ENTRY_BYTES)
    jax.config.update("jax_compilation_cache_dir", str(path))
    return path


# jax's own defaults of the thresholds: a value other than these was set by the user, and is kept.
_JAX_DEFAULTS = {"jax_persistent_cache_min_compile_time_secs": 1.0, "jax_persistent_cache_min_entry_size_bytes": 0}


def _unless_set(name: str, value) -> None:
    """Set jax's config `name` to `value` unless the user set it (its environment variable, or a value
    other than jax's default)."""
    if name.upper() not in os.environ and getattr(jax.config, name) == _JAX_DEFAULTS[name]:
        jax.config.update(name, value)
