"""The peer rows at their seams: TorchServe's pt2 model-config, the variants each peer is tried with, the Triton
and LitServe command lines and the files they are given from the fast archive, and the pipeline ceiling's probe."""

import json
import zipfile
from pathlib import Path

import yaml

from tsvk_tools.lab.bench.assets import pt2_model_config
from tsvk_tools.measure.loadgen import TIME_BOUNDED_JOBS
from tsvk_tools.lab.bench.options import BenchOptions
from tsvk_tools.lab.bench.systems import registry
from tsvk_tools.lab.bench.systems.base import RunContext
from tsvk_tools.lab.bench.systems.ceiling import FastPipelineCeiling
from tsvk_tools.lab.bench.systems.peers import (APPS, PT2_BACKENDS, TRITON_PYTHON, Triton, fast_model_files, model_arguments,
                                           pt2_variants, split_variants, triton_command)

FILES = {"xml": Path("/ir/model.xml"), "labels": Path("/ir/labels.json"), "resize": 232, "crop": 224,
         "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}


def test_pt2_model_config_is_what_torchserve_012_base_handler_compiles_with():
    """ts/torch_handler/base_handler.py 0.12.0: pt2.compile.enable == True, then torch.compile(model, backend=B)."""
    for backend in PT2_BACKENDS:
        config = yaml.safe_load(pt2_model_config(backend))
        assert config == {"pt2": {"compile": {"enable": True, "backend": backend}}}


def test_torchserve_best_tries_every_backend_with_every_worker_count_and_batch():
    variants = pt2_variants(2, "cpu", 8)
    assert len(variants) == 8
    assert variants[:4] == [{"backend": "inductor", "workers": 1, "threads": 2, "batch": 8},
                            {"backend": "inductor", "workers": 1, "threads": 2, "batch": 4},
                            {"backend": "inductor", "workers": 2, "threads": 1, "batch": 8},
                            {"backend": "inductor", "workers": 2, "threads": 1, "batch": 4}]
    assert {v["backend"] for v in variants[4:]} == {"openvino"}


def test_instances_or_workers_split_the_vcpus_with_the_batch_and_half_of_it():
    assert split_variants(4, "instances", 8)[::2] == [
        {"instances": 1, "threads": 4, "batch": 8},
        {"instances": 2, "threads": 2, "batch": 8},
        {"instances": 3, "threads": 1, "batch": 8},
        {"instances": 4, "threads": 1, "batch": 8},
    ]
    assert split_variants(2, "workers", 8)[1] == {"workers": 1, "threads": 2, "batch": 4}
    assert split_variants(2, "workers", 1) == [{"workers": 1, "threads": 2, "batch": 1}, {"workers": 2, "threads": 1, "batch": 1}]


def test_model_arguments_carry_the_archives_preprocessing():
    args = model_arguments(FILES, 2)
    assert args[args.index("--threads") + 1] == "2"
    assert args[args.index("--resize") + 1] == "232"
    assert args[args.index("--mean") + 1 : args.index("--mean") + 4] == ["0.485", "0.456", "0.406"]


def test_triton_command_runs_the_app_script_from_the_triton_venv_without_resolving_its_python():
    python = Path("/p/.venv-triton/bin/python")
    command = triton_command(python, FILES, "resnet50", (1, 2, 3), {"instances": 2, "threads": 1, "batch": 8}, 100)
    assert command[:2] == [str(python), str(APPS / "triton_app.py")]
    for flag, value in (
        ("--http-port", "1"),
        ("--grpc-port", "2"),
        ("--metrics-port", "3"),
        ("--instances", "2"),
        ("--max-batch-size", "8"),
        ("--max-queue-delay-ms", "100"),
        ("--model-name", "resnet50"),
    ):
        assert command[command.index(flag) + 1] == value


def test_triton_app_parses_what_the_harness_passes():
    from tsvk_tools.lab.bench.apps.triton_app import build_parser

    command = triton_command(Path("python"), FILES, "resnet50", (1, 2, 3), {"instances": 1, "threads": 2, "batch": 4}, 100)
    args = build_parser().parse_args(command[2:])
    assert (args.instances, args.threads, args.max_batch_size, args.crop, args.std) == (1, 2, 4, 224, [0.229, 0.224, 0.225])


def test_triton_is_left_out_without_its_venv(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    reason = Triton().unavailable(None)
    assert str(TRITON_PYTHON) in reason and "make triton-venv" in reason


def _fast_mar(path: Path) -> Path:
    ir = path / "model.ov.zip"
    with zipfile.ZipFile(ir, "w") as bundle:
        bundle.writestr("model.xml", "<net/>")
        bundle.writestr("model.bin", b"\0")
    config = {
        "tsvk": {
            "model_name": "resnet18",
            "artifact": {
                "file": "model.ov.zip",
                "format": "openvino",
                "precision": "int8",
                "source": {"kind": "torchvision", "builder": "resnet18"},
            },
            "task": "classify",
            "preprocess": {"resize": 240, "crop": 200},
        }
    }
    mar = path / "resnet18.mar"
    with zipfile.ZipFile(mar, "w") as bundle:
        bundle.writestr("model-config.yaml", yaml.safe_dump(config))
        bundle.write(ir, "model.ov.zip")
    return mar


def test_fast_model_files_unpack_the_same_ir_and_preprocessing(tmp_path):
    ctx = RunContext(BenchOptions(model="resnet18", systems=("triton",)), 2, tmp_path / "run")
    ctx.__dict__["fast_mar"] = _fast_mar(tmp_path)  # the cached_property, filled as if built
    folder = tmp_path / "triton"
    folder.mkdir()
    files = fast_model_files(ctx, folder)
    assert files["xml"].read_text() == "<net/>" and (folder / "model.bin").is_file()
    assert (files["resize"], files["crop"]) == (240, 200)
    assert len(json.loads(files["labels"].read_text())) == 1000
    assert not (folder / "ir.zip").exists()


def test_pipeline_ceiling_times_the_whole_pipeline_for_the_round(tmp_path):
    ctx = RunContext(BenchOptions(model="resnet18", systems=("ceiling_pipeline_fast",), round_seconds=20.5), 2, tmp_path)
    assert FastPipelineCeiling().probe_arguments(ctx) == ["--seconds", "20.5", "--pipeline-batch", "8"]


def test_every_peer_is_registered():
    assert {"torchserve_best", "triton", "litserve_fast", "ceiling_pipeline_fast"} <= set(registry())


def test_the_triton_apps_import_nothing_the_triton_venv_lacks():
    """The Triton venv has NumPy, Pillow, openvino and PyTriton only: no torch, no tsvk."""
    for app in ("openvino_classifier.py", "triton_app.py"):
        imports = [line for line in (APPS / app).read_text().splitlines() if line.lstrip().startswith(("import ", "from "))]
        assert not [line for line in imports if "torch" in line.replace("pytriton", "") or "tsvk" in line], app


def test_the_eager_model_file_builds_a_classifier_without_arguments(tmp_path, monkeypatch):
    """TorchServe's _load_pickled_model calls the one class with no arguments; a classifier's builder takes no
    weights_backbone (torchvision raises TypeError for it)."""
    import importlib

    import torch

    from tsvk_tools.lab.bench import assets

    captured = {}
    monkeypatch.setattr(assets, "labels_for", lambda model: ["a"] * 10)
    monkeypatch.setattr(
        assets.subprocess, "run", lambda command, **_: captured.setdefault("command", command) and type("Done", (), {"returncode": 0})()
    )
    weights = tmp_path / "weights.pt"
    torch.save(torch.nn.Linear(1, 1).state_dict(), weights)
    assets._archive_eager(
        BenchOptions(model="resnet18", systems=("torchserve_best",)),
        weights,
        tmp_path / "labels.json",
        tmp_path,
        "image_classifier",
        tmp_path / "model-config.yaml",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    model = importlib.import_module("model").TorchvisionModel()
    assert model.model.fc.out_features == 10
    assert captured["command"][-2:] == ["--config-file", str(tmp_path / "model-config.yaml")]


def test_a_fast_artifact_server_starts_in_its_own_folder_with_the_unpacked_ir(tmp_path):
    from tsvk_tools.lab.bench.systems.peers import FastArtifactServer

    class Fake(FastArtifactServer):
        name, split = "fake", "instances"

        def launch(self, ctx, folder, files, variant):
            self.seen = (folder, files["xml"])
            return type("Server", (), {"stop": lambda self: None})(), "target", {"extra": 1}

    ctx = RunContext(BenchOptions(model="resnet18", systems=("triton",)), 2, tmp_path / "run")
    ctx.__dict__["fast_mar"] = _fast_mar(tmp_path)
    fake = Fake()
    assert fake.variants(ctx) == [
        {"instances": 1, "threads": 2, "batch": 8},
        {"instances": 1, "threads": 2, "batch": 4},
        {"instances": 2, "threads": 1, "batch": 8},
        {"instances": 2, "threads": 1, "batch": 4},
    ]
    deployment = fake.start(ctx, {"instances": 2, "threads": 1, "batch": 4})
    assert fake.seen == (tmp_path / "run" / "fake-i2-b4", tmp_path / "run" / "fake-i2-b4" / "model.xml")
    assert deployment.details["extra"] == 1 and deployment.details["max_batch_size"] == 4
    assert deployment.details["log"].endswith("fake-i2-b4/server.log")


def test_torchserve_best_warms_up_with_a_single_image_batch_before_full_batches(monkeypatch):
    """torch.compile's second compile (a dynamic batch size) must happen in the warm-up, not in the measured load."""
    from tsvk_tools.lab.bench.systems import base, peers

    calls = []
    from tsvk_tools.measure.loadgen import RequestRecord

    fake = lambda target, images, total, concurrency, until=None: calls.append((total, concurrency)) or [RequestRecord(0, 1, 200)]  # noqa: E731 - the loop's signature, in one line
    monkeypatch.setattr(peers, "run_closed_loop", fake)
    monkeypatch.setattr(base, "run_closed_loop", fake)
    deployment = base.Deployment("target", lambda: None, {"logs": "/nonexistent"})
    warm = peers.TorchServeBest().warm_up(deployment, [b"jpeg"], BenchOptions(concurrency=16, systems=("torchserve_best",)))
    assert calls == [(2, 1), (32, 16), (TIME_BOUNDED_JOBS, 16)] and len(warm) == 3


def test_the_warm_up_ends_with_seconds_of_the_full_load(monkeypatch):
    """After the counted warm-up requests, a time-bounded load at the measured concurrency: the round then measures a
    frontend whose request path is already compiled."""
    from tsvk_tools.measure.loadgen import RequestRecord
    from tsvk_tools.lab.bench.systems import base

    calls = []
    fake = lambda target, images, total, concurrency, until=None: calls.append((total, concurrency, until)) or [RequestRecord(0, 1, 200)]  # noqa: E731 - the loop's signature, in one line
    monkeypatch.setattr(base, "run_closed_loop", fake)
    monkeypatch.setattr(base.time, "monotonic", lambda: 1000.0)
    deployment = base.Deployment("target", lambda: None, {})
    base.System().warm_up(deployment, [b"jpeg"], BenchOptions(concurrency=16, round_seconds=20, warmup_seconds=7.5))
    assert calls == [(32, 16, None), (TIME_BOUNDED_JOBS, 16, 1007.5)]
    calls.clear()
    base.System().warm_up(deployment, [b"jpeg"], BenchOptions(concurrency=16, round_seconds=0))
    assert calls == [(32, 16, None)]  # a counted round: counted warm-up only


def test_no_warm_up_load_follows_warm_up_requests_that_all_failed(monkeypatch):
    from tsvk_tools.measure.loadgen import RequestRecord
    from tsvk_tools.lab.bench.systems import base

    calls = []
    failed = lambda target, images, total, concurrency, until=None: calls.append(total) or [RequestRecord(0, 1, 503, error="down")]  # noqa: E731 - the loop's signature, in one line
    monkeypatch.setattr(base, "run_closed_loop", failed)
    warm = base.System().warm_up(base.Deployment("target", lambda: None, {}), [b"jpeg"], BenchOptions(concurrency=16))
    assert calls == [32] and [record.status for record in warm] == [503]


def test_a_backend_that_cannot_compile_fails_with_the_workers_error(tmp_path, monkeypatch):
    import pytest

    from tsvk_tools.measure.loadgen import RequestRecord
    from tsvk_tools.lab.bench.systems import base, peers

    (tmp_path / "model_log.log").write_text(
        "2026-11-25T20:26:05,836 [INFO ] W-9000-resnet50_1.0-stdout MODEL_LOG - AssertionError: sources must not be empty for symbol s7\n"
        "2026-11-25T20:26:26,246 [INFO ] W-9000-resnet50_1.0-stdout MODEL_LOG - AssertionError: sources must not be empty for symbol s31\n"
        "2026-11-25T20:26:26,247 [INFO ] W-9000-resnet50_1.0-stdout MODEL_LOG - Backend worker process died.\n"
    )
    failed = lambda target, images, total, concurrency, until=None: [RequestRecord(0, 1, 503, error='{\n  "code": 503\n}')]  # noqa: E731 - the loop's signature, in one line
    monkeypatch.setattr(peers, "run_closed_loop", failed)
    monkeypatch.setattr(base, "run_closed_loop", failed)
    deployment = base.Deployment("target", lambda: None, {"logs": str(tmp_path)})
    with pytest.raises(RuntimeError, match="last error: AssertionError: sources must not be empty for symbol s31$"):
        peers.TorchServeBest().warm_up(deployment, [b"jpeg"], BenchOptions(systems=("torchserve_best",)))
