"""One worker process of tsvk's engine: load one archive's service with the archive's own code, then answer the
batches the server sends until the server closes the socket.

Run as `python -m tsvk_tools.engines.kserve.worker`; the server (pool.py) starts it with the archive unpacked in
`--model-dir` and one end of a socket pair as `--fd`, and it loads the archive's service as any engine's worker does
(tools/engines/shared/service.py: the archive's own `tsvk`, checked). Once it has said READY it answers one synthetic photo (warm_up)
while the server collects its first batch. A worker ignores SIGTERM and SIGINT: `tsvk stop` signals the engine's
whole process group, and the batch a worker holds must still be answered while the server drains; the server ends its
workers once it has (by closing their sockets, then SIGKILL). Answers are encoded here, as TorchServe's worker encodes them
(ts/protocol/otf_message_handler.py of 0.12.0: bytes as they are, text as UTF-8, anything else
`json.dumps(value, indent=2)`), so the server only copies bytes.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import os
import select
import signal
import socket
import sys
from pathlib import Path
from typing import Any

from PIL import Image

from . import forkserver, wire
from ..shared.metrics import RecordingMetrics
from ..shared.service import load_service

log = logging.getLogger("tsvk.engine.worker")

WARM_UP_PHOTO_SIDE = 224  # pixels: a square photo the size of a classifier's input, so its resize is a no-op


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tsvk_tools.engines.kserve.worker")
    parser.add_argument("--model-dir", type=Path, required=True, help="the archive, unpacked")
    parser.add_argument("--model-name", required=True)
    parser.add_argument("--handler", required=True, help="the manifest's handler file (image_classifier.py)")
    parser.add_argument("--settings", required=True, help="the manifest's config file (model-config.yaml)")
    parser.add_argument("--config", type=Path, required=True, help="the TorchServe config the server started on")
    parser.add_argument("--served-properties", type=json.loads, default=None,
                        help="what the server read of the config for this model (JSON), so the worker need not read the file")
    parser.add_argument("--fd", type=int, required=True, help="this worker's end of the socket pair")
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--gpu-id", type=int, default=None)
    return parser


def build_fork_server_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"python -m tsvk_tools.engines.kserve.worker {forkserver.FLAG}")
    parser.add_argument("--fd", type=int, required=True, help="the fork server's end of its control socket pair")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == [forkserver.FLAG]:  # the fork server: import once, then fork the workers from itself
        fd = build_fork_server_parser().parse_args(argv[1:]).fd
        return forkserver.serve_forks(socket.socket(fileno=fd), main)
    args = build_parser().parse_args(argv)
    for sig in (signal.SIGTERM, signal.SIGINT):  # see the module's docstring: the server ends its workers
        signal.signal(sig, signal.SIG_IGN)
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s [{args.model_name} worker {os.getpid()}] %(levelname)s %(message)s")
    sock = socket.socket(fileno=args.fd)
    os.environ["TS_CONFIG_FILE"] = str(args.config)  # what an archive's thread and deadline lookups read first
    metrics = RecordingMetrics()
    try:
        service = load_service(args, metrics)
    except Exception as err:  # noqa: BLE001 - whatever stops the archive loading is its refusal, said in one line
        log.exception("cannot serve %s", args.model_name)
        wire.send(sock, (wire.REFUSED, f"{type(err).__name__}: {str(err)[:300]}"))
        return 1
    wire.send(sock, (wire.READY, {"pid": os.getpid()}))
    warm_up(sock, service, metrics)
    return serve_batches(sock, service, metrics)


def warm_up(sock: socket.socket, service: Any, metrics: RecordingMetrics) -> bool:
    """Answer one synthetic photo right after saying READY, unless a batch is already waiting; True when it did.

    A worker's first answer pays once for what every later one reuses: the image format plugins registered, the
    kernels chosen for the model's shapes, modules the answer path imports lazily (tens of milliseconds on a CPU
    worker, more where a GPU's context and kernels are set up). Said READY first, the worker pays it while the
    server collects the first batch (an idle worker waits up to the max batch delay for one to fill), so no
    client's request does. A worker replaced under load finds a batch waiting and takes it at once. Nothing of it
    is counted: its metric samples are dropped, and a failure is only logged (the real requests will say it)."""
    if select.select([sock], [], [], 0)[0]:
        return False
    try:
        batch_answerer(service)([{"body": warm_up_photo()}], [None])
    except Exception:  # noqa: BLE001 - a warm-up is an optimisation: the worker serves whatever it raised
        log.exception("the warm-up answer failed; serving without it")
    metrics.take()
    return True


def batch_answerer(service: Any):
    """The service's batch entry point: `answer_batch` (answers, then trims the heap), or `answer` in archives packed
    before it had one."""
    return getattr(service, "answer_batch", None) or service.answer


def warm_up_photo() -> bytes:
    """A mid-grey JPEG: decoded, resized and normalised by the archive's own path like a client's photo."""
    out = io.BytesIO()
    Image.new("RGB", (WARM_UP_PHOTO_SIDE, WARM_UP_PHOTO_SIDE), (128, 128, 128)).save(out, format="JPEG")
    return out.getvalue()


def serve_batches(sock: socket.socket, service: Any, metrics: RecordingMetrics) -> int:
    """(batch id, request dicts, arrival times) in, (batch id, [(status, body bytes)], the handler's metric samples)
    out, until the socket closes."""
    answer = batch_answerer(service)
    while True:
        message = wire.receive(sock)
        if message is None:
            return 0
        batch_id, requests, arrivals = message
        outcome = answer(requests, arrivals)
        wire.send(sock, (batch_id, [(status, encode(value)) for status, value in zip(outcome.statuses, outcome.answers)], metrics.take()))


def encode(value: Any) -> bytes:
    """An answer's bytes as TorchServe 0.12's worker writes them."""
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    return json.dumps(value, indent=2).encode("utf-8")


if __name__ == "__main__":
    sys.exit(main())
