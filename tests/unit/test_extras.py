"""tsvk's extras: the names a command's message gives are the ones setup.cfg declares, and the message is the
one line a user runs."""

from __future__ import annotations

import configparser
from pathlib import Path

import pytest

from tsvk_tools import extras
from tsvk_tools.errors import UsageError

ROOT = Path(__file__).resolve().parents[2]
DEVELOPERS_ONLY = {"test"}  # an extra of setup.cfg no command names: the test suite's packages


def _declared() -> set[str]:
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    return set(config["options.extras_require"])


def test_every_extra_a_command_names_is_declared_and_every_declared_one_is_named():
    assert set(extras.EXTRAS) == _declared() - DEVELOPERS_ONLY


def test_the_message_names_the_missing_module_and_the_quoted_pip_line():
    try:
        import tsvk_module_that_is_not_there  # noqa: F401
    except ImportError as err:
        error = extras.missing_extra("--ray (Ray Data)", "ray", err)
    assert isinstance(error, UsageError)
    assert str(error) == ("--ray (Ray Data) needs tsvk's ray extra (tsvk_module_that_is_not_there is not installed): "
                          "pip install 'tsvk[ray]'")


def test_an_extra_setup_cfg_does_not_declare_is_refused():
    with pytest.raises(ValueError, match="extra must be one of torchserve, .*got 'kserve'"):
        extras.install_line("kserve")


def test_torchserve_missing_says_which_extra_and_that_the_other_engine_needs_none(monkeypatch, tmp_path):
    from tsvk_tools.engines.torchserve import server

    monkeypatch.setattr(server.sys, "executable", str(tmp_path / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(extras.MissingExtra, match=r"--engine kserve, needs neither it nor Java.*pip install 'tsvk\[torchserve\]'"):
        server._torchserve_bin()
