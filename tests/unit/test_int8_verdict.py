"""int8 verdicts: labelled photos are judged by accuracy, unlabelled ones by agreement with eager fp32.

The models here are logits laid out by hand: each photo's "image" is its fp32 logits, and the int8
stand-in raises every photo's second and sixth classes by a little, which flips exactly the near
ties (at the top for top-1, at the fifth place for top-5). A near
tie is right as often as wrong, so flipping one loses agreement without losing accuracy: the case of
a real int8 build (EfficientNet-Lite0: 96.0% agreement, top-1 86.0% -> 86.0%).
"""

from __future__ import annotations

import pytest
import torch

from tsvk_tools import defaults
from tsvk_tools.archive.backends import CompileTarget
from tsvk_tools.archive.build import BuildRequest, build
from tsvk_tools.archive.calibration import PhotoSet
from tsvk_tools.archive.verify_int8 import ACCURACY, AGREEMENT, Int8Limits, judge_int8, verify_int8
from tsvk_tools.errors import UsageError

CLASSES = 12  # a (3, 2, 2) "image" flattens to 12 logits
TARGET = CompileTarget(device="cpu", precision="int8", max_batch=4, crop=2)
NUDGE = 0.02  # what the int8 stand-in adds to each photo's second and sixth class: more than a near tie's gap


def eager(x: torch.Tensor) -> torch.Tensor:
    return x.flatten(1)


def int8(x: torch.Tensor) -> torch.Tensor:
    logits = x.flatten(1).clone()
    ranked = logits.topk(6, dim=1).indices
    for place in (1, 5):  # the runner-up, and the first class outside the top five
        logits[torch.arange(len(logits)), ranked[:, place]] += NUDGE
    return logits


def photos(count: int, ties_right_in_fp32: int, ties_right_in_int8: int, wrong_top5_in_int8: int = 0,
           labelled: bool = True) -> PhotoSet:
    """`count` photos whose fp32 top-1 is their label, except the near ties: of those, the first ones are
    labelled with fp32's class (int8 flips them away), the next with the runner-up (int8 flips them right).
    `wrong_top5_in_int8` more near ties have a label fp32 ranks fifth and int8 sixth."""
    logits, labels = [], []
    for i in range(count):
        row = torch.linspace(0.0, -1.0, CLASSES)  # class 0 first, class 1 second, ... by clear margins
        label = 0
        if i < ties_right_in_fp32 + ties_right_in_int8:
            row[1] = row[0] - NUDGE / 2  # a near tie between classes 0 and 1
            label = 0 if i < ties_right_in_fp32 else 1
        elif i < ties_right_in_fp32 + ties_right_in_int8 + wrong_top5_in_int8:
            row[5] = row[4] - NUDGE / 2  # fifth and sixth nearly tied: int8 lifts the sixth over the label
            label = 4
        logits.append(row.view(3, 2, 2))
        labels.append(label)
    return PhotoSet([f"p{i}.jpg" for i in range(count)], torch.stack(logits), labels if labelled else None)


def test_a_near_tie_flipped_either_way_keeps_accuracy_and_the_build_passes():
    """96% agreement, the old 97% floor's refusal, is no reason to refuse when accuracy did not move."""
    report = verify_int8(int8, eager, TARGET, photos(100, 2, 2), held_out=True, enforce=True)
    assert report.top1_agreement == pytest.approx(0.96)
    assert report.accuracy["fp32"]["top1"] == report.accuracy["int8"]["top1"] == pytest.approx(0.98)
    assert report.passed and report.judged_by == (ACCURACY,) and report.failed == ()
    assert report.min_top1_agreement is None
    assert "judged by accuracy" in report.describe() and "96.0% (reported, not judged)" in report.describe()


def test_a_top1_drop_past_the_limit_is_refused_naming_the_drop_and_how_to_accept_it():
    report = verify_int8(int8, eager, TARGET, photos(100, 3, 1), held_out=True, enforce=True)
    assert report.top1_drop == pytest.approx(0.02)
    assert not report.passed and report.failed == ("top-1 drop",)
    assert "top-1 99.0% -> 97.0% (drop +2.0 points, allowed +1.0 points)" in report.describe()
    assert "failed: top-1 drop" in report.describe()
    assert "--max-accuracy-drop 0.020" in report.remedy()
    accepted = verify_int8(int8, eager, TARGET, photos(100, 3, 1), held_out=True, enforce=True,
                           limits=Int8Limits(max_drop=0.02))
    assert accepted.passed


def test_a_top5_drop_past_the_limit_is_refused_too():
    report = verify_int8(int8, eager, TARGET, photos(100, 0, 0, wrong_top5_in_int8=2), held_out=True, enforce=True)
    assert report.top1_drop == 0 and report.top5_drop == pytest.approx(0.02)
    assert not report.passed and report.failed == ("top-5 drop",)


def test_without_labels_agreement_decides_and_the_refusal_says_how_to_accept_it():
    report = verify_int8(int8, eager, TARGET, photos(100, 2, 2, labelled=False), held_out=True, enforce=True)
    assert report.judged_by == (AGREEMENT,) and report.accuracy == {}
    assert report.min_top1_agreement == defaults.INT8_MIN_TOP1_AGREEMENT
    assert not report.passed and report.failed == (AGREEMENT,)
    assert "--tolerance 0,0,0.960" in report.remedy() and "wnids.txt" in report.remedy()
    assert verify_int8(int8, eager, TARGET, photos(100, 1, 1, labelled=False), held_out=True, enforce=True).passed


def test_an_agreement_floor_asked_for_decides_beside_accuracy():
    report = verify_int8(int8, eager, TARGET, photos(100, 2, 2), held_out=True, enforce=True,
                         limits=Int8Limits(min_agreement=0.97))
    assert report.judged_by == (ACCURACY, AGREEMENT) and report.failed == (AGREEMENT,) and not report.passed
    assert "96.0% (needed 97%)" in report.describe()


def test_random_weights_report_without_judging():
    report = verify_int8(int8, eager, TARGET, photos(100, 6, 0), held_out=False, enforce=False)
    assert report.passed and report.failed == () and "NOT ENFORCED" in report.describe()


def test_the_values_a_refusal_suggests_let_the_measured_result_pass():
    """4 of 300 photos lost is a 1.333-point drop: 0.013 would still refuse it, 0.014 does not."""
    lost = judge_int8(300, True, 289 / 300, {"fp32": {"top1": 0.86, "top5": 0.95}, "int8": {"top1": 0.86 - 4 / 300, "top5": 0.95}},
                      True, Int8Limits())
    assert "--max-accuracy-drop 0.014 (make: MAX_ACCURACY_DROP=0.014)" in lost.remedy()
    assert judge_int8(300, True, 289 / 300, lost.accuracy, True, Int8Limits(max_drop=0.014)).passed
    unlabelled = judge_int8(300, True, 289 / 300, {}, True, Int8Limits())  # 96.33%: 0.964 would still refuse it
    assert "--tolerance 0,0,0.963 (make: TOLERANCE=0,0,0.963)" in unlabelled.remedy()
    assert judge_int8(300, True, 289 / 300, {}, True, Int8Limits(min_agreement=0.963)).passed


def test_an_accuracy_drop_limit_outside_0_to_1_is_refused():
    with pytest.raises(UsageError, match="between 0 and 1"):
        Int8Limits(max_drop=2.0)


@pytest.mark.parametrize("request_, message", [
    (BuildRequest(model="mobilenet_v3_small", weights="none", precision="fp32", max_accuracy_drop=0.02),
     "--max-accuracy-drop applies to builds judged on labelled photos only"),
    (BuildRequest(model="lraspp_mobilenet_v3_large", backend="openvino", precision="int8", weights="none", max_accuracy_drop=0.02),
     "--max-accuracy-drop applies to classifiers.*segment model lraspp_mobilenet_v3_large"),
])
def test_an_accuracy_drop_where_no_accuracy_is_judged_is_refused(request_, message, tmp_path):
    with pytest.raises(UsageError, match=message):
        build(request_, tmp_path)
    assert not list(tmp_path.iterdir())
