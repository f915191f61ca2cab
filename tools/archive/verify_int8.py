"""Check an int8 artifact against the eager fp32 model on real photos held out from calibration, and a bf16 one
on labelled photos given for the purpose (`--accuracy-photos`): both are judged the same way.

A logit tolerance means nothing for int8 (every logit moves); what a user sees is the answer, and
what a user measures is accuracy. So for a classifier whose held-out photos carry labels, top-1 and
top-5 accuracy of both decide: each may fall by at most `Int8Limits.max_drop`. The share of photos
whose top-1 class is the same as fp32's (agreement) is reported beside them; it decides where the
photos carry no labels, and also with labels when the user asks for a floor (`--tolerance`).
Agreement alone refuses models that are as accurate as fp32: a near tie between two classes flips
either way, right as often as wrong (EfficientNet-Lite0 with its ImageNet weights: 96.0% agreement,
top-1 86.0% -> 86.0%, docs/int8.md). For a segmenter: the share of the photos' pixels whose class is
the same. With random weights there is no accuracy to keep: the numbers are printed and stored, the
thresholds are not applied.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from tsvk.tasks import first_tensor

from .. import defaults
from .backends import CompileTarget
from .calibration import PhotoSet, one_photo_batches
from ..errors import UsageError
from .verify_tasks import segmentation_sizes

ACCURACY = "accuracy"  # the labels' top-1 and top-5 decide
AGREEMENT = "agreement"  # top-1 agreement with eager fp32 decides


@dataclass(frozen=True)
class Int8Limits:
    """What an int8 build must keep, as the user asked for it (None: the default for the photos at hand)."""

    min_agreement: float | None = None  # asked for (--tolerance): agreement decides too, even with labels
    max_drop: float = defaults.INT8_MAX_ACCURACY_DROP  # labels: top-1 and top-5 may each fall by this much (0.01: 1 point)

    def __post_init__(self) -> None:
        if not 0.0 <= self.max_drop <= 1.0:
            raise UsageError(f"--max-accuracy-drop must be a fraction between 0 and 1 (0.01 is one point), got {self.max_drop}")


@dataclass(frozen=True)
class AgreementReport:
    photos: int
    held_out: bool  # False: measured on the calibration photos themselves (random weights, no directory)
    top1_agreement: float
    min_top1_agreement: float | None  # None: agreement is reported, not judged (labelled photos, no floor asked for)
    accuracy: dict  # {"fp32": {"top1", "top5"}, "int8": {...}} where labels are known, else {}
    max_top1_drop: float
    enforced: bool  # False with random weights: accuracy cannot be measured
    passed: bool
    judged_by: tuple[str, ...] = ()  # ACCURACY and/or AGREEMENT
    failed: tuple[str, ...] = ()  # the criteria that refused it: "top-1 drop", "top-5 drop", AGREEMENT
    max_top5_drop: float | None = None
    tolerance: str = "int8: accuracy on labelled held-out photos, else top-1 agreement with eager fp32"
    precision: str = "int8"  # the artifact's: the key of its scores in `accuracy`

    def to_dict(self) -> dict:
        return asdict(self)

    @property
    def top1_drop(self) -> float | None:
        return self.accuracy["fp32"]["top1"] - self.accuracy[self.precision]["top1"] if self.accuracy else None

    @property
    def top5_drop(self) -> float | None:
        return self.accuracy["fp32"]["top5"] - self.accuracy[self.precision]["top5"] if self.accuracy else None

    def describe(self) -> str:
        verdict = "PASS" if self.passed else "FAIL"
        where = "held-out" if self.held_out else "calibration (none held out)"
        judged = f", judged by {' and '.join(self.judged_by)}" if self.enforced else ""
        text = f"verification {verdict}: {self.photos} {where} photos{judged}"
        if self.accuracy:
            fp32, compiled = self.accuracy["fp32"], self.accuracy[self.precision]
            text += (f"; top-1 {fp32['top1']:.1%} -> {compiled['top1']:.1%} (drop {_points(self.top1_drop)}, allowed "
                     f"{_points(self.max_top1_drop)}), top-5 {fp32['top5']:.1%} -> {compiled['top5']:.1%} "
                     f"(drop {_points(self.top5_drop)}, allowed {_points(self.max_top5_drop)})")
        text += f"; top-1 agreement with eager fp32 {self.top1_agreement:.1%}"
        text += f" (needed {self.min_top1_agreement:.0%})" if self.min_top1_agreement is not None else " (reported, not judged)"
        if self.failed:
            text += f"; failed: {', '.join(self.failed)}"
        return text + ("" if self.enforced else "; NOT ENFORCED: random weights, accuracy cannot be measured")

    def remedy(self) -> str:
        """How a user who accepts this result builds it anyway, criterion by criterion."""
        ways = []
        drops = [drop for name, drop in (("top-1 drop", self.top1_drop), ("top-5 drop", self.top5_drop)) if name in self.failed]
        if drops:
            drop = _thousandths(max(drops), math.ceil)
            ways.append(f"allow the accuracy drop with --max-accuracy-drop {drop} (make: MAX_ACCURACY_DROP={drop})")
        if AGREEMENT in self.failed:
            floor = _thousandths(self.top1_agreement, math.floor)
            ways.append(f"lower the agreement floor with --tolerance 0,0,{floor} (make: TOLERANCE=0,0,{floor})"
                        + ("" if self.accuracy else ", or label the photos (wnids.txt and <wnid>_*.JPEG names) so accuracy decides"))
        return "; ".join(ways) + " - only if you accept it"


def _thousandths(value: float, rounding) -> str:
    """`value` to three decimals, rounded the way that lets the measured result pass (ceil a drop, floor a floor)."""
    return f"{rounding(round(value * 1000, 6)) / 1000:.3f}"


def _points(drop: float | None) -> str:
    return "n/a" if drop is None else f"{100 * drop:+.1f} points"


def logits(model, batch, max_batch: int, dtype=None):
    """Run `batch` through `model` in chunks of at most max_batch (what the artifact accepts), each chunk in
    `dtype` where given (a bf16 artifact takes bf16 input), the logits back in float32."""
    import torch

    with torch.no_grad():
        return torch.cat([model(batch[i:i + max_batch].to(dtype or batch.dtype)).float()
                          for i in range(0, len(batch), max_batch)])


def accuracy(scores, labels: list[int]) -> dict:
    import torch

    truth = torch.tensor(labels)
    top = scores.topk(min(5, scores.shape[1]), dim=1).indices
    return {"top1": (top[:, 0] == truth).sum().item() / len(truth), "top5": (top == truth[:, None]).any(1).sum().item() / len(truth)}


def check_shapes(compiled, eager_fp32, target: CompileTarget) -> None:
    """Batch 1 and max_batch give eager's shapes (the photos may not include either size)."""
    import torch

    with torch.no_grad():
        for batch in sorted({1, target.max_batch}):
            x = target.example(batch)
            got, want = compiled(x).shape, eager_fp32(x.float()).shape  # x is in the artifact's dtype; eager's is fp32
            if got != want:
                raise UsageError(f"{target.precision} model returned shape {tuple(got)} at batch {batch}; eager returned "
                                 f"{tuple(want)}")


def verify_int8(compiled, eager_fp32, target: CompileTarget, photos: PhotoSet, held_out: bool, enforce: bool,
                limits: Int8Limits | None = None) -> AgreementReport:
    """Accuracy (with labels) and agreement of int8 vs eager fp32; `enforce` False reports without judging."""
    check_shapes(compiled, eager_fp32, target)
    reference = logits(eager_fp32, photos.batch, target.max_batch)
    got = logits(compiled, photos.batch, target.max_batch, target.input_dtype)
    agreement = (got.argmax(1) == reference.argmax(1)).sum().item() / len(got)  # a count over photos, exactly
    compiled_name = target.precision
    scores = {"fp32": accuracy(reference, photos.labels), compiled_name: accuracy(got, photos.labels)} if photos.labels else {}
    return judge_int8(len(photos), held_out, agreement, scores, enforce, limits or Int8Limits(), compiled_name)


def judge_int8(photos: int, held_out: bool, agreement: float, scores: dict, enforce: bool, limits: Int8Limits,
               precision: str = "int8") -> AgreementReport:
    """The verdict: accuracy decides where there are labels, agreement where there are none or a floor was asked for."""
    judged_by = ((ACCURACY,) if scores else ()) + ((AGREEMENT,) if not scores or limits.min_agreement is not None else ())
    floor = None if AGREEMENT not in judged_by else (defaults.INT8_MIN_TOP1_AGREEMENT if limits.min_agreement is None
                                                     else limits.min_agreement)
    report = AgreementReport(photos, held_out, agreement, floor, scores, limits.max_drop, enforce, True, judged_by,
                             max_top5_drop=limits.max_drop if scores else None, precision=precision,
                             tolerance=f"{precision}: accuracy on labelled held-out photos, else top-1 agreement with eager fp32")
    failed = []
    if scores:
        failed += [name for name, drop in (("top-1 drop", report.top1_drop), ("top-5 drop", report.top5_drop))
                   if drop > limits.max_drop + 1e-9]
    if floor is not None and agreement < floor - 1e-9:
        failed.append(AGREEMENT)
    failed = failed if enforce else []
    return AgreementReport(**{**asdict(report), "passed": not failed, "failed": tuple(failed)})


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

    def remedy(self) -> str:
        floor = _thousandths(self.pixel_agreement, math.floor)
        return f"lower the pixel agreement floor with --tolerance 0,0,{floor} (make: TOLERANCE=0,0,{floor}) only if you accept it"


def verify_segmenter_int8(compiled, eager_fp32, target: CompileTarget, photos: PhotoSet, held_out: bool, enforce: bool,
                          limits: Int8Limits | None = None) -> PixelAgreementReport:
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
    asked = (limits or Int8Limits()).min_agreement
    floor = defaults.SEGMENT_INT8_MIN_PIXEL_AGREEMENT if asked is None else asked
    return PixelAgreementReport(len(photos), held_out, share, floor, enforce, not enforce or share >= floor)
