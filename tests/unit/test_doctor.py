"""`tsvk doctor` on TorchServe's own configs, on deliberately broken ones, and on what `tsvk config` writes."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest
import yaml

from tests.support.torchserve import archive_tiny
from tsvk_tools.cli import main as tsvk
from tsvk_tools.doctor import diagnose
from tsvk_tools.doctor.properties import read

STOCK = Path(__file__).resolve().parents[1] / "data" / "torchserve-0.12.0"
VCPUS = 2


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    """A tsvk archive of a tiny eager model (max batch 4), built once."""
    store = tmp_path_factory.mktemp("doctor-store")
    archive_tiny(store, "TinyNet", "--quiet")
    return store


@pytest.fixture
def generated(store, tmp_path) -> Path:
    config = tmp_path / "generated.properties"
    assert tsvk(["config", "--model-store", str(store), "--vcpus", str(VCPUS), "--output", str(config)]) == 0
    return config


def problems(config: Path, archives=()) -> list[str]:
    findings, _ = diagnose(config, list(archives), VCPUS)
    return [f"{f.severity}: {f.problem}" for f in findings]


def edited(config: Path, changes: dict[str, str | None]) -> Path:
    """`config` with keys replaced (None: removed) or added."""
    lines = [line for line in config.read_text().splitlines() if line.partition("=")[0] not in changes]
    config.write_text("\n".join(lines + [f"{k}={v}" for k, v in changes.items() if v is not None]) + "\n")
    return config


def repacked(archive: Path, target: Path, edit_yaml=None, extra: dict[str, str] | None = None, manifest=None) -> Path:
    """A copy of `archive` with its model-config.yaml, manifest or files changed."""
    with zipfile.ZipFile(archive) as source, zipfile.ZipFile(target, "w") as out:
        for item in source.infolist():
            data = source.read(item)
            if item.filename == "model-config.yaml" and edit_yaml:
                raw = yaml.safe_load(data)
                edit_yaml(raw)
                data = yaml.safe_dump(raw).encode()
            if item.filename == "MAR-INF/MANIFEST.json" and manifest:
                raw = json.loads(data)
                manifest(raw["model"])
                data = json.dumps(raw).encode()
            out.writestr(item, data)
        for name, text in (extra or {}).items():
            out.writestr(name, text)
    return target


def test_what_tsvk_config_writes_has_no_findings(generated, capsys):
    assert tsvk(["doctor", str(generated), "--vcpus", str(VCPUS)]) == 0
    assert capsys.readouterr().out.startswith("no problems found in ")


# --- TorchServe's own configs (tests/data/torchserve-0.12.0/ORIGIN.md) ---

def test_the_official_docker_config_exposes_management_and_metrics():
    found = problems(STOCK / "docker.properties")
    assert found == ["warning: the management API listens on http://0.0.0.0:8081", "warning: gRPC management listens on 0.0.0.0",
                     "warning: metrics listen on http://0.0.0.0:8082"]


def test_the_kserve_config_has_an_ignored_key_and_lets_the_environment_override_it():
    found = problems(STOCK / "kubernetes_kserve.properties")
    assert "warning: TorchServe 0.12 ignores the key 'NUM_WORKERS'" in found
    assert "warning: TS_* environment variables override this file" in found
    assert any(p.startswith("error: mnist: no mnist.mar in /home/model-server/shared/model-store") for p in found)


def test_a_models_value_continued_over_lines_is_read_whole():
    props = read(STOCK / "examples_custom_metrics.properties")
    assert json.loads(props.get("models"))["mnist"]["1.0"]["maxWorkers"] == 1 and props.lines["models"] == 4


def test_the_benchmark_config_is_clean(capsys):
    assert tsvk(["doctor", str(STOCK / "benchmarks.properties"), "--vcpus", str(VCPUS)]) == 0


def test_exit_status_is_one_for_warnings_and_two_for_errors(capsys):
    assert tsvk(["doctor", str(STOCK / "docker.properties")]) == 1
    assert tsvk(["doctor", str(STOCK / "examples_custom_metrics.properties")]) == 2
    out = capsys.readouterr().out
    assert "0 error(s), 3 warning(s)" in out and "1 error(s), 0 warning(s)" in out


# --- deliberately broken configs ---

def test_registration_with_management_exposed_is_an_error(generated):
    found = problems(edited(generated, {"management_address": "http://0.0.0.0:8081", "enable_model_api": "true"}))
    assert "error: the management API listens on http://0.0.0.0:8081" in found
    assert "warning: model registration is on (enable_model_api=true)" in found


def test_token_auth_off_and_a_misspelt_key_are_warnings(generated):
    found = problems(edited(generated, {"disable_token_authorization": "true", "number_of_netty_thread": "4"}))
    assert found == ["warning: TorchServe 0.12 ignores the key 'number_of_netty_thread'", "warning: token authorization is off"]
    findings, _ = diagnose(generated, [], VCPUS)
    assert findings[0].fix == "did you mean 'number_of_netty_threads'?"


def test_workers_without_thread_counts_oversubscribe_the_vcpus(generated):
    models = json.loads(read(generated).get("models"))
    models["tiny"]["1.0"].update(minWorkers=4, maxWorkers=4)
    found = problems(edited(generated, {"models": json.dumps(models), "tsvk.threads.tiny": None}))
    [threads] = [p for p in found if "workers x threads" in p]
    assert threads.startswith("warning: workers x threads = tiny 4 x ") and f"on {VCPUS} vCPUs" in threads


def test_unbounded_and_unparseable_limits(generated):
    found = problems(edited(generated, {"max_request_size": str(4 * 2**30), "job_queue_size": "lots"}))
    assert f"error: max_request_size={4 * 2**30} does not fit a Java int" in found
    assert "error: job_queue_size='lots' is not a whole number" in found


def test_a_batch_above_the_compiled_max_batch_is_an_error(generated):
    models = json.loads(read(generated).get("models"))
    models["tiny"]["1.0"]["batchSize"] = 16
    found = problems(edited(generated, {"models": json.dumps(models)}))
    assert any(p.startswith("error: batchSize 16 is above what tiny.mar was compiled for (max batch 4)") for p in found)


def test_a_startup_timeout_shorter_than_the_measured_load_is_an_error(generated, store, tmp_path):
    slow = tmp_path / "store"
    slow.mkdir()
    repacked(store / "tiny.mar", slow / "tiny.mar",
             edit_yaml=lambda raw: raw["tsvk"]["provenance"]["compile"].update(load_seconds=30.0))
    found = problems(edited(generated, {"model_store": str(slow), "default_startup_timeout": "20"}))
    assert found == ["error: tiny: startupTimeout 20 s, and its artifact took 30 s to load when built"]


def test_an_archive_that_overrides_the_config_is_reported(generated, store, tmp_path):
    forced = repacked(store / "tiny.mar", tmp_path / "tiny.mar", edit_yaml=lambda raw: raw.update(batchSize=2, minWorkers=1))
    assert problems(generated, [forced]) == [
        "warning: its model-config.yaml sets minWorkers=1, batchSize=2, overriding config.properties"]


def test_foreign_archives_missing_their_handler_or_requirements(generated, store, tmp_path):
    (tmp_path / "a").mkdir()
    no_handler = repacked(store / "tiny.mar", tmp_path / "a" / "tiny.mar", manifest=lambda model: model.update(handler="my_handler.py"))
    assert problems(generated, [no_handler]) == [
        "error: its handler 'my_handler.py' is neither packed in it nor a module this Python has"]
    handler = "import torch\nimport surely_not_installed_pkg\n\nclass Handler: pass\n"
    needs = repacked(
        store / "tiny.mar",
        tmp_path / "tiny.mar",
        extra={"needs.py": handler, "requirements.txt": "surely-not-installed-pkg==1.0\n"},
        manifest=lambda model: model.update(handler="needs.py", requirementsFile="requirements.txt"),
    )
    assert problems(generated, [needs]) == [
        "error: its handler imports surely_not_installed_pkg, which this Python lacks",
        "error: it requires surely-not-installed-pkg, not installed here, and install_py_dep_per_model is off",
    ]


def test_a_missing_config_is_a_usage_error(tmp_path, capsys):
    assert tsvk(["doctor", str(tmp_path / "nope.properties")]) == 2
    assert "not found" in capsys.readouterr().err


def test_the_job_queue_is_held_to_twice_the_clients_tsvk_config_accepts(generated):
    assert problems(edited(generated, {"job_queue_size": "5000000"})) == ["warning: job_queue_size=5000000 is outside 2..2000000"]
    assert problems(edited(generated, {"job_queue_size": "1000000"})) == []


def _aoti_package(cpu_isa: str) -> bytes:
    """An AOTInductor package's zip as far as the check reads it: the metadata member torch 2.14 writes beside the
    compiled library (model/data/aotinductor/model/<hash>.wrapper_metadata.json, as in a package built here)."""
    import io

    metadata = {
        "AOTI_DEVICE_KEY": "cpu",
        "AOTI_PLATFORM": "linux",
        "AOTI_MACHINE": "x86_64",
        "AOTI_CPU_ISA": cpu_isa,
        "AOTI_COMPUTE_CAPABILITY": "",
    }
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as package:
        package.writestr("model/data/aotinductor/model/c0ffee.wrapper_metadata.json", json.dumps(metadata))
        package.writestr("model/data/aotinductor/model/c0ffee.wrapper.so", b"\x7fELF")
    return buffer.getvalue()


def test_an_aoti_archive_compiled_for_instructions_this_cpu_lacks_is_an_error(generated, store, tmp_path, monkeypatch, avx2_only_cpu):
    from tsvk.model import cpu_isa

    def as_aoti(raw):
        raw["tsvk"]["artifact"].update(format="aoti", file="model.pt2", device="cpu")

    (tmp_path / "a").mkdir()
    avx512 = repacked(
        store / "tiny.mar", tmp_path / "a" / "tiny.mar", edit_yaml=as_aoti, extra={"model.pt2": _aoti_package("AVX512 AVX512_VNNI")}
    )
    avx2 = repacked(store / "tiny.mar", tmp_path / "tiny.mar", edit_yaml=as_aoti, extra={"model.pt2": _aoti_package("AVX2")})
    monkeypatch.setattr(cpu_isa.platform, "machine", lambda: "x86_64")
    found = problems(generated, [avx512])
    assert len(found) == 1 and found[0].startswith(
        "error: its AOTInductor package cannot run on this CPU: it was compiled for "
        "the CPU instructions AVX512 AVX512_VNNI and this CPU lacks AVX512 AVX512_VNNI"
    )
    assert problems(generated, [avx2]) == []
    monkeypatch.setattr(cpu_isa, "host_instructions", lambda: {"avx2", "avx512", "avx512_vnni"})
    assert problems(generated, [avx512]) == []


def test_an_archive_the_kserve_engine_would_refuse_is_an_error_for_that_engine_only(generated, store, tmp_path):
    stock = repacked(store / "tiny.mar", tmp_path / "tiny.mar", manifest=lambda model: model.update(handler="image_classifier"))
    on_engine, _ = diagnose(generated, [stock], VCPUS, "kserve")
    on_torchserve, _ = diagnose(generated, [stock], VCPUS, "torchserve")
    refusals = [f for f in on_engine if f.problem.startswith("the kserve engine refuses it: ")]
    assert [(f.severity, f.where) for f in refusals] == [("error", "tiny.mar")]
    assert "TorchServe's own (stock) handler" in refusals[0].problem
    assert not [f for f in on_torchserve if "kserve" in f.problem]


def test_the_engine_is_chosen_on_the_command_line_and_reported(generated, capsys):
    assert tsvk(["doctor", str(generated), "--vcpus", str(VCPUS), "--engine", "kserve", "--json"]) == 0
    said = json.loads(capsys.readouterr().out)
    assert said["engine"] == "kserve" and said["findings"] == []
    assert tsvk(["doctor", str(generated), "--vcpus", str(VCPUS), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["engine"] == "torchserve"  # nothing serves this config from the default run dir
