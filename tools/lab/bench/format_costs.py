"""What each photo format costs the served CPU path: the probe (header, bounds) and the decode, per photo, in-process.

Photos are made here, in a temporary folder: a smooth gradient with sensor-like noise, at the sizes phones write,
encoded as a phone or a web service would (JPEG quality 90 baseline and progressive, PNG, WebP and AVIF quality
80). HEIC cannot be made here (tsvk ships no HEVC encoder): pass a HEIC with --heic, an iPhone's or the bench's own
(`tsvk bench --photos as-sent` makes `12mp-coffee-heic.heic` with an encoder installed apart: heic_encoder.py). Each
row is the fastest of --rounds decodes with the classifier's settings (resize 256: a large JPEG is decoded at its DCT
scale, every other format whole), on one thread and with the freed heap kept for reuse, as a worker of `tsvk config`'s
plan runs. Times are the process's CPU time, not the wall clock's, so a machine shared with other work still measures
the decoder's own cost.

    python tools/lab/bench/format_costs.py [--heic photo.heic] [--rounds 3] [--sizes 12,48]
"""

from __future__ import annotations

import argparse
import io
import platform
import time
from pathlib import Path
from typing import Iterator

import numpy as np
import torch
from PIL import Image

from tsvk.common import PreprocessSettings
from tsvk.model import cpu_flags
from tsvk.preprocess import allowed_formats, dct_short_side, decode_rgb, decoded_pixels, probe
from tsvk.worker import reuse_freed_heap

SIZES = {12: (4032, 3024), 48: (8064, 6048), 108: (12000, 9000)}  # MP -> the sizes phones write
ENCODINGS = {  # name -> (Pillow format, save options)
    "JPEG q90": ("JPEG", {"quality": 90}),
    "JPEG q90 progressive": ("JPEG", {"quality": 90, "progressive": True}),
    "PNG": ("PNG", {"compress_level": 6}),
    "WebP q80": ("WEBP", {"quality": 80}),
    "AVIF q80": ("AVIF", {"quality": 80, "speed": 8}),
}
NOT_WHOLE = ("JPEG",)  # formats decoded at a reduced scale where large: the other rows of a size above 40 MP are left out
MEASURED_PIXELS = 10**9  # every photo is timed; a served worker refuses a progressive JPEG over max_pixels (docs)
FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile")


def photo(width: int, height: int) -> Image.Image:
    rng = np.random.default_rng(0)
    y, x = np.linspace(0, 1, height, dtype=np.float32)[:, None], np.linspace(0, 1, width, dtype=np.float32)[None, :]
    channels = [a * y + b * x + c + rng.normal(0, 8, (height, width)).astype(np.float32)
                for a, b, c in ((150, 40, 40), (60, 120, 30), (20, 90, 60))]
    return Image.fromarray(np.clip(np.stack(channels, -1), 0, 255).astype(np.uint8))


def measure(name: str, data: bytes, settings: PreprocessSettings, rounds: int) -> str:
    """One table row: the format, its size, its bytes, the probe's and the decode's milliseconds, the pixels decoded."""
    side = dct_short_side(settings)
    started = time.process_time()
    image = probe(data, MEASURED_PIXELS, max_jpeg_pixels=MEASURED_PIXELS, min_short_side=side)
    probe_ms = (time.process_time() - started) * 1e3
    times = []
    for _ in range(rounds):
        started = time.process_time()
        decode_rgb(image, side)
        times.append(time.process_time() - started)
    pixels = decoded_pixels(image, side) / 1e6
    return (f"| {name} | {image.width}x{image.height} | {len(data) / 2**20:.1f} MiB | {probe_ms:.1f} | {min(times) * 1e3:.0f} | "
            f"{pixels:.1f} MP |")


def rows(sizes: list[int], heic: Path | None, rounds: int) -> Iterator[str]:
    """Each row as soon as it is measured."""
    settings = PreprocessSettings()
    for megapixels in sizes:
        picture = photo(*SIZES[megapixels])
        for name, (fmt, options) in ENCODINGS.items():
            if megapixels * 1e6 > settings.max_pixels and fmt not in NOT_WHOLE:
                continue
            buffer = io.BytesIO()
            picture.save(buffer, fmt, **options)
            yield measure(f"{name}, {megapixels} MP", buffer.getvalue(), settings, rounds)
    if heic is not None:
        yield measure(f"HEIC ({heic.name})", heic.read_bytes(), settings, rounds)


def machine() -> str:
    name = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                 if line.startswith("model name")), platform.processor())
    present = cpu_flags()
    flags = " ".join(flag for flag in FLAGS if flag in present) or "none of " + ", ".join(FLAGS)
    return f"{name}, {torch.get_num_threads()} thread(s), flags: {flags}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--heic", type=Path, help="a HEIC photo to time beside the made ones (an iPhone's)")
    parser.add_argument("--rounds", type=int, default=3, help="decodes per photo; the fastest is reported")
    parser.add_argument("--sizes", default="12,48", help=f"megapixels of the made photos, of {sorted(SIZES)}")
    args = parser.parse_args()
    torch.set_num_threads(1)
    reuse_freed_heap()  # as a worker keeps its freed heap: a photo decoded whole does not fault its buffers in again
    allowed_formats()  # the decoders registered, on one thread, before any photo is timed
    print(machine())
    print("| photo | size | bytes | probe, CPU ms | decode, CPU ms | decoded |\n|---|---|---|---|---|---|")
    for row in rows([int(s) for s in args.sizes.split(",")], args.heic, args.rounds):
        print(row, flush=True)


if __name__ == "__main__":
    main()
