"""Progressive-JPEG scan bombs: the decoding work a JPEG's scans ask for is counted from its markers and
refused before any backend decodes it, while real progressive photos still decode."""

from __future__ import annotations

import io
import time
from pathlib import Path

import pytest
import torch
from PIL import Image

from tsvk.preprocess.decode import decode_rgb, probe
from tsvk.common.errors import DecodeTooCostly
from tsvk.preprocess.jpeg_scans import scan_work
from tsvk.worker.service import VisionService
from tsvk.common.settings import HandlerSettings

from tests.support.handler_fakes import FakeContext, encode, photo, write_tiny_eager_archive
from tests.support.jpeg_bombs import gradient_jpeg, scan_bomb, scans

LIMIT = 40_000_000
IMAGENET_SAMPLES = Path("/work/shared/imagenet-samples")


def test_a_scan_bomb_is_refused_from_its_markers_in_milliseconds():
    """The same bomb at 4000x4000 with 2,000 repeats took 6-9 s to decode; the walk refuses it in ~1 ms."""
    bomb = scan_bomb(2000, 2000, repeats=300)
    assert len(scans(bomb)) == 310 and len(bomb) < 50_000
    Image.open(io.BytesIO(bomb)).load()  # a valid JPEG: the decoders would spend the time
    probe(gradient_jpeg(64, 48), LIMIT)  # plugins registered, as in a warm worker
    started = time.perf_counter()
    with pytest.raises(DecodeTooCostly, match=r"more than 256 scans.*max_jpeg_scans") as info:
        probe(bomb, LIMIT)
    assert time.perf_counter() - started < 0.05
    assert info.value.status == 413 and info.value.body()["error"] == "decode_too_costly"


def test_blocks_times_scans_is_bounded_below_the_scan_count_limit():
    bomb = scan_bomb(2000, 2000, repeats=100)  # 110 scans of up to 62,500 blocks each
    work = scan_work(bomb, 2000, 2000, 256)
    assert work.scans == 110 and 100 * 250 * 250 < work.blocks < 110 * 250 * 250 * 3
    assert probe(bomb, LIMIT).is_jpeg  # within the default budget: 16 passes over a 40 MP photo
    with pytest.raises(DecodeTooCostly, match=r"110 scans decode \d+ 8x8 blocks.*max_jpeg_scan_blocks"):
        probe(bomb, LIMIT, max_jpeg_scan_blocks=work.blocks - 1)


@pytest.mark.parametrize("size", [(2000, 2000), (333, 17), (8, 8)])
@pytest.mark.parametrize("subsampling", [0, 1, 2], ids=["4:4:4", "4:2:2", "4:2:0"])
def test_blocks_counted_are_those_libjpeg_visits(size, subsampling):
    """Baseline: one pass over every component's blocks; libjpeg's progressive script: DC twice over all of
    them (interleaved, whole MCUs), and luma AC four times, each chroma component's AC twice."""
    width, height = size
    image = Image.new("RGB", size, (10, 200, 30))
    h, v = {0: (1, 1), 1: (2, 1), 2: (2, 2)}[subsampling]
    luma = -(-width // 8) * -(-height // 8)
    chroma = -(-(-(-width // h)) // 8) * -(-(-(-height // v)) // 8)
    mcus = -(-width // (8 * h)) * -(-height // (8 * v))
    baseline = scan_work(encode(image, "JPEG", subsampling=subsampling), width, height, 256)
    progressive = scan_work(encode(image, "JPEG", subsampling=subsampling, progressive=True), width, height, 256)
    assert baseline.scans == 1 and baseline.blocks == mcus * (h * v + 2)
    assert progressive.scans == 10 and progressive.blocks == 2 * mcus * (h * v + 2) + 4 * luma + 4 * chroma


def test_real_progressive_photos_still_decode():
    for image in [photo("chelsea"), photo("astronaut"), photo("coffee", (4000, 3000))]:
        data = encode(image, "JPEG", quality=90, progressive=True)
        decoded = decode_rgb(probe(data, LIMIT))
        assert decoded.shape == (3, image.height, image.width)
    for path in sorted(IMAGENET_SAMPLES.glob("*.JPEG"))[:20]:
        progressive = encode(Image.open(path).convert("RGB"), "JPEG", quality=90, progressive=True)
        assert probe(progressive, LIMIT).is_jpeg and probe(path.read_bytes(), LIMIT).is_jpeg


def test_a_truncated_or_corrupt_walk_leaves_the_refusal_to_the_decoder():
    data = gradient_jpeg(64, 48)
    for broken in (data[: len(data) // 2], data[:30], b"\xff\xd8\xff\xda\x00", b"\xff\xd8" + b"\x00" * 50):
        assert scan_work(broken, 64, 48, 256).scans <= len(scans(data))


def test_the_limits_are_settings_of_the_archive():
    settings = HandlerSettings.from_dict(
        {
            "model_name": "m",
            "artifact": {"file": "m.pt", "format": "aoti", "source": {"builder": "resnet18"}},
            "preprocess": {"max_jpeg_scans": 12, "max_jpeg_scan_blocks": 1000},
        }
    )
    assert (settings.preprocess.max_jpeg_scans, settings.preprocess.max_jpeg_scan_blocks) == (12, 1000)


def test_the_handler_refuses_the_bomb_before_any_backend_sees_it_and_answers_its_neighbour(tmp_path, monkeypatch):
    """The probe runs in the read stage, before the task's prepare hands images to a backend (CPU, nvJPEG,
    CV-CUDA alike): the bomb never reaches one."""
    context = FakeContext(tmp_path, write_tiny_eager_archive(tmp_path))
    service = VisionService.from_context(context)
    seen = []
    real_prepare = service.task.prepare
    monkeypatch.setattr(service.task, "prepare", lambda images: seen.extend(images) or real_prepare(images))
    good = encode(photo("chelsea", (64, 48)), "JPEG", progressive=True)
    answers = service.handle([{"data": scan_bomb()}, {"data": good}], context)
    assert context.statuses == {0: (413, "Payload Too Large")} and answers[0]["error"] == "decode_too_costly"
    assert all(label.startswith("class_") for label in answers[1])
    assert [image.data for image in seen] == [good]
    assert isinstance(decode_rgb(seen[0]), torch.Tensor)
