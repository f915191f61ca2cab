"""The engine refuses an archive it cannot serve with one line naming it and why (tools/engines/kserve/archives.py);
the archive's other models still start. The archives here are plain zips shaped like TorchServe's .mar."""

from __future__ import annotations

import importlib.util
import json
import zipfile
from pathlib import Path

import yaml

from tsvk_tools.engines.kserve.archives import open_archives


def _mar(path: Path, handler: str, files: dict[str, bytes] | None = None) -> None:
    manifest = {"runtime": "python", "model": {"modelName": path.stem, "handler": handler, "modelVersion": "1.0"}}
    with zipfile.ZipFile(path, "w") as mar:
        mar.writestr("MAR-INF/MANIFEST.json", json.dumps(manifest))
        for name, data in (files or {}).items():
            mar.writestr(name, data)


def _properties(store: Path, *names: str) -> dict[str, str]:
    models = {name: {"1.0": {"marName": f"{name}.mar", "minWorkers": 1, "batchSize": 4, "maxBatchDelay": 50}} for name in names}
    return {"model_store": str(store), "models": json.dumps(models)}


def test_each_archive_it_cannot_serve_is_one_line_naming_it_and_why(tmp_path):
    _mar(tmp_path / "stock.mar", "image_classifier")
    _mar(tmp_path / "foreign.mar", "my_handler.py", {"my_handler.py": b"class Mine: pass\n"})
    (tmp_path / "broken.mar").write_bytes(b"not a zip")
    served, refused = open_archives(_properties(tmp_path, "stock", "foreign", "broken", "absent"), tmp_path / "unpacked")
    assert served == []
    lines = {refusal.archive.name: refusal.line() for refusal in refused}
    assert set(lines) == {"stock.mar", "foreign.mar", "broken.mar", "absent.mar"}
    assert all("\n" not in line and line.startswith(f"not serving {name}: ") for name, line in lines.items())
    assert "image_classifier" in lines["stock.mar"] and "stock" in lines["stock.mar"]
    assert "not a tsvk handler" in lines["foreign.mar"]
    assert "not a readable model archive" in lines["broken.mar"]
    assert "not in the model store" in lines["absent.mar"]
    assert not (tmp_path / "unpacked").exists()  # nothing refused is unpacked


def test_a_served_archive_is_unpacked_with_its_python_compiled_once_for_every_worker(tmp_path):
    settings = {"tsvk": {"model_name": "m", "artifact": {"file": "model.pt", "format": "torchscript", "source": {"builder": "resnet18"}}}}
    sources = {"handler_file.py": b"from tsvk.handler import TorchServeHandler\n", "tsvk/handler.py": b"class TorchServeHandler: pass\n",
               "tsvk/worker/service.py": b"VALUE = 1\n", "tsvk/worker/broken.py": b"def (:\n"}
    manifest = {"runtime": "python", "model": {"modelName": "m", "handler": "handler_file.py", "modelVersion": "1.0"}}
    with zipfile.ZipFile(tmp_path / "m.mar", "w") as mar:
        mar.writestr("MAR-INF/MANIFEST.json", json.dumps(manifest))
        mar.writestr("model-config.yaml", yaml.safe_dump(settings))
        mar.writestr("model.pt", b"weights")
        for name, data in sources.items():
            mar.writestr(name, data)
    served, refused = open_archives(_properties(tmp_path, "m"), tmp_path / "unpacked")
    assert refused == [] and [model.name for model in served] == ["m"]
    directory = served[0].directory
    for name in sources:
        compiled = Path(importlib.util.cache_from_source(str(directory / name)))
        # a file that does not compile is left to the worker, whose refusal names the error
        assert compiled.is_file() == (name != "tsvk/worker/broken.py"), name
    assert (directory / "tsvk/worker/broken.py").read_bytes() == sources["tsvk/worker/broken.py"]
