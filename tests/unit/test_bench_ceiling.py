"""The ceiling summary: the best batch size is the ceiling, and decode/preprocess rates travel with it; the pipeline
ceiling runs a worker's whole batch."""

import time
import zipfile
from io import BytesIO

import pytest
from PIL import Image
from tsvk.common import PreprocessSettings
from tsvk.common.errors import RequestError
from tsvk.preprocess import probe
from tsvk.tasks.classify import ClassifyTask

from tests.support.handler_fakes import write_tiny_eager_archive
from tsvk_tools.lab.bench.apps.ceiling_probe import probe_as_served, probe_pipeline, probed, timed_calls
from tsvk_tools.lab.bench.systems.ceiling import summarize_probe

PROBE = {
    "ready_s": 3.2, "threads": 2, "format": "aoti", "top1": {"0": "tabby"},
    "decode_images_per_s": 900.0, "preprocess_images_per_s": 300.0,
    "batches": {
        "1": {"images_per_s": 60.0, "mean_images_per_s": 58.0, "calls": 10, "call_ms": [16.0] * 10},
        "8": {"images_per_s": 88.0, "mean_images_per_s": 85.0, "calls": 4, "call_ms": [90.0, 91.0, 92.0, 99.0]},
    },
}


def test_best_batch_is_the_ceiling():
    summary = summarize_probe(PROBE)
    assert summary["throughput_ips"] == 88.0
    assert summary["details"]["best_batch"] == 8
    assert summary["requests"] == 10 + 4 * 8
    assert summary["latency_ms"]["p50"] == 91.5
    assert summary["details"]["preprocess_images_per_s"] == 300.0


def test_timed_calls_makes_at_least_the_minimum_calls():
    counter = []
    durations = timed_calls(lambda: counter.append(1), seconds=0.0, min_calls=3)
    assert len(durations) == len(counter) == 3


def test_the_pipeline_ceiling_runs_a_workers_whole_batch_from_jpeg_bytes_to_answers(tmp_path, monkeypatch):
    """A real (tiny) archive through the handler's own task code: prepare, the model, and the task's answers, the
    step a segmenter or detector spends most of its non-model time in."""
    model_dir = tmp_path / "model"
    write_tiny_eager_archive(model_dir)
    mar = tmp_path / "tiny.mar"
    with zipfile.ZipFile(mar, "w") as archive:
        for path in model_dir.iterdir():
            archive.write(path, path.name)
    photo = tmp_path / "photo.jpg"
    Image.new("RGB", (64, 48), (200, 30, 30)).save(photo, "JPEG")
    answered = []
    original = ClassifyTask.answer
    monkeypatch.setattr(
        ClassifyTask, "answer", lambda self, batch, options: answered.append(len(options)) or original(self, batch, options)
    )
    before = time.monotonic()
    probe = probe_pipeline(mar, [photo], seconds=0.2, batch=3)
    began, ended = probe["timed_span"]
    assert before < began and ended - began >= 0.2 and ended <= time.monotonic()  # the timed calls, on the bench's clock
    assert summarize_probe(probe)["load_window"] == (began, ended)
    assert answered and set(answered) == {3}  # every call shaped 3 answers
    assert probe["batches"]["3"]["calls"] == len(answered) - 1  # one unmeasured warm-up call
    assert probe["batches"]["3"]["images_per_s"] > 0


def test_the_ceiling_takes_a_phones_48_mp_jpeg_as_a_served_worker_does():
    """A worker counts a large JPEG at the DCT scale it decodes it at (preprocess.max_pixels is 40 MP): the ceiling's
    probe must take it too, or the ceiling leaves out the costliest photos the servers answer."""
    out = BytesIO()
    Image.new("RGB", (8064, 6048), (90, 120, 150)).save(out, format="JPEG", quality=50)
    limits = PreprocessSettings()
    assert probe_as_served(out.getvalue(), limits, min_short_side=2 * limits.resize).width == 8064
    assert len(probed([out.getvalue()], limits, min_short_side=2 * limits.resize)) == 1
    with pytest.raises(RequestError):  # counted whole, as the ceiling counted it before
        probe(out.getvalue(), limits.max_pixels, limits.max_jpeg_scans, limits.max_jpeg_scan_blocks)
