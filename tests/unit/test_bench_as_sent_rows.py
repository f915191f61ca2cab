"""The rows photos as sent adds or changes: the peers' hand-written draft decoding, stock TorchServe's request size,
the pipeline ceiling spread over processes, and the decode floor."""

from __future__ import annotations

import io
from types import SimpleNamespace

import numpy as np
import pytest
from PIL import Image

from tsvk.common import PreprocessSettings
from tsvk_tools.lab.bench import decode_floor, photo_report
from tsvk_tools.lab.bench.apps.ceiling_probe import photo_batches
from tsvk_tools.lab.bench.apps.openvino_classifier import OpenVinoClassifier
from tsvk_tools.lab.bench.apps.torchserve_draft_handler import open_photo
from tsvk_tools.lab.bench.assets import Photo
from tsvk_tools.lab.bench.options import BenchOptions
from tsvk_tools.lab.bench.sent_photos import orientation_exif
from tsvk_tools.lab.bench.systems.base import RunContext
from tsvk_tools.lab.bench.systems import ceiling
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
    def probe(rate: float, ready: float, span: tuple | None = None) -> dict:
        return {"ready_s": ready, "threads": 1, "format": "openvino", "answers": [], "timed_span": span, "batches": {
            "8": {"images_per_s": rate, "mean_images_per_s": rate - 1, "calls": 2, "call_ms": [100.0, 120.0]}}}

    combined = combine_processes([probe(10.0, 3.0, (100.0, 120.5)), probe(12.0, 5.0, (100.2, 120.4))])
    assert combined["processes"] == 2 and combined["ready_s"] == 5.0
    assert combined["timed_span"] == (100.2, 120.4)  # the seconds both were timing: their CPU is read over these
    assert combine_processes([probe(10.0, 3.0, (100.0, 120.5)), probe(12.0, 5.0)])["timed_span"] is None
    assert combined["batches"]["8"] == {"images_per_s": 22.0, "mean_images_per_s": 20.0, "calls": 4,
                                        "call_ms": [100.0, 100.0, 120.0, 120.0]}


def test_the_decode_floor_measures_each_photo_tsvk_reads_and_skips_the_rest(tmp_path):
    png = io.BytesIO()
    Image.new("RGB", (64, 64)).save(png, "PNG")
    photos = [Photo("sideways", _sideways_jpeg(), tmp_path / "a.jpg", "JPEG"), Photo("flat", png.getvalue(), tmp_path / "b.png"),
              Photo("tiff", b"II*\x00" + bytes(64), tmp_path / "c.tif")]
    settings = PreprocessSettings(resize=64, crop=56)
    upright = decode_floor.floor_input(photos[0].data, settings)
    assert upright.shape == (3, 56, 56)
    assert upright[:, 0].mean() < upright[:, -1].mean()  # turned upright: the stored left (dark) half is on top
    rows = decode_floor.measure(photos, settings, repeats=1)
    assert [(row["photo"], row["format"]) for row in rows] == [("sideways", "JPEG"), ("flat", "PNG")]
    assert rows[0]["megapixels"] == 1.0 and rows[0]["floor_ms"] > 0 and rows[0]["tsvk_vs_floor"] > 0
    assert rows[0]["full_decode_ms"] > 0 and rows[1]["full_decode_ms"] is None  # a PNG has no scaled decode to compare


def _floor_row(photo: str, fmt: str, floor_ms: float, tsvk_ms: float) -> dict:
    return {"photo": photo, "kind": photo, "format": fmt, "megapixels": 12.0, "bytes": 3_000_000, "floor_ms": floor_ms,
            "tsvk_ms": tsvk_ms, "tsvk_vs_floor": round(tsvk_ms / floor_ms, 2), "full_decode_ms": 80.0 if fmt == "JPEG" else None}


def test_what_the_floor_and_the_model_allow_is_every_vcpu_at_the_floor_and_the_model():
    floor = [_floor_row("a", "JPEG", 30.0, 33.0), _floor_row("b", "HEIF", 590.0, 600.0)]
    assert photo_report.allowance(floor, model_ms=20.0, vcpus=2) == {"floor_ms": 310.0, "model_ms": 20.0, "vcpus": 2,
                                                                    "images_per_s": round(2000 / 330, 2)}


def test_the_report_holds_tsvk_batch_to_its_share_of_the_allowance_and_the_jpegs_to_the_floor():
    floor = [_floor_row("a", "JPEG", 30.0, 33.0), _floor_row("b", "JPEG", 100.0, 125.0), _floor_row("c", "PNG", 50.0, 80.0)]
    systems = {"batch_fast": {"label": "tsvk batch", "throughput_ips": 20.0}, "ours_kserve_fast": {"throughput_ips": 19.0}}
    result = {"systems": systems, "machine": {"vcpus": 2}, "decode_floor": floor,
              "model_cost": {"ms_per_image": 6.0, "batch": 8, "threads": 1, "format": "openvino"}}
    text = "\n".join(photo_report.photo_lines(result))
    allowed = 2000 / (60.0 + 6.0)
    assert f"allow **{allowed:.2f} img/s**" in text
    assert "tsvk within 1.2x the floor on every JPEG: **no** (at most 1.25x, b)" in text  # the PNG's 1.6x is not a JPEG's
    assert f"what the floor and the model allow: **no** ({20.0 / allowed:.2f}x)" in text
    assert f"| ours_kserve_fast | 19.00 | {19.0 / allowed:.2f} |" in text
    systems["batch_fast"]["throughput_ips"] = 0.95 * allowed
    assert "what the floor and the model allow: **yes** (0.95x)" in "\n".join(photo_report.photo_lines(result))


def test_the_model_cost_is_the_fast_archive_s_cheapest_batch_on_one_thread(monkeypatch):
    asked = []

    def probe(self, ctx, threads):
        asked.append(threads)
        return {"format": "openvino", "batches": {"1": {"images_per_s": 40.0}, "8": {"images_per_s": 50.0}}}

    monkeypatch.setattr(ceiling.FastCeiling, "probe", probe)
    assert ceiling.model_cost(None) == {"ms_per_image": 20.0, "batch": 8, "threads": 1, "format": "openvino"}
    assert asked == [1]


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



def test_the_floor_registers_the_heic_reader_with_one_decoding_thread(monkeypatch, tmp_path):
    import torch

    from tsvk.common import features

    heif = features.heif_decoder()
    if heif is None:
        pytest.skip("no pi-heif here")
    registered = []
    monkeypatch.setattr(heif, "register_heif_opener", lambda **options: registered.append(options["decode_threads"]))
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        decode_floor.allowed_formats()  # registered before the floor, with two threads
        decode_floor.measure([Photo("sideways", _sideways_jpeg(), tmp_path / "a.jpg", "JPEG")], PreprocessSettings(resize=64, crop=56), 1)
        decode_floor.allowed_formats()  # and after it with the caller's threads again
    finally:
        torch.set_num_threads(threads)
        decode_floor.allowed_formats.cache_clear()
    assert registered[-2:] == [1, 2], registered
