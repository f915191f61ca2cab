"""TorchServe as an engine (tools/engines/base.py): its Java frontend started in a session of its own with tsvk's key
renewer (its keys expire), the Open Inference Protocol through tsvk's front process, its models and workers read from
its management API, and a stop that drains what its frontend had taken in (tools/engines/torchserve/drain.py)."""

from __future__ import annotations

import json
import os
import signal
import ssl
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tsvk.common import read_properties

from ... import defaults, progress
from ...keys import renew_keys, start_key_renewer
from ...oip.config import is_oip_config, read_front_config
from ...oip.process import front_pid, front_urls, start_front, wait_front_ready
from ...processes import signal_group
from .server import TORCHSERVE, WORKER_MARKER, TorchServeRun, find_running, start_torchserve
from ..shared.drain import describe_drain
from ..base import Engine, ServeOutcome, StopResult

GRPC_PORT_KEYS = ("grpc_inference_port", "grpc_management_port")
API_TIMEOUT_S = 5
FORWARDED_SIGNALS = (signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)  # a container's PID 1 passes these on to TorchServe


class TorchServeEngine(Engine):
    name = TORCHSERVE
    label = "TorchServe"
    running_label = "TorchServe"
    needs_java = True
    keys_expire = True
    management_api = True
    serves_protocol_itself = False
    worker_marker = WORKER_MARKER

    def start(self, config: Path, run_dir: Path, allocator: str = defaults.ALLOCATOR, env: dict[str, str] | None = None):
        return start_torchserve(config, run_dir, env=env, allocator=allocator)

    def find(self, run_dir: Path):
        return find_running(run_dir)

    def serve(self, config: Path, run_dir: Path, allocator: str, timeout_s: float, oip: bool) -> ServeOutcome:
        with progress.step("start TorchServe", f"its frontend (Java) on {config}"):
            run = self.start(config, run_dir, allocator)
        try:
            start_key_renewer(run)  # before waiting: a slow start must not outlive the first keys
            with progress.step("load the models", f"every model READY (at most {timeout_s:g} s; log: {run_dir}/logs)"):
                run.wait_ready(timeout=timeout_s)
            if oip:
                with progress.step("start the Open Inference Protocol front", "its REST and gRPC ports"):
                    start_front(run.config, run.run_dir)
                    wait_front_ready(read_front_config(run.config), run.run_dir)
        except BaseException:  # a failed readiness check, Ctrl-C, SIGTERM: nothing we started stays behind
            run.stop(drain_timeout=0)
            raise
        lines = [f"TorchServe ready (pid {run.pid}); predictions at {run.url('inference')}/predictions/<model>"]
        if oip:
            rest, grpc = front_urls(read_front_config(run.config))
            lines.append(f"Open Inference Protocol: REST {rest}/v2/models/<model>/infer, gRPC {grpc}")
        if run.keys():
            lines.append("token auth is on: send 'Authorization: Bearer <inference key>' (`tsvk keys` prints it; it is renewed "
                         "while TorchServe runs: on a 400 InvalidKeyException, read it again)")
        return ServeOutcome(tuple(lines))

    def start_in_container(self, config: Path, run_dir: Path, drain_timeout_s: float, front: bool):
        run = start_torchserve(config, run_dir, env=workers_pythonpath())
        for sig in FORWARDED_SIGNALS:
            signal.signal(sig, lambda signum, frame: run.owned() and signal_group(run.pid, signum))
        if front and is_oip_config(read_properties(config)):
            start_front(config, run_dir)
        return run

    def stop(self, run, drain_timeout_s: float) -> StopResult:
        report = run.stop(drain_timeout=drain_timeout_s)
        return StopResult(None if report is None else report.drained, f"stopped TorchServe (pid {run.pid}); {describe_drain(report)}",
                          report)

    def status(self, run: TorchServeRun) -> dict[str, Any]:
        properties = run.properties
        return {"addresses": _addresses(run, properties), "models": self.models(run), "oip_front": _front(run, properties)}

    def models(self, run) -> list[dict] | dict:
        return _models(run)

    def renew_keys(self, run) -> None:
        renew_keys(run.run_dir, run.url("management"), tls=run.client_tls)


def workers_pythonpath() -> dict[str, str]:
    """PYTHONPATH for TorchServe without the folder tsvk's tools were imported from (the image's /opt/tsvk): its
    workers import the handler packed in each archive, never an installed copy."""
    own = str(Path(__file__).resolve().parents[3])
    kept = [entry for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep) if entry and str(Path(entry).resolve()) != own]
    return {"PYTHONPATH": os.pathsep.join(kept)}


def _addresses(run: TorchServeRun, properties: dict[str, str]) -> dict:
    return {**{api: run.url(api) for api in ("inference", "management", "metrics")},
            **{key: int(properties[key]) for key in GRPC_PORT_KEYS if properties.get(key, "").isdigit()}}


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
