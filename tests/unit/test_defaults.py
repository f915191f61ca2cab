"""Every default is written once, in tsvk.common.defaults (the worker's) or tsvk_tools.defaults, and every place that has one says the same.

The Makefile passes nothing it is not given (tests/unit/test_make_options.py), the Helm chart's
defaults are checked in tests/helm/test_helm_make.py; these tests cover the Python side: the settings
schema, the build and config requests, the benchmarks and every `tsvk` command's parser.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from tsvk.common.settings import (
    ARTIFACT_FORMATS,
    DEVICES,
    PRECISIONS,
    ArtifactSettings,
    PreprocessSettings,
    RuntimeSettings,
    ServingDefaults,
)
from tsvk.common import defaults as worker_defaults
from tsvk_tools import cli, defaults
from tsvk_tools.archive.backends import BACKENDS
from tsvk_tools.lab.bench import options as bench_options
from tsvk_tools.lab.bench import bench_cli as bench_run
from tsvk_tools.archive.build import BuildRequest
from tsvk_tools.config.serving_config import ServingRequest

SERVING = {
    "batch_size": defaults.BATCH,
    "max_batch_delay_ms": defaults.MAX_BATCH_DELAY_MS,
    "workers": None,  # None: tsvk config plans them
    "response_timeout_s": defaults.RESPONSE_TIMEOUT_S,
}


def _parser(*command: str) -> argparse.ArgumentParser:
    if command[0] == "bench":
        return bench_run.benchmark_module(command[1]).build_parser() if len(command) > 1 else bench_run.build_parser()
    return next(a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices[command[0]]


def _default(parser: argparse.ArgumentParser, flag: str):
    return next(a.default for a in parser._actions if flag in a.option_strings)


def test_the_settings_schema_takes_its_defaults_from_the_defaults_module():
    assert vars(ServingDefaults()) == SERVING
    artifact = ArtifactSettings(file="model.pt2", format=defaults.BACKEND)
    assert (artifact.device, artifact.precision, artifact.max_batch) == (defaults.DEVICE, defaults.PRECISION, defaults.MAX_BATCH)
    assert RuntimeSettings().topk == defaults.TOPK
    assert (PreprocessSettings().max_pixels, PreprocessSettings().max_batch_pixels) == (
        worker_defaults.MAX_PIXELS,
        worker_defaults.MAX_BATCH_PIXELS,
    )
    assert PreprocessSettings().cvcuda_cache_mb == worker_defaults.CVCUDA_CACHE_MB
    preprocess = PreprocessSettings()
    assert (preprocess.max_jpeg_scans, preprocess.max_jpeg_scan_blocks) == (
        worker_defaults.MAX_JPEG_SCANS,
        worker_defaults.MAX_JPEG_SCAN_BLOCKS,
    )


def test_an_archive_without_serving_suggestions_reads_the_same_defaults():
    from tsvk.common.settings import HandlerSettings

    settings = HandlerSettings.from_dict(
        {"model_name": "m", "artifact": {"file": "model.pt2", "format": "aoti", "source": {"builder": "m"}}}
    )
    assert vars(settings.serving) == SERVING and settings.artifact.max_batch == defaults.MAX_BATCH


def test_requests_of_the_build_the_config_and_the_benchmark_default_alike():
    from tsvk_tools.archive.build import default_backend

    build = BuildRequest(model=defaults.MODEL)
    assert build.backend is None and default_backend(defaults.TASK) == defaults.BACKEND  # None: the task's default
    assert default_backend("detect") == defaults.DETECT_BACKEND
    assert (default_backend(defaults.TASK), build.device, build.precision, build.max_batch, build.weights, build.topk) == (
        defaults.BACKEND,
        defaults.DEVICE,
        defaults.BUILD_PRECISION,
        defaults.MAX_BATCH,
        defaults.WEIGHTS,
        defaults.TOPK,
    )
    assert vars(build.serving) == SERVING
    config = ServingRequest()
    assert (config.concurrency, config.max_request_mb, config.token_expiry_min, config.model_store) == (
        defaults.CONCURRENCY,
        defaults.MAX_REQUEST_MB,
        defaults.TOKEN_EXPIRY_MIN,
        Path(defaults.MODEL_STORE),
    )
    assert (config.inference_address, config.management_address, config.metrics_address) == (
        defaults.INFERENCE_ADDRESS,
        defaults.MANAGEMENT_ADDRESS,
        defaults.METRICS_ADDRESS,
    )
    assert (config.grpc_inference_port, config.grpc_management_port) == (defaults.GRPC_INFERENCE_PORT, defaults.GRPC_MANAGEMENT_PORT)
    bench = bench_options.BenchOptions()
    assert (bench.backend, bench.device, bench.precision, bench.max_batch, bench.batch) == (
        defaults.BACKEND,
        defaults.DEVICE,
        defaults.PRECISION,
        defaults.MAX_BATCH,
        defaults.BATCH,
    )


def test_a_config_without_archives_plans_with_the_defaults(tmp_path):
    from tsvk_tools.config.serving_config import plan_serving

    plan = plan_serving(ServingRequest(vcpus=2, gpus=0, models=("m",), archive_check=False))
    model = plan.models[0]
    assert (model.batch, model.max_batch_delay_ms, model.response_timeout_s) == (
        defaults.BATCH,
        defaults.MAX_BATCH_DELAY_MS,
        defaults.RESPONSE_TIMEOUT_S,
    )
    assert model.workers == defaults.WORKERS  # nothing tells a worker's memory without the archive


@pytest.mark.parametrize(
    "command, flag, default",
    [
        (("archive",), "--model", defaults.MODEL),
        (("archive",), "--weights", defaults.WEIGHTS),
        (("archive",), "--backend", None),  # None: the task decides (test_requests_of_the_build...)
        (("archive",), "--score-threshold", defaults.SCORE_THRESHOLD),
        (("archive",), "--max-detections", defaults.MAX_DETECTIONS),
        (("archive",), "--task", None),  # None: torchvision says, or defaults.TASK for a model file
        (("archive",), "--device", defaults.DEVICE),
        (("archive",), "--precision", defaults.BUILD_PRECISION),
        (("archive",), "--max-batch", defaults.MAX_BATCH),
        (("archive",), "--max-batch-delay", defaults.MAX_BATCH_DELAY_MS),
        (("archive",), "--workers", None),  # None: tsvk config plans them (tools/config/worker_plan.py)
        (("archive",), "--topk", defaults.TOPK),
        (("archive",), "--model-store", Path(defaults.MODEL_STORE)),
        (("compile",), "--max-batch", defaults.MAX_BATCH),
        (("config",), "--concurrency", defaults.CONCURRENCY),
        (("config",), "--max-request-mb", defaults.MAX_REQUEST_MB),
        (("config",), "--token-expiry-min", defaults.TOKEN_EXPIRY_MIN),
        (("config",), "--inference-address", defaults.INFERENCE_ADDRESS),
        (("config",), "--management-address", defaults.MANAGEMENT_ADDRESS),
        (("config",), "--metrics-address", defaults.METRICS_ADDRESS),
        (("config",), "--grpc-inference-port", defaults.GRPC_INFERENCE_PORT),
        (("config",), "--grpc-management-port", defaults.GRPC_MANAGEMENT_PORT),
        (("config",), "--model-store", Path(defaults.MODEL_STORE)),
        (("config",), "--output", Path(defaults.CONFIG)),
        (("serve",), "--config", Path(defaults.CONFIG)),
        (("serve",), "--run-dir", Path(defaults.RUN_DIR)),
        (("serve",), "--timeout", defaults.READY_TIMEOUT_S),
        (("stop",), "--run-dir", Path(defaults.RUN_DIR)),
        (("stop",), "--drain-timeout", defaults.DRAIN_TIMEOUT_S),
        (("run-container",), "--drain-timeout", defaults.DRAIN_TIMEOUT_S),
        (("predict",), "--image", defaults.IMAGE),
        (("predict",), "--run-dir", Path(defaults.RUN_DIR)),
        (("keys",), "--run-dir", Path(defaults.RUN_DIR)),
        (("demo",), "--model", defaults.MODEL),
        (("demo",), "--image", defaults.IMAGE),
        (("demo",), "--model-store", Path(defaults.MODEL_STORE)),
        (("bench", "compile"), "--model", defaults.MODEL),
        (("bench", "pinning"), "--model", defaults.MODEL),
        (("bench", "preprocess"), "--batch-size", defaults.BATCH),
    ],
)
def test_each_command_defaults_to_the_defaults_module(command, flag, default):
    assert _default(_parser(*command), flag) == default


def test_backend_names_come_from_the_schema():
    assert defaults.BACKEND in ARTIFACT_FORMATS and defaults.DEVICE in DEVICES and defaults.PRECISION in PRECISIONS
    assert list(BACKENDS) == list(ARTIFACT_FORMATS)
    assert all(backend.name == name for name, backend in BACKENDS.items())
    assert bench_options.BACKENDS == ARTIFACT_FORMATS
    choices = next(a.choices for a in _parser("archive")._actions if "--backend" in a.option_strings)
    assert list(choices) == list(ARTIFACT_FORMATS)


def test_the_handler_loads_every_format_the_schema_names():
    from tsvk.model import loading

    assert set(loading._LOADERS) == set(ARTIFACT_FORMATS)


def test_config_errors_name_the_flag_that_sets_the_field():
    from tsvk_tools.limits import BOUNDS, flag

    config_flags = {a.dest: s for a in _parser("config")._actions for s in a.option_strings if s.startswith("--")}
    assert {name: flag(name) for name in BOUNDS} == {name: config_flags[name] for name in BOUNDS}
