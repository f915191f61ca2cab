"""`tsvk bench accuracy`: which photos are scored, how answers are scored, and what the report says."""

from __future__ import annotations

import argparse

import pytest

from tsvk_tools.lab.bench import accuracy
from tsvk_tools.errors import UsageError


def _photos(directory, wnids):
    directory.mkdir()
    (directory / "wnids.txt").write_text("\n".join(wnids) + "\n")
    for i, wnid in enumerate(wnids * 2):
        (directory / f"{wnid}_{i:02d}.JPEG").write_bytes(b"x")
    return directory


def test_only_photos_int8_did_not_calibrate_on_are_scored(tmp_path):
    directory = _photos(tmp_path / "photos", ["n01", "n02", "n03", "n04", "n05"])
    scored = accuracy.held_out_photos(directory)
    calibration, held_out = accuracy.split(accuracy.list_photos(directory))
    assert [p for p, _ in scored] == held_out and not set(calibration) & {p for p, _ in scored}
    assert all(label == ["n01", "n02", "n03", "n04", "n05"].index(p.name.split("_")[0]) for p, label in scored)


def test_photos_without_labels_are_refused_with_the_layout_asked_for(tmp_path):
    directory = tmp_path / "plain"
    directory.mkdir()
    (directory / "cat.jpg").write_bytes(b"x")
    with pytest.raises(UsageError, match="wnids.txt and photos named <wnid>_"):
        accuracy.held_out_photos(directory)


def test_variants_must_be_known_pairs():
    assert accuracy._variants("aoti:int8, openvino:fp32") == ["aoti:int8", "openvino:fp32"]
    with pytest.raises(argparse.ArgumentTypeError, match="comma-separated names from eager:fp32"):
        accuracy._variants("onnx:int8")


def test_agreement_is_counted_photo_by_photo_against_eager():
    rows = {"eager:fp32": {"top1_labels": ["cat", "dog", "cow", None]},
            "openvino:int8": {"top1_labels": ["cat", "dog", "pig", "cow"]}}
    accuracy.agreement(rows, "eager:fp32")
    assert rows["openvino:int8"]["top1_agreement_with_eager_fp32"] == 0.5
    assert rows["eager:fp32"]["top1_agreement_with_eager_fp32"] == 0.75  # its own failed answer never agrees


def test_the_report_names_refused_variants_and_why():
    row = {"top1": 0.86, "top5": 0.957, "errors": 0, "top1_agreement_with_eager_fp32": 1.0}
    text = accuracy.render({"photos": 300, "created": "now", "images": "p", "command": "tsvk bench accuracy",
                            "built": {"eager:fp32": "PASS"}, "refused": {"aoti:int8": "verification FAIL: agreement 96.7%"},
                            "variants": {"eager:fp32": row}})
    assert "| eager:fp32 | 86.0% | 95.7% | 100.0% | 0 | PASS |" in text
    assert "| aoti:int8 | refused | | | | verification FAIL: agreement 96.7% |" in text
