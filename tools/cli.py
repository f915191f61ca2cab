"""The `tsvk` command: one entry point, one plain function per subcommand.

Each command module has `register(commands)`, which adds its parser and sets its function (`cmd_*`, taking
the parsed arguments and returning an exit status, so tests call them directly). A UsageError becomes one
clear line on stderr and exit status 2, never a traceback.

The lab's commands (bench, robustness, soak, gpu-check) are added from `tsvk_tools.lab.commands` only when one of
them is asked for: it is looked up by name, because the product never imports the lab, and `tsvk --help` lists them
by name without importing it (nor Hypothesis, which it needs). Where the lab's packages are missing, asking for one
of its commands says in one line to install the lab extra.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import importlib.util
import signal
import sys

from . import doctor, progress
from .batch import batch_cli
from .archive import build_cli
from .client import demo, draw, predict, status
from .engines import container, serve_cli
from .errors import UsageError
from .extras import install_line, missing_extra
from .processes import exit_on_sigterm
from .tune import tune_cli as tune

# Each module's register(commands), in the order `tsvk --help` lists the commands; the lab's follow them.
COMMAND_MODULES = (build_cli, serve_cli, container, predict, batch_cli, demo, tune, draw, status, doctor)
LAB_COMMANDS = f"{__package__}.lab.commands"
# The lab's commands by name, so that `tsvk --help` lists them and `tsvk <one of them>` loads the lab only then
# (tests/unit/test_cli_commands.py holds this to the commands the lab registers).
LAB_COMMAND_NAMES = ("bench", "robustness", "soak", "gpu-check")
DISTRIBUTION = "tsvk"
# The commands with long steps: each shows its progress on a terminal and takes --quiet (the lab's where it is installed).
PROGRESS_COMMANDS = ("archive", "compile", "serve", "demo", "tune", "robustness", "soak", "batch")


def build_parser(lab: bool = True) -> argparse.ArgumentParser:
    """Every command's parser, the lab's where it is installed (`lab=False`: the product's only). None of them imports
    torch: a command imports it when it runs a model, so `tsvk --help` starts in about a second."""
    parser = argparse.ArgumentParser(prog="tsvk", description="TorchServe Vision Kit: compile, archive, configure, serve, benchmark.",
                                     epilog=f"the lab's commands: {', '.join(LAB_COMMAND_NAMES)} ({install_line('lab')} where "
                                            "they are missing; `tsvk bench --help` for one of them)")
    parser.add_argument("--version", action="version", version=f"%(prog)s {installed_version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMAND_MODULES + (lab_command_modules() if lab else ()):
        module.register(commands)
    for name in PROGRESS_COMMANDS:
        if name in commands.choices:
            progress.add_quiet_argument(commands.choices[name])
    return parser


def installed_version() -> str:
    """The installed distribution's version: setup.cfg takes it from the run-time package, so it is written once."""
    return importlib.metadata.version(DISTRIBUTION)


def lab_command_modules(required: bool = False) -> tuple:
    """The lab's command modules, or none where the lab or a package it needs is not installed: the product runs
    without it. `required` (a lab command was asked for): its absence is a MissingExtra naming the pip line."""
    try:
        if importlib.util.find_spec(LAB_COMMANDS) is not None:
            return importlib.import_module(LAB_COMMANDS).COMMAND_MODULES
        failed = None
    except ImportError as err:
        failed = err
    if required:
        raise missing_extra(f"the lab ({', '.join(LAB_COMMAND_NAMES)})", "lab", failed)
    return ()


def parser_for(argv: list[str]) -> argparse.ArgumentParser:
    """The whole parser for a lab command (the lab loaded, or a MissingExtra); the product's for anything else,
    `tsvk --help` included: the lab's modules (the robustness corpus, Hypothesis) cost a few tenths of a second
    that `tsvk status` or `tsvk stop` need not wait, and packages a plain install does not have."""
    if argv[:1] and argv[0] in LAB_COMMAND_NAMES:
        lab_command_modules(required=True)
        return build_parser()
    return build_parser(lab=False)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        parser = parser_for(argv)
    except UsageError as err:
        print(f"tsvk {argv[0]}: error: {err}", file=sys.stderr)
        return 2
    args = parser.parse_args(argv)
    exit_on_sigterm()  # run `finally` blocks: servers we started get stopped
    progress.configure(args.command, getattr(args, "quiet", False))
    try:
        return args.func(args)
    except UsageError as err:
        print(f"tsvk {args.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 128 + signal.SIGINT


if __name__ == "__main__":
    sys.exit(main())
