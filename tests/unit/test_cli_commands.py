"""Every command registers the same way, and reaches its request by name."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import pytest

from tsvk_tools import cli
from tsvk_tools.arguments import request_from
from tsvk_tools.lab.bench import bench_cli as bench_run

COMMANDS = {"archive", "batch", "bench", "compile", "config", "demo", "doctor", "draw", "gpu-check", "keys", "predict", "robustness",
            "run-container", "serve", "soak", "status", "stop", "tune"}


def test_tsvk_help_lists_every_command_each_with_its_function():
    parser = cli.build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    assert set(commands) == COMMANDS
    for name, sub in commands.items():
        assert callable(sub.get_default("func")), f"tsvk {name} sets no function"


LAB_COMMANDS = {"bench", "robustness", "soak", "gpu-check"}


def test_the_product_cli_stands_without_the_lab(monkeypatch):
    """Where the lab is not installed, `tsvk` has every product command and none of the lab's."""
    monkeypatch.setattr(cli, "LAB_COMMANDS", "tsvk_tools.lab_not_installed")
    parser = cli.build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    assert set(commands) == COMMANDS - LAB_COMMANDS


def test_the_lab_s_commands_by_name_are_the_ones_it_registers():
    """`tsvk --help` and the choice of parser go by cli.LAB_COMMAND_NAMES, without importing the lab."""
    def names(parser):
        return set(next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices)

    assert names(cli.build_parser()) - names(cli.build_parser(lab=False)) == set(cli.LAB_COMMAND_NAMES) == LAB_COMMANDS
    assert all(name in cli.build_parser(lab=False).format_help() for name in cli.LAB_COMMAND_NAMES)


def test_tsvk_version_is_the_run_time_package_s(capsys):
    import tsvk

    with pytest.raises(SystemExit) as stop:
        cli.main(["--version"])
    assert stop.value.code == 0
    assert capsys.readouterr().out == f"tsvk {tsvk.__version__}\n"


def test_bench_goes_through_argparse_and_hands_every_word_to_its_own_parser(monkeypatch):
    seen = []
    monkeypatch.setattr(bench_run, "main", lambda argv: seen.append(argv) or 0)
    for argv in (["--quick", "--jobs", "3"], ["--help"], [], ["preprocess", "--help"]):
        assert cli.main(["bench", *argv]) == 0
    assert seen == [["--quick", "--jobs", "3"], ["--help"], [], ["preprocess", "--help"]]


def test_tsvk_bench_help_is_the_benchmarks_own(capsys):
    with pytest.raises(SystemExit):
        cli.main(["bench", "--help"])
    assert capsys.readouterr().out == bench_run.build_parser().format_help()


@dataclass
class _Request:
    model: str
    workers: int = 1
    computed: str = ""


def test_a_request_takes_each_field_from_the_argument_of_its_name():
    args = argparse.Namespace(model="resnet18", workers=4, unrelated=True)
    assert request_from(_Request, args, computed="x") == _Request("resnet18", 4, "x")
    assert request_from(_Request, argparse.Namespace(model="m")) == _Request("m")
