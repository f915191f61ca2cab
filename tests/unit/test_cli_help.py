"""Every `tsvk` command's --help renders: argparse formats help texts with %, so one stray percent sign
(a default shown as "40%") breaks that command's help for every user."""

from __future__ import annotations

import argparse

import pytest

from tsvk_tools.cli import build_parser


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


@pytest.mark.parametrize("name", sorted(_commands()))
def test_help_renders(name, capsys):
    text = _commands()[name].format_help()
    assert f"tsvk {name}" in text
    assert "%(" not in text


def test_archive_help_shows_the_calibration_share_as_a_percentage():
    text = " ".join(_commands()["archive"].format_help().split())
    assert "% calibrate, the rest verify accuracy" in text
    assert "%%" not in text
