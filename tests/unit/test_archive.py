"""Packing: a self-contained .mar, written atomically, replaced only with --force."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from tsvk_tools.cli import main

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
TINY_ARGS = ["--model", "tiny", "--model-file", str(FIXTURES / "tiny_model.py"), "--model-factory", "TinyNet",
             "--resize", "40", "--crop", "32", "--mean", "0.5,0.5,0.5", "--std", "0.25,0.25,0.25",
             "--labels", str(FIXTURES / "tiny_labels.txt"), "--weights", "none", "--max-batch", "4"]


def archive(store: Path, *extra: str) -> int:
    return main(["archive", *TINY_ARGS, "--model-store", str(store), *extra])


def test_archive_is_self_contained(tmp_path):
    assert archive(tmp_path, "--backend", "eager", "--precision", "fp32") == 0
    with zipfile.ZipFile(tmp_path / "tiny.mar") as mar:
        names = set(mar.namelist())
        config = yaml.safe_load(mar.read("model-config.yaml"))
        labels = mar.read("index_to_name.json").decode()
    assert {"image_classifier.py", "model_state.pt", "tiny_model.py", "index_to_name.json", "model-config.yaml",
            "tsvk/__init__.py", "tsvk/common/settings.py", "tsvk/worker/threads.py", "tsvk/request/oip.py",
            "MAR-INF/MANIFEST.json"} <= names
    assert not any("__pycache__" in n for n in names)
    assert list(config) == ["tsvk"], "TorchServe keys in the archive would override the generated config"
    settings = config["tsvk"]
    assert settings["artifact"] | {"source": None} == {"file": "model_state.pt", "format": "eager", "device": "cpu",
                                                        "precision": "fp32", "max_batch": 4, "source": None,
                                                        "gpu": "", "compute_capability": ""}  # a CPU build: no GPU
    assert settings["preprocess"]["resize"] == 40 and settings["preprocess"]["mean"] == [0.5, 0.5, 0.5]
    assert settings["preprocess"]["jpeg_dct_scaling"] is True
    assert settings["serving"]["batch_size"] == 4
    assert settings["provenance"]["weights"]["random"] is True
    assert settings["provenance"]["verification"]["passed"] is True
    assert '"2": "bird"' in labels


def test_an_archive_says_which_of_its_handler_files_this_checkout_has_changed(tmp_path):
    """A custom model file beside the handler is not a handler file; a changed or missing package file is."""
    from tsvk_tools.archive.pack import handler_files_changed

    assert archive(tmp_path, "--backend", "eager") == 0
    built = tmp_path / "tiny.mar"
    assert handler_files_changed(built) == []
    edited = tmp_path / "edited.mar"
    with zipfile.ZipFile(built) as source, zipfile.ZipFile(edited, "w") as target:
        for name in source.namelist():
            if name == "tsvk/worker/threads.py":
                continue  # as if built before the file existed
            data = source.read(name)
            target.writestr(name, data + b"# older" if name == "tsvk/worker/heap.py" else data)
    assert handler_files_changed(edited) == ["tsvk/worker/heap.py", "tsvk/worker/threads.py"]


def test_exact_jpeg_decode_is_recorded_in_the_archive(tmp_path):
    assert archive(tmp_path, "--backend", "eager", "--exact-jpeg-decode") == 0
    with zipfile.ZipFile(tmp_path / "tiny.mar") as mar:
        assert yaml.safe_load(mar.read("model-config.yaml"))["tsvk"]["preprocess"]["jpeg_dct_scaling"] is False


def top_level_modules_after(statement: str) -> set[str]:
    script = f"import sys; {statement}; print(' '.join(sorted({{m.split('.')[0] for m in sys.modules}})))"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=ROOT / "handlers")
    return set(done.stdout.split())


def test_handler_needs_nothing_beyond_a_stock_torchserve_image():
    """Whatever the handler imports, torch + torchvision + Pillow + numpy + PyYAML already bring in."""
    stock = top_level_modules_after("import torch, torchvision, PIL.Image, numpy, yaml")
    handler = top_level_modules_after("import tsvk.handler, tsvk.worker.service, tsvk.preprocess.cpu, tsvk.model.loading")
    assert handler - stock == {"tsvk"}


def test_existing_archive_needs_force(tmp_path, capsys):
    assert archive(tmp_path, "--backend", "eager") == 0
    before = (tmp_path / "tiny.mar").read_bytes()
    assert archive(tmp_path, "--backend", "export") == 2
    assert "already exists; pass --force" in capsys.readouterr().err
    assert (tmp_path / "tiny.mar").read_bytes() == before
    assert archive(tmp_path, "--backend", "export", "--force") == 0
    with zipfile.ZipFile(tmp_path / "tiny.mar") as mar:
        assert "model.pt2" in mar.namelist()


def test_failed_build_leaves_nothing(tmp_path, capsys):
    assert archive(tmp_path, "--backend", "export", "--tolerance", "0,0,1.5") == 2
    assert "verification FAIL" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("argv, message", [
    (["--model", "resnet18", "--resize", "100"], "--resize applies to your own model code only: add --model-file"),
    (["--model", "resnet18", "--batch", "16", "--max-batch", "8"], "--batch 16 exceeds --max-batch 8"),
    (["--model", "resnet18", "--weights", "none", "--backend", "tensorrt"], "--backend tensorrt does not run on --device cpu"),
    (["--model", "resnet18", "--weights", "none", "--precision", "fp16"], "supported: --device cpu: --precision fp32|bf16"),
    (["--model", "resnet18", "--weights", "none", "--backend", "openvino", "--cpu-isa", "avx2"],
     "--cpu-isa avx2 applies to --backend aoti --device cpu only (this build: openvino on cpu)"),
])
def test_bad_archive_arguments(tmp_path, capsys, argv, message):
    assert main(["archive", *argv, "--model-store", str(tmp_path)]) == 2
    assert message in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_make_archive_suggests_the_right_name():
    done = subprocess.run(["make", "-s", "archive", "MODEL=resnt152", "WEIGHTS=none"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode != 0 and "did you mean resnet152" in done.stderr


def test_compile_writes_artifact_and_report_only(tmp_path):
    import json

    out = tmp_path / "build"
    args = [a for a in TINY_ARGS]
    assert main(["compile", *args, "--backend", "export", "--output-dir", str(out)]) == 0
    assert sorted(p.name for p in (out / "tiny").iterdir()) == ["model.pt2", "report.json"]
    assert json.loads((out / "tiny" / "report.json").read_text())["provenance"]["verification"]["passed"] is True
    assert [p.name for p in out.iterdir()] == ["tiny"]
