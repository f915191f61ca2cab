"""Check an int8 artifact against the eager fp32 model on real photos held out from calibration.

A logit tolerance means nothing for int8 (every logit moves); what a user sees is the answer. So:
for a classifier the share of photos whose top-1 class is the same (agreement), and, where the
photos' labels are known, top-1 and top-5 accuracy of both and the top-1 drop; for a segmenter the
share of the photos' pixels whose class is the same. With random weights there is no accuracy to
keep: the numbers are printed and stored, the thresholds are not applied.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from tsvk.postprocess import first_tensor

from .. import defaults
from .backends import CompileTarget
from .calibration import PhotoSet, one_photo_batches
from ..errors import UsageError
from .verify_tasks import segmentation_sizes


@dataclass(frozen=True)
class AgreementReport:
    photos: int
    held_out: bool  # False: measured on the calibration photos themselves (random weights, no directory)
    top1_agreement: float
    min_top1_agreement: float
    accuracy: dict  # {"fp32": {"top1", "top5"}, "int8": {...}} where labels are known, else {}
    max_top1_drop: float
    enforced: bool  # False with random weights: accuracy cannot be measured
    passed: bool
    tolerance: str = "int8: top-1 agreement and accuracy on held-out photos"

    def to_dict(self) -> dict:
        return asdict(self)

    @property
    def top1_drop(self) -> float | None:
        return self.accuracy["fp32"]["top1"] - self.accuracy["int8"]["top1"] if self.accuracy else None

    def describe(self) -> str:
        verdict = "PASS" if self.passed else "FAIL"
        where = "held-out" if self.held_out else "calibration (none held out)"
        text = (f"verification {verdict}: {self.photos} {where} photos, top-1 agreement with eager fp32 "
                f"{self.top1_agreement:.1%} (needed {self.min_top1_agreement:.0%})")
        if self.accuracy:
            fp32, int8 = self.accuracy["fp32"], self.accuracy["int8"]
            text += (f"; top-1 {fp32['top1']:.1%} -> {int8['top1']:.1%} (drop {self.top1_drop:+.1%}, allowed "
                     f"{self.max_top1_drop:.1%}), top-5 {fp32['top5']:.1%} -> {int8['top5']:.1%}")
        return text + ("" if self.enforced else "; NOT ENFORCED: random weights, accuracy cannot be measured")


def logits(model, batch, max_batch: int):
    """Run `batch` through `model` in chunks of at most max_batch (what the artifact accepts)."""
    import torch

    with torch.no_grad():
        return torch.cat([model(batch[i:i + max_batch]).float() for i in range(0, len(batch), max_batch)])


def accuracy(scores, labels: list[int]) -> dict:
    import torch

    truth = torch.tensor(labels)
    top = scores.topk(min(5, scores.shape[1]), dim=1).indices
    return {"top1": (top[:, 0] == truth).float().mean().item(), "top5": (top == truth[:, None]).any(1).float().mean().item()}


def check_shapes(compiled, eager_fp32, target: CompileTarget) -> None:
    """Batch 1 and max_batch give eager's shapes (the photos may not include either size)."""
    import torch

    with torch.no_grad():
        for batch in sorted({1, target.max_batch}):
            x = target.example(batch)
            got, want = compiled(x).shape, eager_fp32(x).shape
            if got != want:
                raise UsageError(f"int8 model returned shape {tuple(got)} at batch {batch}; eager returned {tuple(want)}")


def verify_int8(compiled, eager_fp32, target: CompileTarget, photos: PhotoSet, held_out: bool, enforce: bool,
                min_agreement: float | None = None) -> AgreementReport:
    """Agreement (and accuracy, with labels) of int8 vs eager fp32; `enforce` False reports without judging."""
    check_shapes(compiled, eager_fp32, target)
    reference = logits(eager_fp32, photos.batch, target.max_batch)
    got = logits(compiled, photos.batch, target.max_batch)
    agreement = (got.argmax(1) == reference.argmax(1)).float().mean().item()
    scores = {"fp32": accuracy(reference, photos.labels), "int8": accuracy(got, photos.labels)} if photos.labels else {}
    floor = defaults.INT8_MIN_TOP1_AGREEMENT if min_agreement is None else min_agreement
    report = AgreementReport(len(photos), held_out, agreement, floor, scores, defaults.INT8_MAX_TOP1_DROP, enforce, True)
    drop_ok = report.top1_drop is None or report.top1_drop <= defaults.INT8_MAX_TOP1_DROP + 1e-9
    passed = not enforce or (agreement >= floor and drop_ok)
    return AgreementReport(**{**asdict(report), "passed": passed})


@dataclass(frozen=True)
class PixelAgreementReport:
    photos: int
    held_out: bool
    pixel_agreement: float
    min_pixel_agreement: float
    enforced: bool
    passed: bool
    tolerance: str = "int8: label-map pixel agreement with eager fp32 on held-out photos"

    def to_dict(self) -> dict:
        return asdict(self)

    def describe(self) -> str:
        verdict = "PASS" if self.passed else "FAIL"
        where = "held-out" if self.held_out else "calibration (none held out)"
        return (f"verification {verdict}: {self.photos} {where} photos at their served sizes, label-map pixel agreement with "
                f"eager fp32 {self.pixel_agreement:.2%} (needed {self.min_pixel_agreement:.0%})"
                + ("" if self.enforced else "; NOT ENFORCED: random weights, accuracy cannot be measured"))


def verify_segmenter_int8(compiled, eager_fp32, target: CompileTarget, photos: PhotoSet, held_out: bool, enforce: bool,
                          min_agreement: float | None = None) -> PixelAgreementReport:
    """Pixel agreement of int8 vs eager fp32 label maps, photo by photo; shapes checked at sizes the photos may not have."""
    import torch

    with torch.no_grad():
        for seed, (batch, height, width) in enumerate(segmentation_sizes(target)):
            x = target.example(batch, seed=seed, size=(height, width))
            got, want = first_tensor(compiled(x)).shape, first_tensor(eager_fp32(x)).shape
            if got != want:
                raise UsageError(f"int8 model returned shape {tuple(got)} for input {tuple(x.shape)}; eager returned {tuple(want)}")
        agree = total = 0
        for photo in one_photo_batches(photos.batch):
            reference = first_tensor(eager_fp32(photo)).argmax(1)
            agree += (first_tensor(compiled(photo)).argmax(1) == reference).sum().item()
            total += reference.numel()
    share = agree / total if total else 0.0
    floor = defaults.SEGMENT_INT8_MIN_PIXEL_AGREEMENT if min_agreement is None else min_agreement
    return PixelAgreementReport(len(photos), held_out, share, floor, enforce, not enforce or share >= floor)
