"""The photos people send: HEIC and AVIF decoded as JPEG is (upright, bounded from the header), the modes and
animations phones and the web produce, and a pixel bound that counts what the decoder holds, so a 48-108 MP
phone JPEG decoded at a reduced DCT scale is served while a PNG of that size is refused before it is decoded.

tests/fixtures/chelsea_orientation6.heic is scikit-image's chelsea (451x300) stored sideways (300x451) with EXIF
orientation 6, written by pillow-heif 1.8.1 (libheif 1.23, x265) at quality 50: libheif turns the orientation into
the file's own rotation (`irot`). tsvk ships no HEVC encoder (pi-heif only decodes), so the file is kept here.
"""

from __future__ import annotations

import functools
import io
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from tsvk.common.errors import BadImage, ImageTooLarge, UnsupportedFormat
from tsvk.common.defaults import PILLOW_MAX_PIXELS
from tsvk.common.settings import HandlerSettings, PreprocessSettings
from tsvk.preprocess import decode
from tsvk.preprocess.base import dct_short_side
from tsvk.preprocess.cpu import CpuPreprocessor
from tsvk.preprocess.decode import decode_rgb, decoded_pixels, probe
from tsvk.preprocess.heif_items import declared_sizes
from tsvk.tasks.geometry import fit_pixels, original_size
from tsvk.worker.service import VisionService

from tests.support.handler_fakes import FakeContext, encode, noise_image, photo, write_tiny_eager_archive

LIMIT = 10_000_000
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
HEIC = FIXTURES / "chelsea_orientation6.heic"
CLASSIFY = dct_short_side(PreprocessSettings())  # 512: what a classifier with resize 256 decodes a JPEG down to


def upright_chelsea() -> np.ndarray:
    return np.asarray(photo("chelsea"), dtype=np.int16)


def sideways(image: Image.Image) -> tuple[Image.Image, Image.Exif]:
    """The image stored as a phone held upright stores it (rotated), and the EXIF orientation that shows it upright."""
    exif = Image.Exif()
    exif[0x0112] = 6  # "rotate 90 clockwise to display"
    return image.transpose(Image.Transpose.ROTATE_90), exif


def mean_difference(decoded: torch.Tensor, expected: np.ndarray) -> float:
    return float(np.abs(decoded.permute(1, 2, 0).numpy().astype(np.int16) - expected).mean())


def with_declared_jpeg_size(data: bytes, width: int, height: int) -> bytes:
    """A JPEG whose frame header declares width x height (its scans still hold the small image's data)."""
    at = data.index(b"\xff\xc0")
    return data[:at + 5] + struct.pack(">HH", height, width) + data[at + 9:]


def test_heic_decodes_upright_from_the_files_own_rotation():
    image = probe(HEIC.read_bytes(), LIMIT)
    assert (image.format, image.width, image.height, image.orientation) == ("HEIF", 451, 300, 1)  # libheif rotates it
    decoded = decode_rgb(image)
    assert decoded.dtype == torch.uint8 and tuple(decoded.shape) == (3, 300, 451)
    assert mean_difference(decoded, upright_chelsea()) < 8
    assert original_size(image) == (300, 451)


def test_avif_decodes_upright_from_its_exif_orientation():
    stored, exif = sideways(photo("chelsea"))
    image = probe(encode(stored, "AVIF", quality=80, exif=exif), LIMIT)
    assert (image.format, image.width, image.height, image.orientation) == ("AVIF", 300, 451, 6)
    decoded = decode_rgb(image)
    assert tuple(decoded.shape) == (3, 300, 451)
    assert mean_difference(decoded, upright_chelsea()) < 8
    assert original_size(image) == (300, 451)


def test_a_heif_file_whose_coded_image_is_larger_than_its_crop_is_refused_before_decoding():
    """The reported size is after the clean-aperture crop; libheif decodes the whole coded image first."""
    data = bytearray(HEIC.read_bytes())
    assert declared_sizes(bytes(data)) == [(300, 452)]
    at = data.index(b"ispe") + 8
    data[at:at + 8] = struct.pack(">II", 8000, 8000)
    with pytest.raises(ImageTooLarge, match="8000x8000"):
        probe(bytes(data), LIMIT)
    assert probe(HEIC.read_bytes(), 300 * 452).width == 451


def test_a_heic_with_the_generic_brand_is_read_as_heic_not_refused_as_avif():
    data = HEIC.read_bytes()
    generic = data[:8] + b"mif1" + data[12:]  # 'mif1' major brand: both AVIF and HEIC files use it
    assert probe(generic, LIMIT).format == "HEIF"


@pytest.mark.parametrize("cut", [0.5, 0.1])
def test_a_truncated_heic_is_a_400(cut):
    data = HEIC.read_bytes()
    with pytest.raises(BadImage):
        decode_rgb(probe(data[:int(len(data) * cut)], LIMIT))


def test_without_their_decoders_heic_and_avif_are_415_naming_what_decodes_them(monkeypatch):
    monkeypatch.setattr(decode, "allowed_formats", lambda: decode.BUILT_IN_FORMATS)
    with pytest.raises(UnsupportedFormat, match="HEIC images are not decoded by this server.*pip install pi-heif") as info:
        probe(HEIC.read_bytes(), LIMIT)
    assert info.value.status == 415
    with pytest.raises(UnsupportedFormat, match="AVIF images are not decoded by this server.*pillow"):
        probe(encode(noise_image(), "AVIF"), LIMIT)


def test_the_allowed_formats_name_heic_and_avif_where_their_decoders_are():
    with pytest.raises(UnsupportedFormat, match="allowed formats: JPEG, PNG, WEBP, BMP, GIF, AVIF, HEIF"):
        probe(encode(noise_image(), "TIFF"), LIMIT)


@pytest.mark.parametrize("fmt", ["PNG", "WEBP"])
def test_an_animated_image_gives_its_first_frame(fmt):
    """APNG and animated WebP as GIF does (test_decode.py): the first frame is the photo's poster."""
    frames = [Image.new("RGB", (16, 16), colour) for colour in ((255, 0, 0), (0, 0, 255))]
    data = encode(frames[0], fmt, save_all=True, append_images=frames[1:], **({"lossless": True} if fmt == "WEBP" else {}))
    assert getattr(Image.open(io.BytesIO(data)), "n_frames", 1) == 2
    assert decode_rgb(probe(data, LIMIT))[:, 8, 8].tolist() == [255, 0, 0]


def test_a_sixteen_bit_colour_png_decodes_to_rgb():
    wide = np.zeros((8, 8, 3), dtype=">u2")
    wide[..., 0] = 65535
    header = struct.pack(">IIBBBBB", 8, 8, 16, 2, 0, 0, 0)
    rows = b"".join(b"\x00" + wide[y].tobytes() for y in range(8))
    data = _png([(b"IHDR", header), (b"IDAT", zlib.compress(rows)), (b"IEND", b"")])
    assert decode_rgb(probe(data, LIMIT))[:, 4, 4].tolist() == [255, 0, 0]


def _png(chunks: list[tuple[bytes, bytes]]) -> bytes:
    body = b"".join(struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data)) for kind, data in chunks)
    return b"\x89PNG\r\n\x1a\n" + body


def test_a_jpeg_is_bounded_by_the_pixels_its_dct_scale_decodes():
    """A 108 MP header: 1500x1125 at 1/8 for a classifier, so within 10 MP; decoded whole it would not be."""
    data = with_declared_jpeg_size(encode(noise_image(64, 48), "JPEG"), 12000, 9000)
    image = probe(data, LIMIT, min_short_side=CLASSIFY)
    assert (image.width, image.height) == (12000, 9000)
    assert decoded_pixels(image, CLASSIFY) == 1500 * 1125
    with pytest.raises(ImageTooLarge, match="12000x9000.*preprocess.max_pixels"):
        probe(data, LIMIT)  # a backend that decodes it whole


def test_a_progressive_jpeg_counts_whole_at_any_scale_as_it_holds_every_coefficient():
    """The same 48 MP header a baseline JPEG is served with at 1/8: progressive, it is refused before decoding."""
    buffer = io.BytesIO()
    Image.fromarray(np.zeros((48, 64, 3), np.uint8)).save(buffer, "JPEG", progressive=True)
    progressive = buffer.getvalue()
    at = progressive.index(b"\xff\xc2")  # SOF2: a progressive frame
    declared = progressive[:at + 5] + struct.pack(">HH", 6000, 8000) + progressive[at + 9:]
    with pytest.raises(ImageTooLarge, match="progressive JPEG is 8000x6000.*preprocess.max_pixels"):
        probe(declared, LIMIT, min_short_side=CLASSIFY)
    baseline = with_declared_jpeg_size(encode(noise_image(64, 48), "JPEG"), 8000, 6000)
    assert decoded_pixels(probe(baseline, LIMIT, min_short_side=CLASSIFY), CLASSIFY) == 1000 * 750


def test_a_jpeg_over_max_jpeg_pixels_is_refused_however_small_it_decodes():
    data = with_declared_jpeg_size(encode(noise_image(64, 48), "JPEG"), 13000, 10000)  # 130 MP
    with pytest.raises(ImageTooLarge, match="13000x10000.*preprocess.max_jpeg_pixels") as info:
        probe(data, LIMIT, min_short_side=CLASSIFY)
    assert info.value.code == "image_too_large"
    assert probe(data, LIMIT, min_short_side=CLASSIFY, max_jpeg_pixels=PILLOW_MAX_PIXELS).width == 13000


def test_max_jpeg_pixels_is_a_setting_within_what_pillow_opens():
    section = {"model_name": "m", "artifact": {"file": "m.pt", "format": "aoti", "source": {"builder": "resnet18"}}}
    settings = HandlerSettings.from_dict({**section, "preprocess": {"max_jpeg_pixels": 150_000_000}})
    assert settings.preprocess.max_jpeg_pixels == 150_000_000
    with pytest.raises(ValueError, match=f"max_jpeg_pixels.*an integer from 1 to {PILLOW_MAX_PIXELS}"):
        HandlerSettings.from_dict({**section, "preprocess": {"max_jpeg_pixels": 200_000_000}})


def test_a_jpeg_whose_scale_still_decodes_too_many_pixels_is_refused():
    """A 60000x1000 panorama: 1/2 would leave a shorter side of 500 < 512, so it decodes whole (60 MP)."""
    data = with_declared_jpeg_size(encode(noise_image(64, 48), "JPEG"), 60_000, 1000)
    with pytest.raises(ImageTooLarge, match="60000x1000 JPEG decodes to 60000000 pixels"):
        probe(data, LIMIT, min_short_side=CLASSIFY)


@pytest.mark.parametrize("fmt", ["PNG", "GIF", "BMP"])
def test_a_format_that_cannot_be_scaled_while_decoding_counts_whole(fmt):
    bomb = encode(Image.new("1" if fmt != "GIF" else "P", (12_000, 9_000)), fmt)
    with pytest.raises(ImageTooLarge, match="12000x9000"):
        probe(bomb, LIMIT, min_short_side=CLASSIFY)


@functools.lru_cache(maxsize=None)
def phone_jpeg() -> bytes:
    """8000x6000 (48 MP) stored sideways with orientation 6, at quality 90, as a phone held upright writes it."""
    y, x = np.mgrid[0:6000:8, 0:8000:8]
    small = np.stack([x * 255 // 8000, y * 255 // 6000, (x + y) * 255 // 14000], -1).astype(np.uint8)
    stored, exif = sideways(Image.fromarray(small).resize((8000, 6000), Image.BILINEAR))
    return encode(stored, "JPEG", quality=90, exif=exif)


def test_a_48_mp_phone_jpeg_is_decoded_small_and_upright():
    """Decoded at 1/8 (1000x750 once turned), within the default 40 MP it would not be whole."""
    image = probe(phone_jpeg(), 40_000_000, min_short_side=CLASSIFY)
    assert (image.width, image.height, image.orientation) == (6000, 8000, 6)
    decoded = decode_rgb(image, CLASSIFY)
    assert tuple(decoded.shape) == (3, 750, 1000)
    assert decoded[:, 10, 990].tolist() == pytest.approx([252, 3, 145], abs=6)  # the top right corner is the red one
    assert CpuPreprocessor(PreprocessSettings())([image]).batch.shape == (1, 3, 224, 224)


def test_the_handler_answers_a_48_mp_jpeg_and_a_heic_and_refuses_a_png_of_108_mp(tmp_path):
    context = FakeContext(tmp_path, write_tiny_eager_archive(tmp_path))
    service = VisionService.from_context(context)
    png = encode(Image.new("1", (12_000, 9_000)), "PNG")
    answers = service.handle([{"data": phone_jpeg()}, {"data": HEIC.read_bytes()}, {"data": png}], context)
    assert context.statuses == {2: (413, "Payload Too Large")} and answers[2]["error"] == "image_too_large"
    assert all(label.startswith("class_") for answer in answers[:2] for label in answer)


def test_a_label_map_is_kept_within_max_pixels_and_its_shape():
    assert fit_pixels((9000, 12000), 40_000_000) == (5477, 7302)
    assert fit_pixels((300, 451), 40_000_000) == (300, 451)
