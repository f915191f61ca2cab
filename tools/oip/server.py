"""Run the KServe SDK's REST and gRPC Open Inference Protocol servers for the tsvk models, on one address.

The SDK's ModelServer listens on every interface and serves more than the protocol (KServe's v1
API, model load/unload, its docs and metrics); this front keeps its protocol code and changes only
that: both servers bind the configured address (127.0.0.1 unless asked), REST answers only the
protocol's paths (the rest 404, model load/unload refused on gRPC too), request bodies are bounded
like TorchServe's, a request's JSON is bounded like the handler's (size, depth, values: tsvk/request/json_body.py)
before FastAPI and pydantic parse it, slow and idle clients are bounded on both servers (connection_bounds.py,
bounded_http.py), and server readiness is TorchServe's.

Run as `python -m tsvk_tools.oip --config <TorchServe config>`; `tsvk serve` does (process.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
from concurrent import futures
from dataclasses import replace
from pathlib import Path

from tsvk import __version__
from tsvk.common import RequestError, read_properties
from tsvk.request import JsonLimits, check_json, limits_for_pixels, oip

from ..defaults import OIP_JSON_PIXEL_IMAGES, TLS_CIPHERS
from ..keys import current_key
from ..tls import ServedTls, TlsError, served_tls, verifying
from .bounded_body import CLOSE, BodyTooLarge, BoundedReceive, declared_length, read_body, too_large
from .config import FrontConfig, read_front_config
from .health import TorchServeHealth
from .kserve_private import grpc_server_built_by, stop_grpc_with
from .upstream import TorchServeClient

# The protocol's REST paths: health, server metadata, model metadata / ready / infer (versions say 501).
PROTOCOL_PATHS = r"^/v2(/health/(live|ready))?/?$|^/v2/models/[^/]+(/versions/[^/]+)?(/(ready|infer))?/?$"
GRPC_THREADS = 4
GRACE_S = 5  # the front's drain: how long its REST and gRPC servers answer what they hold once stopped
BINARY_JSON_LENGTH = b"inference-header-content-length"  # the binary extension: the JSON part's length, in bytes


class Guard:
    """ASGI middleware: the protocol's paths only, a request body no larger than TorchServe accepts, and its JSON
    within `json_limits`: parsed, a 16 MiB body of `[[],[],...]` cost 572 MiB in KServe's request (docs/robustness.md).
    `paths` are the paths served (the protocol's by default), `json_paths` those whose bodies are checked as JSON here
    (tsvk's engine also serves /predictions, whose bodies its handler reads within the same bounds)."""

    def __init__(self, app, max_request_bytes: int, json_limits: JsonLimits = JsonLimits(), paths: str = PROTOCOL_PATHS,
                 json_paths: str = PROTOCOL_PATHS):
        self.app = app
        self.max_request_bytes = max_request_bytes
        self.json_limits = json_limits
        self.paths = re.compile(paths)
        self.json_paths = re.compile(json_paths)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        refusal = self._refusal(scope)
        if isinstance(refusal, RequestError):
            return await _send_refusal(send, refusal)
        if refusal is not None:
            return await _send_error(send, *refusal)
        try:
            await self._pass_on(scope, BoundedReceive(receive, self.max_request_bytes), send)
        except BodyTooLarge as err:  # raised while the body was read, before any answer was started
            await _send_refusal(send, err.refusal)

    async def _pass_on(self, scope, receive: BoundedReceive, send) -> None:
        """The request to the app, its body bounded as it arrives; on the JSON paths read whole (within the bound)
        first, and a POST's JSON checked, so that the app behind (KServe's) never reads a body itself."""
        if not self.json_paths.match(scope["path"]):
            return await self.app(scope, receive, send)
        body = await read_body(receive)
        if body is None:  # the client left before sending its body: there is no one to answer
            return None
        refusal = self._json_refusal(scope, body) if scope["method"] == "POST" else None
        if refusal is not None:
            return await _send_error(send, *refusal)
        return await self.app(scope, _replay(body, receive), send)

    def _json_refusal(self, scope, body: bytes) -> tuple[int, str] | None:
        """The body's JSON (all of it, or the binary extension's JSON part) checked before anything parses it."""
        length = dict(scope.get("headers") or []).get(BINARY_JSON_LENGTH, b"")
        # A malformed length (not a number, or more digits than Python turns into an int) is refused when decoded.
        json_part = body[:int(length)] if length.isdigit() and len(length) <= len(str(len(body))) else body
        try:
            check_json(json_part, self.json_limits)
        except RequestError as err:
            return err.status, f"{err.code}: {err.message}"
        return None

    def _refusal(self, scope) -> tuple[int, str] | RequestError | None:
        """404 for a path not served; 413 for a body whose Content-Length is over the limit, before it is read."""
        if not self.paths.match(scope["path"]):
            return 404, f"not_found: {scope['path']} is not a path this server serves"
        length = declared_length(dict(scope.get("headers") or []))
        if length is not None and length > self.max_request_bytes:
            return too_large(self.max_request_bytes, length)
        return None


def _replay(body: bytes, receive):
    """A `receive` that gives the app the body already read, then whatever the connection says next."""
    sent = False

    async def replayed():
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replayed


def front_json_limits(config: FrontConfig) -> JsonLimits:
    return front_json_limits_for(config.models)


def front_json_limits_for(models) -> JsonLimits:
    """The handler's JSON limits, with room for OIP_JSON_PIXEL_IMAGES images of pixels at the largest crop the
    front serves (more go as the binary extension or over gRPC, which are not parsed as JSON)."""
    largest = max((oip.element_count((3, m.crop, m.crop)) for m in models), default=0)
    return limits_for_pixels(OIP_JSON_PIXEL_IMAGES * largest)


async def _send_error(send, status: int, message: str) -> None:
    """The front's refusal of a path or a JSON body: `{"error": "<code>: <message>"}`."""
    await _send_json(send, status, {"error": message})


async def _send_refusal(send, error: RequestError) -> None:
    """tsvk's error body (code, type, error, source, message); the connection closes, as the rest of the body is unread."""
    await _send_json(send, error.status, error.body(), [CLOSE])


async def _send_json(send, status: int, document: dict, headers: list[tuple[bytes, bytes]] = ()) -> None:
    body = json.dumps(document).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *headers]})
    await send({"type": "http.response.body", "body": body})


def serve(config: FrontConfig, run_dir: Path) -> None:
    """Register every model and run both servers until SIGTERM. TorchServe's key file in `run_dir` gives the
    key its health checks need when token authorization is on (clients' requests carry their own)."""
    from kserve import ModelServer
    from kserve.model_server import FASTAPI_APP_IMPORT_STRING, app
    from kserve.protocol.rest.server import RESTServer

    from .bounded_http import bound_uvicorn  # uvicorn, as kserve
    from .forward import ForwardedError, TorchServeModel  # kserve: the front's own process only

    _quiet_logs()

    def ping_headers() -> dict[str, str]:
        key = current_key(run_dir)
        return {"Authorization": f"Bearer {key}"} if key else {}

    client = TorchServeClient(verifying(config.tls.cert_file if config.tls else None))
    server = ModelServer(http_port=config.rest_port, grpc_port=config.grpc_port, enable_grpc=False, workers=1,
                         enable_docs_url=False)
    health = TorchServeHealth(client, f"{config.torchserve_url}/ping", ping_headers)
    server.dataplane = torchserve_dataplane(server.registered_models, health)
    for tensors in config.models:
        model = TorchServeModel(tensors, config.torchserve_url, config.max_images, client, health)
        model.enable_latency_logging = False
        server.register_model(model)
    app.add_exception_handler(ForwardedError, forwarded_error_handler)
    app.add_middleware(Guard, max_request_bytes=config.max_request_bytes, json_limits=front_json_limits(config))
    rest = RESTServer(FASTAPI_APP_IMPORT_STRING, server.dataplane, server.model_repository_extension, config.rest_port,
                      workers=1, grace_period=GRACE_S)
    rest.config.host = config.address
    serve_https(rest.config, config.tls if config.rest_tls else None)
    bound_uvicorn(rest.config, config.http_bounds)
    grpc = grpc_server(config, server)
    stop_grpc_with(server, grpc)
    server.setup_event_loop()
    server.register_signal_handler()
    asyncio.run(_run_all(rest.start(), grpc.start(GRPC_THREADS)))


def serve_https(uvicorn_config, tls: ServedTls | None) -> None:
    """uvicorn's TLS settings (its Config's key, certificate and ciphers) for an https listener; from them uvicorn builds
    the context ServedTls.server_context builds (TLS 1.2 or later is Python's floor). None: plain HTTP."""
    if tls is not None:
        uvicorn_config.ssl_keyfile, uvicorn_config.ssl_certfile = str(tls.key_file), str(tls.cert_file)
        uvicorn_config.ssl_ciphers = TLS_CIPHERS


async def _run_all(*servers) -> None:
    await asyncio.gather(*servers)


async def forwarded_error_handler(_, exc):
    from fastapi.responses import JSONResponse

    return JSONResponse(status_code=exc.status, content={"error": exc.message})


def _quiet_logs() -> None:
    """No line per request (KServe's access and timing logs): at full load they cost as much as the forwarding."""
    import logging

    for name in ("uvicorn.access", "kserve.trace"):
        logging.getLogger(name).setLevel(logging.WARNING)


def torchserve_dataplane(registry, health):
    """KServe's data plane, but the server is ready only while TorchServe is (its /ping), and says it is tsvk."""
    from kserve.protocol.dataplane import DataPlane

    from .binary import request_from_binary  # kserve: the front's own process only

    class TorchServeDataPlane(DataPlane):
        def __init__(self):
            super().__init__(model_registry=registry)
            self._server_name, self._server_version = "tsvk", __version__

        async def ready(self) -> bool:
            return await health.healthy()

        def decode_inference_request(self, body, headers, model_name):
            from kserve.constants.constants import INFERENCE_CONTENT_LENGTH_HEADER

            json_length = (headers or {}).get(INFERENCE_CONTENT_LENGTH_HEADER)
            if isinstance(body, bytes) and json_length is not None:
                return request_from_binary(body, json_length, model_name)
            return super().decode_inference_request(body, headers, model_name)

    return TorchServeDataPlane()


def grpc_server(config: FrontConfig, server, interceptors: tuple = (), grace_s: float = GRACE_S):
    """KServe's gRPC servicer and interceptor on `config.address` only, model load/unload refused, within the config's
    bounds on calls and connections (connection_bounds.py); `interceptors` run before KServe's (the engine's key
    check). Its stop takes no new call and answers those in flight for `grace_s`."""
    from grpc import StatusCode, aio
    from kserve.protocol.grpc import grpc_predict_v2_pb2_grpc
    from kserve.protocol.grpc.interceptors import ExceptionToStatusInterceptor
    from kserve.protocol.grpc.servicer import InferenceServicer

    class ServingOnly(InferenceServicer):
        async def RepositoryModelLoad(self, request, context):
            await context.abort(StatusCode.PERMISSION_DENIED, "models are loaded by TorchServe's config, not over the protocol")

        async def RepositoryModelUnload(self, request, context):
            await context.abort(StatusCode.PERMISSION_DENIED, "models are loaded by TorchServe's config, not over the protocol")

    def build(data_plane, repository_extension, max_workers: int):
        limit = config.max_request_bytes + 2**16  # the images plus the request's own fields
        bounds = config.grpc_bounds
        built = aio.server(futures.ThreadPoolExecutor(max_workers=max_workers),
                           interceptors=(*interceptors, ExceptionToStatusInterceptor()),
                           options=[("grpc.max_receive_message_length", limit), ("grpc.max_send_message_length", limit),
                                    *bounds.server_options()],
                           maximum_concurrent_rpcs=bounds.max_concurrent_rpcs)
        grpc_predict_v2_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(ServingOnly(data_plane, repository_extension), built)
        _add_port(built, config)
        return built

    return grpc_server_built_by(build, config.grpc_port, server, grace_s)


def _add_port(server, config: FrontConfig) -> None:
    """The gRPC port on the config's address: with TLS where the config's key files are set (unless
    enable_grpc_ssl=false), else in plain text."""
    import grpc

    target = f"[{config.address}]:{config.grpc_port}" if ":" in config.address else f"{config.address}:{config.grpc_port}"
    if config.tls is None or not config.tls.grpc:
        server.add_insecure_port(target)
        return
    server.add_secure_port(target, grpc.ssl_server_credentials([config.tls.key_and_chain()]))


def build_parser() -> argparse.ArgumentParser:
    """The front's command line; `tsvk serve` and the Helm chart's front container both call it."""
    parser = argparse.ArgumentParser(prog="python -m tsvk_tools.oip", description="the Open Inference Protocol front of a tsvk TorchServe")
    parser.add_argument("--ts-config", type=Path, required=True, help="the TorchServe config `tsvk config --protocol oip` wrote")
    parser.add_argument("--run-dir", type=Path, required=True, help="the TorchServe's run directory (its key file)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    sys.argv = sys.argv[:1]  # kserve.model_server parses the command line when it is imported
    try:
        config = replace(read_front_config(args.ts_config), tls=served_tls(read_properties(args.ts_config)))
    except TlsError as err:
        print(f"not starting: {err}", file=sys.stderr)
        return 2
    serve(config, args.run_dir)
    return 0
