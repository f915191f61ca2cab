"""The `tsvk` command: one entry point, one plain function per subcommand.

Each command module has `register(commands)`, which adds its parser and sets its function (`cmd_*`, taking
the parsed arguments and returning an exit status, so tests call them directly). A UsageError becomes one
clear line on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import signal
import sys

from . import doctor, progress
from .batch import batch_cli
from .build import build_cli
from .client import demo, draw, predict, status
from .serve import container, serve_cli
from .bench import run as bench
from .errors import UsageError
from .gpu_check import cli as gpu_check
from .robustness import run as robustness, soak
from .tune import run as tune

# Each module's register(commands), in the order `tsvk --help` lists the commands.
COMMAND_MODULES = (bench, build_cli, serve_cli, container, predict, batch_cli, robustness, soak, gpu_check, demo, tune, draw, status, doctor)
# The commands with long steps: each shows its progress on a terminal and takes --quiet.
PROGRESS_COMMANDS = ("archive", "compile", "serve", "demo", "tune", "robustness", "soak", "batch")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tsvk", description="TorchServe Vision Kit: compile, archive, configure, serve, benchmark.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMAND_MODULES:
        module.register(commands)
    for name in PROGRESS_COMMANDS:
        progress.add_quiet_argument(commands.choices[name])
    return parser


def _exit_on_sigterm(signum, frame) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)  # run `finally` blocks: servers we started get stopped
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
