"""`tsvk config`, `tsvk serve`, `tsvk stop` and `tsvk keys`: write a serving config, and start, stop and
hold the keys of the server started from it: TorchServe (and its Open Inference Protocol front), or with
`--engine kserve` tsvk's own engine (tools/engines/kserve), on the same config and model store."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

from tsvk.common import read_properties

from .. import defaults
from ..config.allocator import add_allocator_argument, describe as describe_allocator
from ..arguments import add_protocol_argument, name_list, non_negative_int, on_off, positive_int, request_from
from .shared.drain import add_drain_timeout_argument
from .registry import add_engine_argument, engine_named, engine_of, find_serving
from ..errors import UsageError
from ..keys import KEY_FILE, KEY_TYPES, current_key
from ..oip.config import is_oip_config
from ..config.precision_check import emulated_precision_lines, served_archives
from ..config.rendering import write_plan
from ..config.serving_config import ServingRequest, plan_with_choices, tuned_choices, write_config


def register(commands) -> None:
    _register_config(commands)
    _register_serve(commands)
    _register_stop(commands)
    _register_keys(commands)


DEFAULT_RUN_DIR = Path(defaults.RUN_DIR)


def _register_config(commands) -> None:
    p = commands.add_parser("config", help="write a thread-tuned TorchServe config.properties")
    p.add_argument("--vcpus", type=positive_int, help="vCPUs to plan for (default: detected from the cgroup quota and affinity mask)")
    p.add_argument("--workers", type=positive_int, help="workers per model (default: one per GPU; else what the archive suggests, if it "
                   "was built with --workers; else one single-threaded worker per vCPU, as many as --memory-mb holds)")
    p.add_argument("--memory-mb", type=positive_int, help="memory TorchServe may use, MiB: bounds the planned workers, each "
                   "estimated from its archive's size (256-16777216; default: the cgroup limit, else this machine's memory)")
    p.add_argument("--gpus", type=non_negative_int, help="GPUs to use (default: all CUDA devices visible)")
    p.add_argument(
        "--batch", type=positive_int, help="batch size per model (default: the archive's suggestion; at most its compiled max batch)"
    )
    p.add_argument(
        "--max-batch-delay",
        type=non_negative_int,
        dest="max_batch_delay_ms",
        help=f"ms to wait for a batch to fill (default: the archive's suggestion; without archives {defaults.MAX_BATCH_DELAY_MS})",
    )
    p.add_argument(
        "--response-timeout",
        type=positive_int,
        dest="response_timeout_s",
        help=f"seconds before a request times out (default: the archive's suggestion; without archives {defaults.RESPONSE_TIMEOUT_S})",
    )
    p.add_argument("--models", type=name_list, help="comma-separated model names (default: every archive in the model store)")
    p.add_argument("--model-store", type=Path, default=Path(defaults.MODEL_STORE))
    p.add_argument(
        "--no-archive-check", dest="archive_check", action="store_false", help="do not open the archives (Helm: they arrive at deploy time)"
    )
    p.add_argument("--auth", type=on_off, default=True, help="TorchServe token authorization: on (default) or off")
    p.add_argument(
        "--concurrency",
        type=positive_int,
        default=defaults.CONCURRENCY,
        help=f"expected concurrent clients (sizes the job queue; default {defaults.CONCURRENCY})",
    )
    p.add_argument("--core-pinning", action="store_true", help="pin each worker to its own cores with TorchServe's CPU launcher")
    p.add_argument(
        "--max-request-mb",
        type=positive_int,
        default=defaults.MAX_REQUEST_MB,
        help=f"largest request body TorchServe accepts, MiB (1-1024; default {defaults.MAX_REQUEST_MB})",
    )
    p.add_argument(
        "--deadline-ms",
        type=positive_int,
        help="refuse (503 deadline_exceeded) requests that waited longer than this "
        "before reaching a worker; needs an X-Request-Start header (default: no deadline)",
    )
    p.add_argument(
        "--token-expiry-min",
        type=positive_int,
        default=defaults.TOKEN_EXPIRY_MIN,
        help=f"minutes before token-auth keys expire; `tsvk serve` renews them at half that age (default {defaults.TOKEN_EXPIRY_MIN})",
    )
    p.add_argument("--inference-address", default=defaults.INFERENCE_ADDRESS)
    p.add_argument("--management-address", default=defaults.MANAGEMENT_ADDRESS)
    p.add_argument("--metrics-address", default=defaults.METRICS_ADDRESS)
    p.add_argument(
        "--grpc-inference-port",
        type=positive_int,
        default=defaults.GRPC_INFERENCE_PORT,
        help="gRPC ports: TorchServe always opens them, on localhost",
    )
    p.add_argument("--grpc-management-port", type=positive_int, default=defaults.GRPC_MANAGEMENT_PORT)
    p.add_argument("--tls-key", type=Path, help="with --tls-cert: serve every address as https, and gRPC over TLS, with this "
                   "PEM private key (unencrypted, readable by its owner only; RSA for TorchServe): written as private_key_file")
    p.add_argument("--tls-cert", type=Path, help="the PEM certificate of --tls-key (certificate_file); it must name the hosts "
                   "clients connect to, 127.0.0.1 for tsvk's own (default: plain http)")
    p.add_argument(
        "--tuned",
        type=Path,
        help="take each model's workers, threads, batch and delay from a config `tsvk tune` wrote "
        "(everything else from these flags: a tuned config for another address, model store or the Helm chart)",
    )
    add_protocol_argument(p)
    p.add_argument(
        "--oip-address",
        default=defaults.OIP_ADDRESS,
        help=f"--protocol oip: where the front listens (default {defaults.OIP_ADDRESS}; 0.0.0.0 exposes it)",
    )
    p.add_argument(
        "--oip-rest-port",
        type=positive_int,
        default=defaults.OIP_REST_PORT,
        help=f"--protocol oip: the front's REST port (default {defaults.OIP_REST_PORT})",
    )
    p.add_argument(
        "--oip-grpc-port",
        type=positive_int,
        default=defaults.OIP_GRPC_PORT,
        help=f"--protocol oip: the front's gRPC port (default {defaults.OIP_GRPC_PORT})",
    )
    p.add_argument("--output", "-o", type=Path, default=Path(defaults.CONFIG))
    p.set_defaults(func=cmd_config)


def cmd_config(args: argparse.Namespace) -> int:
    request = request_from(ServingRequest, args)
    plan = _tuned_config(request, args) if args.tuned else write_config(request, args.output)
    for model in plan.models:
        print(
            f"{model.name}: {model.workers} worker(s) x {model.intra_op_threads} thread(s), batch {model.batch}, "
            f"max delay {model.max_batch_delay_ms} ms"
        )
    print(f"wrote {args.output} for {plan.vcpus} vCPUs, {plan.gpus} GPU(s)")
    if request.archive_check:
        _warn_emulated_precision([request.model_store / f"{model.name}.mar" for model in plan.models])
    return 0


def _warn_emulated_precision(archives: list[Path]) -> None:
    """Archives this CPU would run slower than they were built to run, each in one line with its fix."""
    for line in emulated_precision_lines(path for path in archives if path.is_file()):
        print(line, file=sys.stderr)


def _tuned_config(request, args: argparse.Namespace):
    """The generator's config with the numbers of a tuned one; flags that would set those numbers are refused."""
    clashing = [
        flag
        for flag, dest in (("--workers", "workers"), ("--batch", "batch"), ("--max-batch-delay", "max_batch_delay_ms"))
        if getattr(args, dest) is not None
    ]
    if clashing:
        raise UsageError(f"{', '.join(clashing)} cannot be combined with --tuned, which sets workers, threads, batch and delay")
    choices = tuned_choices(args.tuned)
    unknown = [name for name in request.models or () if name not in choices]
    if unknown:
        raise UsageError(f"--tuned {args.tuned} has no tuned numbers for {', '.join(unknown)} (it has {', '.join(choices)})")
    chosen = {name: choices[name] for name in request.models or choices}
    plan = plan_with_choices(replace(request, models=tuple(chosen)), chosen, origin=f"tsvk config --tuned {args.tuned}")
    return write_plan(plan, args.output)


def _register_serve(commands) -> None:
    p = commands.add_parser(
        "serve", help="start TorchServe (or tsvk's own engine: --engine kserve) on a generated config and wait until every model is ready"
    )
    p.add_argument("--config", type=Path, default=Path(defaults.CONFIG))
    p.add_argument("--run-dir", type=Path, default=DEFAULT_RUN_DIR, help="working dir, logs and key file of this TorchServe")
    p.add_argument(
        "--timeout",
        type=positive_int,
        default=defaults.READY_TIMEOUT_S,
        help=f"seconds to wait for the models (default {defaults.READY_TIMEOUT_S})",
    )
    add_protocol_argument(
        p,
        "oip: require the config to serve the Open Inference Protocol (default: whatever the config "
        "says; a config from `tsvk config --protocol oip` starts the front too)",
    )
    add_allocator_argument(p)
    add_engine_argument(p)
    p.set_defaults(func=cmd_serve)


def cmd_serve(args: argparse.Namespace) -> int:
    oip = args.config.is_file() and is_oip_config(read_properties(args.config))
    if args.protocol == "oip" and not oip:
        raise UsageError(f"{args.config} does not serve the Open Inference Protocol; write it with `tsvk config --protocol oip`")
    print(describe_allocator(args.allocator))
    if args.config.is_file():
        _warn_emulated_precision(served_archives(args.config))
    outcome = engine_named(args.engine).serve(args.config, args.run_dir, args.allocator, args.timeout, oip)
    print("\n".join(outcome.lines))
    return 0


def _register_stop(commands) -> None:
    p = commands.add_parser("stop", help="drain and stop the server (either engine) that `tsvk serve` started (and no other)")
    p.add_argument("--run-dir", type=Path, default=DEFAULT_RUN_DIR)
    add_drain_timeout_argument(p)
    p.set_defaults(func=cmd_stop)


def cmd_stop(args: argparse.Namespace) -> int:
    run = find_serving(args.run_dir)
    if run is None:
        print(f"no server started from {args.run_dir} is running")
        return 0
    print(engine_of(run).stop(run, args.drain_timeout).said)
    return 0


def _register_keys(commands) -> None:
    p = commands.add_parser("keys", help="print the running TorchServe's inference key, or renew the keys (--renew)")
    p.add_argument("--run-dir", type=Path, default=DEFAULT_RUN_DIR)
    p.add_argument("--renew", action="store_true", help="replace the inference and management keys now")
    p.add_argument("--kind", choices=KEY_TYPES, default="inference", help="which key to print (default inference)")
    p.set_defaults(func=cmd_keys)


def cmd_keys(args: argparse.Namespace) -> int:
    run = find_serving(args.run_dir)
    if run is None:
        raise UsageError(f"no server started from {args.run_dir} is running; `tsvk serve` first")
    if args.renew:
        engine_of(run).renew_keys(run)
    key = current_key(run.run_dir, args.kind)
    if key is None:
        raise UsageError(f"no {args.kind} key in {run.run_dir / KEY_FILE}: token authorization is off")
    print(key)
    return 0
