"""The settings name the task; `tsvk archive` reads it from torchvision and refuses what a task cannot use."""

from __future__ import annotations

import base64
import io

import numpy as np
import pytest
import torch
from PIL import Image

from tsvk.common.settings import HandlerSettings, SettingsError
from tsvk.tasks.rle import encode_mask
from tsvk_tools.archive.build import BuildRequest, build
from tsvk_tools.client.draw import draw_answer
from tsvk_tools.errors import UsageError
from tsvk_tools.archive.models import CustomModel, torchvision_builders

ARTIFACT = {"file": "model.ts", "format": "torchscript", "source": {"builder": "fasterrcnn_mobilenet_v3_large_320_fpn"}}


def test_the_task_defaults_to_classify_and_an_unknown_one_is_refused():
    assert HandlerSettings.from_dict({"model_name": "m", "artifact": ARTIFACT}).task == "classify"
    with pytest.raises(SettingsError) as err:
        HandlerSettings.from_dict({"model_name": "m", "artifact": ARTIFACT, "task": "dtect", "detect": {"score_floor": 0.9}})
    message = str(err.value)
    assert "tsvk.task must be one of classify, detect, segment, got 'dtect'" in message
    assert "tsvk.preprocess.crop" not in message  # the default crop is fine for any task
    assert "detect.score_floor (0.9) must not exceed detect.score_threshold (0.5)" in message


def test_detect_settings_round_trip():
    raw = {"model_name": "m", "artifact": ARTIFACT, "task": "detect",
           "preprocess": {"crop": 0, "resize": 320, "max_size": 320, "fixed_size": [320, 320]},
           "detect": {"score_threshold": 0.3, "max_detections": 20, "score_floor": 0.01, "masks": True, "max_mask_pixels": 1000}}
    settings = HandlerSettings.from_dict(raw)
    assert settings.preprocess.fixed_size == (320, 320) and settings.detect.masks and settings.detect.max_mask_pixels == 1000
    assert HandlerSettings.from_dict(settings.to_dict()) == settings
    with pytest.raises(SettingsError, match="max_mask_pixels"):
        HandlerSettings.from_dict({**raw, "detect": {**raw["detect"], "max_mask_pixels": 0}})


def test_torchvision_names_the_task():
    builders = torchvision_builders()
    assert builders["resnet50"] == "classify"
    assert builders["fasterrcnn_mobilenet_v3_large_320_fpn"] == builders["maskrcnn_resnet50_fpn_v2"] == "detect"
    assert builders["deeplabv3_mobilenet_v3_large"] == builders["lraspp_mobilenet_v3_large"] == "segment"


@pytest.mark.parametrize("request_, message", [
    (BuildRequest(model="ssdlite320_mobilenet_v3_large", backend="aoti", weights="none"),
     "--backend aoti cannot build a detect model: torch.export cannot capture a torchvision detector.*use --backend torchscript or eager"),
    (BuildRequest(model="lraspp_mobilenet_v3_large", backend="tensorrt", weights="none"),
     "--backend tensorrt .*"),
    (BuildRequest(model="lraspp_mobilenet_v3_large", backend="aoti", precision="int8", weights="none"),
     "--precision int8 for the segment model lraspp_mobilenet_v3_large needs --backend openvino"),
    (BuildRequest(model="ssdlite320_mobilenet_v3_large", backend="openvino", precision="int8", weights="none"),
     "--precision int8 runs an R-CNN box head's fully connected layers in int8, and SSD has none.*use --precision fp32"),
    (BuildRequest(model="ssdlite320_mobilenet_v3_large", backend="torchscript", precision="int8", weights="none"),
     "--backend torchscript --device cpu does not support --precision int8"),
    (BuildRequest(model="lraspp_mobilenet_v3_large", task="detect", weights="none"),
     "--task detect does not fit lraspp_mobilenet_v3_large, a torchvision segment model"),
])
def test_what_a_task_cannot_use_is_refused_with_the_reason(request_, message, tmp_path):
    with pytest.raises(UsageError, match=message):
        build(request_, tmp_path)
    assert not list(tmp_path.iterdir())


def test_a_model_file_that_is_no_detector_is_refused_for_detect(tmp_path):
    from pathlib import Path

    fixtures = Path(__file__).parent.parent / "fixtures"
    custom = CustomModel(fixtures / "tiny_model.py", "TinyNet", task="detect")
    with pytest.raises(UsageError, match="--task detect: a detection model must be a torchvision-style detector"):
        build(BuildRequest(model="tiny", custom=custom, backend="eager", weights="none"), tmp_path)


def _png(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format="PNG")
    return buffer.getvalue()


def test_draw_puts_boxes_masks_and_label_maps_where_the_answer_says():
    photo = _png(np.full((60, 80, 3), 128, dtype=np.uint8))
    mask = torch.zeros(60, 80, dtype=torch.bool)
    mask[10:30, 20:50] = True
    boxes = draw_answer(photo, [{"label": "cat", "score": 0.9, "box": [20, 10, 50, 30], "mask": encode_mask(mask)}])
    pixels = np.asarray(boxes)
    assert pixels.shape == (60, 80, 3)
    assert (pixels[40:, :, :] == 128).all()  # below the box: untouched
    assert not (pixels[15:25, 25:45] == 128).all()  # inside the mask: tinted
    reduced = {**encode_mask(mask[::2, ::2]), "photo_size": [60, 80]}  # a mask on a grid half the photo's
    drawn = np.asarray(draw_answer(photo, [{"label": "cat", "score": 0.9, "box": [20, 10, 50, 30], "mask": reduced}]))
    assert (drawn[15:25, 25:45] == pixels[15:25, 25:45]).all() and (drawn[40:, :, :] == 128).all()
    label_map = np.zeros((60, 80), dtype=np.uint8)
    label_map[:, 40:] = 3
    answer = {"width": 80, "height": 60, "classes": [{"label": "bg", "index": 0, "pixels": 2400, "fraction": 0.5}],
              "label_map": {"format": "png", "width": 80, "height": 60, "data": base64.b64encode(_png(label_map)).decode()}}
    segmented = np.asarray(draw_answer(photo, answer))
    assert (segmented[50, 30] != segmented[50, 70]).any()  # two classes, two tints
    with pytest.raises(UsageError, match="neither boxes nor a label map"):
        draw_answer(photo, {"cat": 0.9})
