"""`tsvk robustness`: hostile input, bombs, overload, a killed worker, auth and surface, key expiry,
against a real TorchServe started from a generated config; figures to benchmarks/results."""

from __future__ import annotations

import argparse
from datetime import datetime, timezone
from pathlib import Path

from tsvk import defaults
from tsvk.cpus import detect_vcpus

from .. import progress
from ..errors import UsageError
from . import auth, parts
from .report import RESULTS_DIR, write
from .report import envelope
from .service import ServiceSpec, running_service

DEFAULT_WORK_DIR = Path(".tsvk/robustness")
KEY_EXPIRY_TEST_MIN = 0.1  # 6 s: three expiries in under half a minute


def register(commands) -> None:
    p = commands.add_parser("robustness", help="fuzz, bombs, overload, worker kill, auth and key expiry against a real TorchServe")
    p.add_argument("--model", default=defaults.ROBUSTNESS_MODEL, help="archive name in --model-store (built with random weights if missing)")
    p.add_argument("--model-store", type=Path, default=DEFAULT_WORK_DIR / "store")
    p.add_argument("--fuzz-inputs", type=int, default=defaults.FUZZ_INPUTS,
                   help=f"Hypothesis-generated requests (default {defaults.FUZZ_INPUTS})")
    p.add_argument("--seed", type=int, default=0, help="corpus seed: the same seed sends the same requests")
    p.add_argument("--concurrency", type=int, default=16, help="fuzz clients at once")
    p.add_argument("--overload-factor", type=int, default=4, help="burst size as a multiple of job_queue_size")
    p.add_argument("--kill-load-s", type=float, default=20.0, help="seconds of load around the worker kill")
    p.add_argument("--output-dir", type=Path, default=RESULTS_DIR)
    p.add_argument("--work-dir", type=Path, default=DEFAULT_WORK_DIR)
    p.set_defaults(func=cmd_robustness)


def cmd_robustness(args: argparse.Namespace) -> int:
    if args.fuzz_inputs < 1 or args.concurrency < 1 or args.overload_factor < 2:
        raise UsageError("--fuzz-inputs and --concurrency must be >= 1 and --overload-factor >= 2")
    result = run_robustness(args)
    written = write(result, "robustness", args.output_dir)
    for name, ok in result["checks"].items():
        print(f"  {'ok  ' if ok else 'FAIL'} {name}")
    print(f"wrote {written['json']} and {written['md']}")
    return 0 if result["passed"] else 1


def run_robustness(args: argparse.Namespace, env: dict[str, str] | None = None) -> dict:
    started = datetime.now(timezone.utc)
    store = ensure_archive(args.model_store, args.model)
    vcpus = detect_vcpus()
    spec = ServiceSpec(store, args.model, args.work_dir / "main", workers=min(2, vcpus), env=env)
    figures: dict[str, dict] = {}
    with running_service(spec) as service:
        figures["fuzz"] = _timed("fuzz", lambda: parts.fuzz(service, args.fuzz_inputs, args.seed, args.concurrency))
        figures["bombs"] = _timed("bombs", lambda: parts.bombs(service))
        figures["overload"] = _timed("overload", lambda: parts.overload(service, args.overload_factor))
        figures["worker kill"] = _timed("worker kill", lambda: parts.worker_kill(service, 8, args.kill_load_s))
        figures["auth and surface"] = _timed("auth and surface", lambda: auth.surface(service))
    expiring = ServiceSpec(store, args.model, args.work_dir / "keys", workers=1, token_expiration_min=KEY_EXPIRY_TEST_MIN, env=env)
    with running_service(expiring) as service:
        figures["key expiry"] = _timed("key expiry", lambda: auth.key_lifetime(service, KEY_EXPIRY_TEST_MIN * 60))
    return envelope("robustness", vcpus, figures, started)


def _timed(name: str, part) -> dict:
    print(f"robustness: {name} ...", flush=True)
    began = datetime.now(timezone.utc)
    with progress.step(name, "the checks of this part"):
        figures = part()
    figures["seconds_total"] = round((datetime.now(timezone.utc) - began).total_seconds(), 1)
    failed = [check for check, ok in figures.get("checks", {}).items() if not ok]
    print(f"robustness: {name} done in {figures['seconds_total']} s{'; FAILED: ' + ', '.join(failed) if failed else ''}", flush=True)
    return figures


SOURCES_SUFFIX = ".sources"  # beside an archive built here: the digest of the handler sources it packs


def ensure_archive(store: Path, model: str) -> Path:
    """The store holding `<model>.mar`: as given, or built here from torchvision with random weights
    (speed and robustness do not depend on the weights' values). An archive built here earlier is
    built again once the handler's sources have changed, so a run never measures yesterday's handler;
    an archive the user put there is served as it is, with a warning when it packs another handler."""
    from ..bench.assets import sources_digest

    archive, stamp = store / f"{model}.mar", store / f"{model}{SOURCES_SUFFIX}"
    digest = sources_digest()
    if archive.is_file() and not stamp.is_file():
        _warn_if_other_handler(archive)
        return store
    if archive.is_file() and stamp.read_text() == digest:
        return store
    from ..archive import build_archive
    from ..build import BuildRequest

    why = "the handler changed since it was built" if archive.is_file() else "random weights"
    print(f"robustness: building {archive} ({why})", flush=True)
    build_archive(BuildRequest(model=model, weights="none"), store, force=archive.is_file())
    stamp.write_text(digest)
    return store


def served_handler_differences(store: Path, model: str) -> list[str]:
    """Files of the handler's package that differ between the served archive and this checkout."""
    from ..archive import handler_sources
    from ..archive_info import handler_differences

    return handler_differences(store / f"{model}.mar", handler_sources()[1])


def _warn_if_other_handler(archive: Path) -> None:
    differing = served_handler_differences(archive.parent, archive.stem)
    if differing:
        print(f"robustness: WARNING: {archive} was not built by this tool and packs a handler that differs from this "
              f"checkout's in {len(differing)} files ({', '.join(differing[:5])}{', ...' if len(differing) > 5 else ''}); "
              "the run measures that archive's handler. Delete it to have one built from this checkout.", flush=True)
