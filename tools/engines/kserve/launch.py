"""The engine's entry point: the fork server is started before the server's own modules are imported.

The fork server's imports (torch, torchvision: seconds of CPU) are the longest part of a cold start, and the first
workers wait for them. The server's own imports (KServe's SDK, aiohttp, the Open Inference Protocol front: about a
second) do not need to come first, so they run beside the fork server's on another CPU instead of before them. This
module imports only what starting the fork server needs.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from .files import WORKER_LOG, WORKER_MODULE
from .forkserver import ForkServer, worker_env

GRACE_S = 30  # how long SIGTERM waits for the REST requests and gRPC calls held to be answered, unless --drain-timeout says otherwise


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tsvk_tools.engines.kserve",
                                     description="serve a TorchServe config's tsvk archives without TorchServe")
    parser.add_argument("--config", type=Path, required=True, help="the config.properties `tsvk config` wrote")
    parser.add_argument("--run-dir", type=Path, required=True, help="working directory: key file, unpacked archives, logs")
    parser.add_argument("--drain-timeout", type=float, default=GRACE_S,
                        help=f"seconds SIGTERM waits for the requests and gRPC calls held to be answered (default {GRACE_S})")
    return parser


def start_fork_server(config: Path, run_dir: Path) -> ForkServer:
    return ForkServer.start(WORKER_MODULE, run_dir / "logs" / WORKER_LOG, worker_env(config), run_dir)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    config, run_dir = args.config.resolve(), args.run_dir.resolve()
    forks = start_fork_server(config, run_dir)
    try:
        from . import server  # after the fork server's start, so that its imports and the server's overlap

        return server.main(config, run_dir, args.drain_timeout, forks)
    finally:
        forks.close()

