"""The kserve engine's metrics: the handler's per-batch series recorded in a worker reach the server's exposition under
TorchServe's names and labels, and the metrics API's `name[]` filter and refusals behave as TorchServe's."""

from __future__ import annotations

import asyncio

from tsvk.worker.metrics import BatchMetrics
from tsvk_tools.lab.bench.tsmetrics import metric_total, parse_prometheus
from tsvk_tools.engines.shared.metrics import LATENCY_US, QUEUE_US, REQUESTS, EngineMetrics, MetricsServer, RecordingMetrics
from tsvk_tools.oip.connection_bounds import HttpBounds


def _served_batch(metrics: EngineMetrics) -> None:
    recorder = RecordingMetrics()
    BatchMetrics(recorder, "cpu", "tiny", worker_starts=2).record(3, 2, 4.5, 20.25, [200, 200, 400])
    metrics.batch_done("tiny", None, [0.010, 0.020, 0.030], [0.050, 0.060, 0.070], 0.040, recorder.take())


def test_a_batch_is_exposed_under_torchserves_names_and_the_handlers():
    metrics = EngineMetrics(hostname="host")
    for _ in range(3):
        metrics.accepted("tiny", None)
    for status in (200, 200, 400, 503):
        metrics.answered(status)
    _served_batch(metrics)
    samples = parse_prometheus(metrics.exposition())
    assert metric_total(samples, REQUESTS, "tiny") == 3
    assert round(metric_total(samples, QUEUE_US, "tiny")) == 60_000
    assert round(metric_total(samples, LATENCY_US, "tiny")) == 180_000
    assert {n: v for n, labels, v in samples if n.startswith("Requests")} == {"Requests2XX": 2, "Requests4XX": 1, "Requests5XX": 1}
    by_name = {n: (labels, v) for n, labels, v in samples}
    assert by_name["TsvkPreprocessMs"] == ({"ModelName": "tiny", "Level": "Model", "Backend": "cpu", "Hostname": "host"}, 4.5)
    assert by_name["TsvkInferenceMs"][1] == 20.25 and by_name["TsvkBatchSize"][1] == 3 and by_name["TsvkWorkerStarts"][1] == 2
    assert by_name["TsvkRejectedTotal"] == ({"ModelName": "tiny", "Level": "Model", "Status": "400", "Hostname": "host"}, 1)
    assert by_name["PredictionTime"] == ({"ModelName": "tiny", "Level": "Model", "Hostname": "host"}, 40.0)
    assert by_name["QueueTime"][0] == {"Level": "Host", "Hostname": "host"}


def test_counters_add_up_over_batches_and_gauges_keep_the_last():
    metrics = EngineMetrics(hostname="host")
    _served_batch(metrics)
    _served_batch(metrics)
    samples = parse_prometheus(metrics.exposition())
    assert metric_total(samples, "TsvkImagesTotal", "tiny") == 4
    assert metric_total(samples, "TsvkBatchSize", "tiny") == 3


def _get(server: MetricsServer, target: str) -> bytes:
    async def ask() -> bytes:
        await server.start()
        port = server._server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(f"GET {target} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        answer = await reader.read()
        writer.close()
        await server.stop()
        return answer

    return asyncio.run(ask())


def test_the_metrics_api_filters_by_name_and_serves_nothing_else():
    metrics = EngineMetrics(hostname="host")
    metrics.accepted("tiny", None)
    _served_batch(metrics)
    server = MetricsServer(metrics, "127.0.0.1", 0, HttpBounds())
    filtered = _get(server, f"/metrics?name[]={REQUESTS}")
    assert filtered.startswith(b"HTTP/1.1 200 OK")
    names = {n for n, _, _ in parse_prometheus(filtered.split(b"\r\n\r\n", 1)[1].decode())}
    assert names == {REQUESTS}
    assert _get(server, "/models").startswith(b"HTTP/1.1 404")
