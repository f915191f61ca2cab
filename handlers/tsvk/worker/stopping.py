"""The server is stopping: requests that reach a worker from now on are refused at once with a 503.

A stop (tools/engines/torchserve/drain.py) first lets every request TorchServe had taken in be answered normally, then creates
a marker file; from then on a worker answers each request of a batch with 503 `server_stopping` ("retry
elsewhere") without reading or computing it, so TorchServe soon holds no request and can be signalled
without cutting any. TorchServe 0.12 cannot stop taking requests on connections already open (clients
that keep their connection alive); this is how they get an answer instead of a closed connection.

`tsvk serve` names the marker in the environment variable STOP_MARKER_ENV when it starts TorchServe; the
workers inherit it. Without it (a TorchServe started by other means) nothing is ever refused. The check
is one stat() per batch.
"""

from __future__ import annotations

import os

from ..common.errors import ServerStopping

STOP_MARKER_ENV = "TSVK_STOP_MARKER"


class StopMarker:
    """Whether the marker named at the worker's start exists now."""

    def __init__(self, path: str | None = None):
        self.path = path if path is not None else os.environ.get(STOP_MARKER_ENV) or None

    def stopping(self) -> bool:
        return self.path is not None and os.path.exists(self.path)


def refusal() -> ServerStopping:
    return ServerStopping("the server is stopping and takes no new requests: send this request again, to another "
                          "replica or once the server is back")
