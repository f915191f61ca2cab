"""How far the served CPU preprocessing is from torchvision's reference transforms, stage by stage.

The reference is what a classifier's weights were evaluated with: PIL decode, `transforms.Resize`
(shorter side, bilinear, antialiased), `CenterCrop`, `ToTensor`, `Normalize`. The served side is the
handler's own CPU path (`tsvk.preprocess.decode` and `tsvk.preprocess`), and the final tensor is made exactly as
int8 calibration and verification make it: `CpuPreprocessor` over the photos, 16 at a time.

For each stage it prints the largest and mean absolute difference over every photo (decode, resize
and crop in uint8 levels; the normalized tensor in its own units and in levels), and how many photos
it compared. Photos the served path decodes at a reduced DCT scale (`preprocess.jpeg_dct_scaling`, a
JPEG at least 4x the resize on its shorter side) are counted apart: their decode has another size, and
their later stages carry the reduced decode's documented difference (docs/handler.md).

It imports nothing from tsvk_tools, so it runs against any revision's run time:
    PYTHONPATH=<checkout>/handlers python tools/lab/bench/preprocess_drift.py --images DIR --save a.pt
    python tools/lab/bench/preprocess_drift.py --images DIR --against a.pt    # this checkout against a.pt
"""

from __future__ import annotations

import argparse
import io
import json
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torchvision.transforms as T
import torchvision.transforms.v2.functional as F
from PIL import Image

from tsvk.common import PreprocessSettings
from tsvk.preprocess import CpuPreprocessor, DCT_OVERSAMPLE, INTERPOLATION_MODES, decode_rgb, probe, resize_crop_stack

STAGES = ("decode", "resize", "crop", "normalize")
REDUCED = " (reduced DCT decode)"  # the row suffix of photos decoded at a reduced scale
CHUNK = 16  # photos per CpuPreprocessor call, as int8 calibration preprocesses them
SUFFIXES = (".jpg", ".jpeg", ".png")


@dataclass
class StageDiff:
    """The largest and summed absolute difference of one stage, over the photos that could be compared."""

    max_abs: float = 0.0
    abs_sum: float = 0.0
    values: int = 0
    photos: int = 0
    skipped: int = 0
    worst_photo: str = ""

    def add(self, name: str, served: torch.Tensor, reference: torch.Tensor) -> None:
        if served.shape != reference.shape:
            self.skipped += 1
            return
        diff = (served.double() - reference.double()).abs()
        if diff.max().item() > self.max_abs or not self.worst_photo:
            self.max_abs, self.worst_photo = max(self.max_abs, diff.max().item()), name
        self.abs_sum += diff.sum().item()
        self.values += diff.numel()
        self.photos += 1

    @property
    def mean_abs(self) -> float:
        return self.abs_sum / self.values if self.values else 0.0


@dataclass
class DriftReport:
    settings: dict
    stages: dict[str, StageDiff] = field(default_factory=lambda: {stage + group: StageDiff() for group in ("", REDUCED)
                                                                  for stage in STAGES[group == REDUCED:]})

    def to_dict(self) -> dict:
        return {"settings": self.settings, "stages": {name: {**vars(diff), "mean_abs": diff.mean_abs}
                                                      for name, diff in self.stages.items()}}


def reference_stages(data: bytes, settings: PreprocessSettings) -> dict[str, torch.Tensor]:
    """torchvision's reference classification transforms on a PIL image, each stage's output."""
    pil = Image.open(io.BytesIO(data)).convert("RGB")
    resized = T.Resize(settings.resize, interpolation=T.InterpolationMode.BILINEAR, antialias=True)(pil)
    cropped = T.CenterCrop(settings.crop)(resized)
    normalized = T.Normalize(settings.mean, settings.std)(T.ToTensor()(cropped))
    return {"decode": T.PILToTensor()(pil), "resize": T.PILToTensor()(resized), "crop": T.PILToTensor()(cropped),
            "normalize": normalized}


def served_stages(data: bytes, settings: PreprocessSettings) -> dict[str, torch.Tensor]:
    """The served CPU path's decode, resize (as `resize_and_crop` calls it) and resize + crop of one photo."""
    min_short_side = DCT_OVERSAMPLE * settings.resize if settings.jpeg_dct_scaling else 0
    decoded = decode_rgb(probe(data, settings.max_pixels), min_short_side)
    resized = F.resize(decoded.unsqueeze(0), [settings.resize], interpolation=INTERPOLATION_MODES[settings.interpolation],
                       antialias=settings.antialias)[0]
    return {"decode": decoded, "resize": resized, "crop": resize_crop_stack([decoded], settings)[0]}


def served_batches(payloads: list[bytes], settings: PreprocessSettings) -> torch.Tensor:
    """The normalized NCHW tensor int8 calibration and verification feed the model."""
    preprocessor = CpuPreprocessor(settings)
    parts = []
    for start in range(0, len(payloads), CHUNK):
        result = preprocessor([probe(data, settings.max_pixels) for data in payloads[start:start + CHUNK]])
        if result.failed:
            raise SystemExit(f"photo {start + min(result.failed)} cannot be preprocessed: {next(iter(result.failed.values()))}")
        parts.append(result.batch)
    return torch.cat(parts)


def measure(photos: list[Path], settings: PreprocessSettings) -> tuple[DriftReport, torch.Tensor]:
    payloads = [photo.read_bytes() for photo in photos]
    report = DriftReport({k: v for k, v in vars(settings).items() if k in ("resize", "crop", "mean", "std", "interpolation",
                                                                              "antialias", "jpeg_dct_scaling")})
    served_batch = served_batches(payloads, settings)
    for index, (photo, data) in enumerate(zip(photos, payloads)):
        reference, served = reference_stages(data, settings), served_stages(data, settings)
        served["normalize"] = served_batch[index]
        group = REDUCED if served["decode"].shape != reference["decode"].shape else ""
        for stage in STAGES[bool(group):]:
            report.stages[stage + group].add(photo.name, served[stage], reference[stage])
    return report, served_batch


def table(report: DriftReport, level: float) -> str:
    rows = ["| stage | photos compared | max abs diff | mean abs diff | worst photo |", "|---|---|---|---|---|"]
    for name, diff in report.stages.items():
        unit = f" ({diff.max_abs / level:.2f} levels)" if name.startswith("normalize") else " levels"
        skipped = f" ({diff.skipped} other size)" if diff.skipped else ""
        rows.append(f"| {name} | {diff.photos}{skipped} | {diff.max_abs:.6g}{unit} | {diff.mean_abs:.4g} | {diff.worst_photo} |")
    return "\n".join(rows)


def against(names: list[str], batch: torch.Tensor, saved: Path) -> str:
    """This run's normalized tensors against those another revision saved, photo by photo."""
    other = torch.load(saved, weights_only=True)
    if other["names"] != names:
        raise SystemExit(f"{saved} holds other photos than this run")
    diff = (batch - other["batch"]).abs()
    differing = int((diff.flatten(1).max(1).values > 0).sum())
    return (f"against {saved}: max abs diff {diff.max().item():.6g}, mean {diff.mean().item():.4g}, "
            f"{differing} of {len(names)} photos differ")


def triple(text: str) -> tuple[float, float, float]:
    values = tuple(float(v) for v in text.split(","))
    if len(values) != 3:
        raise argparse.ArgumentTypeError(f"expected three comma-separated numbers r,g,b, got {text!r}")
    return values  # type: ignore[return-value]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--images", type=Path, required=True, help="a directory of JPEG or PNG photos")
    p.add_argument("--resize", type=int, default=256)
    p.add_argument("--crop", type=int, default=224)
    p.add_argument("--mean", type=triple, default=PreprocessSettings.mean)
    p.add_argument("--std", type=triple, default=PreprocessSettings.std)
    p.add_argument("--limit", type=int, default=0, help="at most this many photos, in name order (0: all)")
    p.add_argument("--exact-jpeg-decode", action="store_true", help="decode large JPEGs at full size, as --exact-jpeg-decode builds do")
    p.add_argument("--save", type=Path, help="write the photos' names and normalized tensors here")
    p.add_argument("--against", type=Path, help="compare the normalized tensors with those a --save wrote")
    p.add_argument("--json", type=Path, help="write the per-stage figures here")
    args = p.parse_args(argv)
    photos = sorted(f for f in args.images.iterdir() if f.suffix.lower() in SUFFIXES)[:args.limit or None]
    settings = PreprocessSettings(resize=args.resize, crop=args.crop, mean=args.mean, std=args.std,
                                  jpeg_dct_scaling=not args.exact_jpeg_decode)
    report, batch = measure(photos, settings)
    print(f"{len(photos)} photos from {args.images}; served: {Path(CpuPreprocessor.__module__.replace('.', '/'))} "
          f"({__import__('tsvk').__file__}); reference: torchvision {__import__('torchvision').__version__} PIL transforms")
    print(table(report, level=1 / (255 * min(settings.std))))
    names = [photo.name for photo in photos]
    if args.save:
        torch.save({"names": names, "batch": batch}, args.save)
    if args.against:
        print(against(names, batch, args.against))
    if args.json:
        args.json.write_text(json.dumps(report.to_dict(), indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
