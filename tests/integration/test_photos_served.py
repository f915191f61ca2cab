"""The photos phones send, served by the generated config as it comes, on both engines: a 48 MP JPEG of the size a
phone writes at high quality (over TorchServe's own 6.5 MiB and tsvk's former 16 MiB body limit), stored sideways
with EXIF orientation 6, answers as the same photo upright does; an iPhone's HEIC answers as its JPEG does; a PNG
bomb is still refused 413 from its header.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest
import requests
from PIL import Image

from tests.support.engine import running_engine
from tests.support.handler_fakes import encode, photo
from tests.support.torchserve import archive_tiny, running_torchserve
from tsvk_tools import defaults
from tsvk_tools.config.ports import serving_on_free_ports

pytestmark = pytest.mark.integration

MODEL = "tiny"
HEIC = Path(__file__).resolve().parents[1] / "fixtures" / "chelsea_orientation6.heic"  # chelsea, 451x300 upright
PHONE = (8000, 6000)  # 48 MP
ENGINES = {"kserve": running_engine, "torchserve": running_torchserve}


@functools.lru_cache(maxsize=None)
def phone_photo() -> Image.Image:
    """A smooth gradient with sensor-like noise: at quality 90 it is as large as a phone's 48 MP JPEG."""
    width, height = PHONE
    rng = np.random.default_rng(0)
    y, x = np.linspace(0, 1, height, dtype=np.float32)[:, None], np.linspace(0, 1, width, dtype=np.float32)[None, :]
    channels = [a * y + b * x + c + rng.normal(0, 14, (height, width)).astype(np.float32)
                for a, b, c in ((150, 40, 40), (60, 120, 30), (20, 90, 60))]
    return Image.fromarray(np.clip(np.stack(channels, -1), 0, 255).astype(np.uint8))


@functools.lru_cache(maxsize=None)
def phone_jpegs() -> tuple[bytes, bytes]:
    """(stored sideways with orientation 6, the same photo upright without EXIF)."""
    exif = Image.Exif()
    exif[0x0112] = 6
    upright = phone_photo()
    return encode(upright.transpose(Image.Transpose.ROTATE_90), "JPEG", quality=90, exif=exif), encode(upright, "JPEG", quality=90)


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    return archive_tiny(tmp_path_factory.mktemp("photos_store") / "model_store")


@pytest.fixture(scope="module", params=sorted(ENGINES))
def served(request, store, tmp_path_factory):
    """The generated config with its defaults (max_request_size, the archive's pixel limits), on each engine."""
    config = serving_on_free_ports(model_store=store, vcpus=2, workers=1, batch=2, max_batch_delay_ms=10, auth=True)
    with ENGINES[request.param](config, tmp_path_factory.mktemp(f"photos_{request.param}")) as run:
        yield run


def _predict(run, body: bytes) -> requests.Response:
    return requests.post(f"{run.url('inference')}/predictions/{MODEL}", data=body, headers=run.headers("inference"), timeout=120)


def _top1(answer: requests.Response) -> str:
    assert answer.status_code == 200, answer.text[:300]
    scores = answer.json()
    return max(scores, key=scores.get)


def test_a_48_mp_phone_jpeg_stored_sideways_answers_as_the_upright_photo(served):
    sideways, upright = phone_jpegs()
    assert 16 * 2**20 < len(sideways) < defaults.MAX_REQUEST_MB * 2**20, len(sideways)
    turned, straight = _predict(served, sideways), _predict(served, upright)
    assert _top1(turned) == _top1(straight)
    assert np.allclose(list(turned.json().values()), list(straight.json().values()), atol=0.02)
    assert list(turned.json()) == list(straight.json())


def test_a_heic_answers_as_its_jpeg(served):
    heic, jpeg = _predict(served, HEIC.read_bytes()), _predict(served, encode(photo("chelsea"), "JPEG", quality=95))
    assert _top1(heic) == _top1(jpeg)
    assert np.allclose(list(heic.json().values()), list(jpeg.json().values()), atol=0.02)


def test_a_png_bomb_is_still_refused_from_its_header(served):
    answer = _predict(served, encode(Image.new("1", (12_000, 9_000)), "PNG"))
    assert answer.status_code == 413 and answer.json()["error"] == "image_too_large", answer.text
    assert "12000x9000" in answer.json()["message"]
