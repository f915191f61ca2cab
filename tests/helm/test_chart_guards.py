"""The chart refuses values that disagree with the generated config, naming the problem and the fix."""

from __future__ import annotations

import json

import pytest
from tests.support.helm import config_with, config_without

pytestmark = pytest.mark.helm


def with_config(config: str, **values) -> dict:
    return {"torchserve": {"configProperties": config, **values.pop("torchserve", {})}, **values}


def test_more_threads_than_vcpus_is_refused(render_error):
    error = render_error(with_config(config_with(tsvk__threads__resnet50="4,1")))
    assert "4 compute threads" in error and "throttled" in error and "tsvk config --vcpus 2" in error


def test_vcpus_without_a_matching_config_is_refused(render_error):
    error = render_error({"torchserve": {"vcpus": 8}})
    assert "2 compute threads" in error and "is 8" in error and "idle CPUs" in error


def test_workers_and_batch_must_match_the_models_entry(render_error):
    error = render_error({"torchserve": {"workers": 2, "batchSize": 4}})
    assert "minWorkers 1 / maxWorkers 1 but torchserve.workers is 2" in error
    assert "batchSize 8 but torchserve.batchSize is 4" in error


def test_every_problem_is_reported_at_once(render_error):
    config = config_with(disable_token_authorization="false", inference_address="http://127.0.0.1:8080")
    error = render_error(with_config(config, torchserve={"batchSize": 2}))
    assert error.count("\n  - ") >= 3


def test_token_authorization_must_be_off(render_error):
    error = render_error(with_config(config_without("disable_token_authorization")))
    assert "disable_token_authorization=true" in error and "NetworkPolicy" in error


def test_inference_must_listen_beyond_loopback(render_error):
    error = render_error(with_config(config_with(inference_address="http://127.0.0.1:8080")))
    assert "inference_address must listen on 0.0.0.0" in error


def test_management_open_to_the_network_needs_an_explicit_yes(render_error, render):
    open_management = config_with(management_address="http://0.0.0.0:8081")
    assert "service.exposeManagement is false" in render_error(with_config(open_management))
    assert "management_address" in render_error({"service": {"exposeManagement": True}})
    render(with_config(open_management, service={"exposeManagement": True}))


def test_scraping_needs_metrics_on_all_interfaces_in_prometheus_mode(render_error):
    error = render_error({"serviceMonitor": {"enabled": True}})
    assert "metrics_address on 0.0.0.0" in error
    prometheus_off = config_with(metrics_address="http://0.0.0.0:8082", metrics_mode="log")
    assert "metrics_mode=prometheus" in render_error(with_config(prometheus_off, service={"exposeMetrics": True}))


def test_downloads_must_cover_every_archive_the_config_loads(render_error):
    error = render_error({"modelStore": {"source": "download", "download": {"archives": []}}})
    assert "loads resnet50.mar but modelStore.download.archives has no entry" in error


def test_gpu_count_must_match_number_of_gpu(render_error, render):
    two_gpus = config_with(number_of_gpu="2")
    assert "number_of_gpu=2 but the pod gets 0 GPUs" in render_error(with_config(two_gpus))
    assert "number_of_gpu=0 but the pod gets 1 GPUs" in render_error({"gpu": {"enabled": True}})
    render(with_config(two_gpus, gpu={"enabled": True, "count": 2}))


def test_custom_metric_autoscaling_needs_scraped_metrics(render_error):
    error = render_error({"autoscaling": {"customMetric": {"enabled": True}}})
    assert "autoscaling.customMetric needs TorchServe's metrics scraped" in error


def test_autoscaler_bounds_are_ordered(render_error):
    assert "maxReplicas (1) must be at least" in render_error({"autoscaling": {"minReplicas": 3, "maxReplicas": 1}})


def test_the_grace_period_is_no_longer_a_value_of_its_own(render_error):
    assert "terminationGracePeriodSeconds" in render_error({"terminationGracePeriodSeconds": 30})  # it follows the drain


def test_existing_claim_needs_a_name(render_error):
    assert "names no PersistentVolumeClaim" in render_error({"modelStore": {"source": "existingClaim"}})


def test_a_config_without_models_is_refused(render_error):
    assert "no models={...} entry" in render_error(with_config(config_without("models")))


def test_malformed_models_json_is_named(render_error):
    assert "models= line of the config is not JSON" in render_error(with_config(config_with(models="{not json")))


def test_threads_of_several_models_add_up(render):
    models = {
        name: {"1.0": {"marName": f"{name}.mar", "minWorkers": 1, "maxWorkers": 1, "batchSize": 8}}
        for name in ("resnet50", "vit_b_16")
    }
    config = config_with(models=json.dumps(models), tsvk__threads__resnet50="2,1", tsvk__threads__vit_b_16="2,1")
    rendered = render(with_config(config, torchserve={"vcpus": 4}))
    assert rendered.server()["resources"]["requests"]["cpu"] == "4"


@pytest.mark.parametrize(
    "values, fragment",
    [
        ({"torchserve": {"vcpus": 0}}, "vcpus"),
        ({"modelStore": {"source": "s3"}}, "source"),
        ({"gpu": {"enabeld": True}}, "enabeld"),
        (
            {"modelStore": {"source": "download", "download": {"archives": [{"name": "m", "url": "https://x/m.mar", "sha256": "abc"}]}}},
            "sha256",
        ),
        (
            {
                "modelStore": {
                    "source": "download",
                    "download": {"archives": [{"name": "m", "url": "file:///etc/passwd", "sha256": "a" * 64}]},
                }
            },
            "url",
        ),
        ({"grafanaDashboard": {"handlerMetricType": "summary"}}, "handlerMetricType"),
    ],
)
def test_schema_rejects_bad_values(render_error, values, fragment):
    assert fragment in render_error(values)
