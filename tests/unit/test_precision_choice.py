"""--precision auto: bf16 where the CPU multiplies it in hardware, fp32 elsewhere, and every warning about a bf16
archive on a CPU that would emulate it. The CPU's flags are the one seam faked here (the text of /proc/cpuinfo);
every archive is really built and read back."""

from __future__ import annotations

import logging
import zipfile
from pathlib import Path

import pytest
import torch
import yaml

from tests.fixtures.tiny_model import make_tiny
from tsvk.model import cpu_flags, emulated_bf16, native_bf16_flags
from tsvk.worker import service
from tsvk_tools.archive import precision
from tsvk_tools.archive.backends import get_backend
from tsvk_tools.cli import main
from tsvk_tools.client.demo import describe_precision
from tsvk_tools.images import SKIMAGE_PHOTOS, image_bytes
from tsvk_tools.doctor.archive_rules import _cpu_precision, read_archive
from tsvk_tools.config import precision_check
from tsvk_tools.config.precision_check import emulated_precision_lines, served_archives

from tests.unit.test_archive import TINY_ARGS

ZEN4 = frozenset({"avx2", "avx512f", "avx512_vnni", "avx512_bf16"})
SAPPHIRE_RAPIDS = frozenset({"avx512f", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8"})
AVX2_ONLY = frozenset({"sse4_2", "avx", "avx2", "fma"})
ICE_LAKE = frozenset({"avx2", "avx512f", "avx512_vnni"})  # AVX-512 without its bf16 instructions


def test_cpu_flags_are_read_from_cpuinfo_on_x86_and_arm(tmp_path):
    x86 = tmp_path / "x86"
    x86.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu sse avx2 avx512f avx512_bf16\n\nprocessor\t: 1\n")
    arm = tmp_path / "arm"
    arm.write_text("processor\t: 0\nFeatures\t: fp asimd sve bf16 i8mm\nCPU implementer\t: 0x41\n")
    assert cpu_flags(x86) == {"fpu", "sse", "avx2", "avx512f", "avx512_bf16"}
    assert "bf16" in cpu_flags(arm)
    assert cpu_flags(tmp_path / "missing") == frozenset()


def test_native_bf16_is_amx_or_avx512_bf16_best_first():
    assert native_bf16_flags(SAPPHIRE_RAPIDS) == ("amx_bf16", "avx512_bf16")
    assert native_bf16_flags(ZEN4) == ("avx512_bf16",)
    assert native_bf16_flags(ICE_LAKE) == native_bf16_flags(AVX2_ONLY) == ()


@pytest.mark.parametrize("flags, device, precision, emulated", [
    (AVX2_ONLY, "cpu", "bf16", True), (ICE_LAKE, "cpu", "bf16", True), (ZEN4, "cpu", "bf16", False),
    (AVX2_ONLY, "cpu", "fp32", False), (AVX2_ONLY, "cuda", "bf16", False), (AVX2_ONLY, "cpu", "int8", False),
])
def test_only_a_bf16_cpu_artifact_on_a_cpu_without_the_instructions_is_emulated(flags, device, precision, emulated):
    problem = emulated_bf16(precision, device, flags)
    assert (problem is not None) == emulated
    if emulated:
        assert "AMX_BF16 or AVX512_BF16" in problem and "slower than an fp32 archive" in problem


@pytest.mark.parametrize("backend, task, flags, chosen, reason", [
    ("aoti", "classify", ZEN4, "bf16", "AVX512_BF16"),
    ("aoti", "classify", SAPPHIRE_RAPIDS, "bf16", "AMX_BF16 and AVX512_BF16"),
    ("aoti", "segment", ZEN4, "bf16", "in hardware"),
    ("eager", "classify", ZEN4, "bf16", "in hardware"),
    ("aoti", "classify", ICE_LAKE, "fp32", "neither AMX nor AVX-512 BF16"),
    ("aoti", "classify", AVX2_ONLY, "fp32", "emulated"),
    ("openvino", "classify", ZEN4, "fp32", "pins its inference precision to f32"),
    ("eager", "detect", ZEN4, "fp32", "non-maximum suppression has no bf16 CPU kernel"),
])
def test_auto_is_bf16_only_where_cpu_backend_and_task_all_run_it(backend, task, flags, chosen, reason):
    choice = precision.choose_precision("auto", get_backend(backend), "cpu", task, flags)
    assert (choice.asked, choice.chosen) == ("auto", chosen)
    assert reason in choice.why and reason in choice.describe()
    assert choice.cpu_flags == native_bf16_flags(flags)
    assert choice.may_fall_back == (chosen == "bf16")


def test_auto_on_a_gpu_stays_fp32_and_an_explicit_precision_is_kept_as_asked():
    on_gpu = precision.choose_precision("auto", get_backend("aoti"), "cuda", "classify", SAPPHIRE_RAPIDS)
    assert on_gpu.chosen == "fp32" and "--precision fp16 or bf16" in on_gpu.why
    asked = precision.choose_precision("bf16", get_backend("aoti"), "cpu", "classify", AVX2_ONLY)
    assert (asked.chosen, asked.may_fall_back) == ("bf16", False)
    fallen = precision.choose_precision("auto", get_backend("aoti"), "cpu", "classify", ZEN4).falling_back("why")
    assert (fallen.chosen, fallen.fell_back, fallen.may_fall_back) == ("fp32", "why", False)
    assert "the bf16 build failed, so fp32: why" in fallen.describe()


def _settings(mar: Path) -> dict:
    with zipfile.ZipFile(mar) as archive:
        return yaml.safe_load(archive.read("model-config.yaml"))["tsvk"]


@pytest.fixture
def bf16_cpu(monkeypatch):
    """The build machine answers as a Zen 4 EPYC would, whatever this one is."""
    monkeypatch.setattr(precision, "cpu_flags", lambda: ZEN4)


def test_archive_records_the_auto_choice_and_why(tmp_path, bf16_cpu, capsys):
    assert main(["archive", *TINY_ARGS, "--backend", "eager", "--model-store", str(tmp_path)]) == 0
    settings = _settings(tmp_path / "tiny.mar")
    assert settings["artifact"]["precision"] == "bf16"
    assert settings["provenance"]["precision"] | {"machine": None} == {
        "asked": "auto", "chosen": "bf16", "why": "this CPU multiplies bf16 in hardware (AVX512_BF16)",
        "cpu_flags": ["avx512_bf16"], "fell_back": "", "machine": None}
    assert "tiny: precision bf16 (auto: this CPU multiplies bf16 in hardware (AVX512_BF16))" in capsys.readouterr().out


def test_auto_on_a_cpu_without_bf16_builds_fp32(tmp_path, monkeypatch):
    monkeypatch.setattr(precision, "cpu_flags", lambda: AVX2_ONLY)
    assert main(["archive", *TINY_ARGS, "--backend", "eager", "--model-store", str(tmp_path)]) == 0
    settings = _settings(tmp_path / "tiny.mar")
    assert settings["artifact"]["precision"] == "fp32"
    assert "emulated" in settings["provenance"]["precision"]["why"]


def test_a_failing_auto_bf16_build_gives_way_to_fp32_in_one_line(tmp_path, bf16_cpu, capsys):
    # atol 0: bf16 cannot match eager fp32 exactly, the fp32 eager artifact does
    assert main(["archive", *TINY_ARGS, "--backend", "eager", "--tolerance", "0,0,1", "--model-store", str(tmp_path)]) == 0
    settings = _settings(tmp_path / "tiny.mar")
    assert settings["artifact"]["precision"] == "fp32"
    assert settings["provenance"]["precision"]["fell_back"].startswith("verification FAIL")
    lines = [line for line in capsys.readouterr().err.splitlines() if "building fp32 instead" in line]
    assert len(lines) == 1 and lines[0].startswith("tiny: the bf16 build failed")


def test_an_explicit_bf16_that_fails_is_refused_and_writes_nothing(tmp_path, capsys):
    code = main(["archive", *TINY_ARGS, "--backend", "eager", "--precision", "bf16", "--tolerance", "0,0,1",
                 "--model-store", str(tmp_path)])
    assert code != 0 and not list(tmp_path.iterdir())
    assert "verification FAIL" in capsys.readouterr().err


def test_explicit_bf16_for_a_detector_is_refused_with_the_reason(tmp_path, capsys):
    code = main(["compile", "--model", "fasterrcnn_mobilenet_v3_large_320_fpn", "--weights", "none", "--precision", "bf16",
                 "--output-dir", str(tmp_path)])
    assert code == 2 and not list(tmp_path.iterdir())
    assert "--precision bf16 cannot build a detect model: torchvision's non-maximum suppression" in capsys.readouterr().err


def test_photo_options_name_the_precision_they_apply_to(tmp_path, capsys):
    code = main(["archive", *TINY_ARGS, "--backend", "eager", "--precision", "fp32", "--accuracy-photos", str(tmp_path),
                 "--model-store", str(tmp_path / "store")])
    assert code != 0
    assert "--accuracy-photos applies to --precision bf16 only (got --precision fp32)" in capsys.readouterr().err


def test_auto_sets_aside_the_bf16_photo_options_where_it_chose_fp32_but_never_int8s(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(precision, "cpu_flags", lambda: AVX2_ONLY)
    assert main(["archive", *TINY_ARGS, "--backend", "eager", "--accuracy-photos", str(tmp_path), "--max-accuracy-drop",
                 "0.02", "--model-store", str(tmp_path / "store")]) == 0
    assert "--accuracy-photos, --max-accuracy-drop set aside" in capsys.readouterr().err
    code = main(["archive", *TINY_ARGS, "--backend", "eager", "--calibration", str(tmp_path), "--model-store",
                 str(tmp_path / "other")])
    assert code == 2
    assert "--calibration applies to --precision int8 only (got --precision auto, which chose fp32)" in capsys.readouterr().err


@pytest.fixture
def bf16_archive(tmp_path, bf16_cpu) -> Path:
    store = tmp_path / "store"
    assert main(["archive", *TINY_ARGS, "--backend", "eager", "--model-store", str(store)]) == 0
    return store / "tiny.mar"


def test_serving_warns_for_a_bf16_archive_only_where_the_cpu_would_emulate_it(bf16_archive, tmp_path):
    lines = emulated_precision_lines([bf16_archive], AVX2_ONLY)
    assert len(lines) == 1 and lines[0].startswith("tsvk: warning: tiny.mar holds a bf16 model on a CPU without")
    assert "PRECISION=fp32" in lines[0]
    assert emulated_precision_lines([bf16_archive], ZEN4) == []
    config = tmp_path / "config.properties"
    config.write_text(f"model_store={bf16_archive.parent}\nload_models=tiny.mar\n")
    assert served_archives(config) == [bf16_archive]


def test_doctor_warns_with_the_fix(bf16_archive):
    findings = _cpu_precision(read_archive(bf16_archive), AVX2_ONLY)
    assert [(f.severity, f.where) for f in findings] == [("warning", "tiny.mar")]
    assert "make archive PRECISION=fp32" in findings[0].fix
    assert _cpu_precision(read_archive(bf16_archive), SAPPHIRE_RAPIDS) == []


def test_a_worker_logs_the_warning_once_it_has_loaded(bf16_archive, monkeypatch, caplog):
    settings = type("Settings", (), {"model_name": "tiny", "artifact": type("A", (), {"precision": "bf16"})()})()
    model = type("Model", (), {"device": torch.device("cpu")})()
    monkeypatch.setattr(service, "cpu_flags", lambda: AVX2_ONLY)
    with caplog.at_level(logging.WARNING, logger=service.log.name):
        service._warn_emulated_bf16(settings, model)
    assert "tsvk: tiny is a bf16 model on a CPU without" in caplog.text
    caplog.clear()
    monkeypatch.setattr(service, "cpu_flags", lambda: ZEN4)
    service._warn_emulated_bf16(settings, model)
    assert caplog.text == ""


def test_the_demo_says_which_precision_its_archive_runs_in_and_why(bf16_archive):
    assert describe_precision(bf16_archive) == "tiny runs in bf16 (auto: this CPU multiplies bf16 in hardware (AVX512_BF16))"


@pytest.fixture
def labelled_photos(tmp_path) -> Path:
    """Three real photos named as ImageNet's are, with a wnids.txt giving the tiny model's three classes."""
    folder = tmp_path / "labelled"
    folder.mkdir()
    (folder / "wnids.txt").write_text("n00000000\nn00000001\nn00000002\n")
    for index, name in enumerate(SKIMAGE_PHOTOS):
        (folder / f"n0000000{index}_{name}.jpg").write_bytes(image_bytes(f"skimage:{name}"))
    return folder


def test_bf16_with_labelled_photos_is_judged_by_accuracy_as_int8_is(tmp_path, labelled_photos, bf16_cpu, capsys):
    weights = tmp_path / "tiny.pth"
    torch.save(make_tiny().state_dict(), weights)
    args = list(TINY_ARGS)
    args[args.index("--weights") + 1] = str(weights)
    assert main(["archive", *args, "--backend", "eager", "--accuracy-photos", str(labelled_photos), "--max-accuracy-drop",
                 "1", "--model-store", str(tmp_path / "store")]) == 0
    provenance = _settings(tmp_path / "store" / "tiny.mar")["provenance"]
    verification = provenance["verification"]
    assert verification["precision"] == "bf16" and verification["judged_by"] == ["accuracy"]
    assert set(verification["accuracy"]) == {"fp32", "bf16"} and verification["photos"] == 3
    assert provenance["accuracy_photos"]["labels"] == "wnids.txt" and "calibration" not in provenance
    assert "3 held-out photos, judged by accuracy; top-1" in capsys.readouterr().out


def test_tsvk_config_warns_when_this_cpu_would_emulate_an_archives_bf16(bf16_archive, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(precision_check, "cpu_flags", lambda: AVX2_ONLY)
    output = tmp_path / "generated.properties"
    assert main(["config", "--model-store", str(bf16_archive.parent), "--output", str(output)]) == 0
    err = capsys.readouterr().err
    assert "tsvk: warning: tiny.mar holds a bf16 model on a CPU without" in err and output.is_file()
    monkeypatch.setattr(precision_check, "cpu_flags", lambda: ZEN4)
    assert main(["config", "--model-store", str(bf16_archive.parent), "--output", str(output)]) == 0
    assert "warning" not in capsys.readouterr().err
