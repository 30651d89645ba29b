"""The persistent compilation cache for library, CLI and notebook users (issue 52 item 4,
`specjax.data.compile_cache`): `enable` points jax at ``<cache root>/xla`` with its thresholds,
does nothing under ``SPECJAX_COMPILE_CACHE=0``, and never overrides what the user configured
(the suite's own cache, tests/conftest.py, included: every test restores jax's config)."""

from __future__ import annotations

import jax
import pytest

from specjax.cli.main import main
from specjax.cli.train import main as train_main
from specjax.data import compile_cache

DIR = "jax_compilation_cache_dir"
MIN_TIME = "jax_persistent_cache_min_compile_time_secs"
MIN_SIZE = "jax_persistent_cache_min_entry_size_bytes"


@pytest.fixture
def unconfigured(monkeypatch, tmp_path):
    """jax as a user's process starts it: no cache directory, jax's default thresholds, none of their variables
    (conftest.py sets the suite's own); SPECJAX_CACHE in tmp_path. Restored afterwards. Nothing compiles meanwhile,
    so jax's cache, if the suite already opened it, stays the suite's."""
    saved = {name: getattr(jax.config, name) for name in (DIR, MIN_TIME, MIN_SIZE, "jax_enable_compilation_cache")}
    for var in (compile_cache.ENV, "JAX_COMPILATION_CACHE_DIR", MIN_TIME.upper(), MIN_SIZE.upper()):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("SPECJAX_CACHE", str(tmp_path / "root"))
    jax.config.update(DIR, None)
    jax.config.update(MIN_TIME, 1.0)
    jax.config.update(MIN_SIZE, 0)
    yield tmp_path
    for name, value in saved.items():
        jax.config.update(name, value)


def test_enable_sets_the_directory_and_the_thresholds(unconfigured):
    where = unconfigured / "xla-here"
    assert compile_cache.enable(where) == where and where.is_dir()
    assert getattr(jax.config, DIR) == str(where)
    assert getattr(jax.config, MIN_TIME) == compile_cache.MIN_COMPILE_SECONDS == 0.5
    assert getattr(jax.config, MIN_SIZE) == compile_cache.MIN_ENTRY_BYTES == -1
    assert compile_cache.enable(unconfigured / "elsewhere") == where  # idempotent: the first directory stays


def test_the_default_directory_is_xla_under_the_cache_root(unconfigured):
    assert compile_cache.enable() == unconfigured / "root" / "xla"
    assert getattr(jax.config, DIR) == str(unconfigured / "root" / "xla")


@pytest.mark.parametrize("off", ["0", "off", "False", "no "])
def test_the_environment_variable_turns_it_off(unconfigured, monkeypatch, off):
    monkeypatch.setenv(compile_cache.ENV, off)
    assert not compile_cache.is_wanted()
    assert compile_cache.enable(unconfigured / "xla") is None
    assert getattr(jax.config, DIR) is None and getattr(jax.config, MIN_TIME) == 1.0
    assert not (unconfigured / "xla").exists()
    monkeypatch.setenv(compile_cache.ENV, "1")
    assert compile_cache.is_wanted()


def test_what_the_user_configured_is_kept(unconfigured, monkeypatch):
    mine = str(unconfigured / "mine")
    jax.config.update(DIR, mine)
    jax.config.update(MIN_TIME, 3.0)
    assert compile_cache.enable(unconfigured / "xla") == unconfigured / "mine"
    assert getattr(jax.config, DIR) == mine and getattr(jax.config, MIN_TIME) == 3.0
    assert not (unconfigured / "xla").exists()
    # No directory yet, but thresholds of the user's (through jax.config, or their variables): kept.
    jax.config.update(DIR, None)
    monkeypatch.setenv(MIN_SIZE.upper(), "0")
    assert compile_cache.enable(unconfigured / "xla") == unconfigured / "xla"
    assert getattr(jax.config, MIN_TIME) == 3.0 and getattr(jax.config, MIN_SIZE) == 0
    # jax's own switch off: nothing enabled.
    jax.config.update(DIR, None)
    jax.config.update("jax_enable_compilation_cache", False)
    assert compile_cache.enable(unconfigured / "other") is None and getattr(jax.config, DIR) is None


def test_a_directory_that_cannot_be_made_warns_and_leaves_it_off(unconfigured):
    blocker = unconfigured / "a-file"
    blocker.write_text("")
    with pytest.warns(UserWarning, match="no persistent compilation cache: cannot create .*SPECJAX_COMPILE_CACHE=0"):
        assert compile_cache.enable(blocker / "xla") is None
    assert getattr(jax.config, DIR) is None


def test_the_command_lines_turn_it_on(unconfigured, capsys):
    assert main(["methods"]) == 0
    assert getattr(jax.config, DIR) == str(unconfigured / "root" / "xla")
    jax.config.update(DIR, None)
    assert train_main(["recipe", "--shares", "0.5,0.5"]) == 2  # the plan's own error, after parsing: the cache is on
    assert "--shares must be three fractions >= 0 summing to 1" in capsys.readouterr().err
    assert getattr(jax.config, DIR) == str(unconfigured / "root" / "xla")
