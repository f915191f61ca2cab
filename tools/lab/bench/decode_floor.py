"""The decode floor: the least a JPEG of each size costs to become the model's input on one core, beside what tsvk's
own CPU path (the handler's: probe, libjpeg-turbo or Pillow decode at a DCT scale, batched resize, crop, normalize)
costs on the same photo. Measured in-process, one thread: the fastest of a few calls of each, taken in turns after one
unmeasured call of each (on a shared machine other work only ever adds time, so the fastest call is the cost).

The floor decodes with Pillow's `draft` at the smallest DCT scale that leaves both sides >= the resize (libjpeg-turbo's
scaled IDCT: 1/8 for a 12 MP photo and resize 256), turns it upright, resizes bilinearly without antialiasing (the
image is already near the size), crops and normalizes in NumPy. Entropy decoding is not scaled: every bit of the file
is read at any scale, so a larger file costs more however small the output. tsvk keeps at least 2x the resize
(`DCT_OVERSAMPLE`, 1/4 for the same photo) for its antialiased resize: the ratio is the price of that, and of the rest
of its path. torchvision's `decode_jpeg` has no scaled decode, so Pillow's is the floor; the full-size decode
(libjpeg-turbo through torchvision, what tsvk runs on a JPEG too small to scale) is reported beside them.

The other formats of a set (PNG, WebP, HEIC) have no scaled decode: their floor is the same path decoded whole with
Pillow and pi-heif, or tsvk's own path where that is cheaper (libspng decodes an 8-bit PNG in half Pillow's time).
With the model's cost per image, the floors of every photo say what a machine's vCPUs allow at most
(photo_report.allowance): what an offline run over the same photos can be held to.
"""

from __future__ import annotations

import io
import time
from dataclasses import replace
from typing import Callable, Sequence

import numpy as np
import torch
from PIL import Image, ImageOps

from tsvk.common import PreprocessSettings, RequestError
from tsvk.preprocess import CpuPreprocessor, allowed_formats, decode_rgb, probe
from tsvk.worker import reuse_freed_heap

from ...archive.task_preprocess import preprocess_from_weights

MAX_PIXELS = 10**9  # the floor is measured on every photo; which ones a served archive refuses is the report's business
REPEATS = 7  # calls of each per photo (a --quick run: QUICK_REPEATS)
QUICK_REPEATS = 3


def for_run(model: str, photos: Sequence, quick: bool) -> list[dict]:
    """The floor of a classifier's photos, with the preprocessing its torchvision weights were trained with; this process's
    heap kept for reuse as a worker's is (the least a decode costs is not its buffers' page faults, photo after photo)."""
    import torchvision.models as tvm

    settings = preprocess_from_weights(tvm.get_model_weights(model).DEFAULT)
    reuse_freed_heap()
    return measure(photos, settings, QUICK_REPEATS if quick else REPEATS)


def floor_input(data: bytes, settings: PreprocessSettings) -> np.ndarray:
    """The model's (3, crop, crop) input from a photo at the least decoding work Pillow allows."""
    with Image.open(io.BytesIO(data)) as image:
        image.draft("RGB", (settings.resize, settings.resize))
        upright = ImageOps.exif_transpose(image).convert("RGB")
    scale = settings.resize / min(upright.size)
    resized = upright.resize((round(upright.width * scale), round(upright.height * scale)), Image.Resampling.BILINEAR)
    left, top = (resized.width - settings.crop) // 2, (resized.height - settings.crop) // 2
    cropped = np.asarray(resized.crop((left, top, left + settings.crop, top + settings.crop)), dtype=np.float32)
    mean, std = np.asarray(settings.mean, dtype=np.float32), np.asarray(settings.std, dtype=np.float32)
    return ((cropped / 255.0 - mean) / std).transpose(2, 0, 1)


def tsvk_input(data: bytes, preprocessor: CpuPreprocessor) -> torch.Tensor:
    """The same photo through the handler's CPU path, as a batch of one."""
    return preprocessor([probe(data, MAX_PIXELS)]).batch


def full_decode(data: bytes) -> torch.Tensor:
    """The whole photo decoded at full size (no DCT scaling), as tsvk decodes a JPEG too small to scale."""
    return decode_rgb(probe(data, MAX_PIXELS))


def fastest_ms(calls: dict[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    """The fastest of `repeats` calls of each, in milliseconds, the calls taken in turns after one unmeasured call each."""
    for call in calls.values():
        call()
    best = {name: float("inf") for name in calls}
    for _ in range(repeats):
        for name, call in calls.items():
            started = time.perf_counter()
            call()
            best[name] = min(best[name], time.perf_counter() - started)
    return {name: round(1e3 * seconds, 1) for name, seconds in best.items()}


def measure(photos: Sequence, settings: PreprocessSettings, repeats: int) -> list[dict]:
    """One row per photo of `photos` (bench Photo objects), on one thread: floor and tsvk, in ms, and a JPEG's full
    decode; photos no decoder here opens (a HEIC without pi-heif) are left out."""
    wide = replace(settings, max_pixels=MAX_PIXELS, max_batch_pixels=MAX_PIXELS)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    allowed_formats.cache_clear()  # the HEIC and AVIF readers take torch's threads when registered: one, as a worker's
    try:
        preprocessor = CpuPreprocessor(wide)
        return [_row(photo, wide, preprocessor, repeats) for photo in photos if _tsvk_reads(photo.data)]
    finally:
        torch.set_num_threads(threads)
        allowed_formats.cache_clear()


def _row(photo, settings: PreprocessSettings, preprocessor: CpuPreprocessor, repeats: int) -> dict:
    data = photo.data
    jpeg = _is_jpeg(data)
    calls = {"floor": lambda: floor_input(data, settings), "tsvk": lambda: tsvk_input(data, preprocessor)}
    ms = fastest_ms({**calls, "full": lambda: full_decode(data)} if jpeg else calls, repeats)
    if not jpeg:  # no scaled decode: the least any decoder here takes
        ms["floor"] = min(ms["floor"], ms["tsvk"])
    with Image.open(io.BytesIO(data)) as image:
        megapixels, fmt = round(image.width * image.height / 1e6, 1), image.format
    return {"photo": photo.name, "kind": photo.kind, "format": fmt, "megapixels": megapixels, "bytes": len(data),
            "floor_ms": ms["floor"], "tsvk_ms": ms["tsvk"],
            "tsvk_vs_floor": round(ms["tsvk"] / ms["floor"], 2) if ms["floor"] else None, "full_decode_ms": ms.get("full")}


def _tsvk_reads(data: bytes) -> bool:
    """Whether tsvk's probe takes the photo; probing registers the HEIC and AVIF readers tsvk has, so the floor's
    Pillow opens them too."""
    try:
        probe(data, MAX_PIXELS)
    except RequestError:
        return False
    return True


def _is_jpeg(data: bytes) -> bool:
    return data[:3] == b"\xff\xd8\xff"
