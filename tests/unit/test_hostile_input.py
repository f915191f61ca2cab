"""Hostile input meets the handler: bombs refused from the header alone, batches decoded within a
pixel budget, unknown settings refused by name, every error body machine-readable, deadlines kept,
restarted workers counted."""

from __future__ import annotations

import io
import time
import tracemalloc

import pytest
import torch
from PIL import Image

from tsvk.worker.deadline import parse_arrival, request_age_ms, response_timeout_from_config
from tsvk.preprocess.decode import decoded_pixels, probe, webp_canvas_size
from tsvk.common.errors import ERROR_CLASSES, ImageTooLarge
from tsvk.preprocess.cpu import CpuPreprocessor, pixel_budget_chunks
from tsvk.worker.service import VisionService
from tsvk.common.settings import HandlerSettings, PreprocessSettings, SettingsError
from tsvk.worker.worker_starts import record_worker_start
from tsvk_tools.lab.robustness.corpus import BOMB_FORMATS, declare_size, real_webp_bomb, seed_images

from tests.support.handler_fakes import FakeContext, encode, noise_image, write_tiny_eager_archive

LIMIT = 40_000_000


def _png_bomb(width: int = 12_000, height: int = 10_000) -> bytes:
    buffer = io.BytesIO()
    Image.new("1", (width, height)).save(buffer, "PNG")  # 120 MP in ~15 kB
    return buffer.getvalue()


def test_a_png_bomb_is_refused_from_its_header_in_milliseconds_and_kilobytes():
    """Reading EXIF first made Pillow decode every pixel of a PNG (~265 ms, +118 MB for this one)."""
    bomb = _png_bomb()
    probe(encode(noise_image(), "PNG"), LIMIT)  # plugins registered, as in a warm worker
    tracemalloc.start()
    started = time.perf_counter()
    with pytest.raises(ImageTooLarge, match="12000x10000"):
        probe(bomb, LIMIT)
    seconds = time.perf_counter() - started
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 1 * 2**20 and seconds < 0.05


def test_a_webp_bomb_is_refused_before_pillow_allocates_its_canvas(monkeypatch):
    """Pillow's WebP reader creates its decoder, two canvases of the declared size, as it opens a file."""
    from PIL import WebPImagePlugin

    created = []
    real_decoder = WebPImagePlugin._webp.WebPAnimDecoder
    monkeypatch.setattr(WebPImagePlugin._webp, "WebPAnimDecoder", lambda data: created.append(len(data)) or real_decoder(data))
    probe(encode(noise_image(), "WEBP"), LIMIT)
    assert len(created) == 1  # the spy sees a normal WebP opened
    with pytest.raises(ImageTooLarge, match="7000x7000"):
        probe(real_webp_bomb(), LIMIT)
    assert len(created) == 1


@pytest.mark.parametrize("options", [{"lossless": True}, {"quality": 80}, {"lossless": True, "exif": b"Exif\x00\x00"}],
                         ids=["VP8L", "VP8", "VP8X"])
@pytest.mark.parametrize("size", [(1, 1), (333, 17), (2000, 1500)])
def test_the_webp_header_size_is_the_size_pillow_decodes(options, size):
    data = encode(Image.new("RGB", size, (10, 200, 30)), "WEBP", **options)
    assert webp_canvas_size(data) == Image.open(io.BytesIO(data)).size == size


@pytest.mark.parametrize("fmt", BOMB_FORMATS)
def test_bombs_of_every_allowed_format_are_413(fmt):
    with pytest.raises(ImageTooLarge):
        probe(declare_size(seed_images()[fmt], fmt, 9_000, 9_000), LIMIT)


def test_pixel_budget_splits_a_batch_of_large_pngs_and_keeps_photos_together():
    big = probe(encode(noise_image(3000, 2000), "PNG"), LIMIT)  # 6 MP
    small = probe(encode(noise_image(640, 480), "JPEG"), LIMIT)
    assert pixel_budget_chunks([big] * 4, budget=13_000_000) == [[0, 1], [2, 3]]
    assert pixel_budget_chunks([small] * 8, budget=13_000_000) == [list(range(8))]
    assert pixel_budget_chunks([big], budget=1_000) == [[0]]  # larger than the budget: alone, never dropped


def test_a_large_jpeg_counts_at_its_reduced_decode_size():
    photo = probe(encode(noise_image(4032, 3024), "JPEG"), LIMIT)
    assert decoded_pixels(photo, 512) == 1008 * 756 and decoded_pixels(photo) == 4032 * 3024


def test_chunked_preprocessing_gives_the_same_batch_as_one_chunk():
    images = [probe(encode(noise_image(300 + 10 * i, 200, seed=i), "PNG"), LIMIT) for i in range(5)]
    whole = CpuPreprocessor(PreprocessSettings(resize=64, crop=56))(images)
    chunked = CpuPreprocessor(PreprocessSettings(resize=64, crop=56, max_batch_pixels=130_000))(images)
    assert chunked.kept == whole.kept == list(range(5))
    assert torch.equal(chunked.batch, whole.batch)


def test_unknown_settings_fail_the_load_naming_the_key_and_the_closest_one():
    raw = {"model_name": "m", "artifact": {"file": "a", "format": "aoti", "source": {"builder": "resnet18"}},
           "preprocess": {"backnd": "cuda", "max_pixel": 5}}
    with pytest.raises(SettingsError) as info:
        HandlerSettings.from_dict(raw)
    assert any("tsvk.preprocess.backnd is not a known setting" in p and "'backend'" in p for p in info.value.problems)
    assert any("tsvk.preprocess.max_pixel is not a known setting" in p for p in info.value.problems)


def test_every_error_body_carries_a_distinct_machine_readable_code():
    codes = [cls("x").body()["error"] for cls in ERROR_CLASSES]
    assert len(set(codes)) == len(codes) and all(code.islower() and " " not in code for code in codes)
    assert all(cls("x").body()["source"] == "tsvk" for cls in ERROR_CLASSES)


class HeaderContext(FakeContext):
    """FakeContext plus request headers, as ts.context.Context.get_request_header gives them."""

    def __init__(self, *args, headers=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.headers = headers or {}

    def get_request_header(self, idx, key):
        return self.headers.get(idx, {}).get(key)


@pytest.fixture
def service_with_deadline(tmp_path, monkeypatch):
    config = tmp_path / "config.properties"
    config.write_text("tsvk.deadline.tiny=200\n")
    monkeypatch.setenv("TS_CONFIG_FILE", str(config))
    model_dir = tmp_path / "model"
    yaml_config = write_tiny_eager_archive(model_dir)
    return model_dir, yaml_config


def test_a_request_older_than_the_deadline_is_refused_503_without_being_computed(service_with_deadline):
    model_dir, yaml_config = service_with_deadline
    now = time.time()
    context = HeaderContext(model_dir, yaml_config, headers={0: {"X-Request-Start": f"t={now - 5:.3f}"},
                                                            1: {"X-Request-Start": f"t={int(now * 1e6)}"}})
    service = VisionService.from_context(context)
    image = encode(noise_image(), "JPEG")
    answers = service.handle([{"data": image}, {"data": image}, {"data": image}], context)
    assert context.statuses[0][0] == 503 and answers[0]["error"] == "deadline_exceeded"
    assert 1 not in context.statuses and 2 not in context.statuses  # fresh stamp (in us), and no stamp at all


def test_arrival_stamps_in_seconds_ms_and_us_mean_the_same_time():
    assert parse_arrival("t=1763900000.5") == parse_arrival("1763900000500") == parse_arrival(b"t=1763900000500000")
    assert parse_arrival("yesterday") is None and request_age_ms(time.time() - 10 * 86_400) is None


def test_each_worker_start_is_counted_in_the_model_directory(tmp_path):
    assert [record_worker_start(tmp_path) for _ in range(3)] == [1, 2, 3]


@pytest.mark.parametrize("config, timeout", [
    ({}, 120),
    ({"default_response_timeout": "30"}, 30),
    ({"default_response_timeout": "30", "models": '{"tiny": {"1.0": {"responseTimeout": 12}}}'}, 12),
    ({"default_response_timeout": "30", "models": '{"other": {"1.0": {"responseTimeout": 12}}}'}, 30),
    ({"default_response_timeout": "-4", "models": "{not json"}, 120),
])
def test_the_worker_reads_its_response_timeout_as_torchserve_applies_it(config, timeout):
    assert response_timeout_from_config(config, "tiny") == timeout


def test_images_a_batch_had_no_time_for_are_refused_503_and_the_rest_answered(tmp_path, monkeypatch):
    """A task that stops between parts (a detector's CPU forward slices) answers a prefix; the service
    refuses the rest 503 deadline_exceeded, so TorchServe never kills the worker over the batch."""
    config = tmp_path / "config.properties"
    config.write_text('default_response_timeout=60\nmodels={"tiny": {"1.0": {"responseTimeout": 20}}}\n')
    monkeypatch.setenv("TS_CONFIG_FILE", str(config))
    context = FakeContext(tmp_path / "model", write_tiny_eager_archive(tmp_path / "model"))
    service = VisionService.from_context(context)
    assert service.worker.batch_budget_s == pytest.approx(10.0)  # half the model's own response timeout
    budgets = []
    answer = service.task.answer

    def first_image_only(batch, options, until_s):
        budgets.append(until_s - time.perf_counter())
        return answer(batch, options)[:1]

    monkeypatch.setattr(service.task, "answer_within", first_image_only)
    image = encode(noise_image(), "JPEG")
    answers = service.handle([{"data": image}] * 3, context)
    assert 0 < budgets[0] <= 10.0
    assert 0 not in context.statuses and "error" not in answers[0]
    assert [context.statuses[i][0] for i in (1, 2)] == [503, 503]
    assert answers[1]["error"] == answers[2]["error"] == "deadline_exceeded"
