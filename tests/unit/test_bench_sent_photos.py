"""The photos as sent (`tsvk bench --photos as-sent`): sizes, EXIF orientation, formats, twins, determinism, and files
that appear whole or not at all. The recipe runs at small sizes here (a 48 MP photo takes seconds); the sizes
themselves are checked as numbers. The HEIC, made by an encoder installed apart from tsvk, has its own tests
(test_bench_sent_heic.py); the photos here are the ones Pillow writes and reads itself."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image, ImageOps

from tsvk_tools.lab.bench import sent_photos
from tsvk_tools.lab.bench.sent_photos import PHOTOS, SIZES

SMALL = {"12mp": (96, 72), "24mp": (128, 96), "48mp": (160, 120), "4k": (128, 72)}
PILLOW_MADE = tuple(photo for photo in PHOTOS if photo.format != "HEIC")


@pytest.fixture
def small_sizes(monkeypatch):
    monkeypatch.setattr(sent_photos, "SIZES", SMALL)


def _pixels(path) -> np.ndarray:
    with Image.open(path) as image:
        return np.asarray(image.convert("RGB"), dtype=np.int16)


def test_the_sizes_are_phone_and_camera_sizes():
    megapixels = {name: round(w * h / 1e6, 1) for name, (w, h) in SIZES.items()}
    assert megapixels == {"12mp": 12.2, "24mp": 24.5, "48mp": 48.8, "4k": 8.3}
    assert {photo.size for photo in PHOTOS} == set(SIZES)


def test_the_proportions_are_the_stated_ones():
    assert sent_photos.proportions() == {"12.2 MP JPEG": 0.4, "12.2 MP HEIC": 0.1, "24.5 MP JPEG": 0.2, "48.8 MP JPEG": 0.1,
                                         "8.3 MP PNG": 0.1, "12.2 MP WEBP": 0.1}
    jpegs = [photo for photo in PHOTOS if photo.format == "JPEG"]
    assert all(photo.orientation in (6, 8) for photo in jpegs)
    assert {photo.progressive for photo in jpegs} == {True, False}


def test_each_photo_has_its_size_format_and_orientation(small_sizes, tmp_path):
    for files in sent_photos.build_set(tmp_path, PILLOW_MADE):
        photo = files.photo
        with Image.open(files.file) as image:
            assert image.format == photo.format
            assert image.size == SMALL[photo.size]  # stored: the sensor's landscape pixels
            assert image.getexif().get(0x0112, 1) == photo.orientation
            if photo.format == "JPEG":
                assert bool(image.info.get("progressive")) == photo.progressive
            displayed = ImageOps.exif_transpose(image)
            assert displayed.size == (SMALL[photo.size][::-1] if photo.sideways else SMALL[photo.size])


def test_a_sideways_photo_has_an_upright_and_a_stored_twin(small_sizes, tmp_path):
    sideways = [files for files in sent_photos.build_set(tmp_path, PILLOW_MADE) if files.photo.sideways]
    assert sideways and all(files.upright and files.stored for files in sideways)
    for files in sideways:
        with Image.open(files.upright) as upright, Image.open(files.stored) as stored:
            assert 0x0112 not in upright.getexif() and 0x0112 not in stored.getexif()
            assert upright.size == SMALL[files.photo.size][::-1]
        assert np.array_equal(_pixels(files.stored), _pixels(files.file)), "the stored twin is the same pixels"
        with Image.open(files.file) as sent:
            shown = np.asarray(ImageOps.exif_transpose(sent).convert("RGB"), dtype=np.int16)
        turned_wrong_way = Image.fromarray(_pixels(files.file).astype(np.uint8)).transpose(sent_photos.SIDEWAYS[files.photo.orientation])
        wrong = np.asarray(turned_wrong_way, dtype=np.int16)
        upright = _pixels(files.upright)
        assert np.abs(shown - upright).mean() < 8, "turned as its EXIF says, it is the upright twin (up to JPEG noise)"
        assert np.abs(wrong - upright).mean() > 3 * np.abs(shown - upright).mean(), "and not the photo turned the other way"


def test_the_set_is_made_the_same_every_time(small_sizes, tmp_path):
    first = sent_photos.build_set(tmp_path / "a", PILLOW_MADE)
    second = sent_photos.build_set(tmp_path / "b", PILLOW_MADE)
    for one, two in zip(first, second):
        assert one.file.read_bytes() == two.file.read_bytes()
    assert len({sent_photos.seed_of(photo) for photo in PHOTOS}) == len(PHOTOS)


def test_the_noise_makes_a_phone_sized_file(monkeypatch):
    """A 1 MP photo here: at thumbnail sizes JPEG's own overhead hides what the noise costs."""
    monkeypatch.setattr(sent_photos, "SIZES", {**SMALL, "12mp": (1152, 864)})
    photo = PHOTOS[0]
    clean = io.BytesIO()
    noisy = sent_photos.upright_pixels(photo)
    Image.fromarray(np.asarray(ImageOps.fit(Image.fromarray(sent_photos.photo_array(photo.source)), noisy.size))).save(
        clean, "JPEG", quality=sent_photos.QUALITY)
    assert len(sent_photos.encode(noisy, photo)) > 1.5 * len(clean.getvalue())  # 3.5x at 12 MP


def test_a_cached_set_is_read_not_made_again(small_sizes, tmp_path, monkeypatch):
    made = sent_photos.build_set(tmp_path, PILLOW_MADE)
    monkeypatch.setattr(sent_photos, "upright_pixels", lambda photo: pytest.fail(f"{photo.name} made again"))
    assert [files.file for files in sent_photos.build_set(tmp_path, PILLOW_MADE)] == [files.file for files in made]


def test_a_failed_build_leaves_no_file_behind(small_sizes, tmp_path, monkeypatch):
    encode = sent_photos.encode
    calls = []

    def failing(image, photo, orientation=1, encoder=None):
        calls.append(photo.name)
        if len(calls) == 2:
            raise OSError("disk full")
        return encode(image, photo, orientation, encoder)

    monkeypatch.setattr(sent_photos, "encode", failing)
    with pytest.raises(OSError, match="disk full"):
        sent_photos.build_set(tmp_path, PILLOW_MADE)
    folder = sent_photos.cache_folder(tmp_path)
    left = sorted(path.name for path in folder.iterdir())
    assert left == [f"{PHOTOS[0].name}-upright.jpg"], "only the whole twin written before the failure; no partial file"
    monkeypatch.setattr(sent_photos, "encode", encode)
    assert all(files.file.is_file() for files in sent_photos.build_set(tmp_path, PILLOW_MADE)), "the next build completes the set"


def test_a_new_version_of_the_set_leaves_each_photo_s_noise_as_it_was(monkeypatch):
    """The set's version names its folder; the noise is seeded from the pixels' recipe alone, so a photo added to the set
    leaves the others' bytes (and the labelled copies that borrow the recipe) as they were."""
    before = [sent_photos.seed_of(photo) for photo in PHOTOS]
    monkeypatch.setattr(sent_photos, "VERSION", sent_photos.VERSION + 1)
    assert [sent_photos.seed_of(photo) for photo in PHOTOS] == before
    monkeypatch.setattr(sent_photos, "RECIPE_VERSION", sent_photos.RECIPE_VERSION + 1)
    assert [sent_photos.seed_of(photo) for photo in PHOTOS] != before
