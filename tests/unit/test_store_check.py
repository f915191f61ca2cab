"""A container whose model store lacks an archive the config loads stops at once, naming it.

TorchServe 0.12 would start anyway (the model simply absent) and a pod's startup probe would wait out its
budget; `tsvk run-container` (the image's PID 1) checks first.
"""

from __future__ import annotations

import subprocess
import sys
import time

from tsvk_tools.config.store_check import archives_loaded, missing_archives_message

MODELS = '{"resnet152":{"1.0":{"marName":"resnet152.mar","minWorkers":1}}}'


def config(tmp_path, load_models: str = "resnet152.mar", models: str = MODELS):
    store = tmp_path / "store"
    store.mkdir(exist_ok=True)
    path = tmp_path / "config.properties"
    path.write_text(f"model_store={store}\nload_models={load_models}\nmodels={models}\n")
    return path, store


def test_the_archives_a_config_loads():
    assert archives_loaded({"load_models": "a.mar, b=b-v2.mar,all", "models": MODELS}) == ["a.mar", "b-v2.mar", "resnet152.mar"]
    assert archives_loaded({"load_models": "https://example.com/x.mar"}) == []


def test_a_missing_archive_is_named_with_what_the_store_holds(tmp_path):
    path, store = config(tmp_path)
    (store / "resnet50.mar").write_bytes(b"x")
    message = missing_archives_message(path)
    assert "archive missing: resnet152.mar not in the model store" in message and "it holds: resnet50.mar" in message


def test_all_there_is_no_message(tmp_path):
    path, store = config(tmp_path)
    (store / "resnet152.mar").write_bytes(b"x")
    assert missing_archives_message(path) is None


def test_the_container_entrypoint_exits_at_once_naming_the_archive(tmp_path):
    path, _ = config(tmp_path)
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "tsvk_tools.engines.container", "--config", str(path), "--run-dir",
                             str(tmp_path / "run")], capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert "tsvk: archive missing: resnet152.mar" in result.stderr
    assert time.monotonic() - started < 30, "it must not start TorchServe first"
    assert not (tmp_path / "run" / "logs").exists()
