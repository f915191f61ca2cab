"""Encode one photo as HEIC with pillow-heif: raw 8-bit RGB in on stdin, the .heic file's bytes out on stdout.

pillow-heif's wheels carry x265, which is GPL, so tsvk never imports it and never installs it into its own environment:
heic_encoder.py installs it into a folder of its own and runs this file in a separate interpreter, which puts that
folder first on sys.path and imports pillow-heif from there alone. Nothing here imports tsvk, so this process holds the
encoder and the photo's pixels and nothing else.

    python -I heic_encode.py --encoder FOLDER --size 4032x3024 --quality 50 --preset medium --tile 512 [--exif HEX] < rgb > out
"""

from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--encoder", type=Path, required=True, help="the folder pillow-heif was installed into (pip --target)")
    parser.add_argument("--size", required=True, help="WIDTHxHEIGHT of the raw RGB on stdin")
    parser.add_argument("--quality", type=int, required=True, help="libheif's quality, 0-100 (x265's CRF is (100 - quality) / 2)")
    parser.add_argument("--preset", default="medium", help="x265's speed preset (libheif's own default is slow)")
    parser.add_argument("--tile", type=int, default=0, help="grid tile size in pixels, as a phone writes (0: one coded image)")
    parser.add_argument("--exif", default="", help="EXIF as hex; its orientation becomes the file's own rotation (irot)")
    return parser.parse_args(argv)


def load_encoder(folder: Path):
    """pillow_heif from `folder` and nowhere else: a copy found elsewhere on sys.path would mean the folder is not used."""
    sys.path.insert(0, str(folder))
    import pillow_heif  # only from `folder`, in this process alone: see the module's docstring

    if not Path(pillow_heif.__file__).resolve().is_relative_to(folder.resolve()):
        raise SystemExit(f"pillow_heif was imported from {pillow_heif.__file__}, not from {folder}")
    return pillow_heif


def encode(encoder, size: tuple[int, int], rgb: bytes, args: argparse.Namespace, exif: bytes | None) -> bytes:
    """The HEIC file's bytes; pillow-heif turns an EXIF orientation into the file's rotation, as a phone's HEIC has it."""
    out = io.BytesIO()
    encoder.encode("RGB", size, rgb, out, quality=args.quality, tile_size=args.tile, exif=exif, enc_params={"preset": args.preset})
    return out.getvalue()


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    width, height = (int(side) for side in args.size.split("x"))
    encoder = load_encoder(args.encoder)
    data = encode(encoder, (width, height), sys.stdin.buffer.read(), args, bytes.fromhex(args.exif) or None)
    sys.stdout.buffer.write(data)


if __name__ == "__main__":
    main()
