"""k8s/push_image.py: the chart is pointed only at an image that holds exactly the archives it will serve.

`push` needs a container engine and a registry (make deploy-check runs it for real); here `values` is checked
against records as `push` writes them, and `push` against a model store missing an archive, which it must
refuse before touching any engine.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json

import pytest
from tests.support.helm import REPO

spec = importlib.util.spec_from_file_location("push_image", REPO / "k8s" / "push_image.py")
push_image = importlib.util.module_from_spec(spec)
spec.loader.exec_module(push_image)

REGISTRY = "127.0.0.1:5000/tsvk"
DIGEST = "sha256:" + "ab" * 32


@pytest.fixture
def pushed(tmp_path):
    store = tmp_path / "model_store"
    store.mkdir()
    (store / "resnet152.mar").write_bytes(b"resnet152 archive")
    record = {"registry": REGISTRY, "repository": f"{REGISTRY}/tsvk-torchserve", "tag": "0.12.0-cpu-abc1234-models-0123456789ab",
              "digest": DIGEST, "models": ["resnet152"],
              "archives": {"resnet152.mar": hashlib.sha256(b"resnet152 archive").hexdigest()},
              "serving": {"tag": "0.12.0-cpu-abc1234", "digest": "sha256:" + "cd" * 32}}
    (tmp_path / "pushed.json").write_text(json.dumps(record))
    return tmp_path, store


def values(tmp_path, store, registry=REGISTRY, models="resnet152"):
    return push_image.main(["values", "--registry", registry, "--models", models, "--model-store", str(store),
                            "--record", str(tmp_path / "pushed.json"), "--output", str(tmp_path / "values.yaml")])


def test_values_name_the_pushed_image_by_digest_with_the_archives_inside(pushed):
    tmp_path, store = pushed
    assert values(tmp_path, store) == 0
    written = json.loads((tmp_path / "values.yaml").read_text())
    assert written == {"image": {"repository": f"{REGISTRY}/tsvk-torchserve", "tag": "0.12.0-cpu-abc1234-models-0123456789ab",
                                 "digest": DIGEST}, "modelStore": {"source": "image"}}


@pytest.mark.parametrize("change, says", [
    ({"registry": "registry.example.com/ml"}, "the last push went to 127.0.0.1:5000/tsvk"),
    ({"models": "resnet50"}, "the pushed image holds resnet152, the config serves resnet50"),
])
def test_values_refuse_another_registry_or_other_models(pushed, capsys, change, says):
    tmp_path, store = pushed
    assert values(tmp_path, store, **change) == 1
    error = capsys.readouterr().err
    assert says in error and "make image-push REGISTRY=" in error
    assert not (tmp_path / "values.yaml").exists()


def test_values_refuse_an_archive_changed_since_the_push(pushed, capsys):
    tmp_path, store = pushed
    (store / "resnet152.mar").write_bytes(b"rebuilt")
    assert values(tmp_path, store) == 1
    assert "resnet152.mar in" in capsys.readouterr().err


def test_values_without_a_push_say_to_push(tmp_path, capsys):
    assert values(tmp_path, tmp_path) == 1
    assert f"no image pushed to {REGISTRY}" in capsys.readouterr().err


def test_push_refuses_a_missing_archive_before_any_engine_runs(tmp_path, capsys):
    (tmp_path / "resnet50.mar").write_bytes(b"x")
    code = push_image.main(["push", "--engine", "/nonexistent/engine", "--image", "tsvk/torchserve:0.12.0-cpu", "--registry", REGISTRY,
                            "--models", "resnet152", "--model-store", str(tmp_path), "--model-store-in-image", "/m",
                            "--record", str(tmp_path / "pushed.json")])
    assert code == 1
    error = capsys.readouterr().err
    assert "resnet152.mar not in" in error and "it holds: resnet50.mar" in error


@pytest.mark.parametrize("labels, version", [
    ({push_image.VERSION_LABEL: "0.12.0-cpu"}, "0.12.0-cpu"),
    ({push_image.VERSION_LABEL: "0.12.0-cpu", push_image.ENGINE_LABEL: "torchserve"}, "0.12.0-cpu"),
    ({push_image.VERSION_LABEL: "0.12.0-cpu", push_image.ENGINE_LABEL: "kserve"}, "0.12.0-cpu-kserve"),
], ids=["before-the-engine-label", "torchserve", "kserve"])
def test_the_image_without_java_is_pushed_under_tags_of_its_own(labels, version):
    """Pushed from the same revision, the two images never share a tag: the one without Java ends in -kserve."""
    assert push_image.pushed_version(labels, "tsvk/torchserve:0.12.0-cpu") == version
