"""Real photos for int8: some to calibrate the quantizer, the others held out to verify the result.

Photos are preprocessed by the handler's own CPU path (`tsvk.preprocess`), with the archive's resize,
crop, mean and std, so the quantizer sees the activations a worker will see: for a classifier one
NCHW batch of crops, for a segmenter one (1, 3, H, W) tensor per photo at the size the worker
resizes it to (the aspect ratio is kept). A directory is split
by position in name order (2 of every 5 calibrate, `defaults.CALIBRATION_SHARE`), so both halves
span the directory rather than its first classes. Labels are known when the directory holds a
`wnids.txt` (ImageNet's 1000 wnids, one a line, in class order) and photos named `<wnid>_...`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from tsvk.common import task_kind
from tsvk.preprocess import CpuPreprocessor, Normalizer, probe
from tsvk.tasks import resize_groups

from .. import defaults
from ..errors import UsageError
from ..images import SKIMAGE_PHOTOS, image_bytes

PHOTO_SUFFIXES = (".jpg", ".jpeg", ".png")
WNIDS_FILE = "wnids.txt"


@dataclass
class PhotoSet:
    """Preprocessed photos (float32 NCHW) with their names and, where known, their class indices."""

    names: list[str]
    batch: object  # torch.Tensor (N, 3, H, W); for a segmenter a list of (1, 3, H, W), one size per photo
    labels: list[int] | None = None

    def __len__(self) -> int:
        return len(self.names)


def one_photo_batches(batch) -> list:
    """Each photo as a batch of one, whether the photos are one NCHW tensor or a list of them."""
    return list(batch.split(1)) if hasattr(batch, "split") else list(batch)


@dataclass
class Photos:
    """What int8 needs (calibration photos, held-out photos) or bf16 (held-out photos only), and their provenance."""

    calibration: PhotoSet | None
    held_out: PhotoSet | None
    provenance: dict = field(default_factory=dict)


def list_photos(directory: Path, option: str = "--calibration") -> list[Path]:
    """The photos of `directory` in name order; `option` names the flag that gave it, for the errors."""
    if not Path(directory).is_dir():
        raise UsageError(f"{option} {directory} is not a directory; give a directory of JPEG or PNG photos")
    photos = sorted(p for p in Path(directory).iterdir() if p.suffix.lower() in PHOTO_SUFFIXES)
    if not photos:
        raise UsageError(f"{option} {directory} holds no photos ({', '.join(PHOTO_SUFFIXES)})")
    return photos


def split(photos: Sequence[Path]) -> tuple[list[Path], list[Path]]:
    """Calibration and held-out photos: every photo whose position falls in the first share of each
    block of 5 calibrates; each side capped (`CALIBRATION_MAX_IMAGES`, `HELD_OUT_MAX_IMAGES`)."""
    per_five = max(1, round(5 * defaults.CALIBRATION_SHARE))
    calibration = [p for i, p in enumerate(photos) if i % 5 < per_five]
    held_out = [p for i, p in enumerate(photos) if i % 5 >= per_five]
    return calibration[:defaults.CALIBRATION_MAX_IMAGES], held_out[:defaults.HELD_OUT_MAX_IMAGES]


def names_digest(names: Sequence[str]) -> str:
    return hashlib.sha256("\n".join(names).encode()).hexdigest()


def preprocess_files(files: Sequence[Path], settings, directory: Path | None = None, task: str = "classify") -> PhotoSet:
    """Photos as the worker's CPU preprocessing makes them; labels from `wnids.txt` when there is one."""
    return preprocess_bytes([f.name for f in files], [f.read_bytes() for f in files], settings,
                            imagenet_labels(files, directory or (files[0].parent if files else Path("."))), task)


def preprocess_bytes(names: list[str], payloads: list[bytes], settings, labels: list[int] | None = None,
                     task: str = "classify") -> PhotoSet:
    import torch

    preprocessor = CpuPreprocessor(settings)
    crops = task_kind(task).crops  # else each photo at its own size, resized as the task does it
    parts = []
    for start in range(0, len(payloads), 16):  # a few at a time: decoded photos are large
        chunk = [probe(data, settings.max_pixels) for data in payloads[start:start + 16]]
        batch, failed = _crops(preprocessor, chunk) if crops else _resized_photos(preprocessor, chunk, settings)
        if failed:
            index, err = next(iter(failed.items()))
            raise UsageError(f"photo {names[start + index]} cannot be preprocessed: {err}")
        parts.append(batch)
    return PhotoSet(list(names), torch.cat(parts) if crops else [photo for part in parts for photo in part], labels)


def _crops(preprocessor, chunk) -> tuple:
    result = preprocessor(chunk)
    return result.batch, result.failed


def _resized_photos(preprocessor, chunk, settings) -> tuple[list, dict]:
    """One (1, 3, H, W) tensor per photo, resized and normalized as the segmentation task does it."""
    decoded, failed = preprocessor.decode(chunk)
    normalize = Normalizer(settings, preprocessor.device)
    return [resize_groups([decoded[i]], settings, normalize)[0][1] for i in sorted(decoded)], failed


def imagenet_labels(files: Sequence[Path], directory: Path) -> list[int] | None:
    wnids_file = Path(directory) / WNIDS_FILE
    if not wnids_file.is_file():
        return None
    index = {wnid.strip(): i for i, wnid in enumerate(wnids_file.read_text().split())}
    labels = [index.get(f.name.split("_", 1)[0]) for f in files]
    return None if None in labels else labels  # type: ignore[return-value]


def skimage_photos(settings, task: str = "classify") -> PhotoSet:
    """scikit-image's bundled photos: what random-weight builds calibrate on when no directory is given."""
    return preprocess_bytes(list(SKIMAGE_PHOTOS), [image_bytes(f"skimage:{n}") for n in SKIMAGE_PHOTOS], settings, task=task)


def int8_photos(directory: Path | None, settings, random_weights: bool, task: str = "classify") -> Photos:
    """The photos an int8 build uses; real weights need a directory, random ones fall back to scikit-image."""
    if directory is None:
        if not random_weights:
            raise UsageError("--precision int8 with trained weights needs --calibration DIR: a directory of real photos "
                             f"like those the model will serve (a few hundred; {defaults.CALIBRATION_SHARE:.0%} calibrate, "
                             "the rest verify accuracy); without it the quantized model's accuracy is unknown")
        photos = skimage_photos(settings, task)
        return Photos(photos, None, _provenance("skimage", photos, None))
    calibration_files, held_out_files = split(list_photos(directory))
    if not held_out_files and not random_weights:
        raise UsageError(f"--calibration {directory} holds {len(calibration_files)} photo(s): too few to hold any out for "
                         "verification; give a few hundred")
    calibration = preprocess_files(calibration_files, settings, directory, task)
    held_out = preprocess_files(held_out_files, settings, directory, task) if held_out_files else None
    return Photos(calibration, held_out, _provenance(str(directory), calibration, held_out))


def accuracy_photos(directory: Path, settings, task: str = "classify") -> Photos:
    """bf16's photos: nothing calibrates, so every photo of the directory (up to `HELD_OUT_MAX_IMAGES`, spread over
    it as `split` spreads them) judges the artifact against eager fp32."""
    photos = list_photos(directory, "--accuracy-photos")
    step = max(1, -(-len(photos) // defaults.HELD_OUT_MAX_IMAGES))
    held_out = preprocess_files(photos[::step][:defaults.HELD_OUT_MAX_IMAGES], settings, directory, task)
    return Photos(None, held_out, {"directory": str(directory), "held_out_images": len(held_out),
                                   "held_out_names_sha256": names_digest(held_out.names),
                                   "labels": "wnids.txt" if held_out.labels is not None else "unknown"})


def _provenance(source: str, calibration: PhotoSet, held_out: PhotoSet | None) -> dict:
    return {
        "directory": source,
        "images": len(calibration),
        "names_sha256": names_digest(calibration.names),
        "held_out_images": len(held_out) if held_out is not None else 0,
        "held_out_names_sha256": names_digest(held_out.names) if held_out is not None else "",
        "labels": "wnids.txt" if held_out is not None and held_out.labels is not None else "unknown",
    }

