"""A photo whose resize would outgrow preprocess.max_pixels is refused before it is decoded: the header's pixel
count bounds the photo, but a shorter side of one pixel resized to 256 makes a 92-byte 4000x1 PNG a
1,024,000 x 256 image (814 MiB in the classifier's CPU path)."""

from __future__ import annotations

import io

import pytest
from PIL import Image

from tsvk.preprocess.decode import probe
from tsvk.common.errors import ImageTooLarge
from tsvk.worker.service import VisionService
from tsvk.common.settings import PreprocessSettings
from tsvk.tasks.geometry import check_resized_pixels, resized_pixels

from tests.support.handler_fakes import FakeContext, encode, noise_image, write_tiny_eager_archive


def _png(width: int, height: int) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), (120, 30, 200)).save(out, "PNG")
    return out.getvalue()


@pytest.mark.parametrize("size, settings, expected", [
    ((640, 480), PreprocessSettings(resize=256), 256 * 341),
    ((4000, 1), PreprocessSettings(resize=256), 1_024_000 * 256),
    ((4000, 1), PreprocessSettings(resize=800, max_size=1333), 1 * 1333),  # a detector caps its longer side
    ((4000, 1), PreprocessSettings(fixed_size=(320, 320)), 320 * 320),
])
def test_resized_pixels_follow_the_tasks_resize(size, settings, expected):
    assert resized_pixels(*size, settings) == expected


def test_an_extreme_aspect_ratio_is_refused_from_its_header():
    image = probe(_png(4000, 1), 40_000_000)
    with pytest.raises(ImageTooLarge, match="4000x1.*preprocess.max_pixels"):
        check_resized_pixels(image, PreprocessSettings(resize=256))
    check_resized_pixels(probe(_png(1000, 20), 40_000_000), PreprocessSettings(resize=256))  # 12,800 x 256: allowed


def test_the_thin_png_fails_alone_and_its_neighbour_is_answered(tmp_path):
    context = FakeContext(tmp_path, write_tiny_eager_archive(tmp_path))
    service = VisionService.from_context(context)
    good = encode(noise_image(64, 48, seed=0), "JPEG")
    alone = service.handle([{"data": good}], context)[0]
    thin = _png(30_000, 1)  # resize 40 (the tiny archive's): 1,200,000 x 40 = 48 MP, over the 40 MP limit
    answers = service.handle([{"data": thin}, {"data": good}], context)
    assert answers[0]["code"] == 413 and answers[0]["error"] == "image_too_large"
    assert answers[1] == alone
