"""`tsvk status` / `make status`: what our TorchServe is doing right now.

Only a TorchServe that `tsvk serve` started counts, found through its run directory's pid file and
the same is-it-ours check `tsvk stop` uses (tools/serve/server.py), so another TorchServe on the machine is
never reported as ours. The models and their workers come from TorchServe's management API, memory
and uptime from the process group, the OIP front from its own pid file.
"""

from __future__ import annotations

import argparse
import json
import os
import ssl
import stat
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil

from .. import defaults
from ..keys import KEY_FILE
from ..oip.config import is_oip_config, read_front_config
from ..oip.process import front_pid, front_urls
from ..engines.kserve.files import WORKER_MARKER as ENGINE_WORKER_MARKER
from ..engines.kserve.files import STATUS_FILE
from ..engines.running import engine_of, find_serving
from ..serve.server import WORKER_MARKER, TorchServeRun

GRPC_PORT_KEYS = ("grpc_inference_port", "grpc_management_port")
API_TIMEOUT_S = 5


def register(commands) -> None:
    p = commands.add_parser("status", help="what the TorchServe `tsvk serve` started is doing: models, workers, ports, "
                                           "key file, OIP front, memory, uptime")
    p.add_argument("--run-dir", type=Path, default=Path(defaults.RUN_DIR))
    p.add_argument("--json", action="store_true", help="one JSON document, for scripts")
    p.set_defaults(func=cmd_status)


def cmd_status(args: argparse.Namespace) -> int:
    report = gather(args.run_dir)
    print(json.dumps(report, indent=2) if args.json else "\n".join(describe(report)))
    return 0


def gather(run_dir: Path) -> dict:
    """Everything `tsvk status` says, as data; `running` is False when no TorchServe of ours runs."""
    run = find_serving(run_dir)
    if run is None:
        return {"running": False, "run_dir": str(Path(run_dir).resolve())}
    properties = run.properties
    engine = engine_of(run)
    return {
        "running": True,
        "engine": engine,
        "run_dir": str(run.run_dir),
        "pid": run.pid,
        "config": str(run.config),
        "uptime_s": round(time.time() - run.started_at, 1) if run.started_at else None,
        "memory_mb": _group_memory_mb(run.pid),
        "addresses": _engine_addresses(run) if engine == "kserve" else _addresses(run, properties),
        "key_file": _key_file(run.run_dir),
        "models": _engine_models(run) if engine == "kserve" else _models(run),
        "oip_front": None if engine == "kserve" else _front(run, properties),
    }


def _addresses(run: TorchServeRun, properties: dict[str, str]) -> dict:
    return {**{api: run.url(api) for api in ("inference", "management", "metrics")},
            **{key: int(properties[key]) for key in GRPC_PORT_KEYS if properties.get(key, "").isdigit()}}


def _engine_addresses(run: TorchServeRun) -> dict:
    """The engine opens the inference address only (no management or metrics API), and the protocol's gRPC port where
    the config serves it."""
    addresses = {"inference": run.url("inference")}
    if is_oip_config(run.properties):
        addresses["oip_grpc"] = front_urls(read_front_config(run.config))[1]
    return addresses


def _group_memory_mb(pgid: int) -> dict:
    """RSS of the frontend and of the workers of process group `pgid` (ours, checked by the caller)."""
    frontend = workers = 0.0
    for process in psutil.process_iter(["pid", "cmdline", "memory_info"]):
        try:
            if os.getpgid(process.pid) != pgid or process.info["memory_info"] is None:
                continue
        except OSError:
            continue
        rss = process.info["memory_info"].rss / 2**20
        command = " ".join(process.info["cmdline"] or [])
        if WORKER_MARKER in command or ENGINE_WORKER_MARKER in command:
            workers += rss
        else:
            frontend += rss
    return {"frontend": round(frontend, 1), "workers": round(workers, 1), "total": round(frontend + workers, 1)}


def _key_file(run_dir: Path) -> dict | None:
    """Where the token-auth keys are and whether only their owner can read them; None when auth is off."""
    path = run_dir / KEY_FILE
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        return None
    return {"path": str(path), "mode": f"{mode:o}", "owner_only": not mode & 0o077}


def _models(run: TorchServeRun) -> list[dict] | dict:
    """Each registered model with its batch settings and its workers' states, or the API's error."""
    base, headers = run.url("management"), run.headers("management")
    listing = _get_json(f"{base}/models", headers, run.client_tls)
    if "error" in listing:
        return listing
    models = []
    for entry in listing.get("models", []):
        described = _get_json(f"{base}/models/{entry['modelName']}", headers, run.client_tls)
        info = described[0] if isinstance(described, list) and described else {}
        workers = [{"id": w.get("id"), "status": w.get("status"), "pid": w.get("pid"), "gpu": w.get("gpu"),
                    "memory_mb": round(w.get("memoryUsage", 0) / 2**20, 1)} for w in info.get("workers", [])]
        models.append({"name": entry["modelName"], "archive": entry.get("modelUrl"), "batch_size": info.get("batchSize"),
                       "max_batch_delay_ms": info.get("maxBatchDelay"), "min_workers": info.get("minWorkers"),
                       "max_workers": info.get("maxWorkers"), "workers": workers,
                       "ready": bool(workers) and all(w["status"] == "READY" for w in workers)})
    return models


def _engine_models(run: TorchServeRun) -> list[dict] | dict:
    """The engine's models and workers, from the status file it rewrites whenever a worker starts or dies."""
    try:
        models = json.loads((run.run_dir / STATUS_FILE).read_text())["models"]
    except (OSError, ValueError, KeyError) as err:
        return {"error": f"{run.run_dir / STATUS_FILE} cannot be read: {err}"}
    for worker in (w for model in models for w in model["workers"]):
        worker["memory_mb"] = _rss_mb(worker.get("pid"))
    return models


def _rss_mb(pid: int | None) -> float:
    try:
        return round(psutil.Process(pid).memory_info().rss / 2**20, 1) if pid else 0.0
    except psutil.Error:
        return 0.0


def _front(run: TorchServeRun, properties: dict[str, str]) -> dict | None:
    if not is_oip_config(properties):
        return None
    rest, grpc = front_urls(read_front_config(run.config))
    pid = front_pid(run.run_dir)
    return {"running": pid is not None, "pid": pid, "rest": rest, "grpc": grpc}


def _get_json(url: str, headers: dict[str, str], tls: ssl.SSLContext):
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=API_TIMEOUT_S, context=tls) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as err:
        return {"error": f"{url} answered {err.code}: {err.read().decode(errors='replace')[:200]}"}
    except (urllib.error.URLError, OSError, ValueError) as err:
        return {"error": f"{url} did not answer: {err}"}


def describe(report: dict) -> list[str]:
    """The report as lines a person reads."""
    if not report["running"]:
        return [f"no server started by `tsvk serve` is running (run dir {report['run_dir']}); start one with "
                "`make serve` (or `tsvk serve --config <file>`)"]
    uptime = report["uptime_s"]
    memory = report["memory_mb"]
    server = "engine kserve" if report.get("engine") == "kserve" else "TorchServe"
    lines = [f"{server} running: pid {report['pid']}, up {_duration(uptime) if uptime is not None else 'unknown'}, "
             f"config {report['config']}",
             f"  memory: {memory['total']:,.0f} MiB (frontend {memory['frontend']:,.0f}, workers {memory['workers']:,.0f})",
             "  addresses: " + ", ".join(f"{name} {value}" for name, value in report["addresses"].items())]
    key = report["key_file"]
    lines.append(f"  token auth: keys in {key['path']} (mode {key['mode']}{'' if key['owner_only'] else ', READABLE BY OTHERS'}); "
                 "`tsvk keys` prints the inference key" if key else "  token auth: off (no key file)")
    lines += _describe_models(report["models"])
    front = report["oip_front"]
    if front:
        state = f"running (pid {front['pid']})" if front["running"] else "NOT running"
        lines.append(f"  Open Inference Protocol front: {state}, REST {front['rest']}, gRPC {front['grpc']}")
    return lines


def _describe_models(models) -> list[str]:
    if isinstance(models, dict):
        return [f"  models: unknown ({models['error']})"]
    if not models:
        return ["  models: none registered"]
    lines = []
    for model in models:
        states = ", ".join(f"{w['id']} {w['status']} ({w['memory_mb']:,.0f} MiB)" for w in model["workers"]) or "no workers"
        lines.append(f"  model {model['name']}: {'ready' if model['ready'] else 'NOT ready'}, batch {model['batch_size']}, "
                     f"delay {model['max_batch_delay_ms']} ms, workers {model['min_workers']}..{model['max_workers']}: {states}")
    return lines


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min" if hours else f"{minutes} min {secs:02d} s" if minutes else f"{secs} s"
