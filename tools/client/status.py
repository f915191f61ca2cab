"""`tsvk status` / `make status`: what the server `tsvk serve` started is doing right now.

Only a server that `tsvk serve` started counts (either engine), found through its run directory's pid file and the
same is-it-ours check `tsvk stop` uses, so another TorchServe on the machine is never reported as ours. Memory and
uptime come from the process group; the models and their workers, the addresses and the OIP front from the engine
(tools/engines/*/engine.py: TorchServe's management API, or the engine's status file).
"""

from __future__ import annotations

import argparse
import json
import os
import stat
import time
from pathlib import Path

import psutil

from .. import defaults
from ..keys import KEY_FILE
from ..engines.registry import engine_named, engine_of, find_serving



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
    """Everything `tsvk status` says, as data; `running` is False when no server of ours runs."""
    run = find_serving(run_dir)
    if run is None:
        return {"running": False, "run_dir": str(Path(run_dir).resolve())}
    engine = engine_of(run)
    return {
        "running": True,
        "engine": engine.name,
        "run_dir": str(run.run_dir),
        "pid": run.pid,
        "config": str(run.config),
        "uptime_s": round(time.time() - run.started_at, 1) if run.started_at else None,
        "memory_mb": _group_memory_mb(run.pid, engine.worker_marker),
        "key_file": _key_file(run.run_dir),
        **engine.status(run),
    }


def _group_memory_mb(pgid: int, worker_marker: str) -> dict:
    """RSS of the server and of the workers (their command lines hold `worker_marker`) of process group `pgid` (ours,
    checked by the caller)."""
    frontend = workers = 0.0
    for process in psutil.process_iter(["pid", "cmdline", "memory_info"]):
        try:
            if os.getpgid(process.pid) != pgid or process.info["memory_info"] is None:
                continue
        except OSError:
            continue
        rss = process.info["memory_info"].rss / 2**20
        if worker_marker in " ".join(process.info["cmdline"] or []):
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


def describe(report: dict) -> list[str]:
    """The report as lines a person reads."""
    if not report["running"]:
        return [f"no server started by `tsvk serve` is running (run dir {report['run_dir']}); start one with "
                "`make serve` (or `tsvk serve --config <file>`)"]
    uptime = report["uptime_s"]
    memory = report["memory_mb"]
    server = engine_named(report["engine"]).running_label
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
