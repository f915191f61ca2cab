"""Reading TorchServe's accounting: Prometheus counters and the per-batch metric lines in its logs."""

from tsvk_tools.lab.bench.tsmetrics import logged_handler_metrics, metric_total, parse_prometheus, profile_difference

PROMETHEUS = """# HELP ts_inference_requests_total Total number of inference requests.
# TYPE ts_inference_requests_total counter
ts_inference_requests_total{model_name="resnet18",model_version="default",hostname="vm",} 40.0
ts_queue_latency_microseconds{model_name="resnet18",model_version="default",hostname="vm",} 2000000.0
ts_inference_latency_microseconds{model_name="resnet18",model_version="default",hostname="vm",} 8000000.0
ts_inference_requests_total{model_name="other",model_version="default",hostname="vm",} 7.0
"""

TS_LOG = (
    "2026-11-22T03:33:05,750 [INFO ] W-9000-resnet18_1.0-stdout org.pytorch.serve.wlm.WorkerLifeCycle - "
    "result=[METRICS]TsvkPreprocessMs.Milliseconds:18.5|#ModelName:resnet18,Level:Model,Backend:cpu|#type:GAUGE|#hostname:vm\n"
    "2026-11-22T03:33:05,751 [INFO ] W-9000-resnet18_1.0-stdout org.pytorch.serve.wlm.WorkerLifeCycle - Registering auto "
    "detected backend metric: TsvkPreprocessMs.Milliseconds:18.5|#ModelName:resnet18|#hostname:vm\n"
    "2026-11-22T03:33:05,752 [INFO ] W-9000-resnet18_1.0-stdout org.pytorch.serve.wlm.WorkerLifeCycle - "
    "result=[METRICS]TsvkBatchSize.Count:4|#ModelName:resnet18,Level:Model,Backend:cpu|#type:GAUGE|#hostname:vm\n"
)
MODEL_METRICS_LOG = (
    "2026-11-22T03:32:35,328 - HandlerTime.ms:1961.81|#ModelName:resnet18,Level:Model|#hostname:vm,requestID:a\n"
    "2026-11-22T03:32:35,631 - HandlerTime.ms:172.47|#ModelName:resnet18,Level:Model|#hostname:vm,requestID:b\n"
)
TS_METRICS_LOG = "2026-11-22T03:32:35,330 - QueueTime.Milliseconds:100.0|#Level:Host|#hostname:vm,timestamp:1\n"


def test_prometheus_counters_are_summed_per_model():
    samples = parse_prometheus(PROMETHEUS)
    assert metric_total(samples, "ts_inference_requests_total", "resnet18") == 40.0
    assert metric_total(samples, "ts_inference_requests_total") == 47.0
    assert metric_total(samples, "ts_missing", "resnet18") is None


def test_logged_metrics_come_from_both_log_formats(tmp_path):
    (tmp_path / "ts_log.log").write_text(TS_LOG)
    (tmp_path / "model_metrics.log").write_text(MODEL_METRICS_LOG)
    (tmp_path / "ts_metrics.log").write_text(TS_METRICS_LOG)
    logged = logged_handler_metrics(tmp_path)
    assert logged["TsvkPreprocessMs"] == [18.5]  # the 'Registering' echo is not a second sample
    assert logged["TsvkBatchSize"] == [4.0]
    assert logged["HandlerTime"] == [1961.81, 172.47]
    assert logged["QueueTime"] == [100.0]


def test_profile_counts_only_the_measured_load():
    samples = parse_prometheus(PROMETHEUS)
    after = {"counters": {name: metric_total(samples, name, "resnet18") for name in
                          ("ts_inference_requests_total", "ts_queue_latency_microseconds", "ts_inference_latency_microseconds")},
             "handler": {"HandlerTime": [5000.0, 100.0, 300.0], "QueueTime": [1.0, 9.0]}}
    before = {"counters": {"ts_inference_requests_total": 20.0, "ts_queue_latency_microseconds": 0.0,
                           "ts_inference_latency_microseconds": 0.0}, "handler": {"HandlerTime": [5000.0]}}
    profile = profile_difference(before, after)
    assert profile["requests"] == 20.0
    assert profile["per_request"]["queue_ms"] == 100.0  # 2 s over 20 requests
    assert profile["per_request"]["frontend_latency_ms"] == 400.0
    assert profile["per_batch"]["HandlerTime"] == {"mean": 200.0}  # warm-up value left out
    assert profile["per_request"]["QueueTime"] == {"mean": 5.0}
