"""The TorchServe configs the benchmark writes: stock defaults must carry no tuning at all, the
hand-tuned one exactly batch / delay / workers, and neither may use TorchServe's default ports."""

import json
from pathlib import Path

from tsvk_tools.lab.bench.systems.base import RunContext
from tsvk_tools.lab.bench.options import BenchOptions
from tsvk_tools.lab.bench.systems.torchserve import TorchServeTuned, render, stock_default_properties, stock_tuned_properties

DEFAULT_PORTS = ("8080", "8081", "8082", "7070", "7071")


def test_stock_defaults_set_only_addresses_store_model_and_auth():
    properties = stock_default_properties(Path("/store"), "resnet152")
    assert set(properties) == {"inference_address", "management_address", "metrics_address", "grpc_inference_port",
                               "grpc_management_port", "model_store", "load_models", "disable_token_authorization"}
    assert properties["load_models"] == "resnet152.mar"
    for key, value in properties.items():
        if "address" in key or "port" in key:
            assert not value.endswith(DEFAULT_PORTS), f"{key}={value} uses a TorchServe default port"


def test_hand_tuned_sets_batch_delay_and_fixed_workers():
    properties = stock_tuned_properties(Path("/store"), "resnet152", workers=2, batch=8, delay_ms=100)
    entry = json.loads(properties["models"])["resnet152"]["1.0"]
    assert (entry["batchSize"], entry["maxBatchDelay"], entry["minWorkers"], entry["maxWorkers"]) == (8, 100, 2, 2)
    assert properties["default_workers_per_model"] == "2"
    assert "models=" in render(properties)


def test_hand_tuned_tries_every_worker_count_with_threads_sharing_the_vcpus(tmp_path):
    ctx = RunContext(BenchOptions(), vcpus=4, run_dir=tmp_path)
    assert TorchServeTuned().variants(ctx) == [
        {"workers": 1, "threads": 4}, {"workers": 2, "threads": 2}, {"workers": 3, "threads": 1}, {"workers": 4, "threads": 1}]


def test_ours_tuned_serves_what_tsvk_tune_wrote_and_is_left_out_without_it(tmp_path):
    from tsvk_tools.lab.bench.systems.torchserve import OursTuned, tuned_choice
    from tsvk_tools.config.rendering import write_plan
    from tsvk_tools.config.serving_config import ModelChoice, ServingRequest, plan_with_choices

    config = tmp_path / "tuned.properties"
    request = ServingRequest(vcpus=4, gpus=0, models=("resnet152",), archive_check=False)
    written = ModelChoice(workers=2, intra_op_threads=2, inter_op_threads=1, batch=4, max_batch_delay_ms=20, measured="m")
    write_plan(plan_with_choices(request, {"resnet152": written}, origin="tsvk tune"), config)
    read = tuned_choice(config, "resnet152")
    assert (read.workers, read.intra_op_threads, read.inter_op_threads, read.batch, read.max_batch_delay_ms) == (2, 2, 1, 4, 20)
    assert tuned_choice(config, "resnet50") is None and tuned_choice(tmp_path / "missing.properties", "resnet152") is None
    ctx = RunContext(BenchOptions(model="resnet50", tuned_config=config), 4, tmp_path)
    assert "no tuned entry for resnet50" in OursTuned().unavailable(ctx)
    assert OursTuned().unavailable(RunContext(BenchOptions(model="resnet152", tuned_config=config), 4, tmp_path)) == ""
