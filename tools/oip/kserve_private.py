"""The private parts of KServe's model server that tsvk touches, in one place, each with why. Checked against kserve
0.21.0 (kserve/protocol/rest/server.py, kserve/protocol/grpc/server.py, kserve/model_server.py); a KServe upgrade
reads this file first."""

from __future__ import annotations


def uvicorn_server(rest):
    """The uvicorn.Server a kserve RESTServer runs (its `_server`): tsvk wraps its shutdown so that a stop reads the
    requests clients had already sent before closing their connections (tools/engines/kserve/server.py)."""
    return rest._server


def stop_grpc_with(model_server, grpc) -> None:
    """Hand ModelServer the gRPC server tsvk started itself (its `_grpc_server`): its SIGTERM handler, ModelServer.stop,
    then stops that one too, as it stops the one it would have started."""
    model_server._grpc_server = grpc


def grpc_server_built_by(build, port: int, model_server, grace_s: float):
    """A kserve GRPCServer whose start serves the grpc.aio server `build(data_plane, repository_extension, max_workers)`
    makes: KServe's own start listens on every address with its own options, tsvk's on one address with its bounds and
    TLS. GRPCServer.stop stops the server its `_server` holds (with `grace_period`), so the built one is kept there; the
    data plane and repository extension are read from its `_data_plane` and `_model_repository_extension`."""
    from kserve.protocol.grpc.server import GRPCServer  # grpc and KServe: only where the protocol is served

    class Built(GRPCServer):
        async def start(self, max_workers):
            self._server = build(self._data_plane, self._model_repository_extension, max_workers)
            await self._server.start()
            await self._server.wait_for_termination()

    return Built(port, model_server.dataplane, model_server.model_repository_extension, kwargs={}, grace_period=grace_s)
