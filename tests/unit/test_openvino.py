"""--backend openvino: fp32 and int8 build, load through the handler's loader, and refuse what they cannot do."""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

import pytest
import torch

from tsvk.common import features
from tsvk.model.loading import ArtifactLoadError, load_model, model_device
from tsvk.common.settings import ArtifactSettings
from tsvk_tools.archive.backends import check_target, get_backend
from tsvk_tools.archive.build import BuildRequest, build
from tsvk_tools.archive.calibration import split
from tsvk_tools.errors import UsageError
from tsvk_tools.archive.models import CustomModel

import openvino  # noqa: F401,E402  # pinned in requirements.txt: a broken install must fail the suite, not skip it

FIXTURES = Path(__file__).parent.parent / "fixtures"
TINY = CustomModel(FIXTURES / "tiny_model.py", "TinyNet", resize=40, crop=32)


def tiny(tmp_path: Path, **request) -> object:
    (tmp_path / "out").mkdir(exist_ok=True)
    return build(BuildRequest(model="tiny", backend="openvino", custom=TINY, max_batch=4, **request), tmp_path / "out")


def served(result) -> object:
    """The artifact as a worker loads it."""
    return load_model(result.settings.artifact, result.artifact.parent, torch.device("cpu"))


@pytest.fixture
def trained_weights(tmp_path) -> Path:
    from tests.fixtures.tiny_model import make_tiny

    path = tmp_path / "tiny.pth"
    torch.save(make_tiny().state_dict(), path)
    return path


def test_fp32_artifact_is_one_zip_and_matches_eager_at_batch_1_and_max(tmp_path):
    result = tiny(tmp_path, weights="none")
    assert result.report.passed and result.settings.artifact.format == "openvino"
    assert sorted(zipfile.ZipFile(result.artifact).namelist()) == ["model.bin", "model.xml"]
    loaded = served(result)
    eager = result.resolved.model
    for batch in (1, 4):
        x = torch.randn(batch, 3, 32, 32)
        got = loaded.forward(x)
        assert isinstance(got, torch.Tensor) and got.shape == (batch, 3)
        torch.testing.assert_close(got, eager(x).detach(), atol=1e-4, rtol=1e-4)


def test_loader_uses_the_workers_planned_threads(tmp_path, monkeypatch):
    result = tiny(tmp_path, weights="none")
    seen = {}
    import tsvk.model.loading as loading  # the loader's own reference: patched where it is imported

    real = loading.compile_for_cpu

    def recording(ov, path, threads):
        seen["threads"] = threads
        return real(ov, path, threads)

    monkeypatch.setattr(loading, "compile_for_cpu", recording)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 3)
    served(result)
    assert seen["threads"] == 3


def test_compiled_ir_runs_unpinned_in_fp32_with_the_threads_asked(tmp_path):
    """Workers of one machine each compile their own IR: pinned threads would all share one core."""
    import openvino as ov

    from tsvk.model.openvino_ir import compiled_on_cpu

    result = tiny(tmp_path, weights="none")
    compiled = compiled_on_cpu(ov, result.artifact, 1)
    assert compiled.get_property("ENABLE_CPU_PINNING") is False
    assert compiled.get_property("INFERENCE_NUM_THREADS") == 1
    assert str(compiled.get_property("INFERENCE_PRECISION_HINT")) in ("f32", "<Type: 'float32'>")


def test_int8_with_calibration_builds_and_agrees_on_shapes(tmp_path, photos_dir):
    result = tiny(tmp_path, weights="none", precision="int8", calibration=photos_dir)
    calibration = result.settings.provenance["calibration"]
    assert calibration["directory"] == str(photos_dir) and calibration["images"] == 4 and calibration["held_out_images"] == 6
    assert len(calibration["names_sha256"]) == 64
    verification = result.settings.provenance["verification"]
    assert verification["held_out"] is True and verification["enforced"] is False
    loaded = served(result)
    assert loaded.input_dtype == torch.float32
    for batch in (1, 4):
        assert loaded.forward(torch.randn(batch, 3, 32, 32)).shape == (batch, 3)


def test_int8_with_trained_weights_and_no_calibration_is_refused(tmp_path, trained_weights):
    with pytest.raises(UsageError, match="--precision int8 with trained weights needs --calibration DIR"):
        tiny(tmp_path, weights=str(trained_weights), precision="int8")
    assert list((tmp_path / "out").iterdir()) == []


def test_int8_with_trained_weights_is_judged_on_held_out_photos(tmp_path, trained_weights, photos_dir):
    try:
        result = tiny(tmp_path, weights=str(trained_weights), precision="int8", calibration=photos_dir)
    except UsageError as err:  # a 3-class toy may flip a near tie; then the refusal must say why
        assert "verification FAIL" in str(err) and "top-1 agreement" in str(err)
        return
    assert result.report.enforced and result.report.photos == 6 and result.report.top1_agreement >= 0.97


def test_calibration_is_for_int8_only(tmp_path, photos_dir):
    with pytest.raises(UsageError, match="--calibration applies to --precision int8 only"):
        tiny(tmp_path, weights="none", calibration=photos_dir)


def test_split_spreads_both_halves_over_the_directory():
    calibration, held_out = split([Path(f"{i:03d}.jpg") for i in range(500)])
    assert len(calibration) == 200 and len(held_out) == 300
    assert calibration[:3] == [Path("000.jpg"), Path("001.jpg"), Path("005.jpg")]
    assert not set(calibration) & set(held_out)


@pytest.mark.parametrize("backend", ["export", "torchscript", "eager"])
def test_int8_is_refused_by_other_backends_pointing_to_openvino(backend):
    with pytest.raises(
        UsageError, match=r"does not support --precision int8.*use --backend aoti --device cpu or --backend openvino --device cpu"
    ):
        check_target(get_backend(backend), "cpu", "int8")


def test_openvino_does_not_run_on_cuda_or_in_fp16():
    with pytest.raises(UsageError, match="--backend openvino does not run on --device cuda"):
        check_target(get_backend("openvino"), "cuda", "fp32")
    with pytest.raises(UsageError, match=r"supported: --device cpu: --precision fp32\|int8"):
        check_target(get_backend("openvino"), "cpu", "fp16")


def test_openvino_artifact_stays_on_cpu_on_a_gpu_worker():
    artifact = ArtifactSettings(file="model.ov.zip", format="openvino")
    device, note = model_device(artifact, torch.device("cuda", 0))
    assert device == torch.device("cpu") and "openvino artifacts run on cpu" in note


def test_missing_openvino_fails_the_load_with_the_pip_command(tmp_path, monkeypatch):
    result = tiny(tmp_path, weights="none")
    monkeypatch.setitem(sys.modules, "openvino", None)  # `import openvino` now raises ImportError
    features.reset_cache()
    try:
        with pytest.raises(ArtifactLoadError, match=r"OpenVINO artifact .*cannot import openvino.*pip install openvino"):
            served(result)
        assert not features.has_openvino()
    finally:
        features.reset_cache()


def _segmenter(tmp_path: Path, **request) -> object:
    from tests.support.task_models import SEGMENTER

    (tmp_path / "out").mkdir(exist_ok=True)
    return build(BuildRequest(model=SEGMENTER, backend="openvino", max_batch=2, **request), tmp_path / "out")


def _served_segmenter(result) -> object:
    return load_model(result.settings.artifact, result.artifact.parent, torch.device("cpu"), task="segment")


def test_segmenter_fp32_takes_any_height_and_width_and_matches_eager(tmp_path):
    from tsvk.tasks.answers import first_tensor

    result = _segmenter(tmp_path, weights="none")
    assert result.report.passed and result.report.pixel_agreement >= 0.999
    loaded, eager = _served_segmenter(result), result.resolved.model
    for shape in ((1, 3, 64, 96), (2, 3, 130, 77)):  # neither the traced size nor each other's
        x = torch.randn(*shape)
        got, want = first_tensor(loaded.forward(x)), first_tensor(eager(x)).detach()
        assert got.shape == want.shape
        torch.testing.assert_close(got, want, atol=1e-3, rtol=1e-3)


def test_segmenter_int8_calibrates_on_photos_at_their_served_sizes_and_is_judged_by_pixels(tmp_path, photos_dir):
    from tests.support.task_models import SEGMENTER, decisive_weights

    weights = decisive_weights(SEGMENTER, tmp_path / "seg.pt", std=1.0)
    result = _segmenter(tmp_path, weights=str(weights), precision="int8", calibration=photos_dir)
    calibration = result.settings.provenance["calibration"]
    assert calibration["images"] == 4 and calibration["held_out_images"] == 6
    verification = result.settings.provenance["verification"]
    assert verification["enforced"] is True and verification["photos"] == 6
    assert verification["pixel_agreement"] >= verification["min_pixel_agreement"]
    loaded = _served_segmenter(result)
    assert loaded.forward(torch.randn(2, 3, 120, 160)).shape == (2, 21, 120, 160)


def test_segmenter_calibration_photos_keep_their_aspect_ratio(photos_dir):
    from tsvk.common.settings import PreprocessSettings
    from tsvk_tools.archive.calibration import int8_photos, one_photo_batches

    settings = PreprocessSettings(resize=100, crop=0, max_size=0)
    photos = int8_photos(photos_dir, settings, random_weights=True, task="segment")
    shapes = {tuple(p.shape) for p in one_photo_batches(photos.calibration.batch)}
    assert shapes == {(1, 3, 100, 133)}  # 64x48 photos: shorter side 100, ratio kept, no crop


def test_int8_detectors_need_openvino():
    from tsvk_tools.archive.task_builds import check_int8_task

    with pytest.raises(UsageError, match="int8 for the detect model fasterrcnn_mobilenet_v3_large_320_fpn needs --backend openvino"):
        check_int8_task("detect", "eager", BuildRequest(model="fasterrcnn_mobilenet_v3_large_320_fpn", precision="int8"))
    check_int8_task("detect", "openvino", BuildRequest(model="fasterrcnn_mobilenet_v3_large_320_fpn", precision="int8"))
    check_int8_task("segment", "openvino", BuildRequest(model="lraspp_mobilenet_v3_large", precision="int8"))


def _detector(tmp_path: Path, weights: str, **request) -> object:
    from tests.support.task_models import DETECTOR

    (tmp_path / "out").mkdir(exist_ok=True)
    return build(BuildRequest(model=DETECTOR, backend="openvino", weights=weights, max_batch=2, **request), tmp_path / "out")


def test_detector_backbone_runs_in_openvino_under_eager_heads_and_answers_as_eager(tmp_path):
    from tests.support.task_models import DETECTOR, decisive_weights
    from tsvk.model.openvino_detector import FEATURE_NAMES, HEADS_STATE, OpenVinoBackbone
    from tsvk.tasks.detector_model import detections
    from tsvk_tools.archive.verify_tasks import match_boxes

    result = _detector(tmp_path, str(decisive_weights(DETECTOR, tmp_path / "det.pt")))
    assert result.report.passed and result.report.boxes_decide and result.report.matched_share >= 0.95
    members = zipfile.ZipFile(result.artifact).namelist()
    assert sorted(members) == sorted(["model.xml", "model.bin", HEADS_STATE, FEATURE_NAMES])
    loaded = load_model(result.settings.artifact, result.artifact.parent, torch.device("cpu"), task="detect").forward
    assert isinstance(loaded.backbone, OpenVinoBackbone)
    images = [torch.rand(3, 320, 427), torch.rand(3, 427, 320)]  # two sizes padded into one batch
    with torch.no_grad():
        got, want = detections(loaded(images)), detections(result.resolved.model(images))
    assert sum(len(w["boxes"]) for w in want) > 0
    for g, w in zip(got, want):
        pairs = match_boxes(w, g, min_iou=0.99)
        assert len(pairs) == len(w["boxes"]) == len(g["boxes"])
        for r, c in pairs:
            assert abs(float(w["scores"][r]) - float(g["scores"][c])) < 1e-4


def test_detector_verification_catches_a_backbone_off_by_one_percent(tmp_path):
    """Random weights give feature maps near 1e-7: the bound must scale with them, or nothing would fail."""
    import copy
    from collections import OrderedDict

    from tsvk_tools.archive.backends import CompileTarget
    from tsvk_tools.archive.verify_tasks import verify_detector

    result = _detector(tmp_path, "none")
    assert result.report.passed and result.report.feature_allowed_diff < 1e-6
    compiled = copy.deepcopy(result.resolved.model)
    backbone = compiled.backbone

    class OffByOnePercent(torch.nn.Module):
        out_channels = backbone.out_channels

        def forward(self, batch):
            return OrderedDict((k, v * 1.01) for k, v in backbone(batch).items())

    compiled.backbone = OffByOnePercent()
    target = CompileTarget("cpu", "fp32", 2, 0, task="detect", size=(320, 427))
    report = verify_detector(compiled, result.resolved.model, target, random_weights=True)
    assert not report.passed and report.feature_max_diff > report.feature_allowed_diff


def test_detector_artifact_without_its_heads_fails_the_load_saying_so(tmp_path):
    from tsvk.model.openvino_detector import HEADS_STATE

    result = _detector(tmp_path, "none")
    stripped = tmp_path / "stripped"
    stripped.mkdir()
    with zipfile.ZipFile(result.artifact) as full, zipfile.ZipFile(stripped / result.artifact.name, "w") as out:
        for name in full.namelist():
            if name != HEADS_STATE:
                out.writestr(name, full.read(name))
    with pytest.raises(ArtifactLoadError, match=f"without {HEADS_STATE}.*--backend openvino"):
        load_model(result.settings.artifact, stripped, torch.device("cpu"), task="detect")


def test_int8_detector_runs_its_box_head_in_dynamic_int8_and_is_judged_by_it(tmp_path):
    from torch.ao.nn.quantized.dynamic import Linear as DynamicInt8Linear

    from tests.support.task_models import DETECTOR, decisive_weights
    from tsvk.tasks.detector_model import detections

    result = _detector(tmp_path, str(decisive_weights(DETECTOR, tmp_path / "det.pt")), precision="int8")
    report = result.report
    assert report.passed and report.boxes_decide
    assert 0 < report.head_max_diff <= report.head_allowed_diff  # int8 moved the head's outputs, within bounds
    loaded = load_model(result.settings.artifact, result.artifact.parent, torch.device("cpu"), task="detect").forward
    box_head = loaded.roi_heads.box_head
    assert isinstance(box_head.fc6, DynamicInt8Linear) and isinstance(box_head.fc7, DynamicInt8Linear)
    assert isinstance(loaded.roi_heads.box_predictor.cls_score, torch.nn.Linear)  # the predictor stays fp32
    with torch.no_grad():
        answers = detections(loaded([torch.rand(3, 320, 427)]))
    assert len(answers) == 1 and len(answers[0]["boxes"]) > 0


def test_int8_detector_verification_catches_a_box_head_off_by_a_fifth(tmp_path):
    """With random weights the boxes do not decide; the box head's outputs still do."""
    import copy

    from tsvk_tools.archive.backends import CompileTarget
    from tsvk_tools.archive.verify_tasks import verify_detector

    result = _detector(tmp_path, "none")
    compiled = copy.deepcopy(result.resolved.model)
    with torch.no_grad():
        compiled.roi_heads.box_predictor.cls_score.weight.mul_(1.2)
    target = CompileTarget("cpu", "int8", 2, 0, task="detect", size=(320, 427))
    report = verify_detector(compiled, result.resolved.model, target, random_weights=True)
    assert not report.passed and report.head_max_diff > report.head_allowed_diff
    assert verify_detector(copy.deepcopy(result.resolved.model), result.resolved.model, target, random_weights=True).passed


def test_int8_detector_needs_no_calibration_and_refuses_one(tmp_path, photos_dir):
    with pytest.raises(UsageError, match="needs no calibration photos"):
        _detector(tmp_path, "none", precision="int8", calibration=photos_dir)
    assert not list((tmp_path / "out").iterdir())
