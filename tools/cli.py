"""The `tsvk` command: one entry point, one plain function per subcommand.

Each `cmd_*` function takes the parsed arguments and returns an exit status, so tests call them
directly. A UsageError becomes one clear line on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

from . import defaults
from . import progress
from .allocator import add_allocator_argument, describe as describe_allocator
from .drain import add_drain_timeout_argument, describe_drain
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


def triple(text: str) -> tuple[float, float, float]:
    try:
        values = tuple(float(v) for v in text.split(","))
    except ValueError:
        values = ()
    if len(values) != 3:
        raise argparse.ArgumentTypeError(f"must be three comma-separated numbers r,g,b, got {text!r}")
    return values  # type: ignore[return-value]


def fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be a number from 0 to 1, got {text!r}")
    return value


def tolerance(text: str):
    from .verify import Tolerance

    try:
        atol, rtol, top1 = (float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be atol,rtol,min_top1 (e.g. 1e-3,1e-3,1.0), got {text!r}") from None
    return Tolerance(atol, rtol, top1)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tsvk", description="TorchServe Vision Kit: compile, archive, configure, serve, benchmark.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for register in _REGISTRARS:
        register(commands)
    for name in PROGRESS_COMMANDS:
        progress.add_quiet_argument(commands.choices[name])
    return parser


def _register_config(commands) -> None:
    p = commands.add_parser("config", help="write a thread-tuned TorchServe config.properties")
    p.add_argument("--vcpus", type=positive_int, help="vCPUs to plan for (default: detected from the cgroup quota and affinity mask)")
    p.add_argument("--workers", type=positive_int, help="workers per model (default: one per GPU; else what the archive suggests, if it "
                   "was built with --workers; else one single-threaded worker per vCPU, as many as --memory-mb holds)")
    p.add_argument("--memory-mb", type=positive_int, help="memory TorchServe may use, MiB: bounds the planned workers, each "
                   "estimated from its archive's size (256-16777216; default: the cgroup limit, else this machine's memory)")
    p.add_argument("--gpus", type=non_negative_int, help="GPUs to use (default: all CUDA devices visible)")
    p.add_argument("--batch", type=positive_int, help="batch size per model (default: the archive's suggestion; at most its compiled max batch)")
    p.add_argument("--max-batch-delay", type=non_negative_int, dest="max_batch_delay_ms",
                   help=f"ms to wait for a batch to fill (default: the archive's suggestion; without archives {defaults.MAX_BATCH_DELAY_MS})")
    p.add_argument("--response-timeout", type=positive_int, dest="response_timeout_s",
                   help=f"seconds before a request times out (default: the archive's suggestion; without archives {defaults.RESPONSE_TIMEOUT_S})")
    p.add_argument("--models", type=name_list, help="comma-separated model names (default: every archive in the model store)")
    p.add_argument("--model-store", type=Path, default=Path(defaults.MODEL_STORE))
    p.add_argument("--no-archive-check", dest="archive_check", action="store_false", help="do not open the archives (Helm: they arrive at deploy time)")
    p.add_argument("--auth", type=on_off, default=True, help="TorchServe token authorization: on (default) or off")
    p.add_argument("--concurrency", type=positive_int, default=defaults.CONCURRENCY,
                   help=f"expected concurrent clients (sizes the job queue; default {defaults.CONCURRENCY})")
    p.add_argument("--core-pinning", action="store_true", help="pin each worker to its own cores with TorchServe's CPU launcher")
    p.add_argument("--max-request-mb", type=positive_int, default=defaults.MAX_REQUEST_MB,
                   help=f"largest request body TorchServe accepts, MiB (1-1024; default {defaults.MAX_REQUEST_MB})")
    p.add_argument("--deadline-ms", type=positive_int, help="refuse (503 deadline_exceeded) requests that waited longer than this "
                   "before reaching a worker; needs an X-Request-Start header (default: no deadline)")
    p.add_argument("--token-expiry-min", type=positive_int, default=defaults.TOKEN_EXPIRY_MIN,
                   help=f"minutes before token-auth keys expire; `tsvk serve` renews them at half that age (default {defaults.TOKEN_EXPIRY_MIN})")
    p.add_argument("--inference-address", default=defaults.INFERENCE_ADDRESS)
    p.add_argument("--management-address", default=defaults.MANAGEMENT_ADDRESS)
    p.add_argument("--metrics-address", default=defaults.METRICS_ADDRESS)
    p.add_argument("--grpc-inference-port", type=positive_int, default=defaults.GRPC_INFERENCE_PORT,
                   help="gRPC ports: TorchServe always opens them, on localhost")
    p.add_argument("--grpc-management-port", type=positive_int, default=defaults.GRPC_MANAGEMENT_PORT)
    p.add_argument("--tuned", type=Path, help="take each model's workers, threads, batch and delay from a config `tsvk tune` wrote "
                   "(everything else from these flags: a tuned config for another address, model store or the Helm chart)")
    _add_protocol_argument(p)
    p.add_argument("--oip-address", default=defaults.OIP_ADDRESS,
                   help=f"--protocol oip: where the front listens (default {defaults.OIP_ADDRESS}; 0.0.0.0 exposes it)")
    p.add_argument("--oip-rest-port", type=positive_int, default=defaults.OIP_REST_PORT,
                   help=f"--protocol oip: the front's REST port (default {defaults.OIP_REST_PORT})")
    p.add_argument("--oip-grpc-port", type=positive_int, default=defaults.OIP_GRPC_PORT,
                   help=f"--protocol oip: the front's gRPC port (default {defaults.OIP_GRPC_PORT})")
    p.add_argument("--output", "-o", type=Path, default=Path(defaults.CONFIG))
    p.set_defaults(func=cmd_config)


def _add_protocol_argument(p: argparse.ArgumentParser, help_text: str | None = None) -> None:
    p.add_argument("--protocol", choices=defaults.PROTOCOLS, default=None if help_text else defaults.PROTOCOL,
                   help=help_text or "oip: also serve the Open Inference Protocol (KServe v2) over REST and gRPC, through a "
                   f"front `tsvk serve` starts (default {defaults.PROTOCOL}: TorchServe's /predictions only)")


def cmd_config(args: argparse.Namespace) -> int:
    from .serving_config import ServingRequest, write_config

    fields = ServingRequest.__dataclass_fields__
    request = ServingRequest(**{k: v for k, v in vars(args).items() if k in fields})
    plan = _tuned_config(request, args) if args.tuned else write_config(request, args.output)
    for model in plan.models:
        print(f"{model.name}: {model.workers} worker(s) x {model.intra_op_threads} thread(s), batch {model.batch}, "
              f"max delay {model.max_batch_delay_ms} ms")
    print(f"wrote {args.output} for {plan.vcpus} vCPUs, {plan.gpus} GPU(s)")
    return 0


def _tuned_config(request, args: argparse.Namespace):
    """The generator's config with the numbers of a tuned one; flags that would set those numbers are refused."""
    from dataclasses import replace

    from .serving_config import plan_with_choices, tuned_choices, write_plan

    clashing = [flag for flag, dest in (("--workers", "workers"), ("--batch", "batch"), ("--max-batch-delay", "max_batch_delay_ms"))
                if getattr(args, dest) is not None]
    if clashing:
        raise UsageError(f"{', '.join(clashing)} cannot be combined with --tuned, which sets workers, threads, batch and delay")
    choices = tuned_choices(args.tuned)
    unknown = [name for name in request.models or () if name not in choices]
    if unknown:
        raise UsageError(f"--tuned {args.tuned} has no tuned numbers for {', '.join(unknown)} (it has {', '.join(choices)})")
    chosen = {name: choices[name] for name in request.models or choices}
    plan = plan_with_choices(replace(request, models=tuple(chosen)), chosen, origin=f"tsvk config --tuned {args.tuned}")
    return write_plan(plan, args.output)


def _add_build_arguments(p: argparse.ArgumentParser) -> None:
    from tsvk.settings import DEVICES, PRECISIONS, TASKS

    from .backends import BACKENDS

    p.add_argument("--model", default=defaults.MODEL, help="a torchvision classification, detection or segmentation builder "
                   f"(resnet152, fasterrcnn_mobilenet_v3_large_320_fpn, deeplabv3_mobilenet_v3_large, ...) or, with "
                   f"--model-file, your archive name (default {defaults.MODEL})")
    p.add_argument("--task", choices=TASKS, help="what your --model-file model does (default classify); torchvision builders "
                   "name their own")
    p.add_argument("--score-threshold", type=fraction, default=defaults.SCORE_THRESHOLD,
                   help=f"detection: answers keep boxes scoring at least this; requests may ask for another with the "
                   f"score_threshold option (default {defaults.SCORE_THRESHOLD})")
    p.add_argument("--max-detections", type=positive_int, default=defaults.MAX_DETECTIONS,
                   help=f"detection: at most this many boxes per image; requests may ask for another with the max_detections option "
                   f"(default {defaults.MAX_DETECTIONS})")
    p.add_argument("--backend", choices=list(BACKENDS), help=f"compile backend (default {defaults.BACKEND}; detection models "
                   f"{defaults.DETECT_BACKEND})")
    p.add_argument("--device", default=defaults.DEVICE, choices=DEVICES)
    p.add_argument("--precision", default=defaults.PRECISION, choices=PRECISIONS)
    p.add_argument("--max-batch", type=positive_int, default=defaults.MAX_BATCH,
                   help=f"largest batch the artifact accepts (dynamic 1..N; default {defaults.MAX_BATCH})")
    p.add_argument("--weights", default=defaults.WEIGHTS, help="DEFAULT (torchvision pretrained), none (random), or a state_dict path")
    p.add_argument("--model-file", type=Path, help="your model's .py file")
    p.add_argument("--model-factory", help="class or zero-argument function in --model-file that builds the model")
    p.add_argument("--resize", type=positive_int, help="custom model: shorter side before the crop")
    p.add_argument("--crop", type=positive_int, help="custom model: square center crop")
    p.add_argument("--mean", type=triple, help="custom model: normalisation mean r,g,b")
    p.add_argument("--std", type=triple, help="custom model: normalisation std r,g,b")
    p.add_argument("--labels", type=Path, help="custom model: index_to_name.json or one label per line")
    p.add_argument("--tolerance", type=tolerance, help="verification tolerance atol,rtol,min_top1 (default by precision; "
                   "int8: only min_top1, the top-1 agreement needed on held-out photos)")
    p.add_argument("--calibration", type=Path, help="--precision int8: a directory of real photos (a few hundred); "
                   f"{defaults.CALIBRATION_SHARE:.0%}% calibrate, the rest verify accuracy")
    p.add_argument("--batch", type=positive_int, help="suggested serving batch size, at most --max-batch "
                   f"(default: min({defaults.BATCH}, max batch); tsvk config decides)")
    p.add_argument("--max-batch-delay", type=non_negative_int, default=defaults.MAX_BATCH_DELAY_MS, dest="max_batch_delay_ms",
                   help=f"suggested ms to wait for a batch to fill (default {defaults.MAX_BATCH_DELAY_MS})")
    p.add_argument("--workers", type=positive_int, help="suggested workers per model (default: tsvk config plans them: "
                   "on the CPU, one single-threaded worker per vCPU, as many as memory holds)")
    p.add_argument("--topk", type=positive_int, default=defaults.TOPK, help=f"classes in each answer (default {defaults.TOPK})")
    p.add_argument("--exact-jpeg-decode", action="store_true",
                   help="decode large JPEGs at full size instead of a reduced DCT scale (slower; see docs/handler.md)")


def build_request(args: argparse.Namespace):
    from tsvk.settings import ServingDefaults

    from .build import BuildRequest
    from .models import CustomModel

    custom_only = [n for n in ("model_factory", "resize", "crop", "mean", "std", "labels") if getattr(args, n) is not None]
    if args.model_file is None and custom_only:
        raise UsageError(f"--{custom_only[0].replace('_', '-')} applies to custom models only; add --model-file")
    custom = None
    if args.model_file is not None:
        custom = CustomModel(args.model_file, args.model_factory or "", args.resize, args.crop, args.mean, args.std, args.labels,
                             task=args.task or defaults.TASK)
    if args.batch is not None and args.batch > args.max_batch:
        raise UsageError(f"--batch {args.batch} exceeds --max-batch {args.max_batch}: the artifact only accepts batches up to its max batch")
    batch = args.batch or min(defaults.BATCH, args.max_batch)
    serving = ServingDefaults(batch_size=batch, max_batch_delay_ms=args.max_batch_delay_ms, workers=args.workers)
    return BuildRequest(
        model=args.model, backend=args.backend, device=args.device, precision=args.precision, max_batch=args.max_batch,
        weights=args.weights, custom=custom, tolerance=args.tolerance, serving=serving, topk=args.topk,
        jpeg_dct_scaling=not args.exact_jpeg_decode, calibration=args.calibration, task=args.task,
        score_threshold=args.score_threshold, max_detections=args.max_detections,
    )


def _register_archive(commands) -> None:
    p = commands.add_parser("archive", help="compile, verify and pack a self-contained .mar")
    _add_build_arguments(p)
    p.add_argument("--model-store", type=Path, default=Path(defaults.MODEL_STORE))
    p.add_argument("--force", action="store_true", help="replace an existing archive")
    p.set_defaults(func=cmd_archive)


def cmd_archive(args: argparse.Namespace) -> int:
    from .archive import build_archive

    path, result = build_archive(build_request(args), args.model_store, force=args.force)
    size_mb = path.stat().st_size / 2**20
    print(f"wrote {path} ({size_mb:.1f} MiB) in {result.seconds:.1f} s")
    if result.settings.provenance["weights"].get("random"):
        print("NOTE: random weights (--weights none): predictions from this archive are meaningless")
    return 0


def _register_compile(commands) -> None:
    p = commands.add_parser("compile", help="compile and verify a model without packing it")
    _add_build_arguments(p)
    p.add_argument("--output-dir", type=Path, default=Path("build"), help="writes <output-dir>/<model>/ (artifact + report.json)")
    p.set_defaults(func=cmd_compile)


def cmd_compile(args: argparse.Namespace) -> int:
    import json
    import shutil

    from .build import build
    from .fsutil import scratch_dir

    out = args.output_dir / args.model
    with scratch_dir(args.output_dir, f".{args.model}.compile-") as work:
        (work / "out").mkdir()
        result = build(build_request(args), work / "out")
        (work / "out" / "report.json").write_text(json.dumps(result.settings.to_dict(), indent=2))
        shutil.rmtree(out, ignore_errors=True)
        (work / "out").rename(out)  # same filesystem: the finished directory appears whole
    print(f"wrote {out}/{result.artifact.name} and report.json in {result.seconds:.1f} s")
    return 0


DEFAULT_RUN_DIR = Path(defaults.RUN_DIR)


def _register_serve(commands) -> None:
    p = commands.add_parser("serve", help="start TorchServe on a generated config and wait until every model is ready")
    p.add_argument("--config", type=Path, default=Path(defaults.CONFIG))
    p.add_argument("--run-dir", type=Path, default=DEFAULT_RUN_DIR, help="working dir, logs and key file of this TorchServe")
    p.add_argument("--timeout", type=positive_int, default=defaults.READY_TIMEOUT_S,
                   help=f"seconds to wait for the models (default {defaults.READY_TIMEOUT_S})")
    _add_protocol_argument(p, "oip: require the config to serve the Open Inference Protocol (default: whatever the config "
                              "says; a config from `tsvk config --protocol oip` starts the front too)")
    add_allocator_argument(p)
    p.set_defaults(func=cmd_serve)


def cmd_serve(args: argparse.Namespace) -> int:
    from .server import start_torchserve

    from .keys import start_key_renewer

    from tsvk.properties import read_properties

    from .oip.config import is_oip_config

    oip = args.config.is_file() and is_oip_config(read_properties(args.config))
    if args.protocol == "oip" and not oip:
        raise UsageError(f"{args.config} does not serve the Open Inference Protocol; write it with `tsvk config --protocol oip`")
    print(describe_allocator(args.allocator))
    with progress.step("start TorchServe", f"its frontend (Java) on {args.config}"):
        run = start_torchserve(args.config, args.run_dir, allocator=args.allocator)
    try:
        start_key_renewer(run)  # before waiting: a slow start must not outlive the first keys
        with progress.step("load the models", f"every model READY (at most {args.timeout} s; log: {args.run_dir}/logs)"):
            run.wait_ready(timeout=args.timeout)
        if oip:
            with progress.step("start the Open Inference Protocol front", "its REST and gRPC ports"):
                _start_front(run)
    except BaseException:  # a failed readiness check, Ctrl-C, SIGTERM: nothing we started stays behind
        run.stop(drain_timeout=0)
        raise
    print(f"TorchServe ready (pid {run.pid}); predictions at {run.url('inference')}/predictions/<model>")
    if oip:
        rest, grpc = _front_addresses(run)
        print(f"Open Inference Protocol: REST {rest}/v2/models/<model>/infer, gRPC {grpc}")
    if run.keys():
        print("token auth is on: send 'Authorization: Bearer <inference key>' (`tsvk keys` prints it; it is renewed "
              "while TorchServe runs: on a 400 InvalidKeyException, read it again)")
    return 0


def _start_front(run) -> None:
    """The Open Inference Protocol front, once TorchServe's models are ready; stopped with TorchServe."""
    from .oip.config import read_front_config
    from .oip.process import start_front, wait_front_ready

    start_front(run.config, run.run_dir)
    wait_front_ready(read_front_config(run.config), run.run_dir)


def _front_addresses(run) -> tuple[str, str]:
    from .oip.config import read_front_config
    from .oip.process import front_urls

    return front_urls(read_front_config(run.config))


def _register_stop(commands) -> None:
    p = commands.add_parser("stop", help="drain and stop the TorchServe that `tsvk serve` started (and no other)")
    p.add_argument("--run-dir", type=Path, default=DEFAULT_RUN_DIR)
    add_drain_timeout_argument(p)
    p.set_defaults(func=cmd_stop)


def cmd_stop(args: argparse.Namespace) -> int:
    from .server import find_running

    run = find_running(args.run_dir)
    if run is None:
        print(f"no TorchServe started from {args.run_dir} is running")
        return 0
    report = run.stop(drain_timeout=args.drain_timeout)
    print(f"stopped TorchServe (pid {run.pid}); {describe_drain(report)}")
    return 0


def _register_predict(commands) -> None:
    p = commands.add_parser("predict", help="classify an image with the running TorchServe")
    p.add_argument("--image", default=defaults.IMAGE, help="an image file, or skimage:<name> (chelsea, coffee, astronaut)")
    p.add_argument("--model", help="model name (default: the first in the running config)")
    p.add_argument("--run-dir", type=Path, default=DEFAULT_RUN_DIR)
    p.add_argument("--protocol", choices=("predictions", "oip-rest", "oip-grpc"), default="predictions",
                   help="predictions (TorchServe's /predictions, default), or the Open Inference Protocol front over REST "
                        "or gRPC (tritonclient; the server must run a config from `tsvk config --protocol oip`)")
    p.set_defaults(func=cmd_predict)


def cmd_predict(args: argparse.Namespace) -> int:
    from .predict import predict

    print(predict(args.run_dir, args.image, args.model, args.protocol))
    return 0


def _register_run_container(commands) -> None:
    from .container import register

    register(commands)


def _register_keys(commands) -> None:
    from .keys import register

    register(commands)


def _register_robustness(commands) -> None:
    from .robustness.run import register
    from .robustness.soak import register as register_soak

    register(commands)
    register_soak(commands)


def _register_gpu_check(commands) -> None:
    from .gpu_check.cli import register

    register(commands)


def _register_draw(commands) -> None:
    from .draw import register

    register(commands)


def _register_demo(commands) -> None:
    from .demo import register

    register(commands)


def _register_tune(commands) -> None:
    from .tune.run import register

    register(commands)


def _register_status(commands) -> None:
    from .status import register

    register(commands)


def _register_doctor(commands) -> None:
    from .doctor import register

    register(commands)


def _register_bench(commands) -> None:
    commands.add_parser("bench", help="benchmark every way of serving the model, side by side, and the preprocessing, "
                                      "compile and pinning benchmarks (`tsvk bench --help`)")


# The commands with long steps: each shows its progress on a terminal and takes --quiet.
PROGRESS_COMMANDS = ("archive", "compile", "serve", "demo", "tune", "robustness", "soak")

_REGISTRARS = [_register_bench, _register_compile, _register_archive, _register_config, _register_serve, _register_stop, _register_run_container,
               _register_predict, _register_keys, _register_robustness, _register_gpu_check, _register_demo, _register_tune, _register_draw,
               _register_status, _register_doctor]


def _exit_on_sigterm(signum, frame) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["bench"]:  # the benchmark has its own parser; hand it everything, --help included
        from .bench.run import main as bench_main

        return bench_main(argv[1:])
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
