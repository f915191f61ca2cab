"""Header probe (formats, sizes, bombs) and pixel decode (modes, EXIF, truncation)."""

import numpy as np
import pytest
import torch
from PIL import Image, ImageOps

from tsvk.preprocess.decode import apply_orientation, decode_rgb, probe
from tsvk.common.errors import BadRequest, ImageTooLarge, UnsupportedFormat

from tests.support.handler_fakes import encode, noise_image

LIMIT = 10_000_000


@pytest.mark.parametrize("fmt", ["JPEG", "PNG", "WEBP", "BMP", "GIF"])
def test_each_format_decodes_to_rgb_uint8_chw(fmt):
    pixels = noise_image(40, 30)
    decoded = decode_rgb(probe(encode(pixels, fmt, **({"lossless": True} if fmt == "WEBP" else {})), LIMIT))
    assert decoded.dtype == torch.uint8 and tuple(decoded.shape) == (3, 30, 40)
    if fmt in ("PNG", "BMP", "WEBP"):  # lossless: the very same pixels
        assert torch.equal(decoded.permute(1, 2, 0), torch.from_numpy(pixels))


@pytest.mark.parametrize("mode", ["L", "LA", "RGBA", "P", "CMYK", "1", "I;16", "RGB"])
def test_every_mode_becomes_rgb(mode):
    image = Image.new(mode, (20, 10))
    fmt = "JPEG" if mode == "CMYK" else "PNG"
    decoded = decode_rgb(probe(encode(image, fmt), LIMIT))
    assert tuple(decoded.shape) == (3, 10, 20)


def test_cmyk_jpeg_colours_are_converted_not_reinterpreted():
    magenta = Image.new("CMYK", (16, 16), (0, 255, 0, 0))
    decoded = decode_rgb(probe(encode(magenta, "JPEG", quality=100), LIMIT))
    assert decoded[:, 8, 8].tolist() == pytest.approx([255, 0, 255], abs=3)


def test_sixteen_bit_greyscale_is_scaled_not_clipped():
    wide = np.array([[0, 32896, 65535]], dtype=np.uint16)  # 0, half, full
    decoded = decode_rgb(probe(encode(Image.fromarray(wide), "PNG"), LIMIT))
    assert decoded[0, 0].tolist() == [0, 128, 255]


def test_gif_gives_its_first_frame():
    frames = [Image.new("RGB", (8, 8), colour) for colour in ((255, 0, 0), (0, 0, 255))]
    data = encode(frames[0], "GIF", save_all=True, append_images=frames[1:])
    decoded = decode_rgb(probe(data, LIMIT))
    assert decoded[:, 4, 4].tolist() == [255, 0, 0]


@pytest.mark.parametrize("fmt", ["JPEG", "PNG"])
def test_exif_orientation_six_comes_out_rotated(fmt):
    image = Image.new("RGB", (40, 20), (255, 255, 255))
    image.paste((255, 0, 0), (0, 0, 10, 20))  # red band on the left edge
    exif = Image.Exif()
    exif[0x0112] = 6  # "rotate 90 clockwise to display"
    encoded = probe(encode(image, fmt, exif=exif, **({"quality": 100} if fmt == "JPEG" else {})), LIMIT)
    decoded = decode_rgb(encoded)
    assert encoded.orientation == 6
    assert tuple(decoded.shape) == (3, 40, 20)  # portrait now
    assert decoded[:, 2, 10].tolist() == pytest.approx([255, 0, 0], abs=8)  # left edge went to the top
    assert decoded[:, 37, 10].tolist() == pytest.approx([255, 255, 255], abs=8)


@pytest.mark.parametrize("orientation", range(1, 9))
def test_tensor_orientation_matches_pillow_for_all_eight_values(orientation):
    pixels = noise_image(9, 6)
    exif = Image.Exif()
    exif[0x0112] = orientation
    expected = np.array(ImageOps.exif_transpose(Image.open(__import__("io").BytesIO(encode(pixels, "PNG", exif=exif)))))
    mine = apply_orientation(torch.from_numpy(pixels).permute(2, 0, 1), orientation).permute(1, 2, 0).numpy()
    assert np.array_equal(mine, expected)


def test_bomb_is_refused_from_the_header_with_413():
    bomb = encode(Image.new("1", (12_000, 10_000)), "PNG")  # 120 MP, a few kB on the wire
    with pytest.raises(ImageTooLarge, match="12000x10000"):
        probe(bomb, LIMIT)


def test_limit_is_the_archive_setting_not_a_constant():
    data = encode(noise_image(100, 100), "PNG")
    probe(data, 10_000)
    with pytest.raises(ImageTooLarge, match="limit is 9999"):
        probe(data, 9_999)


@pytest.mark.parametrize(
    "data, message",
    [
        (b"", "empty"),
        (b"just some text, not an image", "not a recognised image"),
        (b"%PDF-1.7 not allowed", "not a recognised image"),
    ],
)
def test_non_images_are_bad_requests(data, message):
    with pytest.raises(BadRequest, match=message):
        probe(data, LIMIT)


@pytest.mark.parametrize("fmt", ["JPEG", "PNG"])
def test_truncated_image_fails_at_decode_with_400(fmt):
    data = encode(noise_image(200, 150), fmt)
    encoded = probe(data[: len(data) // 2], LIMIT)  # header intact
    with pytest.raises(BadRequest, match=f"cannot decode the {fmt} image") as info:
        decode_rgb(encoded)
    assert info.value.message.endswith(f"the {fmt} data is truncated or corrupt")  # tsvk's words, not the decoder's


@pytest.mark.parametrize("fmt", ["TIFF", "ICO"])
def test_known_but_unsupported_formats_are_415_naming_the_allowed_ones(fmt):
    with pytest.raises(UnsupportedFormat, match=f"{fmt} images are not supported; allowed formats: JPEG, PNG") as info:
        probe(encode(noise_image(), fmt), LIMIT)
    assert info.value.status == 415 and info.value.body()["error"] == "unsupported_format"


@pytest.mark.parametrize(("min_short_side", "shape"), [
    (0, (3, 1536, 2048)),  # not asked: full size
    (512, (3, 768, 1024)),  # 1/2: 1/4 would leave 384 < 512
    (256, (3, 384, 512)),  # 1/4
    (100, (3, 192, 256)),  # 1/8 is the smallest scale libjpeg has
    (1024, (3, 1536, 2048)),  # 1/2 would leave 768 < 1024: full size
])
def test_large_jpeg_is_decoded_at_the_smallest_scale_that_keeps_the_asked_size(min_short_side, shape):
    encoded = probe(encode(noise_image(2048, 1536), "JPEG", quality=90), LIMIT)
    assert tuple(decode_rgb(encoded, min_short_side).shape) == shape


def test_portrait_jpegs_are_reduced_by_their_shorter_side_too():
    encoded = probe(encode(noise_image(1536, 2048), "JPEG", quality=90), LIMIT)
    assert tuple(decode_rgb(encoded, 256).shape) == (3, 512, 384)


def test_reduced_jpeg_decode_applies_exif_orientation():
    image = Image.new("RGB", (2048, 1024), (255, 255, 255))
    image.paste((255, 0, 0), (0, 0, 512, 1024))  # red band on the left quarter
    exif = Image.Exif()
    exif[0x0112] = 6
    decoded = decode_rgb(probe(encode(image, "JPEG", exif=exif, quality=95), LIMIT), 256)
    assert tuple(decoded.shape) == (3, 512, 256)  # 1/4 scale, then portrait
    assert decoded[:, 10, 128].tolist() == pytest.approx([255, 0, 0], abs=8)  # left edge went to the top
    assert decoded[:, 500, 128].tolist() == pytest.approx([255, 255, 255], abs=8)


@pytest.mark.parametrize("orientation", range(1, 9))
def test_reduced_jpeg_decode_turns_each_orientation_as_pillow_shows_it(orientation):
    exif = Image.Exif()
    exif[0x0112] = orientation
    data = encode(noise_image(1024, 768), "JPEG", exif=exif, quality=90)
    with Image.open(__import__("io").BytesIO(data)) as image:
        image.draft("RGB", (256, 192))
        expected = np.array(ImageOps.exif_transpose(image))
    decoded = decode_rgb(probe(data, LIMIT), 192).permute(1, 2, 0).numpy()
    assert np.array_equal(decoded, expected)


@pytest.mark.parametrize("mode", ["CMYK", "L"])
def test_reduced_jpeg_decode_turns_any_mode_into_rgb(mode):
    decoded = decode_rgb(probe(encode(Image.new(mode, (2048, 1536)), "JPEG"), LIMIT), 256)
    assert tuple(decoded.shape) == (3, 384, 512)


def test_truncated_large_jpeg_fails_the_reduced_decode_with_400():
    data = encode(noise_image(2048, 1536), "JPEG", quality=90)
    with pytest.raises(BadRequest) as info:
        decode_rgb(probe(data[: len(data) // 2], LIMIT), 256)
    assert info.value.status == 400
