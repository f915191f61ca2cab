"""The engine's Prometheus metrics, under the names TorchServe 0.12 gives them with `metrics_mode=prometheus`, so the
chart's dashboard and prometheus-adapter rules (k8s/tsvk/templates/grafana-dashboard.yaml,
k8s/prometheus-adapter/values.yaml) read either engine unchanged.

The frontend's series, counted by the server: `ts_inference_requests_total`, `ts_inference_latency_microseconds` and
`ts_queue_latency_microseconds` per model (counted when a request is accepted into the model's queue, and when it is
answered), `Requests2XX|4XX|5XX` per answer, and the gauges `QueueTime` and `WorkerThreadTime` (ms, last request) and
`PredictionTime` (ms, last batch). The handler's own series (`TsvkPreprocessMs`, ...; handlers/tsvk/worker/metrics.py) are
recorded in the worker by a cache shaped like TorchServe's (`RecordingMetrics`), sent back with each batch's answers,
and exposed as the gauges and counters TorchServe makes of them. Served on the config's `metrics_address`, GET
/metrics (TorchServe's `name[]` filter too), without a key, as TorchServe serves its metrics API.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections import defaultdict
from typing import TYPE_CHECKING, Any, Iterable
from urllib.parse import parse_qs, urlsplit

if TYPE_CHECKING:  # a worker imports this module, and must import no tsvk but its archive's (tools.defaults imports tsvk)
    from ...oip.connection_bounds import HttpBounds

REQUESTS = "ts_inference_requests_total"
LATENCY_US = "ts_inference_latency_microseconds"
QUEUE_US = "ts_queue_latency_microseconds"
MODEL_COUNTERS = {REQUESTS: "Total number of inference requests.",
                  LATENCY_US: "Cumulative inference duration in microseconds",
                  QUEUE_US: "Cumulative queue duration in microseconds"}
HOST_GAUGES = ("QueueTime", "WorkerThreadTime")  # ms, TorchServe's Level="Host" series
PREDICTION_TIME = "PredictionTime"  # ms, per batch, Level="Model"
DEFAULT_VERSION = "default"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
MAX_REQUEST_LINE = 8192
HANDSHAKE_TIMEOUT_S = 10  # a TLS client that does not finish its handshake is dropped as a slow request line is

Labels = tuple[tuple[str, str], ...]


class RecordingMetrics:
    """A worker's stand-in for TorchServe's metrics cache (ts/metrics/metric_cache_abstract.py of 0.12.0: add_time,
    add_metric, add_counter with (name, value, idx, unit, dimensions)): it keeps each sample until `take()`."""

    def __init__(self) -> None:
        self._samples: list[tuple[str, str, float, Labels]] = []

    def add_time(self, name: str, value: float, idx=None, unit: str = "ms", dimensions=None, metric_type=None) -> None:
        self._samples.append(("gauge", name, float(value), _labels(dimensions)))

    def add_metric(self, name: str, value: float, unit: str, idx=None, dimensions=None, metric_type=None) -> None:
        self._samples.append(("gauge", name, float(value), _labels(dimensions)))

    def add_counter(self, name: str, value: float, idx=None, dimensions=None, metric_type=None) -> None:
        self._samples.append(("counter", name, float(value), _labels(dimensions)))

    def take(self) -> list[tuple[str, str, float, Labels]]:
        taken, self._samples = self._samples, []
        return taken


def _labels(dimensions: Iterable[Any] | None) -> Labels:
    return tuple((str(d.name), str(d.value)) for d in dimensions or ())


class EngineMetrics:
    """Every series the engine exposes, kept in this (the server's) process."""

    def __init__(self, hostname: str | None = None):
        self.hostname = hostname or socket.gethostname()
        self.counters: dict[str, dict[Labels, float]] = defaultdict(lambda: defaultdict(float))
        self.gauges: dict[str, dict[Labels, float]] = defaultdict(dict)

    def accepted(self, model: str, version: str | None) -> None:
        """A request went into the model's queue: TorchServe counts it then."""
        self.counters[REQUESTS][self._model_labels(model, version)] += 1

    def answered(self, status: int) -> None:
        """Any answer of the inference API, by its status class."""
        self.counters[f"Requests{status // 100}XX"][self._host_labels()] += 1

    def batch_done(self, model: str, version: str | None, queued_s: list[float], answered_s: list[float], worker_s: float,
                   handler_samples: Iterable[tuple[str, str, float, Labels]] = ()) -> None:
        """A batch's requests answered: their time in the queue and in all, the worker's time, the handler's samples."""
        labels = self._model_labels(model, version)
        self.counters[QUEUE_US][labels] += sum(queued_s) * 1e6
        self.counters[LATENCY_US][labels] += sum(answered_s) * 1e6
        if queued_s:
            self.gauges["QueueTime"][self._host_labels()] = round(queued_s[-1] * 1e3, 3)
        self.gauges["WorkerThreadTime"][self._host_labels()] = round(worker_s * 1e3, 3)
        self.gauges[PREDICTION_TIME][(("ModelName", model), ("Level", "Model"), ("Hostname", self.hostname))] = round(worker_s * 1e3, 3)
        for kind, name, value, sample_labels in handler_samples:
            full = (*sample_labels, ("Hostname", self.hostname))
            if kind == "counter":
                self.counters[name][full] += value
            else:
                self.gauges[name][full] = value

    def _model_labels(self, model: str, version: str | None) -> Labels:
        return (("model_name", model), ("model_version", version or DEFAULT_VERSION), ("hostname", self.hostname))

    def _host_labels(self) -> Labels:
        return (("Level", "Host"), ("Hostname", self.hostname))

    def exposition(self, names: set[str] | None = None) -> str:
        """Prometheus's text format; only `names` when given (TorchServe's `?name[]=` filter)."""
        lines: list[str] = []
        for kind, table in (("counter", self.counters), ("gauge", self.gauges)):
            for name in sorted(table):
                if names and name not in names:
                    continue
                lines.append(f"# HELP {name} {MODEL_COUNTERS.get(name, name)}")
                lines.append(f"# TYPE {name} {kind}")
                lines.extend(f"{name}{{{_render(labels)}}} {value!r}" for labels, value in table[name].items())
        return "\n".join(lines) + "\n"


def _render(labels: Labels) -> str:
    return ",".join(f'{key}="{_escape(value)}"' for key, value in labels)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class MetricsServer:
    """GET /metrics on the metrics address: a plain HTTP/1.1 answer per connection, closed after it; over TLS where the
    address is https. A request's line and headers must arrive within the REST servers' header timeout, in no more
    lines than their header count."""

    def __init__(self, metrics: EngineMetrics, host: str, port: int, bounds: HttpBounds, tls: ssl.SSLContext | None = None):
        self.metrics = metrics
        self.host = host
        self.port = port
        self.bounds = bounds
        self.tls = tls  # https: the config's key and certificate (tools/tls.py)
        self._server: asyncio.base_events.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._answer, self.host, self.port, reuse_address=True, ssl=self.tls,
                                                  ssl_handshake_timeout=HANDSHAKE_TIMEOUT_S if self.tls else None)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await asyncio.wait_for(self._request_line(reader), self.bounds.header_timeout_s)
            status, body = self._route(line[:MAX_REQUEST_LINE].decode("latin-1"))
            writer.write(f"HTTP/1.1 {status}\r\nContent-Type: {CONTENT_TYPE}\r\nContent-Length: {len(body)}\r\n"
                         f"Connection: close\r\n\r\n".encode() + body)
            await writer.drain()
        except (asyncio.TimeoutError, ConnectionError, UnicodeError, ssl.SSLError, ValueError):  # ValueError: a line past the limit
            pass
        finally:
            writer.close()

    async def _request_line(self, reader: asyncio.StreamReader) -> bytes:
        """The request line, once the headers after it are read (and ignored): at most the bound's count of them."""
        line = await reader.readline()
        for _ in range(self.bounds.max_headers + 1):
            header = await reader.readline()
            if header in (b"\r\n", b"\n", b"") or len(header) > MAX_REQUEST_LINE:
                break
        return line

    def _route(self, request_line: str) -> tuple[str, bytes]:
        parts = request_line.split()
        if len(parts) < 2 or parts[0] != "GET":
            return "405 Method Not Allowed", b""
        target = urlsplit(parts[1])
        if target.path.rstrip("/") != "/metrics":
            return "404 Not Found", b""
        names = set(parse_qs(target.query).get("name[]", []))
        return "200 OK", self.metrics.exposition(names or None).encode()

