"""Photos as phones and cameras send them: 12, 24 and 48 MP JPEGs stored sideways with an EXIF orientation, a 12 MP
HEIC stored sideways as an iPhone stores it, a 4K PNG and a 12 MP WebP, generated once (seeded) and cached.

No package installable here ships full-resolution photographs (scikit-image's and imageio's standard images are
well under 1 MP), so each photo is one of scikit-image's real photographs cropped to the photo's shape
(portrait 3:4 upright for a sideways photo, 4:3 for the WebP, 16:9 for the PNG), upscaled with Lanczos to its size,
and given sensor-like noise: per pixel, shot noise whose spread grows with the square root of the level plus a
constant read noise, a little stronger in the blue channel. The noise makes the files as large as a phone's (a
12 MP JPEG at quality 90 is about 3 MB with it, 0.9 MB without), and a JPEG's entropy decoding, which no DCT
scaling reduces, costs in proportion to its size. The 4K PNG is a screen's picture (a screenshot or a render),
so it has none.

A JPEG is stored as a phone held upright stores it: the sensor's landscape pixels, with EXIF orientation 6 or 8
saying how to turn them upright. Each sideways photo has two twins for checking answers: `upright` (the same pixels
turned upright, no EXIF: the photo as displayed) and `stored` (the same JPEG with its EXIF left out: the photo as
stored).

HEIC is what iPhones send by default. The only HEIC encoder on PyPI, pillow-heif, bundles x265, which is GPL, and
tsvk depends on no GPL code (it decodes HEIC with pi-heif, libheif without an encoder): heic_encoder.py installs
pillow-heif apart from tsvk, only when the set is made, and runs it in an interpreter of its own. The HEIC is stored
as an iPhone stores it: the sensor's landscape pixels in a grid of 512x512 tiles, with EXIF orientation 6, which
libheif writes as the file's own rotation (`irot`) beside the EXIF; a HEIF reader applies the rotation and leaves the
EXIF's alone. Its quality is libheif's 50 (x265's CRF 25, preset medium): 2.3 MB at 12 MP, 0.8x the quality-90 JPEG
of the same pixels and within the 2-4 MB of an iPhone's 12 MP HEIC; libheif's 85 (CRF 7.5) makes 10 MB, more than
any phone writes. Its twins are HEICs too, written the same way without the rotation and the EXIF: `upright` the
pixels turned, `stored` the same pixels (x265 codes the same pixels to the same bytes), so the check tells a system
that applies the file's rotation from one that ignores it, and shows which systems cannot read HEIC at all. Where
pillow-heif cannot be installed (no package index within reach) or fails, the set is made without the HEIC and
build_set says so in one line; the bench's report names it.

Every file is written whole or not at all (fsutil.atomic_path), under a folder named after the set's version and
the Pillow and NumPy that made it, so a change of either makes the set anew instead of mixing two. The pixels' own
recipe has a version of its own (`RECIPE_VERSION`, which seeds the noise): a photo added to the set leaves the
others' bytes, and the labelled copies that borrow the recipe (labelled_as_sent.py), as they were.
"""

from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
from PIL import Image, ImageOps

from ...fsutil import atomic_path
from ...images import photo_array
from . import heic_encoder
from .heic_encoder import EncoderUnavailable

SET_NAME = "as-sent"
VERSION = 2  # raise when the set's photos or how one is stored change: the cache folder is named after it
RECIPE_VERSION = 1  # raise when the pixels' recipe (crop, upscale, noise and its seeds, JPEG settings) changes
QUALITY = 90  # what phone cameras write (about 90-95)
ORIENTATION_TAG = 0x0112  # EXIF Orientation
SIDEWAYS = {6: Image.Transpose.ROTATE_90, 8: Image.Transpose.ROTATE_270}  # upright -> stored, undone by exif_transpose
SIZES = {  # (width, height) of the sensor's landscape pixels
    "12mp": (4032, 3024),  # 12.2 MP: most phones' default
    "24mp": (5712, 4284),  # 24.5 MP: recent iPhones' default
    "48mp": (8064, 6048),  # 48.8 MP: a 48 MP sensor at full resolution
    "4k": (3840, 2160),  # a 4K screenshot or render
}
# Noise in 8-bit levels: read + shot * sqrt(level), per channel (blue is noisier on a Bayer sensor)
READ_NOISE = 2.0
SHOT_NOISE = (0.55, 0.47, 0.65)  # a 12 MP JPEG at quality 90 is then about 3 MB, as a phone's
STRIP_ROWS = 512  # noise is added a strip at a time: a 48 MP photo never needs its float copy whole


@dataclass(frozen=True)
class SentPhoto:
    """One photo of the set: what it is and how it is stored."""

    name: str
    source: str  # one of images.SKIMAGE_PHOTOS
    size: str  # a key of SIZES
    format: str  # JPEG, HEIC, PNG or WEBP
    orientation: int = 1  # EXIF orientation of a JPEG or HEIC (a HEIC's also as its rotation); 1: stored upright, no EXIF
    progressive: bool = False
    sensor: bool = True  # with sensor noise; a screenshot or render has none

    @property
    def suffix(self) -> str:
        return {"JPEG": ".jpg", "HEIC": ".heic", "PNG": ".png", "WEBP": ".webp"}[self.format]

    @property
    def sideways(self) -> bool:
        return self.orientation in SIDEWAYS

    @property
    def megapixels(self) -> float:
        width, height = SIZES[self.size]
        return round(width * height / 1e6, 1)

    def describe(self) -> str:
        """'12.2 MP JPEG, progressive, EXIF orientation 6 (chelsea)'; '12.2 MP HEIC, EXIF orientation 6, rotated by irot (coffee)'."""
        scan = ", progressive" if self.progressive else ", baseline" if self.format == "JPEG" else ""
        turn = f", EXIF orientation {self.orientation}" if self.sideways else ""
        rotated = ", rotated by irot" if self.sideways and self.format == "HEIC" else ""
        return f"{self.megapixels:g} MP {self.format}{scan}{turn}{rotated} ({self.source})"


# The set, each photo sent as often as the others: 40% 12 MP JPEGs, 10% a 12 MP HEIC (an iPhone's default), 20% 24 MP
# JPEGs, 10% 48 MP (all sideways, orientation 6 as a phone held upright writes, 8 held the other way), 10% a 4K PNG,
# 10% a 12 MP WebP. The HEIC took the place of a baseline 12 MP JPEG of the same photo and orientation.
PHOTOS = (
    SentPhoto("12mp-chelsea", "chelsea", "12mp", "JPEG", 6),
    SentPhoto("12mp-coffee-heic", "coffee", "12mp", "HEIC", 6),  # made only where pillow-heif installs (heic_encoder.py)
    SentPhoto("12mp-astronaut", "astronaut", "12mp", "JPEG", 8),
    SentPhoto("12mp-coffee-progressive", "coffee", "12mp", "JPEG", 6, progressive=True),
    SentPhoto("12mp-astronaut-progressive", "astronaut", "12mp", "JPEG", 6, progressive=True),
    SentPhoto("24mp-chelsea", "chelsea", "24mp", "JPEG", 6),
    SentPhoto("24mp-coffee-progressive", "coffee", "24mp", "JPEG", 8, progressive=True),
    SentPhoto("48mp-astronaut", "astronaut", "48mp", "JPEG", 6),
    SentPhoto("4k-coffee", "coffee", "4k", "PNG", sensor=False),  # a screenshot or render: no sensor noise
    SentPhoto("12mp-chelsea-webp", "chelsea", "12mp", "WEBP"),
)


@dataclass(frozen=True)
class SentFiles:
    """Where one photo of the set lies, and its twins where it is sideways."""

    photo: SentPhoto
    file: Path
    upright: Path | None = None  # the same pixels turned upright, no EXIF
    stored: Path | None = None  # the same JPEG without its EXIF


def cache_folder(cache_dir: Path) -> Path:
    """The set's folder: a change of recipe, Pillow or NumPy makes a new one."""
    import PIL

    return Path(cache_dir) / "photos" / f"{SET_NAME}-v{VERSION}-pillow{PIL.__version__}-numpy{np.__version__}"


def build_set(cache_dir: Path, photos: tuple[SentPhoto, ...] = PHOTOS, log: Callable[[str], object] = print) -> list[SentFiles]:
    """Every photo of the set on disk (made once, then read from the cache), in the set's order. A HEIC whose encoder
    cannot be installed or run is left out, with one line to `log`: a benchmark without it still measures the rest."""
    folder = cache_folder(cache_dir)
    made = []
    for photo in photos:
        try:
            made.append(_ensure(photo, folder, Path(cache_dir)))
        except EncoderUnavailable as err:
            log(f"sent photos: {photo.name} left out: {err}")
    return made


def left_out(made: list[str], photos: tuple[SentPhoto, ...] = PHOTOS) -> tuple[SentPhoto, ...]:
    """The photos of `photos` whose names are not among `made` (what build_set could not make)."""
    return tuple(photo for photo in photos if photo.name not in made)


def _ensure(photo: SentPhoto, folder: Path, cache_dir: Path) -> SentFiles:
    files = SentFiles(photo, folder / f"{photo.name}{photo.suffix}",
                      folder / f"{photo.name}-upright{photo.suffix}" if photo.sideways else None,
                      folder / f"{photo.name}-stored{photo.suffix}" if photo.sideways else None)
    wanted = [path for path in (files.file, files.upright, files.stored) if path is not None]
    if not all(path.is_file() for path in wanted):
        _write(photo, files, cache_dir)
    return files


def _write(photo: SentPhoto, files: SentFiles, cache_dir: Path) -> None:
    """Encode the photo and its twins; the sent file is renamed into place last, so its presence means all are there.
    A HEIC's encoder is installed first, so a failed install costs no pixels and leaves no file."""
    encoder = heic_encoder.installed_encoder(cache_dir) if photo.format == "HEIC" else None
    upright = upright_pixels(photo)
    if photo.sideways:
        stored = upright.transpose(SIDEWAYS[photo.orientation])
        _save(files.upright, encode(upright, photo, encoder=encoder))
        _save(files.stored, encode(stored, photo, encoder=encoder))
        _save(files.file, encode(stored, photo, orientation=photo.orientation, encoder=encoder))
    else:
        _save(files.file, encode(upright, photo, encoder=encoder))


def _save(path: Path, data: bytes) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def upright_pixels(photo: SentPhoto) -> Image.Image:
    """The photo as displayed: its source cropped to the shape, upscaled to the size, with seeded sensor noise."""
    width, height = SIZES[photo.size]
    shape = (height, width) if photo.sideways else (width, height)  # a sideways photo is portrait when upright
    source = Image.fromarray(photo_array(photo.source))
    return phone_pixels(source, shape, seed_of(photo) if photo.sensor else None)


def phone_pixels(source: Image.Image, shape: tuple[int, int], seed: int | None) -> Image.Image:
    """`source` (RGB) cropped to the (width, height) `shape`'s proportions and upscaled with Lanczos to it, with seeded
    sensor noise (`seed` None: none, a screen's picture). Shared by this set and `tsvk bench accuracy --as-sent`, so a
    labelled photo made phone-size is made exactly as the set's photos are."""
    upscaled = ImageOps.fit(source, shape, Image.Resampling.LANCZOS)
    pixels = np.asarray(upscaled, dtype=np.uint8).copy()
    if seed is not None:
        add_sensor_noise(pixels, seed)
    return Image.fromarray(pixels)


def seed_of(photo: SentPhoto) -> int:
    """A seed from the photo's recipe: the same photo always gets the same noise, two photos never share it."""
    return seed_from(str(photo))


def seed_from(recipe: str) -> int:
    """A seed from any text naming a photo's recipe, in the set's namespace (what `seed_of` hashes for the set's own)."""
    return int.from_bytes(hashlib.sha256(f"{SET_NAME}-v{RECIPE_VERSION}:{recipe}".encode()).digest()[:8], "little")


def add_sensor_noise(pixels: np.ndarray, seed: int) -> None:
    """Shot noise (spread ~ sqrt of the level) plus read noise, in place on an (H, W, 3) uint8 array, a strip at a time."""
    rng = np.random.default_rng(seed)
    shot = np.asarray(SHOT_NOISE, dtype=np.float32)
    for top in range(0, pixels.shape[0], STRIP_ROWS):
        strip = pixels[top:top + STRIP_ROWS].astype(np.float32)
        spread = READ_NOISE + shot * np.sqrt(strip)
        strip += spread * rng.standard_normal(strip.shape, dtype=np.float32)
        pixels[top:top + STRIP_ROWS] = np.clip(np.rint(strip), 0, 255).astype(np.uint8)


def encode(image: Image.Image, photo: SentPhoto, orientation: int = 1, encoder: Path | None = None) -> bytes:
    """The photo's bytes in its format; a JPEG or HEIC at phone quality, with an EXIF orientation when it is not 1.
    A HEIC needs `encoder`, the folder heic_encoder.installed_encoder installed pillow-heif into."""
    if photo.format == "JPEG":
        return encode_jpeg(image, photo.progressive, orientation)
    if photo.format == "HEIC":
        return encode_heic(image, encoder, orientation)
    buffer = io.BytesIO()
    if photo.format == "WEBP":
        image.save(buffer, format="WEBP", quality=QUALITY, method=4)
    else:
        image.save(buffer, format=photo.format, compress_level=6)
    return buffer.getvalue()


def encode_jpeg(image: Image.Image, progressive: bool = False, orientation: int = 1) -> bytes:
    """A JPEG as a phone camera writes it (quality QUALITY, no optimized tables), with an EXIF orientation when not 1."""
    buffer = io.BytesIO()
    extra = {"exif": orientation_exif(orientation).tobytes()} if orientation != 1 else {}
    image.save(buffer, format="JPEG", quality=QUALITY, progressive=progressive, optimize=False, **extra)
    return buffer.getvalue()


def encode_heic(image: Image.Image, encoder: Path | None, orientation: int = 1) -> bytes:
    """A HEIC as an iPhone writes it, by pillow-heif from `encoder` in an interpreter of its own (heic_encoder.py), with
    an EXIF orientation when not 1, which libheif also writes as the file's rotation."""
    if encoder is None:
        raise ValueError("a HEIC is encoded by pillow-heif from the folder heic_encoder.installed_encoder() returns, got no folder")
    return heic_encoder.encode(image, encoder, orientation_exif(orientation).tobytes() if orientation != 1 else None)


def orientation_exif(orientation: int) -> Image.Exif:
    """EXIF with the Orientation tag (and the maker a photo names), written with Pillow's own Exif."""
    exif = Image.Exif()
    exif[ORIENTATION_TAG] = orientation
    exif[0x010F] = "tsvk bench"  # Make
    return exif


def photos_of(set_name: str) -> tuple[SentPhoto, ...]:
    """The photos of a set: the whole one, or without its HEIC (the photos every Pillow-only peer reads)."""
    return PHOTOS if set_name == SET_NAME else tuple(photo for photo in PHOTOS if photo.format != "HEIC")


def proportions(photos: tuple[SentPhoto, ...] = PHOTOS) -> dict[str, float]:
    """Share of the requests of each size and format (each photo is sent as often as the others)."""
    shares: dict[str, float] = {}
    for photo in photos:
        key = f"{photo.megapixels:g} MP {photo.format}"
        shares[key] = shares.get(key, 0.0) + 1 / len(photos)
    return {key: round(share, 3) for key, share in shares.items()}
