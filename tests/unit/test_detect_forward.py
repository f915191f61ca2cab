"""On a CPU a detector's forward takes at most `detect.cpu_forward_pixels` resized pixels: a batch of large
photos runs in slices, so its working memory follows the budget rather than the batch, with the answers
of one forward."""

from __future__ import annotations

import torch
from torchvision.models.detection import fasterrcnn_mobilenet_v3_large_320_fpn

from tsvk.tasks.loaded_model import LoadedModel
from tsvk.preprocess.cpu import CpuPreprocessor
from tsvk.common.settings import HandlerSettings
from tsvk.tasks.detect import DetectBatch, DetectTask
from tsvk.tasks.detector_model import served_detector

CPU = torch.device("cpu")
LARGEST = (800, 1333)  # torchvision's R-CNN inputs: shorter side 800, longer at most 1333
OPTIONS = {"score_threshold": 0.0, "max_detections": 1000}


class RecordingDetector(torch.nn.Module):
    """Answers one box per image, its index in the batch given; records each forward's inputs."""

    def __init__(self):
        super().__init__()
        self.score_thresh = 0.05
        self.calls: list[list[tuple[int, int]]] = []

    def forward(self, images):
        self.calls.append([tuple(x.shape[-2:]) for x in images])
        return [{"boxes": torch.tensor([[0.0, 0.0, float(x.shape[-1]), float(x.shape[-2])]]), "scores": torch.tensor([0.9]),
                 "labels": torch.tensor([1])} for x in images]


def _task(model, detect: dict | None = None, max_batch: int = 8) -> DetectTask:
    settings = HandlerSettings.from_dict({
        "model_name": "m", "task": "detect", "detect": detect or {},
        "artifact": {"file": "model.pt", "format": "eager", "max_batch": max_batch, "source": {"builder": "maskrcnn_resnet50_fpn_v2"}}})
    loaded = LoadedModel(forward=model, device=CPU, input_dtype=torch.float32, format="eager")
    return DetectTask(settings, loaded, CpuPreprocessor(settings.preprocess), None)


def _batch(sizes) -> DetectBatch:
    generator = torch.Generator().manual_seed(0)
    inputs = [torch.randn(3, h, w, generator=generator) for h, w in sizes]
    return DetectBatch(inputs, list(sizes), list(sizes))


def test_a_batch_of_the_largest_inputs_runs_in_forwards_within_the_pixel_budget():
    model = RecordingDetector()
    task = _task(model)
    budget = task.settings.detect.cpu_forward_pixels
    sizes = [LARGEST] * 7 + [(400, 600)]
    answers = task.answer(_batch(sizes), [OPTIONS] * len(sizes))
    assert [size for call in model.calls for size in call] == sizes  # every image once, in order
    assert len(model.calls) > 1 and all(sum(h * w for h, w in call) <= budget for call in model.calls)
    assert [a[0]["box"] for a in answers] == [[0.0, 0.0, float(w), float(h)] for h, w in sizes]


def test_an_image_over_the_budget_goes_alone_and_the_artifacts_max_batch_still_holds():
    model = RecordingDetector()
    task = _task(model, {"cpu_forward_pixels": 100_000}, max_batch=2)
    task.answer(_batch([(400, 400), (100, 100), (100, 100), (100, 100), (100, 100)]), [OPTIONS] * 5)
    assert [len(call) for call in model.calls] == [1, 2, 2]


def test_forwards_in_slices_answer_as_one_forward():
    torch.manual_seed(0)
    detector = served_detector(fasterrcnn_mobilenet_v3_large_320_fpn(weights=None, weights_backbone=None))
    detector.rpn._post_nms_top_n["testing"] = 50
    batch = _batch([(320, 480)] * 4)
    whole = _task(detector, {"cpu_forward_pixels": 10**9, "score_floor": 0.0, "score_threshold": 0.0}).answer(batch, [OPTIONS] * 4)
    sliced_task = _task(detector, {"cpu_forward_pixels": 2 * 320 * 480, "score_floor": 0.0, "score_threshold": 0.0})
    sliced = sliced_task.answer(batch, [OPTIONS] * 4)
    assert sum(len(a) for a in whole) > 0
    for ours, reference in zip(sliced, whole):
        assert [a["label"] for a in ours] == [a["label"] for a in reference]
        assert torch.allclose(torch.tensor([a["box"] for a in ours]), torch.tensor([a["box"] for a in reference]), atol=0.05)


def test_a_batch_out_of_time_stops_between_slices_and_answers_what_it_computed(monkeypatch):
    """Past its time budget a batch stops before the next forward slice, so the worker answers in time
    instead of being killed by TorchServe's response timeout with the whole batch."""
    model = RecordingDetector()
    task = _task(model, {"cpu_forward_pixels": 2 * 400 * 600})
    clock = iter(float(t) for t in range(100))
    monkeypatch.setattr("tsvk.tasks.base.time.perf_counter", lambda: next(clock))
    monkeypatch.setattr("tsvk.tasks.detect.time.perf_counter", lambda: next(clock))
    # each slice of two takes one tick: by the third slice the next would end after the budget
    answers = task.answer_within(_batch([(400, 600)] * 8), [OPTIONS] * 8, until_s=4.5)
    assert len(model.calls) < 4 and len(answers) == 2 * len(model.calls)
    assert task.answer_within(_batch([(400, 600)] * 3), [OPTIONS] * 3, until_s=-1.0)  # the first slice always runs


def test_without_a_budget_every_slice_runs():
    model = RecordingDetector()
    task = _task(model, {"cpu_forward_pixels": 400 * 600})
    assert len(task.answer_within(_batch([(400, 600)] * 5), [OPTIONS] * 5, until_s=None)) == 5
