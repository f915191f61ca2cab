"""`tsvk bench accuracy`: which photos are scored, how answers are scored, and what the report says; with --as-sent,
the phone-size copies it makes and how their answers are compared with the originals'."""

from __future__ import annotations

import argparse
import io
from types import SimpleNamespace

import pytest
from PIL import Image

from tsvk_tools.lab.bench import accuracy, labelled_as_sent
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
    text = accuracy.render({"photos": 300, "created": "now", "images": "p", "command": "tsvk bench accuracy", "engine": "torchserve",
                            "built": {"eager:fp32": "PASS"}, "refused": {"aoti:int8": "verification FAIL: agreement 96.7%"},
                            "variants": {"eager:fp32": row}})
    assert "| eager:fp32 | 86.0% | 95.7% | 100.0% | 0 | PASS |" in text
    assert "| aoti:int8 | refused | | | | verification FAIL: agreement 96.7% |" in text


def _jpeg(path, size=(40, 30), mode="RGB"):
    Image.new(mode, size, 120 if mode == "L" else (200, 120, 40)).save(path, format="JPEG")
    return path


def test_a_copy_as_sent_is_a_12_mp_jpeg_with_the_photos_proportions(tmp_path):
    original = _jpeg(tmp_path / "n01_cat.JPEG")
    copy = labelled_as_sent.upscaled_copy(original, "12mp", tmp_path / "cache")
    with Image.open(copy) as image:
        assert image.format == "JPEG" and image.mode == "RGB"
        assert image.size == (4032, 3024)  # 4:3, as a phone's 12 MP sensor
        assert "exif" not in image.info  # upright, as the original: only the size differs
    assert copy.name.startswith("n01_cat-") and copy.suffix == ".jpg"


@pytest.mark.parametrize("width, height", [(500, 375), (333, 500), (500, 333), (100, 100)])
def test_a_copy_keeps_the_proportions_at_about_12_mp(width, height):
    copy_width, copy_height = labelled_as_sent.phone_shape(width, height, "12mp")
    assert copy_width * copy_height == pytest.approx(4032 * 3024, rel=0.001)
    assert copy_width / copy_height == pytest.approx(width / height, rel=0.001)


def test_a_grey_photo_is_copied_as_rgb_with_noise_in_every_channel(tmp_path):
    original = _jpeg(tmp_path / "n02_dog.JPEG", mode="L")
    data = labelled_as_sent.upscaled_jpeg(original.read_bytes(), "12mp", seed=7)
    with Image.open(io.BytesIO(data)) as image:
        assert image.mode == "RGB"
        pixels = image.crop((0, 0, 64, 64)).getextrema()
    assert all(low < high for low, high in pixels)  # sensor noise, not the flat grey of the original


def test_copies_are_the_same_bytes_every_time_and_made_once(tmp_path, monkeypatch):
    original = _jpeg(tmp_path / "n01_cat.JPEG")
    first = labelled_as_sent.upscaled_copy(original, "12mp", tmp_path / "a")
    second = labelled_as_sent.upscaled_copy(original, "12mp", tmp_path / "b")
    assert first.name == second.name and first.read_bytes() == second.read_bytes()

    made = labelled_as_sent.upscaled_copies([(original, 3)], "12mp", tmp_path / "cache")

    def made_again(*_):
        raise AssertionError("a cached copy was made again")

    monkeypatch.setattr(labelled_as_sent, "upscaled_jpeg", made_again)
    assert labelled_as_sent.upscaled_copies([(original, 3)], "12mp", tmp_path / "cache") == made
    assert made[0][0].parent == labelled_as_sent.cache_folder(tmp_path / "cache", "12mp")


def test_a_changed_original_gets_a_new_copy(tmp_path):
    original = _jpeg(tmp_path / "n01_cat.JPEG")
    before = labelled_as_sent.copy_path(original, original.read_bytes(), tmp_path)
    _jpeg(original, size=(30, 40))
    assert labelled_as_sent.copy_path(original, original.read_bytes(), tmp_path) != before


def _scored(top1_correct, top5_correct, labels, photos=200, errors=0):
    return {"photos": photos, "top1_correct": top1_correct, "top5_correct": top5_correct, "top1_labels": labels, "errors": errors,
            "top1": top1_correct / photos, "top5": top5_correct / photos, "seconds": 1.0}


@pytest.mark.parametrize("sent_correct, difference, within", [
    (170, 0.0, True),
    (169, -0.5, True),  # one photo of 200 is half a point: exactly the allowance
    (171, 0.5, True),
    (168, -1.0, False),
    (172, 1.0, False),  # a gain as large fails too: the photo's size changed answers
])
def test_copies_pass_when_top1_is_within_half_a_point_either_way(sent_correct, difference, within):
    original = _scored(170, 190, ["cat"] * 200)
    sent = _scored(sent_correct, 189, ["cat"] * 199 + ["dog"])
    comparison = accuracy.compare(original, sent)
    assert comparison["top1_difference_points"] == difference and comparison["passed"] is within
    assert comparison["top5_difference_points"] == -0.5 and comparison["top1_agreement_with_originals"] == 0.995
    assert comparison["allowed_top1_difference_points"] == 0.5


def test_copies_are_compared_only_with_the_same_photos():
    with pytest.raises(ValueError, match="the originals' 200 photos, got 100"):
        accuracy.compare(_scored(170, 190, ["cat"] * 200), _scored(85, 95, ["cat"] * 100, photos=100))


def test_a_run_passes_only_when_every_photo_is_answered_and_every_comparison_holds():
    good = dict(_scored(170, 190, ["cat"] * 200), as_sent={**_scored(170, 190, ["cat"] * 200), "passed": True})
    assert accuracy.passed({"variants": {"eager:fp32": good}})
    assert not accuracy.passed({"variants": {"eager:fp32": {**good, "as_sent": {**good["as_sent"], "passed": False}}}})
    assert not accuracy.passed({"variants": {"eager:fp32": {**good, "as_sent": {**good["as_sent"], "errors": 1}}}})
    assert not accuracy.passed({"variants": {}})


def test_originals_and_copies_are_scored_by_the_same_server(tmp_path, monkeypatch):
    started, scored = [], []

    class _Run:
        def wait_ready(self, timeout):
            pass

        def stop(self):
            started.remove(self)

    def start(config, run_dir):
        started.append(_Run())
        return started[-1]

    def score(run, variant, photos, classes):
        scored.append((run, photos))
        return _scored(1, 1, ["cat"], photos=1)

    monkeypatch.setattr(accuracy, "engine_named", lambda name: SimpleNamespace(start=start))
    monkeypatch.setattr(accuracy, "write_config", lambda request, path: None)
    monkeypatch.setattr(accuracy, "score", score)
    originals, copies = [(tmp_path / "a.JPEG", 0)], [(tmp_path / "a-copy.jpg", 0)]
    rows = accuracy.serve_and_score(tmp_path / "store", ["eager:fp32"], originals, [], tmp_path, "kserve", copies)
    assert [photos for _, photos in scored] == [originals, copies] and scored[0][0] is scored[1][0]
    assert rows["eager:fp32"]["as_sent"]["passed"] and not started  # compared, and the server stopped


def test_as_sent_takes_a_phone_size_and_scores_one_variant_unless_told():
    parser = accuracy.build_parser()
    bare = parser.parse_args(["--as-sent"])
    assert bare.as_sent == "12mp" and accuracy.chosen_variants(bare) == [accuracy.AS_SENT_VARIANT]
    named = parser.parse_args(["--as-sent", "24mp", "--variants", "aoti:int8"])
    assert named.as_sent == "24mp" and accuracy.chosen_variants(named) == ["aoti:int8"]
    assert accuracy.chosen_variants(parser.parse_args([])) == list(accuracy.VARIANTS)


def test_an_unknown_size_is_refused_naming_the_sizes_allowed(capsys):
    with pytest.raises(SystemExit):
        accuracy.build_parser().parse_args(["--as-sent", "13mp"])
    assert "invalid choice: '13mp' (choose from '12mp', '24mp', '48mp')" in capsys.readouterr().err


def test_the_report_compares_copies_with_originals_in_points():
    row = {**_scored(172, 190, ["cat"] * 200), "errors": 0}
    row["as_sent"] = {**_scored(171, 191, ["cat"] * 200), **accuracy.compare(row, _scored(171, 191, ["cat"] * 200))}
    text = accuracy.render({"photos": 200, "created": "now", "images": "p", "command": "tsvk bench accuracy --as-sent",
                            "engine": "kserve", "built": {"eager:fp32": "PASS"}, "refused": {}, "variants": {"eager:fp32": row},
                            "machine": {"vcpus": 2, "cpu": "AMD EPYC", "cpu_flags": ["avx2", "avx512_vnni"], "loadavg_end": [1.5, 1, 1]},
                            "as_sent": {"size": "12mp", "megapixels": 12.2, "quality": 90, "median_mb": 3.1, "folder": "f",
                                        "allowed_top1_difference_points": 0.5}})
    assert "# Accuracy through tsvk's engine (kserve, no Java)" in text
    assert "Machine: 2 vCPUs, AMD EPYC, CPU flags avx2, avx512_vnni; load average at the end 1.5." in text
    assert "| eager:fp32 | 86.0% | 95.0% | 85.5% | 95.5% | -0.50 points | +0.50 points | 100.0% | 0 | 1, 1 | PASS |" in text
