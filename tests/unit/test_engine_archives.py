"""The engine refuses an archive it cannot serve with one line naming it and why (tools/engines/shared/archives.py);
the archive's other models still start. The archives here are plain zips shaped like TorchServe's .mar."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import zipfile
from pathlib import Path

import pytest
import yaml

from tsvk_tools import defaults
from tsvk_tools.engines.shared.archives import MAX_UNPACKED_KEY, open_archives


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


def _served_archive(path: Path, extra: dict[str, bytes] | None = None, compression: int = zipfile.ZIP_DEFLATED) -> None:
    """A small archive the engine serves: tsvk's handler and service, settings, an artifact; `extra` files beside them."""
    artifact = {"file": "model.pt", "format": "torchscript", "source": {"builder": "resnet18"}}
    settings = {"tsvk": {"model_name": path.stem, "artifact": artifact}}
    manifest = {"runtime": "python", "model": {"modelName": path.stem, "handler": "handler_file.py", "modelVersion": "1.0"}}
    files = {"MAR-INF/MANIFEST.json": json.dumps(manifest).encode(), "model-config.yaml": yaml.safe_dump(settings).encode(),
             "model.pt": b"weights", "handler_file.py": b"from tsvk.handler import TorchServeHandler\n",
             "tsvk/handler.py": b"class TorchServeHandler: pass\n", "tsvk/worker/service.py": b"VALUE = 1\n", **(extra or {})}
    with zipfile.ZipFile(path, "w", compression) as mar:
        for name, data in files.items():
            mar.writestr(name, data)


def _lie_about_size(path: Path, member: str, size: int) -> None:
    """Rewrite `member`'s uncompressed size in its local header and the zip's directory (a crafted archive's lie)."""
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as mar:
        local = mar.getinfo(member).header_offset
    data[local + 22:local + 26] = size.to_bytes(4, "little")
    entry = data.find(b"PK\x01\x02")
    while data[entry + 46:entry + 46 + len(member)] != member.encode():
        entry = data.find(b"PK\x01\x02", entry + 4)
    data[entry + 24:entry + 28] = size.to_bytes(4, "little")
    path.write_bytes(bytes(data))


def _one_refused(tmp_path: Path, name: str, properties: dict[str, str] | None = None) -> tuple[list, dict[str, str]]:
    """Serve `good` and `name` together: the good one serves; the refusal lines by archive name."""
    _served_archive(tmp_path / "good.mar")
    served, refused = open_archives({**_properties(tmp_path, "good", name), **(properties or {})}, tmp_path / "unpacked")
    assert [model.name for model in served] == ["good"], refused
    lines = {refusal.archive.name: refusal.line() for refusal in refused}
    assert list(lines) == [f"{name}.mar"] and "\n" not in lines[f"{name}.mar"]
    assert not (tmp_path / "unpacked" / name).exists()  # nothing half unpacked is left
    return served, lines


def test_a_truncated_archive_is_refused_alone(tmp_path):
    _served_archive(tmp_path / "whole.mar", {"model.pt": os.urandom(64 * 1024)})
    data = (tmp_path / "whole.mar").read_bytes()
    (tmp_path / "cut.mar").write_bytes(data[: len(data) // 2])
    _, lines = _one_refused(tmp_path, "cut")
    assert "not a readable model archive" in lines["cut.mar"]


def test_an_archive_whose_data_is_corrupt_is_refused_alone_and_leaves_nothing_unpacked(tmp_path):
    weights = os.urandom(256 * 1024)
    _served_archive(tmp_path / "corrupt.mar", {"model.pt": weights}, compression=zipfile.ZIP_STORED)
    data = bytearray((tmp_path / "corrupt.mar").read_bytes())
    at = data.find(weights[:64])
    data[at + 1000:at + 1010] = bytes(10)  # the directory is intact; the CRC of model.pt is not
    (tmp_path / "corrupt.mar").write_bytes(bytes(data))
    _, lines = _one_refused(tmp_path, "corrupt")
    assert "could not be unpacked" in lines["corrupt.mar"] and "CRC" in lines["corrupt.mar"]


def test_an_archive_over_the_unpacked_bound_is_refused_before_a_byte_is_written(tmp_path):
    _served_archive(tmp_path / "big.mar", {"model.pt": os.urandom(2 * 2**20)})
    _, lines = _one_refused(tmp_path, "big", {MAX_UNPACKED_KEY: "1"})
    assert "over the 1 MiB allowed" in lines["big.mar"] and MAX_UNPACKED_KEY in lines["big.mar"]


def test_a_zip_bomb_member_is_refused_by_its_compression_ratio(tmp_path):
    _served_archive(tmp_path / "bomb.mar", {"padding.bin": bytes(64 * 2**20)})  # 64 MiB of zeros: about 64 KiB deflated
    _, lines = _one_refused(tmp_path, "bomb")
    assert "padding.bin" in lines["bomb.mar"] and "zip bomb" in lines["bomb.mar"]


def test_a_member_whose_data_is_larger_than_its_header_says_is_refused_while_unpacking(tmp_path):
    _served_archive(tmp_path / "liar.mar", {"model.pt": os.urandom(512 * 1024)})
    _lie_about_size(tmp_path / "liar.mar", "model.pt", 1000)
    _, lines = _one_refused(tmp_path, "liar")
    assert "could not be unpacked" in lines["liar.mar"] or "unpacks to more than" in lines["liar.mar"]


def test_an_archive_that_would_fill_the_disk_is_refused(tmp_path, monkeypatch):
    _served_archive(tmp_path / "good.mar")
    _served_archive(tmp_path / "huge.mar", {"model.pt": os.urandom(2 * 2**20)})
    real = shutil.disk_usage

    def little_room(path):
        usage = real(path)
        return usage._replace(free=defaults.ENGINE_DISK_RESERVE_MB * 2**20 + 2**20)  # room for good.mar, not for huge.mar

    monkeypatch.setattr(shutil, "disk_usage", little_room)
    _, lines = _one_refused(tmp_path, "huge")
    assert "MiB free" in lines["huge.mar"] and "--run-dir" in lines["huge.mar"]


@pytest.mark.parametrize("member", ["../escape.py", "/etc/cron.d/x", "tsvk/../../escape.py", "dir\\..\\escape.py"])
def test_a_member_named_outside_the_archive_is_refused(tmp_path, member):
    _served_archive(tmp_path / "evil.mar", {member: b"x = 1\n"})
    _, lines = _one_refused(tmp_path, "evil")
    assert "outside the archive's directory" in lines["evil.mar"]
    assert not (tmp_path / "escape.py").exists()


@pytest.mark.parametrize("name, mar_name, allowed", [
    ("../outside", "good.mar", "use letters, digits"),
    ("a/b", "good.mar", "use letters, digits"),
    ("/abs", "good.mar", "use letters, digits"),
    ("x\x00y", "good.mar", "use letters, digits"),
    ("a\nb", "good.mar", "use letters, digits"),
    (".hidden", "good.mar", "starting with a letter or digit"),
    ("ok", "../good.mar", "the file name of an archive in the model store"),
    ("ok", "/etc/passwd", "the file name of an archive in the model store"),
    ("ok", "sub/good.mar", "the file name of an archive in the model store"),
    ("ok", "..", "the file name of an archive in the model store"),
])
def test_a_model_name_or_mar_name_leading_out_of_the_store_or_run_dir_is_refused_saying_what_is_allowed(tmp_path, name, mar_name,
                                                                                                         allowed):
    store, run = tmp_path / "store", tmp_path / "run"
    store.mkdir()
    _served_archive(store / "good.mar")
    models = {"good": {"1.0": {"marName": "good.mar"}}, name: {"1.0": {"marName": mar_name}}}
    served, refused = open_archives({"model_store": str(store), "models": json.dumps(models)}, run / "models")
    assert [model.name for model in served] == ["good"]
    [line] = [refusal.line() for refusal in refused]
    assert line.startswith(f"not serving model {name!r}: ") and allowed in line and "\n" not in line
    assert sorted(os.listdir(tmp_path)) == ["run", "store"] and os.listdir(run) == ["models"]
    assert os.listdir(run / "models") == ["good"]


def test_settings_with_several_problems_are_still_refused_in_one_line(tmp_path):
    settings = {"tsvk": {"model_name": "m", "artifact": {"file": "model.pt"}}}  # no format, no source: a problem a line
    _served_archive(tmp_path / "unset.mar", {"model-config.yaml": yaml.safe_dump(settings).encode()})
    _, lines = _one_refused(tmp_path, "unset")
    assert "cannot be read" in lines["unset.mar"] and "source" in lines["unset.mar"]


@pytest.mark.parametrize("models, says", [("{not json", "models is not valid JSON"),
                                          (json.dumps({"odd": {"1.0": {"batchSize": "eight"}}}), "batchSize must be a whole number")])
def test_a_models_value_it_cannot_read_is_refused_in_one_line_not_raised(tmp_path, models, says):
    served, refused = open_archives({"model_store": str(tmp_path), "models": models}, tmp_path / "unpacked")
    assert served == [] and len(refused) == 1
    assert refused[0].line().startswith("not serving models=: ") and says in refused[0].line()
