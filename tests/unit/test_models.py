"""Resolving models and weights: suggestions, download failures, checkpoints, custom models."""

from __future__ import annotations

import urllib.error
from pathlib import Path

import pytest
import torch
import torchvision

from tsvk_tools.errors import UsageError, WeightsUnavailable
from tsvk_tools.archive.models import CustomModel, read_labels, resolve_model

FIXTURES = Path(__file__).parent.parent / "fixtures"


def test_misspelled_model_suggests_the_closest():
    with pytest.raises(UsageError, match="did you mean resnet152"):
        resolve_model("resnt152", weights="none")


def test_nonsense_model_lists_the_choices():
    with pytest.raises(UsageError, match="choose one of: .*resnet152"):
        resolve_model("zzzzzz", weights="none")


def test_default_weights_unreachable_names_the_alternatives(monkeypatch):
    """The download itself is the seam: it cannot succeed here, and must not be tried for real in CI."""
    def offline(self, *args, **kwargs):
        raise urllib.error.URLError("Name or service not known")

    monkeypatch.setattr(torchvision.models.WeightsEnum, "get_state_dict", offline)
    with pytest.raises(WeightsUnavailable) as err:  # a UsageError the demo falls back on
        resolve_model("resnet18", weights="DEFAULT")
    assert "--weights path/to/state_dict.pth" in str(err.value) and "--weights none" in str(err.value)


def test_preprocessing_comes_from_the_weights_metadata():
    resnet50 = resolve_model("resnet50", weights="none")
    assert (resnet50.preprocess.resize, resnet50.preprocess.crop) == (232, 224)
    vit = resolve_model("vit_b_16", weights="none")
    assert (vit.preprocess.resize, vit.preprocess.crop) == (256, 224)
    assert resnet50.labels[0] == "tench" and len(resnet50.labels) == 1000


def test_random_weights_are_said_loudly_and_recorded(capsys):
    resolved = resolve_model("mobilenet_v3_small", weights="none")
    assert resolved.weights == {"source": "none", "random": True}
    assert "RANDOM INITIALISATION" in capsys.readouterr().err


def test_local_checkpoint_loads(tmp_path):
    torch.manual_seed(1)
    reference = torchvision.models.mobilenet_v3_small()
    path = tmp_path / "w.pth"
    torch.save({"state_dict": reference.state_dict()}, path)
    resolved = resolve_model("mobilenet_v3_small", weights=str(path))
    first = next(iter(reference.state_dict()))
    assert torch.equal(resolved.model.state_dict()[first], reference.state_dict()[first])


def test_key_mismatch_names_missing_and_unexpected(tmp_path):
    state = torchvision.models.mobilenet_v3_small().state_dict()
    state["extra.weight"] = state.pop("classifier.3.weight")
    path = tmp_path / "w.pth"
    torch.save(state, path)
    with pytest.raises(UsageError, match=r"missing keys \[classifier.3.weight\] \(1\), unexpected keys \[extra.weight\] \(1\)"):
        resolve_model("mobilenet_v3_small", weights=str(path))


def test_missing_weights_file(tmp_path):
    with pytest.raises(UsageError, match="does not exist"):
        resolve_model("resnet18", weights=str(tmp_path / "nope.pth"))


def test_custom_model_from_file():
    custom = CustomModel(FIXTURES / "tiny_model.py", "TinyNet", resize=40, crop=32, labels=FIXTURES / "tiny_labels.txt")
    resolved = resolve_model("tiny", weights="none", custom=custom)
    assert resolved.source.kind == "file" and resolved.source.factory == "TinyNet"
    assert (resolved.preprocess.resize, resolved.preprocess.crop) == (40, 32)
    assert resolved.labels == ["cat", "dog", "bird"]


@pytest.mark.parametrize("factory, message", [
    ("Missing", "--model-factory 'Missing' is not defined .* callables there: .*TinyNet"),
    ("NOT_A_MODEL", "must be a class or zero-argument function, got int"),
])
def test_custom_factory_errors(factory, message):
    with pytest.raises(UsageError, match=message):
        resolve_model("tiny", weights="none", custom=CustomModel(FIXTURES / "tiny_model.py", factory))


def test_custom_model_has_no_default_weights():
    with pytest.raises(UsageError, match="no DEFAULT weights"):
        resolve_model("tiny", weights="DEFAULT", custom=CustomModel(FIXTURES / "tiny_model.py", "TinyNet"))


def test_labels_json_and_text(tmp_path):
    (tmp_path / "l.json").write_text('{"0": ["n1", "cat"], "1": "dog"}')
    assert read_labels(tmp_path / "l.json") == ["cat", "dog"]
    (tmp_path / "bad.json").write_text('{"1": "dog"}')
    with pytest.raises(UsageError, match="index_to_name.json"):
        read_labels(tmp_path / "bad.json")


def _fine_tuned(tmp_path: Path, classes: int, builder: str = "resnet18", **extra) -> tuple[Path, torch.nn.Module]:
    """A torchvision model with its head replaced for `classes` classes, saved as a user saves a fine-tune."""
    torch.manual_seed(3)
    model = torchvision.models.get_model(builder, weights=None, num_classes=classes, **extra)
    path = tmp_path / "ft.pth"
    torch.save(model.state_dict(), path)
    return path, model


def test_a_fine_tuned_head_sizes_the_model(tmp_path, capsys):
    path, reference = _fine_tuned(tmp_path, 3)
    resolved = resolve_model("resnet18", weights=str(path))
    assert resolved.model.fc.out_features == 3
    assert torch.equal(resolved.model.fc.weight, reference.fc.weight)
    assert resolved.labels == ["0", "1", "2"]
    assert "give --labels with 3 lines" in capsys.readouterr().err


def test_labels_name_a_fine_tuned_head(tmp_path):
    path, _ = _fine_tuned(tmp_path, 3)
    labels = tmp_path / "labels.txt"
    labels.write_text("cat\ndog\nfox\n")
    resolved = resolve_model("resnet18", weights=str(path), labels=labels)
    assert resolved.labels == ["cat", "dog", "fox"] and resolved.model.fc.out_features == 3


def test_labels_that_miscount_the_head_say_both_counts(tmp_path):
    path, _ = _fine_tuned(tmp_path, 3)
    labels = tmp_path / "labels.txt"
    labels.write_text("cat\ndog\n")
    with pytest.raises(UsageError, match=r"names 2 classes, but the head of --weights .* answers 3: give one label per output"):
        resolve_model("resnet18", weights=str(path), labels=labels)


def test_labels_without_a_checkpoint_size_a_random_head_or_point_to_the_checkpoint(tmp_path):
    labels = tmp_path / "labels.txt"
    labels.write_text("cat\ndog\nfox\n")
    assert resolve_model("resnet18", weights="none", labels=labels).model.fc.out_features == 3
    with pytest.raises(UsageError, match=r"pretrained weights answer 1000: for resnet18 fine-tuned to 3 classes give its "
                                         r"checkpoint, --weights path/to/ft.pth"):
        resolve_model("resnet18", weights="DEFAULT", labels=labels)


def test_a_segmenter_fine_tuned_to_other_classes_is_sized_too(tmp_path):
    path, reference = _fine_tuned(tmp_path, 4, builder="lraspp_mobilenet_v3_large", weights_backbone=None)
    resolved = resolve_model("lraspp_mobilenet_v3_large", weights=str(path))
    assert len(resolved.labels) == 4
    assert torch.equal(resolved.model.state_dict()["classifier.high_classifier.weight"],
                       reference.state_dict()["classifier.high_classifier.weight"])


def test_weights_of_another_architecture_say_what_to_check(tmp_path):
    path, _ = _fine_tuned(tmp_path, 3, builder="mobilenet_v3_small")
    with pytest.raises(UsageError, match="--model must name the architecture the weights were trained with"):
        resolve_model("resnet18", weights=str(path))
