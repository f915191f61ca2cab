"""The private parts of KServe's model server that tsvk touches, in one place, each with why. Checked against kserve
0.21.0 (kserve/protocol/rest/server.py, kserve/model_server.py); a KServe upgrade reads this file first."""

from __future__ import annotations


def uvicorn_server(rest):
    """The uvicorn.Server a kserve RESTServer runs (its `_server`): tsvk wraps its shutdown so that a stop reads the
    requests clients had already sent before closing their connections (tools/engines/kserve/server.py)."""
    return rest._server


def stop_grpc_with(model_server, grpc) -> None:
    """Hand ModelServer the gRPC server tsvk started itself (its `_grpc_server`): its SIGTERM handler, ModelServer.stop,
    then stops that one too, as it stops the one it would have started."""
    model_server._grpc_server = grpc
