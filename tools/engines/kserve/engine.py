"""tsvk's own engine as an engine (tools/engines/base.py): worker processes behind KServe's model server, no Java. It
speaks the Open Inference Protocol itself (no front process), makes its keys once at start (they do not expire), and
keeps its models' and workers' state in a status file of its run directory instead of a management API."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psutil

from ... import defaults, progress
from ...errors import UsageError
from ...oip.config import is_oip_config, read_front_config
from ...oip.process import front_urls
from ...tls import TlsError, served_tls, tls_warnings
from ..base import Engine, ServeOutcome, StopResult
from ..shared.archives import refusal_reason
from .child import start_engine_child
from .engine_process import ENGINE, EngineRun, find_engine, start_engine
from .files import STATUS_FILE, WORKER_MARKER


class KServeEngine(Engine):
    name = ENGINE
    label = "tsvk's engine (kserve, no Java)"
    running_label = "engine kserve"
    needs_java = False
    keys_expire = False
    management_api = False
    serves_protocol_itself = True
    worker_marker = WORKER_MARKER

    def start(self, config: Path, run_dir: Path, allocator: str = defaults.ALLOCATOR, env: dict[str, str] | None = None):
        return start_engine(config, run_dir, allocator=allocator, env=env)

    def find(self, run_dir: Path):
        return find_engine(run_dir)

    def serve(self, config: Path, run_dir: Path, allocator: str, timeout_s: float, oip: bool) -> ServeOutcome:
        with progress.step("start tsvk's engine", f"worker processes behind KServe's model server, on {config}"):
            run = self.start(config, run_dir, allocator)
        try:
            with progress.step("load the models", f"every served model's workers ready (at most {timeout_s:g} s; log: {run_dir}/logs)"):
                run.wait_ready(timeout=timeout_s)
        except BaseException:  # a failed readiness check, Ctrl-C, SIGTERM: nothing we started stays behind
            run.stop(drain_timeout=0)
            raise
        lines = [*run.refusals(), f"engine kserve ready (pid {run.pid}); predictions at {run.url('inference')}/predictions/<model>, "
                 f"Open Inference Protocol REST at {run.url('inference')}/v2/models/<model>/infer"]
        if oip:
            lines.append(f"Open Inference Protocol gRPC: {front_urls(read_front_config(run.config))[1]}")
        if run.keys():
            lines.append("token auth is on: send 'Authorization: Bearer <inference key>' (`tsvk keys` prints it)")
        return ServeOutcome(tuple(lines))

    def start_in_container(self, config: Path, run_dir: Path, drain_timeout_s: float, front: bool):
        return start_engine_child(config, run_dir, drain_timeout_s)

    def stop(self, run, drain_timeout_s: float) -> StopResult:
        return run.stop(drain_timeout=drain_timeout_s)

    def status(self, run: EngineRun) -> dict[str, Any]:
        return {"addresses": _addresses(run), "models": self.models(run), "oip_front": None}

    def archive_refusal(self, archive: Path) -> str | None:
        return refusal_reason(archive)

    def tls_problems(self, properties: dict[str, str]) -> tuple[str | None, list[str]]:
        try:
            tls = served_tls(properties)
        except TlsError as err:
            return str(err), []
        return None, tls_warnings(tls, properties)

    def models(self, run) -> list[dict] | dict:
        return _models(run)

    def renew_keys(self, run) -> None:
        raise UsageError("--renew renews TorchServe's keys; the kserve engine's keys are made at its start and do not expire")


def _addresses(run: EngineRun) -> dict:
    """The engine opens the inference address only (no management or metrics API), and the protocol's gRPC port where
    the config serves it."""
    addresses = {"inference": run.url("inference")}
    if is_oip_config(run.properties):
        addresses["oip_grpc"] = front_urls(read_front_config(run.config))[1]
    return addresses


def _models(run: EngineRun) -> list[dict] | dict:
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
