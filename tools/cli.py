"""The `tsvk` command: one entry point, one plain function per subcommand.

Each `cmd_*` function takes the parsed arguments and returns an exit status, so tests call them
directly. A UsageError becomes one clear line on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .errors import UsageError


def positive_int(text: str) -> int:
    return _int_at_least(text, 1)


def non_negative_int(text: str) -> int:
    return _int_at_least(text, 0)


def _int_at_least(text: str, minimum: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number >= {minimum}, got {text!r}") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"must be a whole number >= {minimum}, got {value}")
    return value


def name_list(text: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    if not names:
        raise argparse.ArgumentTypeError("must be one or more comma-separated model names")
    return names


def on_off(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("on", "true", "1", "yes"):
        return True
    if lowered in ("off", "false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"must be on or off, got {text!r}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tsvk", description="TorchServe Vision Kit: compile, archive, configure, serve, benchmark.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for register in _REGISTRARS:
        register(commands)
    return parser


def _register_config(commands) -> None:
    p = commands.add_parser("config", help="write a thread-tuned TorchServe config.properties")
    p.add_argument("--vcpus", type=positive_int, help="vCPUs to plan for (default: detected from the cgroup quota and affinity mask)")
    p.add_argument("--workers", type=positive_int, help="workers per model (default: one per GPU, else what the archive suggests)")
    p.add_argument("--gpus", type=non_negative_int, help="GPUs to use (default: all CUDA devices visible)")
    p.add_argument("--batch", type=positive_int, help="batch size per model (default: the archive's suggestion; at most its compiled max batch)")
    p.add_argument("--max-batch-delay", type=non_negative_int, dest="max_batch_delay_ms", help="ms to wait for a batch to fill")
    p.add_argument("--response-timeout", type=positive_int, dest="response_timeout_s", help="seconds before a request times out")
    p.add_argument("--models", type=name_list, help="comma-separated model names (default: every archive in the model store)")
    p.add_argument("--model-store", type=Path, default=Path("model_store"))
    p.add_argument("--no-archive-check", dest="archive_check", action="store_false", help="do not open the archives (Helm: they arrive at deploy time)")
    p.add_argument("--auth", type=on_off, default=True, help="TorchServe token authorization: on (default) or off")
    p.add_argument("--concurrency", type=positive_int, default=64, help="expected concurrent clients (sizes the job queue)")
    p.add_argument("--core-pinning", action="store_true", help="pin each worker to its own cores with TorchServe's CPU launcher")
    p.add_argument("--max-request-mb", type=positive_int, default=16)
    p.add_argument("--inference-address", default="http://0.0.0.0:8080")
    p.add_argument("--management-address", default="http://127.0.0.1:8081")
    p.add_argument("--metrics-address", default="http://127.0.0.1:8082")
    p.add_argument("--output", "-o", type=Path, default=Path("configs/generated.properties"))
    p.set_defaults(func=cmd_config)


def cmd_config(args: argparse.Namespace) -> int:
    from .serving_config import ServingRequest, write_config

    fields = ServingRequest.__dataclass_fields__
    request = ServingRequest(**{k: v for k, v in vars(args).items() if k in fields})
    plan = write_config(request, args.output)
    for model in plan.models:
        print(f"{model.name}: {model.workers} worker(s) x {model.intra_op_threads} thread(s), batch {model.batch}, "
              f"max delay {model.max_batch_delay_ms} ms")
    print(f"wrote {args.output} for {plan.vcpus} vCPUs, {plan.gpus} GPU(s)")
    return 0


_REGISTRARS = [_register_config]


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except UsageError as err:
        print(f"tsvk {args.command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
