"""The config generator: thread arithmetic, validation, security defaults, one comment per value."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tsvk.common.settings import ArtifactSettings, HandlerSettings, ServingDefaults
from tsvk_tools.cli import main
from tsvk_tools.errors import UsageError
from tsvk_tools.config.rendering import render_properties
from tsvk_tools.config.serving_config import ServingRequest, plan_serving, write_config


def fake_store(tmp_path, **models) -> "Path":
    """A model store of minimal tsvk archives: name -> compiled max batch."""
    import zipfile

    import yaml

    for name, max_batch in models.items():
        settings = HandlerSettings(model_name=name, artifact=ArtifactSettings(file="model.pt2", format="aoti", max_batch=max_batch),
                                   serving=ServingDefaults(batch_size=min(8, max_batch), workers=1))
        with zipfile.ZipFile(tmp_path / f"{name}.mar", "w") as archive:
            archive.writestr("model-config.yaml", yaml.safe_dump({"tsvk": settings.to_dict()}))
    return tmp_path


def properties(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#"))


@pytest.mark.parametrize("vcpus, workers, threads", [(8, 2, 4), (2, 2, 1), (2, 1, 2), (7, 2, 3), (64, 3, 21)])
def test_threads_are_vcpus_over_workers(tmp_path, vcpus, workers, threads):
    plan = plan_serving(ServingRequest(vcpus=vcpus, workers=workers, model_store=fake_store(tmp_path, m=8)))
    assert plan.models[0].intra_op_threads == threads
    assert plan.total_workers * threads <= vcpus


def test_threads_are_shared_between_models(tmp_path):
    plan = plan_serving(ServingRequest(vcpus=8, workers=2, model_store=fake_store(tmp_path, a=8, b=8)))
    assert [m.intra_op_threads for m in plan.models] == [2, 2]
    props = properties(render_properties(plan))
    assert props["tsvk.threads.a"] == "2,1" and props["tsvk.threads.b"] == "2,1"
    assert props["load_models"] == "a.mar,b.mar"


def test_every_value_has_a_comment_above_it(tmp_path):
    text = render_properties(plan_serving(ServingRequest(vcpus=4, workers=2, model_store=fake_store(tmp_path, m=8), core_pinning=True)))
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line and not line.startswith("#"):
            assert lines[i - 1].startswith("# ") and len(lines[i - 1]) > 10, f"no comment above {line!r}"


def test_secure_defaults(tmp_path):
    props = properties(render_properties(plan_serving(ServingRequest(vcpus=2, model_store=fake_store(tmp_path, m=8)))))
    assert props["inference_address"] == "http://0.0.0.0:8080"
    assert props["management_address"].startswith("http://127.0.0.1:")
    assert props["metrics_address"].startswith("http://127.0.0.1:")
    assert props["grpc_management_address"] == "127.0.0.1" and props["grpc_inference_address"] == "127.0.0.1"
    assert props["enable_model_api"] == "false"
    assert props["disable_token_authorization"] == "false"
    assert props["allowed_urls"].startswith("file://") and "http" not in props["allowed_urls"]
    assert props["metrics_mode"] == "prometheus"
    assert not any("key" in k.lower() or "token" in v.lower() for k, v in props.items() if k != "disable_token_authorization")


def test_auth_off_is_explicit(tmp_path):
    props = properties(render_properties(plan_serving(ServingRequest(vcpus=2, auth=False, model_store=fake_store(tmp_path, m=8)))))
    assert props["disable_token_authorization"] == "true"


def test_models_json_fixes_workers_and_batch(tmp_path):
    plan = plan_serving(ServingRequest(vcpus=4, workers=2, batch=4, max_batch_delay_ms=20, model_store=fake_store(tmp_path, m=8)))
    entry = json.loads(properties(render_properties(plan))["models"])["m"]["1.0"]
    assert entry == {"batchSize": 4, "defaultVersion": True, "marName": "m.mar", "maxBatchDelay": 20,
                     "maxWorkers": 2, "minWorkers": 2, "responseTimeout": 120}


def test_archive_suggestions_are_the_defaults(tmp_path):
    plan = plan_serving(ServingRequest(vcpus=4, model_store=fake_store(tmp_path, m=4)))
    assert (plan.models[0].workers, plan.models[0].batch) == (1, 4)


def test_gpus_get_one_worker_each_by_default(tmp_path):
    plan = plan_serving(ServingRequest(vcpus=8, gpus=2, model_store=fake_store(tmp_path, m=8)))
    props = properties(render_properties(plan))
    assert plan.models[0].workers == 2 and props["number_of_gpu"] == "2" and plan.models[0].intra_op_threads == 4


def test_core_pinning_uses_the_cpu_launcher(tmp_path):
    props = properties(
        render_properties(plan_serving(ServingRequest(vcpus=4, workers=2, core_pinning=True, model_store=fake_store(tmp_path, m=8))))
    )
    assert props["cpu_launcher_enable"] == "true" and "--ncores-per-instance 2" in props["cpu_launcher_args"]


def test_output_is_deterministic(tmp_path):
    request = ServingRequest(vcpus=4, workers=2, model_store=fake_store(tmp_path, a=8, b=8))
    assert render_properties(plan_serving(request)) == render_properties(plan_serving(request))


@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(vcpus=2, workers=3), "--workers (3) must not exceed --vcpus (2)"),
        (dict(vcpus=0), "--vcpus must be a whole number from 1 to 4096, got 0"),
        (dict(vcpus=2, workers=-1), "--workers must be a whole number from 1 to 1024, got -1"),
        (dict(vcpus=4, batch=16), "--batch 16 is above what m.mar was compiled for (max batch 8)"),
        (dict(vcpus=4, models=("n",)), "unknown model 'n'"),
        (dict(vcpus=4, models=("mm",)), "did you mean m?"),
        (dict(vcpus=4, inference_address="0.0.0.0:8080"), "--inference-address must look like http://HOST:PORT"),
        (dict(vcpus=4, inference_address="http://0.0.0.0:700000"), "with a port from 1 to 65535"),
        (dict(vcpus=4, concurrency=10**12), "--concurrency must be a whole number from 1 to 1000000"),
        (dict(vcpus=4, max_request_mb=4096), "--max-request-mb must be a whole number from 1 to 1024"),
        (dict(vcpus=4, grpc_inference_port=700000), "--grpc-inference-port must be a whole number from 1 to 65535"),
        (dict(vcpus=4, token_expiry_min=0), "--token-expiry-min must be a whole number from 1"),
        (dict(vcpus=4, max_batch_delay_ms=-1), "--max-batch-delay must be a whole number from 0 to 60000, got -1"),
        (dict(vcpus=4, response_timeout_s=0), "--response-timeout must be a whole number from 1 to 86400, got 0"),
        (dict(vcpus=4, models=("m\nenable_model_api=true",)), "model name 'm\\nenable_model_api=true' is not allowed"),
    ],
)
def test_bad_values_are_refused_and_nothing_is_written(tmp_path, fields, message):
    store = fake_store(tmp_path, m=8)
    output = tmp_path / "out.properties"
    with pytest.raises(UsageError, match=re.escape(message)):
        write_config(ServingRequest(model_store=store, **fields), output)
    assert not output.exists() and not list(tmp_path.glob(".out.properties*"))


def test_two_models_times_workers_must_fit(tmp_path):
    with pytest.raises(UsageError, match="--workers x models = 4 exceeds --vcpus = 2"):
        plan_serving(ServingRequest(vcpus=2, workers=2, model_store=fake_store(tmp_path, a=8, b=8)))


def test_empty_store_says_how_to_fill_it(tmp_path):
    with pytest.raises(UsageError, match="tsvk archive"):
        plan_serving(ServingRequest(vcpus=2, model_store=tmp_path))


def test_no_archive_check_needs_model_names():
    with pytest.raises(UsageError, match="--models must name the models"):
        plan_serving(ServingRequest(vcpus=2, archive_check=False))
    plan = plan_serving(ServingRequest(vcpus=2, archive_check=False, models=("x",)))
    assert plan.models[0].batch == 8


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--vcpus", "abc"], "argument --vcpus: must be a whole number >= 1, got 'abc'"),
        (["--workers", "0"], "argument --workers: must be a whole number >= 1, got 0"),
        (["--auth", "maybe"], "argument --auth: must be on or off"),
    ],
)
def test_cli_rejects_non_numbers_with_what_is_allowed(tmp_path, capsys, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        main(["config", "--output", str(tmp_path / "c.properties"), *argv])
    assert exit_info.value.code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "c.properties").exists()


def test_cli_writes_the_file(tmp_path, capsys):
    store = fake_store(tmp_path, m=8)
    assert main(["config", "--vcpus", "8", "--workers", "2", "--model-store", str(store), "--output", str(tmp_path / "c.properties")]) == 0
    assert "m: 2 worker(s) x 4 thread(s)" in capsys.readouterr().out
    assert properties((tmp_path / "c.properties").read_text())["tsvk.threads.m"] == "4,1"


def test_tuned_numbers_replace_the_rule_and_say_which_measurement_chose_them(tmp_path):
    from tsvk_tools.config.serving_config import ModelChoice, plan_with_choices

    store = fake_store(tmp_path, a=8, b=4)
    request = ServingRequest(vcpus=4, gpus=0, model_store=store)
    choices = {"a": ModelChoice(1, 2, 2, 8, 20, "1 worker, 9.0 img/s"), "b": ModelChoice(2, 1, 1, 4, 5, "2 workers, 30.0 img/s")}
    text = render_properties(plan_with_choices(request, choices, origin="tsvk tune"))
    values = properties(text)
    models = json.loads(values["models"])
    assert (models["a"]["1.0"]["minWorkers"], models["a"]["1.0"]["batchSize"], models["a"]["1.0"]["maxBatchDelay"]) == (1, 8, 20)
    assert (models["b"]["1.0"]["maxWorkers"], models["b"]["1.0"]["batchSize"], models["b"]["1.0"]["maxBatchDelay"]) == (2, 4, 5)
    assert (values["tsvk.threads.a"], values["tsvk.threads.b"]) == ("2,2", "1,1")
    assert text.startswith("# Generated by `tsvk tune`")
    assert (values["tsvk.tuned.a"], values["tsvk.tuned.b"]) == ("1 worker, 9.0 img/s", "2 workers, 30.0 img/s")
    assert "# tuned: a: 1 worker, 9.0 img/s; b: 2 workers, 30.0 img/s" in text
    rule = properties(render_properties(plan_serving(request)))
    numbers = ("models", "tsvk.threads", "tsvk.tuned", "netty_client", "default_workers")
    assert {k: v for k, v in values.items() if not k.startswith(numbers)} == {k: v for k, v in rule.items() if not k.startswith(numbers)}


def test_a_tuned_config_is_read_back_from_its_properties_not_its_comments(tmp_path):
    from tsvk_tools.config.serving_config import ModelChoice, plan_with_choices, tuned_choices

    store = fake_store(tmp_path, a=8)
    choice = ModelChoice(1, 2, 2, 8, 20, "1 worker, 9.0 img/s")
    config = tmp_path / "tuned.properties"
    config.write_text(render_properties(plan_with_choices(ServingRequest(vcpus=4, gpus=0, model_store=store), {"a": choice},
                                                          origin="tsvk tune")))
    assert tuned_choices(config) == {"a": choice}
    config.write_text("\n".join(line for line in config.read_text().splitlines() if not line.startswith("tsvk.tuned.")))
    with pytest.raises(UsageError, match="no tsvk.tuned.<model> line"):
        tuned_choices(config)


@pytest.mark.parametrize(
    "choice, message",
    [
        (dict(workers=3, intra_op_threads=2), "is 6: more than the 4 vCPUs"),
        (dict(batch=16), "above what a.mar was compiled for (max batch 8)"),
        (dict(intra_op_threads=0), "at least 1"),
    ],
)
def test_tuned_numbers_keep_the_generators_limits(tmp_path, choice, message):
    from tsvk_tools.config.serving_config import ModelChoice, plan_with_choices

    fields = dict(workers=1, intra_op_threads=1, inter_op_threads=1, batch=8, max_batch_delay_ms=50) | choice
    with pytest.raises(UsageError, match=re.escape(message)):
        plan_with_choices(ServingRequest(vcpus=4, gpus=0, model_store=fake_store(tmp_path, a=8)), {"a": ModelChoice(**fields)})


def test_a_detector_on_the_cpu_gets_one_single_threaded_worker_per_vcpu(tmp_path):
    """Its post-processing runs on one thread, so workers, not threads, use the cores; asked-for workers still win."""
    import zipfile
    from dataclasses import replace

    import yaml

    store = fake_store(tmp_path, classifier=8)
    detector = HandlerSettings(model_name="detector", task="detect", artifact=ArtifactSettings(file="model_state.pt", format="eager"))
    with zipfile.ZipFile(tmp_path / "detector.mar", "w") as archive:
        archive.writestr("model-config.yaml", yaml.safe_dump({"tsvk": detector.to_dict()}))
    plan = plan_serving(ServingRequest(vcpus=8, gpus=0, model_store=store))
    by_name = {m.name: m for m in plan.models}
    assert (by_name["detector"].workers, by_name["classifier"].workers) == (4, 1)
    assert plan.total_workers * by_name["detector"].intra_op_threads <= 8
    asked = plan_serving(replace(ServingRequest(vcpus=8, gpus=0, model_store=store), workers=2))
    assert [m.workers for m in asked.models] == [2, 2]


def _detector_archive(tmp_path, name: str, preprocess: dict, batch: int = 8) -> None:
    import zipfile

    import yaml

    settings = HandlerSettings.from_dict(
        {
            "model_name": name,
            "task": "detect",
            "preprocess": preprocess,
            "serving": {"batch_size": batch, "workers": 1},
            "artifact": {"file": "model_state.pt", "format": "eager", "max_batch": 8, "source": {"builder": name}},
        }
    )
    with zipfile.ZipFile(tmp_path / f"{name}.mar", "w") as archive:
        archive.writestr("model-config.yaml", yaml.safe_dump({"tsvk": settings.to_dict()}))


def test_a_detectors_cpu_batch_is_what_one_forward_slice_holds(tmp_path):
    """An R-CNN at 800/1333 computes two inputs per CPU forward: a batch of eight would keep its first requests
    waiting for minutes; a small 320 px detector keeps its batch. On a GPU, and when asked, the batch stays."""
    _detector_archive(tmp_path, "rcnn", {"resize": 800, "max_size": 1333, "crop": 0})
    _detector_archive(tmp_path, "small", {"resize": 320, "max_size": 640, "crop": 0})
    batches = {m.name: m.batch for m in plan_serving(ServingRequest(vcpus=2, gpus=0, model_store=tmp_path)).models}
    assert batches == {"rcnn": 2, "small": 8}
    on_gpu = {m.name: m.batch for m in plan_serving(ServingRequest(vcpus=2, gpus=1, model_store=tmp_path)).models}
    assert on_gpu == {"rcnn": 8, "small": 8}
    asked = {m.name: m.batch for m in plan_serving(ServingRequest(vcpus=2, gpus=0, batch=6, model_store=tmp_path)).models}
    assert asked == {"rcnn": 6, "small": 6}
