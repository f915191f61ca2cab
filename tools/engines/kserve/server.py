"""The engine's server process: the config's archives opened, their worker pools started, and TorchServe's inference
API plus the Open Inference Protocol served on the config's inference address through KServe's SDK.

Run as `python -m tsvk_tools.engines.kserve --config <config.properties> --run-dir <dir>`; `tsvk serve --engine
kserve` does (engine_process.py). The REST server is KServe's (its data plane for /v2) with the OIP front's guard in front:
only the served paths, bodies no larger than max_request_size, /v2 JSON bounded before it is parsed, and the
inference key checked on every path when token authorization is on; slow and idle clients are bounded in the
connection itself (headers' time, size and count, a body's pauses, idle keep-alive, open connections: bounded_http.py),
and so are gRPC's (connection_bounds.py). The gRPC Open Inference Protocol server is
started too where the config serves the protocol (`tsvk config --protocol oip`). SIGTERM: the REST and gRPC servers
stop accepting together and answer what they hold within the drain timeout (uvicorn's graceful shutdown, gRPC's
stop with that grace), then the workers are ended. With token
authorization on, a run directory another user owns or others may write is refused before the keys are written
(tokens.py); with it off (the chart's pods, whose run directory is an emptyDir of their own) there are no keys to keep.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import sys
from pathlib import Path
from typing import Awaitable, Callable
from urllib.parse import urlsplit

from tsvk.common import read_properties

from ... import defaults
from ...tls import ServedTls, TlsError, is_https, served_tls, tls_warnings
from ...oip.config import ADDRESS_KEY, GRPC_PORT_KEY, MAX_IMAGES_KEY, REST_PORT_KEY, FrontConfig, is_oip_config, tensors_of
from ...oip.connection_bounds import GrpcBounds, HttpBounds
from ...oip.kserve_private import uvicorn_server
from ...oip.server import (GRPC_THREADS, PROTOCOL_PATHS, Guard, forwarded_error_handler, front_json_limits_for, grpc_server,
                           serve_https, torchserve_dataplane)
from ..shared.archives import open_archives
from .arrival import ArrivalStamp, trusted_networks
from .files import MODELS_DIR, STATUS_FILE, WORKER_LOG
from .forkserver import ForkServer, worker_env
from ..shared.metrics import EngineMetrics, MetricsServer
from .pool import ModelPool, WorkerStart
from .predictions import PING_PATH, PREDICTIONS_PATH, InferenceRoutes, PredictionsApi, torchserve_error
from .tokens import KEY_REFUSED, InferenceKey, auth_enabled, run_dir_problem, write_keys

log = logging.getLogger("tsvk.engine")

ENGINE_PATHS = f"{PING_PATH.pattern}|{PREDICTIONS_PATH.pattern}"  # TorchServe's inference API
# From the listeners' close to uvicorn's graceful shutdown and gRPC's stop: long enough for a request a client had
# already sent on an open connection to be read, and a gRPC call that had reached the server to be taken up, so each
# is held and answered rather than cut.
SETTLE_S = 0.5


class _Engine:
    """The pools, and whether every model the engine serves has its workers."""

    def __init__(self, pools: dict[str, ModelPool], run_dir: Path, metrics: EngineMetrics):
        self.pools = pools
        self.metrics = metrics
        self.run_dir = run_dir
        self.loaded = False
        for pool in pools.values():
            pool.on_change = self.write_status

    def healthy(self) -> bool:
        return self.loaded and all(pool.ready_workers > 0 for pool in self.pools.values())

    def write_status(self) -> None:
        """The models and their workers as `tsvk status` reports TorchServe's (its management API's fields)."""
        models = [{"name": name, "archive": pool.model.archive.name, "batch_size": pool.model.batch_size,
                   "max_batch_delay_ms": pool.model.max_batch_delay_ms, "min_workers": pool.model.workers,
                   "max_workers": pool.model.workers, "starts": pool.starts, "deaths": pool.deaths,
                   "workers": [{"id": w.number, "status": "READY" if w.ready() else "STARTING", "pid": w.pid,
                                "gpu": bool(pool.model.gpu_ids)} for w in pool.workers],
                   "ready": pool.ready_workers == pool.model.workers} for name, pool in self.pools.items()]
        temporary = self.run_dir / (STATUS_FILE + ".tmp")
        temporary.write_text(json.dumps({"models": models}, indent=2))
        temporary.replace(self.run_dir / STATUS_FILE)


class _Health:
    """The OIP data plane's readiness: the engine's (every served model has a worker)."""

    def __init__(self, engine: _Engine):
        self.engine = engine

    async def healthy(self) -> bool:
        return self.engine.healthy()


class _TokenGuard:
    """ASGI middleware: with token authorization on, every path needs the inference key (TorchServe's /ping too)."""

    def __init__(self, app, key: InferenceKey | None):
        self.app = app
        self.key = key

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and self.key is not None:
            if not self.key.allows(dict(scope.get("headers") or []).get(b"authorization")):
                response = torchserve_error(400, "InvalidKeyException", KEY_REFUSED)
                return await response(scope, receive, send)
        return await self.app(scope, receive, send)


def inference_bind(properties: dict[str, str]) -> tuple[str, int]:
    return _bind(properties.get("inference_address", defaults.INFERENCE_ADDRESS), 8080)


def metrics_bind(properties: dict[str, str]) -> tuple[str, int]:
    return _bind(properties.get("metrics_address", defaults.METRICS_ADDRESS), 8082)


def _bind(address: str, default_port: int) -> tuple[str, int]:
    parts = urlsplit(address)
    return parts.hostname or "127.0.0.1", parts.port or default_port


async def serve(config: Path, run_dir: Path, forks: ForkServer, grace_s: float) -> int:
    """The fork server is already importing torch (launch.py); the archives are opened and the workers asked for,
    then KServe is imported while they load (cold start: the slowest part runs alone)."""
    properties = read_properties(config)
    try:
        networks = trusted_networks(properties)
        tls = served_tls(properties)
        http_bounds, grpc_bounds = HttpBounds.from_properties(properties), GrpcBounds.from_properties(properties)
    except (ValueError, TlsError) as err:  # the line says what to set
        log.error("not starting: %s", err)
        return 2
    for warning in tls_warnings(tls, properties):
        log.warning("%s", warning)
    key = None
    if auth_enabled(properties):
        if (problem := run_dir_problem(run_dir)) is not None:
            log.error("not starting: %s", problem)
            return 2
        write_keys(run_dir)
        key = InferenceKey(run_dir)
    served, refused = open_archives(properties, run_dir / MODELS_DIR)
    for refusal in refused:
        log.error("%s", refusal.line())
    start = WorkerStart(config, run_dir / "logs" / WORKER_LOG, worker_env(config), forks)
    metrics = EngineMetrics()
    engine = _Engine({model.name: ModelPool(model, start, metrics) for model in served}, run_dir, metrics)
    metrics_server = MetricsServer(metrics, *metrics_bind(properties), http_bounds, tls=_metrics_context(tls, properties))
    await metrics_server.start()
    loading = asyncio.create_task(_load(engine))
    await asyncio.to_thread(_import_kserve)
    server, rest = _servers(properties, engine, key, networks, served, grace_s, http_bounds)
    serve_https(rest.config, _tls_on(tls, properties, "inference_address"))
    grpc = _grpc(properties, server, key, networks, tls, grace_s, grpc_bounds) if is_oip_config(properties) else None
    settle_before_shutdown(uvicorn_server(rest), beside=(grpc.stop,) if grpc else ())  # whose shutdown SIGTERM begins
    servers = [asyncio.create_task(rest.start())]
    if grpc is not None:
        servers.append(asyncio.create_task(grpc.start(GRPC_THREADS)))
    await loading
    _register_oip_models(server, engine, key, properties)
    await servers[0]  # until SIGTERM; uvicorn and gRPC answer what they hold first
    await _ended(servers[1:])
    await asyncio.gather(*(pool.stop() for pool in engine.pools.values()))
    await metrics_server.stop()
    return 0


def _tls_on(tls: ServedTls | None, properties: dict[str, str], address_key: str) -> ServedTls | None:
    """The config's TLS where this address is https (served_tls has refused an https address without key files)."""
    return tls if tls is not None and is_https(properties.get(address_key, "")) else None


def _metrics_context(tls: ServedTls | None, properties: dict[str, str]):
    https = _tls_on(tls, properties, "metrics_address")
    return https.server_context() if https is not None else None


def _import_kserve() -> None:
    """KServe's server modules (seconds of imports), once main() has hidden the command line from them."""
    import kserve.model_server  # noqa: F401
    import kserve.protocol.rest.server  # noqa: F401


def _servers(properties: dict[str, str], engine: _Engine, key: InferenceKey | None, networks: tuple, served: list,
             grace_s: float, bounds: HttpBounds):
    """KServe's model server and REST server, with the front's guards and TorchServe's inference API in front of its app;
    `key` is None with token authorization off, `networks` the proxies whose arrival stamps are believed, `bounds` those
    on slow and idle clients (tools/oip/bounded_http.py)."""
    from kserve import ModelServer
    from kserve.model_server import FASTAPI_APP_IMPORT_STRING, app
    from kserve.protocol.rest.server import RESTServer

    from ...oip.bounded_http import bound_uvicorn  # uvicorn, as kserve
    from ...oip.forward import ForwardedError  # kserve, imported once main() has hidden the command line from it

    host, port = inference_bind(properties)
    server = ModelServer(http_port=port, enable_grpc=False, workers=1, enable_docs_url=False)
    server.dataplane = torchserve_dataplane(server.registered_models, _Health(engine))
    app.add_exception_handler(ForwardedError, forwarded_error_handler)
    inference = InferenceRoutes(app, PredictionsApi(engine.pools, engine.healthy, _max_request_bytes(properties), engine.metrics))
    guarded = ArrivalStamp(_TokenGuard(Guard(inference, max_request_bytes=_max_request_bytes(properties),
                                             json_limits=front_json_limits_for(m.settings.preprocess for m in served),
                                             paths=f"{PROTOCOL_PATHS}|{ENGINE_PATHS}", json_paths=PROTOCOL_PATHS), key=key),
                           networks)
    rest = RESTServer(FASTAPI_APP_IMPORT_STRING, server.dataplane, server.model_repository_extension, port, workers=1,
                      grace_period=grace_s)
    # uvicorn serves the guards, then TorchServe's paths, in front of KServe's app (which RESTServer.start still
    # completes with its own middlewares and routes): the inference paths pass through none of KServe's layers.
    rest.config.app = guarded
    rest.config.host = host
    rest.config.server_header = rest.config.date_header = False  # TorchServe sends neither
    bound_uvicorn(rest.config, bounds)
    return server, rest


def settle_before_shutdown(server, settle_s: float = SETTLE_S, beside: tuple[Callable[[], Awaitable], ...] = ()) -> None:
    """uvicorn's graceful shutdown (uvicorn/server.py, 0.54) closes the listeners and at once every connection with no
    request in progress, including one whose request has arrived but not yet been read: that request would be cut
    though its client sent it before the stop. Here the listeners close first (connections the kernel had queued
    are taken before), the open connections are read for `settle_s`, and only then does uvicorn's shutdown begin.

    `beside`: the other servers' drains (the gRPC server's stop), begun with uvicorn's once the settle is over, so that
    the stop takes no new call on any of them while each answers what it holds; the shutdown returns once all have.
    gRPC settles too: its server takes up the calls that have reached it one at a time from the event loop, and those
    not yet taken up when its stop begins are cancelled though their clients sent them before the stop (under load,
    most of a burst sent 0.1 s before it). It cannot close its listener apart from its stop, so during the settle it
    still takes new calls, and answers them."""
    shutdown = server.shutdown

    async def shutdown_after_settling(sockets=None) -> None:
        await asyncio.sleep(0)  # one turn of the loop: it accepts the connections already queued
        for listener in server.servers:
            listener.close()
        await asyncio.sleep(settle_s)
        await asyncio.gather(shutdown(sockets), *(stop() for stop in beside))

    server.shutdown = shutdown_after_settling


async def _ended(servers: list[asyncio.Task]) -> None:
    """The other servers' tasks, ended: their drains ran beside the REST server's, so each has returned unless it
    had not yet begun serving when the stop came (it is then cancelled: it holds no call)."""
    for task in servers:
        if not task.done():
            task.cancel()
    await asyncio.gather(*servers, return_exceptions=True)


def _register_oip_models(server, engine: _Engine, key: InferenceKey | None, properties: dict[str, str]) -> None:
    """The models that loaded, on the Open Inference Protocol; its tensors are stated for classifiers."""
    from .oip_models import EngineModel  # kserve, as above

    for pool in engine.pools.values():
        m = pool.model
        tensors = tensors_of(m.name, m.archive, m.settings, m.response_timeout_s)
        if tensors is not None:
            server.register_model(EngineModel(tensors, pool, _max_images(properties), key))


async def _load(engine: _Engine) -> None:
    """Every pool started at once; a model whose workers cannot load is refused in one line and the others serve."""
    names = list(engine.pools)
    reasons = await asyncio.gather(*(engine.pools[name].start() for name in names))
    for name, reason in zip(names, reasons):
        if reason is not None:
            log.error("not serving %s: its worker cannot load it: %s", engine.pools[name].model.name + ".mar", reason)
            del engine.pools[name]
    engine.loaded = True
    engine.write_status()
    log.info("serving %s", ", ".join(f"{name} ({pool.model.workers} worker(s))" for name, pool in engine.pools.items()) or "no model")


def _grpc(properties: dict[str, str], server, key: InferenceKey | None, networks: tuple, tls: ServedTls | None, grace_s: float,
          bounds: GrpcBounds):
    """KServe's gRPC server with the front's guards, where the config serves the protocol (its address and port); with
    token authorization on, every call needs the key, and every call's arrival is stamped (grpc_guards.py); TLS where
    the config's key files are set (tools/tls.py: unless enable_grpc_ssl=false). Its stop answers the calls in flight
    within `grace_s`, the REST server's drain timeout."""
    front = FrontConfig(torchserve_url="", address=properties.get(ADDRESS_KEY, defaults.OIP_ADDRESS),
                        rest_port=int(properties[REST_PORT_KEY]), grpc_port=int(properties.get(GRPC_PORT_KEY, defaults.OIP_GRPC_PORT)),
                        max_images=_max_images(properties), max_request_bytes=_max_request_bytes(properties), models=(), tls=tls,
                        grpc_bounds=bounds)
    from .grpc_guards import GrpcArrivalStamp, KeyInterceptor  # grpc: once the config serves the protocol

    interceptors = ((KeyInterceptor(key.allows),) if key is not None else ()) + (GrpcArrivalStamp(networks),)
    return grpc_server(front, server, interceptors, grace_s)


def _max_images(properties: dict[str, str]) -> int:
    return int(properties.get(MAX_IMAGES_KEY, defaults.OIP_MAX_IMAGES))


def _max_request_bytes(properties: dict[str, str]) -> int:
    return int(properties.get("max_request_size", defaults.MAX_REQUEST_MB * 2**20))


def _quiet_logs() -> None:
    for name in ("uvicorn.access", "kserve.trace"):
        logging.getLogger(name).setLevel(logging.WARNING)


def main(config: Path, run_dir: Path, grace_s: float, forks: ForkServer) -> int:
    """The server, once launch.py has parsed its command line and started the fork server."""
    sys.argv = sys.argv[:1]  # kserve.model_server parses the command line when it is imported
    logging.basicConfig(level=logging.INFO, format="%(asctime)s [engine] %(levelname)s %(message)s")
    _quiet_logs()
    for sig in (signal.SIGTERM, signal.SIGINT):  # uvicorn raises the signal again once it has stopped: not fatal here
        signal.signal(sig, lambda *_: None)
    return asyncio.run(serve(config, run_dir, forks, grace_s))
