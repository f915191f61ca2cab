"""`tsvk gpu-check`: the subcommand's arguments, kept beside the check they drive."""

from __future__ import annotations

import argparse
from pathlib import Path

from . import check
from .step_runner import OUTPUT_DIR
from .steps import DEFAULT_MODEL, DEFAULT_WEIGHTS


def register(commands) -> None:
    p = commands.add_parser("gpu-check", help="on a CUDA machine: every GPU test and measurement, one report (make gpu-check)")
    p.add_argument("--model", default=DEFAULT_MODEL, help=f"the model of the two archives built (default {DEFAULT_MODEL})")
    p.add_argument(
        "--weights",
        default=DEFAULT_WEIGHTS,
        help="their weights: seeded (seeded decisive weights, no download), DEFAULT, none or a state_dict path "
        f"(default {DEFAULT_WEIGHTS})",
    )
    p.add_argument("--steps", type=_step_names, default=(), help="comma-separated subset of the steps to run (default: all)")
    p.add_argument("--output-dir", type=Path, default=OUTPUT_DIR, help="where gpu-check-<UTC time>.json and .md go")
    p.set_defaults(func=cmd_gpu_check)


def _step_names(text: str) -> tuple[str, ...]:
    return tuple(name.strip() for name in text.split(",") if name.strip())


def cmd_gpu_check(args: argparse.Namespace) -> int:
    report, written = check(args.model, args.weights, args.output_dir, args.steps)
    print(f"gpu-check: {report['summary']}; wrote {written['json']} and {written['md']}")
    return 0 if report["summary"]["passed"] == len(report["steps"]) else 1
