"""8-bit RGB and RGBA PNGs go through libspng (pyspng), pixel for pixel what Pillow gives; every PNG libspng would
answer otherwise (a damaged chunk, another depth or colour type, an animation, an EXIF orientation) goes to Pillow."""

import io
import zlib

import numpy as np
import pytest
import torch
from PIL import Image

from tsvk.common import features
from tsvk.common.errors import BadRequest
from tsvk.preprocess import png
from tsvk.preprocess.decode import decode_rgb, probe

from tests.support.handler_fakes import encode, noise_image

LIMIT = 10_000_000
pytest.importorskip("pyspng")


@pytest.fixture
def spng_calls(monkeypatch):
    """The PNGs pyspng was asked to decode (the real pyspng does the work)."""
    module, calls = features.png_decoder(), []
    real_load = module.load
    monkeypatch.setattr(module, "load", lambda data, fmt=None: calls.append(len(data)) or real_load(data, fmt))
    return calls


def pillow_rgb(data: bytes) -> np.ndarray:
    return np.array(Image.open(io.BytesIO(data)).convert("RGB"))


def alpha_noise(width: int, height: int) -> Image.Image:
    return Image.fromarray(np.random.default_rng(1).integers(0, 256, (height, width, 4), dtype=np.uint8), "RGBA")


@pytest.mark.parametrize("image, options", [
    (Image.fromarray(noise_image(61, 37)), {}),
    (alpha_noise(61, 37), {}),  # a screenshot's alpha channel is dropped, as Pillow's convert("RGB") drops it
    (Image.fromarray(noise_image(61, 37)), {"interlace": 1}),  # Adam7: Pillow writes it only when asked
], ids=["rgb", "rgba", "interlaced"])
def test_an_8_bit_truecolour_png_decodes_through_libspng_to_pillows_pixels(image, options, spng_calls):
    data = encode(image, "PNG", **options)
    decoded = decode_rgb(probe(data, LIMIT))
    assert spng_calls == [len(data)]
    assert torch.equal(decoded.permute(1, 2, 0), torch.from_numpy(pillow_rgb(data)))


def test_a_body_a_worker_received_into_a_bytearray_decodes_too(spng_calls):
    data = encode(noise_image(20, 10), "PNG")
    decoded = decode_rgb(probe(bytearray(data), LIMIT))
    assert spng_calls and torch.equal(decoded.permute(1, 2, 0), torch.from_numpy(noise_image(20, 10)))


def test_a_damaged_chunk_is_left_to_pillow_which_refuses_it_with_400(spng_calls):
    """pyspng has libspng use a chunk whose CRC does not match: without the walk's CRC check these bytes would decode."""
    data = bytearray(encode(noise_image(200, 150), "PNG"))
    data[len(data) // 2] ^= 0xFF  # one byte inside the pixel data
    assert not png.spng_decodes(data)
    with pytest.raises(BadRequest, match="cannot decode the PNG image"):
        decode_rgb(probe(bytes(data), LIMIT))
    assert spng_calls == []


def test_a_png_cut_short_is_left_to_pillow():
    data = encode(noise_image(200, 150), "PNG")
    assert not png.spng_decodes(data[: len(data) - 20])


def animated() -> bytes:
    frames = [Image.new("RGB", (8, 8), colour) for colour in ((255, 0, 0), (0, 0, 255))]
    return encode(frames[0], "PNG", save_all=True, append_images=frames[1:])


def with_orientation() -> bytes:
    exif = Image.Exif()
    exif[0x0112] = 6
    return encode(Image.fromarray(noise_image(12, 8)), "PNG", exif=exif)


def sixteen_bit_rgb(width: int = 6, height: int = 4) -> bytes:
    """A 16-bit RGB PNG, which Pillow writes no such file of: IHDR depth 16, colour type 2, unfiltered rows."""
    def chunk(kind: bytes, body: bytes) -> bytes:
        return len(body).to_bytes(4, "big") + kind + body + zlib.crc32(kind + body).to_bytes(4, "big")

    header = width.to_bytes(4, "big") + height.to_bytes(4, "big") + bytes([16, 2, 0, 0, 0])
    rows = b"".join(b"\x00" + b"\x9c\x40" * 3 * width for _ in range(height))
    return png.SIGNATURE + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


@pytest.mark.parametrize("data", [
    sixteen_bit_rgb(),
    encode(Image.new("P", (6, 4)), "PNG"),
    encode(Image.new("L", (6, 4)), "PNG"),
    encode(Image.new("I;16", (6, 4)), "PNG"),
    animated(),
    with_orientation(),
], ids=["rgb-16-bit", "palette", "grey", "grey-16-bit", "animated", "exif-orientation"])
def test_what_libspng_would_answer_otherwise_goes_to_pillow(data, spng_calls):
    assert not png.spng_decodes(data)
    assert decode_rgb(probe(data, LIMIT)).shape[0] == 3  # Pillow's answer
    assert spng_calls == []


def test_an_animated_png_gives_its_first_frame_and_an_exif_turn_is_applied(spng_calls):
    assert decode_rgb(probe(animated(), LIMIT))[:, 4, 4].tolist() == [255, 0, 0]
    assert tuple(decode_rgb(probe(with_orientation(), LIMIT)).shape) == (3, 12, 8)  # turned upright: portrait
    assert spng_calls == []


def test_without_pyspng_pillow_decodes_every_png(monkeypatch):
    monkeypatch.setattr(features, "png_decoder", lambda: None)
    data = encode(noise_image(20, 10), "PNG")
    assert not png.spng_decodes(data)
    assert torch.equal(decode_rgb(probe(data, LIMIT)).permute(1, 2, 0), torch.from_numpy(noise_image(20, 10)))
