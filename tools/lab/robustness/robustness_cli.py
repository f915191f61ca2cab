"""`tsvk robustness`: hostile input, bombs, overload, a killed worker, auth and surface, key expiry, large uploads, slow
clients, the drain, against a real TorchServe (or tsvk's own engine, `--engine kserve`) started from a generated config; figures to
benchmarks/results. The engine's keys do not expire, so its run has no key-expiry part. `--parts` runs some parts
only (their results are named after them, so a full run's stay the latest)."""

from __future__ import annotations

import argparse
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from ... import defaults
from ...engines.registry import add_engine_argument, default_engine, engine_named
from ...cpus import detect_vcpus

from ... import progress
from ...errors import UsageError
from . import auth, checks, clients, hostile, large_uploads, parts, slow_clients
from .attacks import LARGE_BURST, LARGE_PHOTO_SIDE
from .checks import judged
from .drain_measure import stop_under_load
from .result_files import RESULTS_DIR, write
from .result_files import envelope
from .service import ServiceSpec, running_service

DEFAULT_WORK_DIR = Path(".tsvk/robustness")
KEY_EXPIRY_TEST_MIN = 0.1  # 6 s: three expiries in under half a minute
DETECTOR = "maskrcnn_resnet50_fpn_v2"  # an R-CNN with masks: every mask is memory the worker must bound
SEGMENTER = "lraspp_mobilenet_v3_large"
NO_MODEL = "none"
DRAIN_LOAD = 0.7  # share of measured capacity the drain measurement stops the server under
# The deadline the attacked service is configured with, as a user serving an R-CNN beside fast models would:
# under the fuzz's concurrency a detector's queue can hold many minutes of work, and a request that waited two
# minutes is answered 503 deadline_exceeded at once instead of being computed for a client that has given up.
# Eight 36 MP photos at once to Mask R-CNN (batches of two, ~30 s each on one thread) are all begun within it.
QUEUED_DEADLINE_MS = 120_000
# Every part, in the order a run measures them: those on the main server (the classifier, detector and segmenter, with
# the Open Inference Protocol), then those on servers of their own.
MAIN_PARTS = ("fuzz", "bombs", "hostile classes", "large allowed photos", "oip clients", "overload", "worker kill", "auth and surface",
              "hostile clients")
KEY_EXPIRY, LARGE_UPLOADS, SLOW_CLIENTS, DRAIN = "key expiry", "large uploads", "slow clients", "drain"
PARTS = (*MAIN_PARTS, KEY_EXPIRY, LARGE_UPLOADS, SLOW_CLIENTS, DRAIN)


def register(commands) -> None:
    p = commands.add_parser("robustness", help="fuzz, bombs, overload, worker kill, auth, key expiry, large uploads, slow clients "
                                               "and drain against a real TorchServe (or --engine kserve)")
    p.add_argument(
        "--model", default=defaults.ROBUSTNESS_MODEL, help="archive name in --model-store (built with random weights if missing)"
    )
    p.add_argument(
        "--detector",
        default=DETECTOR,
        help=f"detector served beside --model and attacked too, built with decisive random "
        f"weights if missing (default {DETECTOR}; {NO_MODEL}: none)",
    )
    p.add_argument(
        "--segmenter", default=SEGMENTER, help=f"segmenter served beside --model and attacked too (default {SEGMENTER}; {NO_MODEL}: none)"
    )
    p.add_argument(
        "--large-photos",
        type=int,
        default=LARGE_BURST,
        help=f"large allowed photos sent at once to the detector and segmenter (default {LARGE_BURST})",
    )
    p.add_argument("--large-side", type=int, default=LARGE_PHOTO_SIDE, help=f"their side in pixels (default {LARGE_PHOTO_SIDE}: 36 MP)")
    p.add_argument("--model-store", type=Path, default=DEFAULT_WORK_DIR / "store")
    p.add_argument(
        "--fuzz-inputs", type=int, default=defaults.FUZZ_INPUTS, help=f"Hypothesis-generated requests (default {defaults.FUZZ_INPUTS})"
    )
    p.add_argument("--seed", type=int, default=0, help="corpus seed: the same seed sends the same requests")
    p.add_argument("--concurrency", type=int, default=16, help="fuzz clients at once")
    p.add_argument("--overload-factor", type=int, default=4, help="burst size as a multiple of job_queue_size")
    p.add_argument("--kill-load-s", type=float, default=20.0, help="seconds of load around the worker kill")
    p.add_argument("--large-uploads", type=int, default=defaults.LARGE_UPLOADS,
                   help=f"48 MP phone JPEGs the large-uploads part sends at once, to a job queue of {defaults.LARGE_UPLOADS_QUEUE} "
                        f"(default {defaults.LARGE_UPLOADS})")
    p.add_argument("--slow-connections", type=int, default=slow_clients.SLOW_CONNECTIONS,
                   help=f"slow and idle connections the slow-clients part holds (default {slow_clients.SLOW_CONNECTIONS:,})")
    p.add_argument("--slow-seconds", type=float, default=None,
                   help="how long the slow-clients part holds them (default: the keep-alive bound + "
                        f"{slow_clients.HOLD_BEYOND_KEEP_ALIVE_S:g} s, so every kind is seen closed)")
    p.add_argument("--parts", default=None,
                   help=f"only these parts, comma-separated (default: all): {', '.join(PARTS)}")
    add_engine_argument(p)
    p.add_argument("--output-dir", type=Path, default=RESULTS_DIR)
    p.add_argument("--work-dir", type=Path, default=DEFAULT_WORK_DIR)
    p.set_defaults(func=cmd_robustness)


def cmd_robustness(args: argparse.Namespace) -> int:
    if args.fuzz_inputs < 1 or args.concurrency < 1 or args.overload_factor < 2 or args.large_photos < 1 or args.large_side < 16:
        raise UsageError("--fuzz-inputs, --concurrency and --large-photos must be >= 1, --overload-factor >= 2, --large-side >= 16")
    if args.slow_connections < 1 or (args.slow_seconds is not None and args.slow_seconds <= 0):
        raise UsageError("--slow-connections must be >= 1 and --slow-seconds > 0")
    if args.large_uploads < 1:
        raise UsageError(f"--large-uploads must be >= 1, got {args.large_uploads}")
    chosen = parse_parts(args.parts, args.engine)
    result = run_robustness(args)
    written = write(result, _results_name(args.engine, chosen), args.output_dir)
    for name, ok in result["checks"].items():
        print(f"  {'ok  ' if ok else 'FAIL'} {name}")
    print(f"wrote {written['json']} and {written['md']}")
    return 0 if result["passed"] else 1


def _results_name(engine: str, chosen: tuple[str, ...] = PARTS) -> str:
    """robustness-* for the default engine (TorchServe, as ever), robustness-<engine>-* for another: each keeps its
    latest; a run of some parts only adds their names (robustness-kserve-slow-clients-*), so it does not replace a full
    run's latest."""
    name = "robustness" if engine_named(engine) is default_engine() else f"robustness-{engine}"
    if set(chosen) >= set(parts_of(engine)):
        return name
    return "-".join([name, *(part.replace(" ", "-") for part in chosen)])


def parts_of(engine: str) -> tuple[str, ...]:
    """The parts a run against `engine` has."""
    return tuple(part for part in PARTS if part not in _not_parts_of(engine))


def _not_parts_of(engine: str) -> dict[str, str]:
    """The parts an engine does not have, with why: key expiry, where its keys do not expire (tsvk's engine)."""
    return {} if engine_named(engine).keys_expire else {KEY_EXPIRY: "its keys do not expire"}


def parse_parts(text: str | None, engine: str) -> tuple[str, ...]:
    """`--parts` as the parts it names, in the order a run measures them (all of the engine's when not given); a
    UsageError names every part it does not know, or that the engine does not have, and lists the allowed ones."""
    allowed = parts_of(engine)
    if text is None:
        return allowed
    names = [name.strip() for name in text.split(",") if name.strip()]
    problems = [f"unknown part {name!r}" for name in names if name not in PARTS]
    problems += [f"{name!r} is no part with --engine {engine} ({_not_parts_of(engine)[name]})" for name in names
                 if name in _not_parts_of(engine)]
    if problems or not names:
        raise UsageError(f"--parts: {'; '.join(problems) or 'no part named'}; the parts are: {', '.join(allowed)}")
    return tuple(part for part in allowed if part in names)


def run_robustness(
    args: argparse.Namespace, env: dict[str, str] | None = None, drain: Callable[[ServiceSpec, float], dict] | None = None
) -> dict:
    """Every part (or those `args.parts` names) against one server serving the classifier, the detector and the
    segmenter with the Open Inference Protocol; key expiry (TorchServe's keys only), large uploads, slow clients and the
    drain on servers of their own. `drain`: the drain measurement (default: stop_under_load)."""
    from . import archives  # torch: only once a run builds or reads its archives

    engine = getattr(args, "engine", defaults.ENGINE)
    chosen = parse_parts(getattr(args, "parts", None), engine)
    started = datetime.now(timezone.utc)
    store = archives.ensure_archive(args.model_store, args.model)
    vcpus = detect_vcpus()
    figures: dict[str, dict] = {}
    if set(chosen) & set(MAIN_PARTS):
        figures.update(_main_parts(args, env, engine, store, vcpus, chosen))
    if KEY_EXPIRY in chosen:
        expiring = ServiceSpec(store, args.model, args.work_dir / "keys", workers=1, token_expiration_min=KEY_EXPIRY_TEST_MIN, env=env)
        with running_service(expiring) as service:
            figures[KEY_EXPIRY] = _timed(KEY_EXPIRY, lambda: auth.key_lifetime(service, KEY_EXPIRY_TEST_MIN * 60))
    if LARGE_UPLOADS in chosen:
        figures[LARGE_UPLOADS] = _large_uploads_part(args, env, engine, store, vcpus)
    if SLOW_CLIENTS in chosen:
        figures[SLOW_CLIENTS] = _slow_clients_part(args, env, engine, store, vcpus)
    if DRAIN in chosen:
        measure = drain or stop_under_load
        draining = ServiceSpec(store, args.model, args.work_dir / "drain", workers=min(2, vcpus), env=env, engine=engine, oip=True)
        figures[DRAIN] = _timed(DRAIN, lambda: drain_part(measure, draining))
    return envelope(_results_name(engine, chosen), vcpus, figures, started)


def _large_uploads_part(args: argparse.Namespace, env, engine: str, store: Path, vcpus: int) -> dict:
    """The large-uploads part on a server of its own (the classifier only, two workers), its job queue small enough
    that the burst is four times what it holds."""
    about, photo = large_uploads.phone_photo()
    spec = ServiceSpec(store, args.model, args.work_dir / "uploads", workers=large_uploads.WORKERS, vcpus=max(vcpus, large_uploads.WORKERS),
                       env=env, engine=engine, properties=large_uploads.served_properties())
    count = getattr(args, "large_uploads", defaults.LARGE_UPLOADS)
    with running_service(spec) as service:
        return _timed(LARGE_UPLOADS, lambda: large_uploads.large_uploads(service, engine, count, photo, store / f"{args.model}.mar", about))


def _slow_clients_part(args: argparse.Namespace, env, engine: str, store: Path, vcpus: int) -> dict:
    """The slow-clients part on a server of its own (the classifier only), its connection bound just above the swarm."""
    connections = getattr(args, "slow_connections", slow_clients.SLOW_CONNECTIONS)
    spec = ServiceSpec(store, args.model, args.work_dir / "slow", workers=min(2, vcpus), env=env, engine=engine,
                       properties=slow_clients.served_properties(connections))
    with running_service(spec) as service:
        return _timed(SLOW_CLIENTS, lambda: slow_clients.slow_clients(service, engine, connections, getattr(args, "slow_seconds", None)))


def _main_parts(args: argparse.Namespace, env, engine: str, store: Path, vcpus: int, chosen: tuple[str, ...]) -> dict[str, dict]:
    """The chosen parts of the main server's (and the inputs they counted)."""
    from . import archives  # torch, as above

    others = tuple(archives.ensure_task_archive(args.model_store, m) for m in (args.detector, args.segmenter) if m != NO_MODEL)
    served = 1 + len(others)
    # One worker per vCPU as the config plans it; with more models than vCPUs, one worker each on a
    # config that counts a vCPU per worker (robustness is measured here, not speed).
    workers = max(1, min(2, vcpus // served))
    spec = ServiceSpec(
        store,
        args.model,
        args.work_dir / "main",
        workers=workers,
        vcpus=max(vcpus, workers * served),
        env=env,
        other_models=others,
        oip=True,
        deadline_ms=QUEUED_DEADLINE_MS,
        engine=engine,
    )
    runs = {
        "fuzz": lambda service: parts.fuzz(service, args.fuzz_inputs, args.seed, args.concurrency),
        "bombs": parts.bombs,
        "hostile classes": lambda service: hostile.hostile(service, args.seed),
        "large allowed photos": lambda service: hostile.large_photos(service, args.large_photos, args.large_side),
        "oip clients": hostile.oip_clients,
        "overload": lambda service: parts.overload(service, args.overload_factor),
        "worker kill": lambda service: parts.worker_kill(service, 8, args.kill_load_s),
        "auth and surface": auth.surface,
        "hostile clients": lambda service: clients.hostile_clients(service, engine),
    }
    figures: dict[str, dict] = {}
    with running_service(spec) as service:
        for name in (part for part in MAIN_PARTS if part in chosen):
            figures[name] = _timed(name, lambda: runs[name](service))
    if set(chosen) & set(CORPUS_PARTS):
        figures["inputs"] = counted_inputs(figures)
    return figures


def counted_inputs(figures: dict) -> dict:
    """Inputs sent and answered over every part that sends a corpus, counted from the answers."""
    sent = sum(figures.get(part, {}).get("inputs", 0) for part in CORPUS_PARTS)
    answered = sum(figures.get(part, {}).get("answered", 0) for part in CORPUS_PARTS)
    return {
        "sent": sent,
        "answered": answered,
        "parts": list(CORPUS_PARTS),
        **judged({"at least 10,000 inputs sent and answered": checks.inputs_counted(sent, answered)}),
    }


CORPUS_PARTS = ("fuzz", "hostile classes")


def drain_part(measure: Callable[[ServiceSpec, float], dict] | None, spec: ServiceSpec | None) -> dict:
    """The drain measurement's figures (none without a measurement) and its checks: REST's two, and on an engine
    serving the Open Inference Protocol itself (tsvk's), gRPC's. TorchServe's gRPC (the OIP front's) is measured and reported: the
    front stops through KServe's ModelServer.stop, which unloads the models as gRPC begins to stop."""
    evidence = measure(spec, DRAIN_LOAD) if measure else None
    verdicts = {
        "0 accepted requests lost": checks.no_accepted_lost(evidence),
        "exit within the drain timeout + 5 s": checks.exited_within_drain(evidence),
    }
    if spec is not None and spec.oip and engine_named(spec.engine).serves_protocol_itself:
        verdicts["every gRPC call in flight at the stop answered"] = checks.grpc_calls_answered((evidence or {}).get("grpc_in_flight"))
    return {**(evidence or {"measured": False}), **judged(verdicts)}


def _timed(name: str, part) -> dict:
    print(f"robustness: {name} ...", flush=True)
    began = datetime.now(timezone.utc)
    with progress.step(name, "the checks of this part"):
        figures = part()
    figures["seconds_total"] = round((datetime.now(timezone.utc) - began).total_seconds(), 1)
    failed = [check for check, ok in figures.get("checks", {}).items() if not ok]
    print(f"robustness: {name} done in {figures['seconds_total']} s{'; FAILED: ' + ', '.join(failed) if failed else ''}", flush=True)
    return figures
