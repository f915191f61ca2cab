"""Check a compiled detector or segmenter against its eager model before it goes into an archive.

Segmentation compares logits as classification does, and the label maps pixel by pixel, on inputs of
sizes other than the one the artifact was traced with (its height and width are dynamic). Detection
compares the backbone's raw outputs (every feature map, as logits are compared, the absolute bound
scaled to maps smaller than 1), then matches each
eager box to a compiled box of the same label (IoU) and compares their scores and, for Mask R-CNN,
their mask pixels. A detector with random weights scores every box about alike and below any useful
threshold: verification keeps every box (score threshold 0 on both sides), and since the order of
equal scores is arbitrary (FCOS keeps its top 1,000 of thousands of tied candidates), the box match is
reported but only the raw outputs decide; with trained weights both decide.
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass

from tsvk.tasks import detections, first_tensor, set_score_threshold

from .. import defaults
from .backends import CompileTarget
from ..errors import UsageError
from .verify import Tolerance, exact_fp32, tolerance_for


@dataclass(frozen=True)
class SegmentationReport:
    sizes: tuple[tuple[int, int, int], ...]  # (batch, height, width) of each check
    max_abs_diff: float
    allowed_abs_diff: float
    pixel_agreement: float
    min_pixel_agreement: float
    passed: bool
    tolerance: str = ""

    def to_dict(self) -> dict:
        return {**asdict(self), "sizes": [list(s) for s in self.sizes]}

    def describe(self) -> str:
        verdict = "PASS" if self.passed else "FAIL"
        shapes = ", ".join(f"{b}x{h}x{w}" for b, h, w in self.sizes)
        return (f"verification {verdict}: inputs {shapes}, max |diff| {self.max_abs_diff:.3g} (allowed {self.allowed_abs_diff:.3g}), "
                f"pixel agreement {self.pixel_agreement:.4%} (needed {self.min_pixel_agreement:.2%}); tolerance {self.tolerance}")


def segmentation_sizes(target: CompileTarget) -> list[tuple[int, int, int]]:
    """Batch 1 landscape and max_batch portrait, neither the traced size: the dynamic dimensions are exercised."""
    height, width = target.size
    return sorted({(1, height, width + 37), (target.max_batch, width - 11, height)})


def verify_segmenter(compiled, eager_fp32, target: CompileTarget, tolerance: Tolerance | None = None) -> SegmentationReport:
    import torch

    tolerance = tolerance or tolerance_for(target.device, target.precision)
    sizes = segmentation_sizes(target)
    worst, largest, agree, total = 0.0, 0.0, 0, 0
    with torch.no_grad():
        for seed, (batch, height, width) in enumerate(sizes):
            x = target.example(batch, seed=seed, size=(height, width))
            with exact_fp32():
                reference = first_tensor(eager_fp32(x.float())).float()
            got = first_tensor(compiled(x)).float()
            if got.shape != reference.shape:
                raise UsageError(f"compiled model returned shape {tuple(got.shape)} for input {tuple(x.shape)}; eager returned "
                                 f"{tuple(reference.shape)}")
            worst = max(worst, (got - reference).abs().max().item())
            largest = max(largest, reference.abs().max().item())
            agree += (got.argmax(1) == reference.argmax(1)).sum().item()
            total += reference[:, 0].numel()
    allowed = tolerance.atol + tolerance.rtol * largest
    share = agree / total
    needed = defaults.SEGMENT_VERIFY_MIN_PIXEL_AGREEMENT
    return SegmentationReport(tuple(sizes), worst, allowed, share, needed, worst <= allowed and share >= needed, tolerance.basis)


@dataclass(frozen=True)
class DetectionReport:
    images: int
    feature_max_diff: float
    feature_allowed_diff: float
    head_max_diff: float | None  # an R-CNN box head's class logits and box deltas on the eager proposals
    head_allowed_diff: float | None
    reference_boxes: int
    matched_share: float
    min_matched_share: float
    max_score_diff: float
    allowed_score_diff: float
    mask_agreement: float | None
    boxes_decide: bool
    passed: bool
    note: str = ""

    def to_dict(self) -> dict:
        return asdict(self)

    def describe(self) -> str:
        verdict = "PASS" if self.passed else "FAIL"
        masks = "" if self.mask_agreement is None else f", mask pixel agreement {self.mask_agreement:.3%}"
        needed = f"needed {self.min_matched_share:.0%}" if self.boxes_decide else "reported, not enforced"
        head = ("" if self.head_max_diff is None else
                f"; box head outputs max |diff| {self.head_max_diff:.3g} (allowed {self.head_allowed_diff:.3g})")
        return (f"verification {verdict}: {self.images} images of mixed sizes, backbone outputs max |diff| "
                f"{self.feature_max_diff:.3g} (allowed {self.feature_allowed_diff:.3g}){head}; {self.reference_boxes} eager boxes, "
                f"{self.matched_share:.1%} matched by a compiled box of the same label at IoU >= {defaults.DETECT_VERIFY_MIN_IOU} "
                f"({needed}), max score diff of matched boxes {self.max_score_diff:.2g} (allowed "
                f"{self.allowed_score_diff:.2g}){masks}; {self.note}")


def match_boxes(reference: dict, got: dict, min_iou: float) -> list[tuple[int, int]]:
    """(reference index, compiled index) pairs: each eager box, best score first, takes the unclaimed compiled
    box of its label that overlaps it most, if that overlap reaches `min_iou`."""
    import torch
    from torchvision.ops import box_iou

    if len(reference["boxes"]) == 0 or len(got["boxes"]) == 0:
        return []
    iou = box_iou(reference["boxes"].float(), got["boxes"].float())
    iou[reference["labels"][:, None] != got["labels"][None, :]] = -1.0
    pairs, claimed = [], torch.zeros(iou.shape[1], dtype=torch.bool)
    for row in torch.argsort(reference["scores"], descending=True).tolist():
        overlaps = iou[row].masked_fill(claimed, -1.0)
        best = int(overlaps.argmax())
        if overlaps[best] >= min_iou:
            pairs.append((row, best))
            claimed[best] = True
    return pairs


@dataclass(frozen=True)
class DetectorBounds:
    """What a compiled detector must keep: its raw outputs within `tolerance`, the box head's within
    `head_rtol` of their largest value, matched scores within `score_atol`, and every eager box scoring at
    least `min_score` matched. int8 moves the box head (and so every score a little); fp32 moves nothing."""

    tolerance: Tolerance
    head_rtol: float
    score_atol: float
    min_score: float


def detector_bounds(target: CompileTarget, tolerance: Tolerance | None) -> DetectorBounds:
    if target.precision != "int8":
        tolerance = tolerance or tolerance_for(target.device, target.precision)
        return DetectorBounds(tolerance, tolerance.rtol, defaults.DETECT_VERIFY_SCORE_ATOL, 0.0)
    backbone = tolerance or tolerance_for(target.device, "fp32")
    basis = (f"int8: the backbone as {backbone.basis}; the box head's fully connected layers in dynamic int8, its outputs "
             f"within {defaults.DETECT_INT8_HEAD_RTOL:.0%} of their largest value; boxes scoring >= "
             f"{defaults.DETECT_INT8_VERIFY_MIN_SCORE} matched, scores within {defaults.DETECT_INT8_VERIFY_SCORE_ATOL}")
    return DetectorBounds(Tolerance(backbone.atol, backbone.rtol, backbone.min_top1, basis), defaults.DETECT_INT8_HEAD_RTOL,
                          defaults.DETECT_INT8_VERIFY_SCORE_ATOL, defaults.DETECT_INT8_VERIFY_MIN_SCORE)


def verify_detector(compiled, eager_fp32, target: CompileTarget, random_weights: bool,
                    tolerance: Tolerance | None = None) -> DetectionReport:
    import torch

    bounds = detector_bounds(target, tolerance)
    eager = copy.deepcopy(eager_fp32)
    for model in (eager, compiled):
        set_score_threshold(model, defaults.DETECT_VERIFY_SCORE_THRESHOLD)
    counted = {"images": 0, "boxes": 0, "matched": 0, "score_diff": 0.0, "mask_agree": 0, "mask_total": 0,
               "feature_diff": 0.0, "feature_largest": 0.0, "head_diff": None, "head_largest": 0.0}
    with torch.no_grad():
        for seed, batch in enumerate(sorted({1, target.max_batch})):
            images = target.example(batch, seed=seed)
            _compare_features(eager, compiled, images, counted)
            _compare_box_heads(eager, compiled, images, counted)
            with exact_fp32():
                reference = detections(eager([image.float() for image in images]))
            _compare(reference, detections(compiled(images)), counted, bounds.min_score)
    return _detection_report(counted, bounds, random_weights)


def _detection_report(counted: dict, bounds: DetectorBounds, random_weights: bool) -> DetectionReport:
    matched = counted["matched"] / counted["boxes"] if counted["boxes"] else 1.0
    masks = counted["mask_agree"] / counted["mask_total"] if counted["mask_total"] else None
    allowed = feature_allowance(bounds.tolerance, counted["feature_largest"])
    head_allowed = None if counted["head_diff"] is None else bounds.head_rtol * counted["head_largest"]
    heads_ok = head_allowed is None or counted["head_diff"] <= head_allowed
    boxes_ok = (matched >= defaults.DETECT_VERIFY_MIN_MATCHED and counted["score_diff"] <= bounds.score_atol
                and (masks is None or masks >= defaults.MASK_VERIFY_MIN_PIXEL_AGREEMENT))
    passed = counted["feature_diff"] <= allowed and heads_ok and (random_weights or boxes_ok)
    note = (f"every box kept on both sides (score threshold {defaults.DETECT_VERIFY_SCORE_THRESHOLD})"
            + (": random weights score boxes alike, so their order is arbitrary and the raw outputs decide" if random_weights else "")
            + f"; tolerance {bounds.tolerance.basis}")
    return DetectionReport(counted["images"], counted["feature_diff"], allowed, counted["head_diff"], head_allowed,
                           counted["boxes"], matched, defaults.DETECT_VERIFY_MIN_MATCHED, counted["score_diff"],
                           bounds.score_atol, masks, not random_weights, passed, note)


def _compare_box_heads(eager, compiled, images: list, counted: dict) -> None:
    """An R-CNN's box head and predictor on the same pooled proposals (the eager model's), eager against compiled:
    the one place an int8 detector differs, checked even where random weights leave the boxes undecided."""
    heads, other = getattr(eager, "roi_heads", None), getattr(compiled, "roi_heads", None)
    if heads is None or other is None or not hasattr(heads, "box_roi_pool"):
        return
    with exact_fp32():
        prepared = eager.transform([image.float() for image in images])[0]
        features = eager.backbone(prepared.tensors)
        proposals = eager.rpn(prepared, features)[0]
        pooled = heads.box_roi_pool(features, proposals, prepared.image_sizes)
        reference = heads.box_predictor(heads.box_head(pooled))
    got = other.box_predictor(other.box_head(pooled))
    counted["head_diff"] = counted["head_diff"] or 0.0
    for want, have in zip(reference, got):
        counted["head_diff"] = max(counted["head_diff"], (have.float() - want.float()).abs().max().item())
        counted["head_largest"] = max(counted["head_largest"], want.abs().max().item())


def feature_allowance(tolerance: Tolerance, largest: float) -> float:
    """The allowed |diff| of feature maps whose largest value is `largest`: atol + rtol x largest, with
    atol scaled down for maps smaller than 1. A randomly initialised backbone answers values near 1e-7,
    where an absolute 1e-3 would let any backbone pass."""
    return tolerance.atol * min(1.0, largest) + tolerance.rtol * largest


def _compare_features(eager, compiled, images: list, counted: dict) -> None:
    """The backbone's feature maps for the padded batch, eager (exact fp32) against compiled."""
    batch = eager.transform([image.float() for image in images])[0].tensors
    with exact_fp32():
        reference = eager.backbone(batch)
    got = compiled.backbone(batch.to(images[0].dtype))
    for key, value in reference.items():
        counted["feature_diff"] = max(counted["feature_diff"], (got[key].float() - value.float()).abs().max().item())
        counted["feature_largest"] = max(counted["feature_largest"], value.abs().max().item())


def _compare(reference: list[dict], got: list[dict], counted: dict, min_score: float = 0.0) -> None:
    """Every eager box scoring at least `min_score` must find its compiled box (all compiled boxes compete)."""
    for ref, out in zip(reference, got):
        pairs = match_boxes(ref, out, defaults.DETECT_VERIFY_MIN_IOU)
        required = ref["scores"] >= min_score
        pairs = [(r, g) for r, g in pairs if bool(required[r])]
        counted["images"] += 1
        counted["boxes"] += int(required.sum())
        counted["matched"] += len(pairs)
        for r, g in pairs:
            counted["score_diff"] = max(counted["score_diff"], abs(float(ref["scores"][r]) - float(out["scores"][g])))
            if "masks" in ref:
                same = (ref["masks"][r] >= defaults.MASK_THRESHOLD) == (out["masks"][g] >= defaults.MASK_THRESHOLD)
                counted["mask_agree"] += int(same.sum())
                counted["mask_total"] += same.numel()
