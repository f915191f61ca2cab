"""The rows photos as sent adds or changes: the peers' hand-written draft decoding, stock TorchServe's request size,
the pipeline ceiling spread over processes, and the decode floor."""

from __future__ import annotations

import io
from types import SimpleNamespace

import numpy as np
from PIL import Image

from tsvk.common import PreprocessSettings
from tsvk_tools.lab.bench import decode_floor
from tsvk_tools.lab.bench.apps.ceiling_probe import photo_batches
from tsvk_tools.lab.bench.apps.openvino_classifier import OpenVinoClassifier
from tsvk_tools.lab.bench.apps.torchserve_draft_handler import open_photo
from tsvk_tools.lab.bench.assets import Photo
from tsvk_tools.lab.bench.options import BenchOptions
from tsvk_tools.lab.bench.sent_photos import orientation_exif
from tsvk_tools.lab.bench.systems.base import RunContext
from tsvk_tools.lab.bench.systems.ceiling import combine_processes
from tsvk_tools.lab.bench.systems.torchserve import request_size_properties, stock_tuned_properties


def _sideways_jpeg(width: int = 1200, height: int = 800, orientation: int = 6) -> bytes:
    """A landscape JPEG whose EXIF says to turn it upright (portrait): left half dark, right half light."""
    pixels = np.zeros((height, width, 3), dtype=np.uint8)
    pixels[:, width // 2:] = 220
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, "JPEG", quality=90, exif=orientation_exif(orientation).tobytes())
    return buffer.getvalue()


def test_the_torchserve_draft_handler_decodes_reduced_and_upright():
    photo = open_photo(_sideways_jpeg())
    assert photo.size == (400, 600)  # 1/2 scale (the largest leaving both sides >= 256), turned upright
    assert photo.mode == "RGB"


def test_the_litserve_draft_decoding_is_the_same():
    with Image.open(io.BytesIO(_sideways_jpeg())) as image:
        photo = OpenVinoClassifier.hand_written(SimpleNamespace(resize=100), image)
    assert photo.size == (100, 150)  # 1/8 scale leaves 150x100, turned upright


def test_stock_torchserve_is_set_to_take_the_largest_photo_only_where_its_default_refuses_it():
    assert request_size_properties(6_553_500) == {}
    assert request_size_properties(11_354_916) == {"max_request_size": "11354916"}
    tuned = stock_tuned_properties(SimpleNamespace(), "resnet18", workers=2, batch=8, delay_ms=100, largest_photo=11_354_916)
    assert tuned["max_request_size"] == "11354916"


def test_processes_timed_side_by_side_add_up():
    def probe(rate: float, ready: float) -> dict:
        return {"ready_s": ready, "threads": 1, "format": "openvino", "answers": [], "batches": {
            "8": {"images_per_s": rate, "mean_images_per_s": rate - 1, "calls": 2, "call_ms": [100.0, 120.0]}}}

    combined = combine_processes([probe(10.0, 3.0), probe(12.0, 5.0)])
    assert combined["processes"] == 2 and combined["ready_s"] == 5.0
    assert combined["batches"]["8"] == {"images_per_s": 22.0, "mean_images_per_s": 20.0, "calls": 4,
                                        "call_ms": [100.0, 100.0, 120.0, 120.0]}


def test_the_decode_floor_measures_each_jpeg_and_skips_the_rest(tmp_path):
    png = io.BytesIO()
    Image.new("RGB", (64, 64)).save(png, "PNG")
    photos = [Photo("sideways", _sideways_jpeg(), tmp_path / "a.jpg", "JPEG"), Photo("flat", png.getvalue(), tmp_path / "b.png")]
    settings = PreprocessSettings(resize=64, crop=56)
    upright = decode_floor.floor_input(photos[0].data, settings)
    assert upright.shape == (3, 56, 56)
    assert upright[:, 0].mean() < upright[:, -1].mean()  # turned upright: the stored left (dark) half is on top
    rows = decode_floor.measure(photos, settings, repeats=1)
    assert [row["photo"] for row in rows] == ["sideways"]
    assert rows[0]["megapixels"] == 1.0 and rows[0]["floor_ms"] > 0 and rows[0]["tsvk_vs_floor"] > 0


def test_the_spread_ceiling_takes_every_photos_batches_in_turn():
    photos = [b"a", b"b", b"c"]
    assert photo_batches(photos, 2, every_photo=False) == [[b"a", b"b"]]
    batches = photo_batches(photos, 2, every_photo=True)
    assert batches == [[b"a", b"b"], [b"c", b"a"], [b"b", b"c"]]
    assert all(sum(batch.count(photo) for batch in batches) == 2 for photo in photos)


def test_a_server_is_set_to_take_the_largest_photo_twins_included(tmp_path):
    upright, stored = tmp_path / "upright.jpg", tmp_path / "stored.jpg"
    upright.write_bytes(b"u" * 120)
    stored.write_bytes(b"s" * 99)
    ctx = RunContext(BenchOptions(), 2, tmp_path)
    ctx.__dict__["photos"] = [Photo("sideways", b"x" * 100, tmp_path / "sent.jpg", "", upright, stored),
                              Photo("flat", b"y" * 110, tmp_path / "flat.png")]  # the cached property, without making photos
    assert ctx.largest_photo == 120
