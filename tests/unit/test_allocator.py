"""Which malloc `tsvk serve` starts TorchServe with: the choice, its fallback, and LD_PRELOAD."""

from __future__ import annotations

from pathlib import Path

import pytest

from tsvk_tools import defaults
from tsvk_tools import cli
from tsvk_tools.config import allocator
from tsvk_tools.errors import UsageError


@pytest.fixture
def fake_jemalloc(tmp_path, monkeypatch) -> Path:
    library = tmp_path / allocator.JEMALLOC_SONAME
    library.write_bytes(b"")
    monkeypatch.setattr(allocator, "find_jemalloc", lambda: library)
    return library


@pytest.fixture
def no_jemalloc(monkeypatch) -> None:
    monkeypatch.setattr(allocator, "find_jemalloc", lambda: None)


def test_glibc_adds_nothing(fake_jemalloc):
    assert allocator.resolve("glibc") == ("glibc", None)
    assert allocator.allocator_env("glibc", {"LD_PRELOAD": "/opt/libx.so"}) == {}


@pytest.mark.parametrize("choice", ["auto", "jemalloc"])
def test_jemalloc_goes_first_and_keeps_what_was_preloaded(fake_jemalloc, choice):
    env = allocator.allocator_env(choice, {"LD_PRELOAD": f"/opt/libx.so:/elsewhere/{allocator.JEMALLOC_SONAME}"})
    assert env == {"LD_PRELOAD": f"{fake_jemalloc} /opt/libx.so"}
    assert allocator.describe(choice) == f"allocator: jemalloc ({fake_jemalloc})"


def test_auto_falls_back_to_glibc_and_says_how_to_get_jemalloc(no_jemalloc):
    assert allocator.resolve("auto") == ("glibc", None)
    assert allocator.allocator_env("auto", {}) == {}
    assert "apt-get install libjemalloc2" in allocator.describe("auto")


def test_jemalloc_asked_for_but_missing_is_a_usage_error(no_jemalloc):
    with pytest.raises(UsageError, match="libjemalloc2.*--allocator glibc"):
        allocator.resolve("jemalloc")


def test_unknown_choice_names_the_allowed_ones():
    with pytest.raises(UsageError, match="auto, jemalloc, glibc"):
        allocator.resolve("tcmalloc")


def test_cli_refuses_an_unknown_allocator(capsys):
    with pytest.raises(SystemExit) as exited:
        cli.main(["serve", "--allocator", "tcmalloc"])
    assert exited.value.code == 2
    assert "choose from 'auto', 'jemalloc', 'glibc'" in capsys.readouterr().err


def test_default_is_one_of_the_choices():
    assert defaults.ALLOCATOR in defaults.ALLOCATORS


def test_finds_the_installed_library_when_there_is_one():
    found = allocator.find_jemalloc()
    if found is None:
        pytest.skip(f"{allocator.JEMALLOC_SONAME} is not installed here (CI installs libjemalloc2)")
    assert found.name == allocator.JEMALLOC_SONAME
