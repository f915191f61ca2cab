"""The HEIC of the photos as sent: made by pillow-heif installed apart from tsvk and run in an interpreter of its own
(tools/lab/bench/heic_encoder.py), read upright at 12 MP by tsvk's own decoder (pi-heif), never importable from tsvk's
interpreter, and left out, with nothing half-made, where its encoder cannot be installed.

pillow-heif is installed once for the module (pip, from the package index) and the HEIC made once at its real size
(three 12 MP encodes, about 30 s on two cores); the other tests run the recipe at small sizes. Where no package index
can be reached, the tests that need the encoder skip, saying so.
"""

from __future__ import annotations

import importlib.util
import io
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

import numpy as np
import pi_heif
import pytest
from PIL import Image

from tsvk.preprocess import decode_rgb, probe
from tsvk.preprocess.heif_items import declared_sizes
from tsvk_tools.lab.bench import heic_encoder, photo_report, sent_photos
from tsvk_tools.lab.bench.options import BenchOptions
from tsvk_tools.lab.bench.result_document import photo_set
from tsvk_tools.lab.bench.sent_photos import PHOTOS, SIZES

HEIC = next(photo for photo in PHOTOS if photo.format == "HEIC")
JPEG = PHOTOS[0]
SMALL = {"12mp": (96, 72), "24mp": (128, 96), "48mp": (160, 120), "4k": (128, 72)}
MAX_PIXELS = 40_000_000  # the handler's default preprocess.max_pixels


@pytest.fixture(scope="module")
def encoder_cache(tmp_path_factory) -> Path:
    """A cache with pillow-heif installed in it, as building the set installs it."""
    cache = tmp_path_factory.mktemp("heic-cache")
    try:
        heic_encoder.installed_encoder(cache)
    except heic_encoder.EncoderUnavailable as err:
        pytest.skip(f"pillow-heif cannot be installed here (pip reaches no package index?): {err}")
    return cache


@pytest.fixture(scope="module")
def made(encoder_cache) -> sent_photos.SentFiles:
    """The set's HEIC and its twins at their real size, made once."""
    files = sent_photos.build_set(encoder_cache, (HEIC,))
    assert [made.photo for made in files] == [HEIC], "the HEIC is in the set where its encoder installs"
    return files[0]


@pytest.fixture
def small_sizes(monkeypatch):
    monkeypatch.setattr(sent_photos, "SIZES", SMALL)


@pytest.fixture
def shared_encoder(encoder_cache, monkeypatch):
    """Any cache finds the module's installed encoder (one pip install for the module)."""
    installed = heic_encoder.encoder_folder(encoder_cache)
    monkeypatch.setattr(heic_encoder, "encoder_folder", lambda cache_dir: installed)


def _decoded(path: Path) -> np.ndarray:
    """The file as tsvk's CPU path decodes it: (3, H, W) uint8, upright."""
    return decode_rgb(probe(path.read_bytes(), MAX_PIXELS)).numpy()


def test_the_set_has_a_12_mp_heic_among_its_photos():
    assert HEIC.size == "12mp" and SIZES["12mp"] == (4032, 3024) and HEIC.megapixels == 12.2
    assert HEIC.sideways and HEIC.suffix == ".heic"
    assert sent_photos.proportions()["12.2 MP HEIC"] == 0.1


def test_the_heic_is_a_phone_s_12_mp_photo_stored_sideways(made):
    data = made.file.read_bytes()
    assert data[4:12] == b"ftypheic" and 1.0e6 < len(data) < 4.0e6, "an iPhone's 12 MP HEIC is 2-4 MB"
    assert (4032, 3024) in declared_sizes(data) and (512, 512) in declared_sizes(data), "landscape pixels in 512-px tiles"
    assert b"irot" in data, "the orientation is the file's own rotation"
    exif = Image.Exif()
    exif.load(pi_heif.open_heif(io.BytesIO(data)).info["exif"])
    assert exif[sent_photos.ORIENTATION_TAG] == 6, "and its EXIF says it too, as an iPhone's does"


def test_tsvk_decodes_the_heic_upright_at_12_mp(made):
    image = probe(made.file.read_bytes(), MAX_PIXELS)
    assert (image.format, image.width, image.height, image.orientation) == ("HEIF", 3024, 4032, 1)  # libheif turns it
    sent = _decoded(made.file)
    assert sent.shape == (3, 4032, 3024)
    assert np.abs(sent.astype(np.int16) - _decoded(made.upright)).mean() < 8, "as its upright twin, up to HEVC's loss"


def test_the_heic_s_stored_twin_is_the_same_pixels_without_the_rotation(made):
    stored = _decoded(made.stored)
    assert stored.shape == (3, 3024, 4032)
    turned = np.rot90(stored, k=-1, axes=(1, 2))  # orientation 6: turn 90 degrees clockwise to display
    assert np.array_equal(_decoded(made.file), turned), "x265 codes the same pixels to the same bytes"


def test_building_the_set_leaves_pillow_heif_out_of_tsvk_s_interpreter(made, encoder_cache):
    encoder = heic_encoder.encoder_folder(encoder_cache)
    assert (encoder / "pillow_heif").is_dir(), "installed in the cache's own folder"
    assert "pillow_heif" not in sys.modules and importlib.util.find_spec("pillow_heif") is None
    assert not [entry for entry in sys.path if Path(entry).resolve().is_relative_to(encoder_cache.resolve())]
    with pytest.raises(PackageNotFoundError):
        distribution("pillow-heif")
    fresh = subprocess.run([sys.executable, "-c", "import pillow_heif"], capture_output=True, text=True, timeout=120)
    assert fresh.returncode != 0 and "No module named 'pillow_heif'" in fresh.stderr, "nothing added to tsvk's site-packages"


def test_the_heic_is_made_the_same_every_time(small_sizes, shared_encoder, tmp_path):
    first = sent_photos.build_set(tmp_path / "a", (HEIC,))[0]
    second = sent_photos.build_set(tmp_path / "b", (HEIC,))[0]
    for one, two in ((first.file, second.file), (first.upright, second.upright), (first.stored, second.stored)):
        assert one.read_bytes() == two.read_bytes()


def test_a_failed_encoder_install_leaves_the_heic_out_and_no_file_behind(small_sizes, tmp_path, monkeypatch):
    """pip itself fails: no index and no wheels folder to install from, as on a machine without a network."""
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "no-wheels"))
    said = []
    made = sent_photos.build_set(tmp_path, (JPEG, HEIC), log=said.append)
    assert [files.photo for files in made] == [JPEG], "the rest of the set is made"
    assert len(said) == 1 and HEIC.name in said[0] and "pip install pillow-heif" in said[0], said
    assert not list(tmp_path.rglob("*.heic")), "no HEIC, whole or partial"
    assert not any((tmp_path / "heic-encoder").iterdir()), "no encoder folder, whole or partial"


def test_an_encoder_that_fails_leaves_no_heic(small_sizes, shared_encoder, tmp_path, monkeypatch):
    broken = tmp_path / "broken_encode.py"
    broken.write_text("import sys\nsys.exit('x265 crashed')\n")
    monkeypatch.setattr(heic_encoder, "SCRIPT", broken)
    said = []
    assert sent_photos.build_set(tmp_path, (HEIC,), log=said.append) == []
    assert len(said) == 1 and "x265 crashed" in said[0], said
    assert not list(tmp_path.rglob("*.heic"))


def test_the_report_names_a_photo_left_out():
    sent = [photo.name for photo in PHOTOS if photo is not HEIC]
    document = photo_set(BenchOptions(photos="as-sent"), sent)["photo_set"]
    assert document["left_out"] == [HEIC.describe()] and HEIC.describe() not in document["photos"]
    assert "12.2 MP HEIC" not in document["proportions"] and document["proportions"]["12.2 MP JPEG"] == 0.444
    lines = photo_report.photo_lines({"photo_set": document, "systems": {}})
    assert len([line for line in lines if "Left out" in line]) == 1
    assert photo_set(BenchOptions(photos="as-sent"), [photo.name for photo in PHOTOS])["photo_set"]["left_out"] == []


def test_the_set_without_the_heic_is_the_whole_set_less_it_and_names_nothing_left_out():
    chosen = sent_photos.photos_of("as-sent-no-heic")
    assert chosen == tuple(photo for photo in PHOTOS if photo is not HEIC) and sent_photos.photos_of("as-sent") == PHOTOS
    options = BenchOptions(photos="as-sent-no-heic")
    assert options.as_sent and {"torchserve_draft", "litserve_draft"} <= set(options.systems)
    document = photo_set(options, [photo.name for photo in chosen])["photo_set"]
    assert document["name"] == "as-sent-no-heic" and document["left_out"] == [] and HEIC.describe() not in document["photos"]
    assert sum(document["proportions"].values()) == pytest.approx(1.0, abs=0.01)
