"""The `tsvk` command: one entry point, one plain function per subcommand.

Each command module has `register(commands)`, which adds its parser and sets its function (`cmd_*`, taking
the parsed arguments and returning an exit status, so tests call them directly). A UsageError becomes one
clear line on stderr and exit status 2, never a traceback.

The lab's commands (bench, robustness, soak, gpu-check) are added from `tsvk_tools.lab.commands` when the lab is
installed: it is looked up by name, because the product never imports the lab.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import signal
import sys

from . import doctor, progress
from .batch import batch_cli
from .archive import build_cli
from .client import demo, draw, predict, status
from .engines import container, serve_cli
from .errors import UsageError
from .processes import exit_on_sigterm
from .tune import tune_cli as tune

# Each module's register(commands), in the order `tsvk --help` lists the commands; the lab's follow them.
COMMAND_MODULES = (build_cli, serve_cli, container, predict, batch_cli, demo, tune, draw, status, doctor)
LAB_COMMANDS = f"{__package__}.lab.commands"
# The commands with long steps: each shows its progress on a terminal and takes --quiet (the lab's where it is installed).
PROGRESS_COMMANDS = ("archive", "compile", "serve", "demo", "tune", "robustness", "soak", "batch")


def build_parser(lab: bool = True) -> argparse.ArgumentParser:
    """Every command's parser, the lab's where it is installed (`lab=False`: the product's only). None of them imports
    torch: a command imports it when it runs a model, so `tsvk --help` starts in about a second."""
    parser = argparse.ArgumentParser(prog="tsvk", description="TorchServe Vision Kit: compile, archive, configure, serve, benchmark.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMAND_MODULES + (lab_command_modules() if lab else ()):
        module.register(commands)
    for name in PROGRESS_COMMANDS:
        if name in commands.choices:
            progress.add_quiet_argument(commands.choices[name])
    return parser


def lab_command_modules() -> tuple:
    """The lab's command modules, or none where the lab is not installed: the product runs without it."""
    if importlib.util.find_spec(LAB_COMMANDS) is None:
        return ()
    return importlib.import_module(LAB_COMMANDS).COMMAND_MODULES


def parser_for(argv: list[str]) -> argparse.ArgumentParser:
    """The product's parser for a product command: the lab's modules (the robustness corpus, Hypothesis) cost a
    few tenths of a second that `tsvk status` or `tsvk stop` need not wait; the whole parser for anything else."""
    product = build_parser(lab=False)
    commands = next(a for a in product._actions if isinstance(a, argparse._SubParsersAction))
    return product if argv[:1] and argv[0] in commands.choices else build_parser()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parser_for(argv).parse_args(argv)
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
