"""The handler in a real TorchServe 0.12: batches of 4 formed by concurrent requests, per-request
errors (400 corrupt / empty / non-image, 413 bomb) beside 200s of the same batch, and the handler's
metrics on the Prometheus endpoint.

The .mar is staged here from the tiny eager model (model.py + state_dict) and packed with
torch-model-archiver, exactly as `tsvk archive` lays it out, so this test needs no weights download.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

import pytest
import requests
import yaml
from PIL import Image

from tsvk import metrics as tsvk_metrics

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
HANDLERS = ROOT / "handlers"
sys.path.insert(0, str(ROOT / "tests" / "unit"))
from handler_fakes import encode, noise_image, write_tiny_eager_archive  # noqa: E402

MODEL = "tiny"
BATCH_SIZE = 4


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def build_mar(work: Path, model_store: Path) -> Path:
    """Stage handler + tsvk package + model code + labels + settings, and pack them."""
    source = work / "source"
    write_tiny_eager_archive(source, preprocess={"resize": 40, "crop": 32, "backend": "auto"})
    extra = work / "extra"
    shutil.copytree(HANDLERS / "tsvk", extra / "tsvk", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("model.py", "index_to_name.json"):
        shutil.copy2(source / name, extra / name)
    model_store.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            str(Path(sys.executable).with_name("torch-model-archiver")),
            "--model-name", MODEL, "--version", "1.0",
            "--serialized-file", str(source / "model_state.pt"),
            "--handler", str(HANDLERS / "image_classifier.py"),
            "--extra-files", str(extra),
            "--config-file", str(source / "model-config.yaml"),
            "--export-path", str(model_store),
        ],
        check=True,
    )
    return model_store / f"{MODEL}.mar"


def write_metrics_yaml(path: Path) -> Path:
    """TorchServe's default metrics config plus the handler's model_metrics."""
    import ts

    config = yaml.safe_load((Path(ts.__file__).parent / "configs" / "metrics.yaml").read_text())
    for kind, entries in tsvk_metrics.model_metrics_yaml_section().items():
        config["model_metrics"].setdefault(kind, []).extend(entries)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def write_config(path: Path, model_store: Path, metrics_yaml: Path | None, model: str = MODEL) -> tuple[Path, dict[str, str]]:
    """One worker, batchSize 4, 1 s batch delay; metrics_yaml None: model_metrics_auto_detect=true instead."""
    ports = {api: _free_port() for api in ("inference", "management", "metrics")}
    models = {model: {"1.0": {"defaultVersion": True, "marName": f"{model}.mar", "minWorkers": 1, "maxWorkers": 1,
                              "batchSize": BATCH_SIZE, "maxBatchDelay": 1000, "responseTimeout": 120}}}
    lines = [
        *(f"{api}_address=http://127.0.0.1:{port}" for api, port in ports.items()),
        f"model_store={model_store}",
        f"load_models={model}.mar",
        f"models={json.dumps(models)}",
        "metrics_mode=prometheus",
        f"metrics_config={metrics_yaml}" if metrics_yaml else "model_metrics_auto_detect=true",
        f"grpc_inference_port={_free_port()}",  # ours alone: another TorchServe may hold 7070/7071
        f"grpc_management_port={_free_port()}",
        "disable_token_authorization=true",
        "default_workers_per_model=1",
        f"tsvk.threads.{model}=1,1",
    ]
    path.write_text("\n".join(lines) + "\n")
    return path, {api: f"http://127.0.0.1:{port}" for api, port in ports.items()}


@contextlib.contextmanager
def serving(work: Path, metrics_config: bool = True, model: str = MODEL, build: Callable[[Path, Path], Path] = build_mar):
    """A TorchServe of our own serving `model`, whose .mar `build(work, model_store)` writes."""
    if shutil.which("java") is None:
        pytest.skip("TorchServe needs Java 17 (no `java` on PATH)")
    from tsvk_tools.server import start_torchserve

    model_store = work / "model_store"
    build(work, model_store)
    metrics_yaml = write_metrics_yaml(work / "metrics.yaml") if metrics_config else None
    config, urls = write_config(work / "config.properties", model_store, metrics_yaml, model)
    run = start_torchserve(config, work / "run")
    try:
        run.wait_ready([model], timeout=240)
        yield urls, run
    finally:
        run.stop()


@pytest.fixture(scope="module")
def torchserve(tmp_path_factory):
    with serving(tmp_path_factory.mktemp("ts"), metrics_config=True) as server:
        yield server


def post_concurrently(url: str, bodies: list[bytes]) -> list[requests.Response]:
    """Send all at once so TorchServe's batch aggregator puts them in one batch."""
    responses: list[requests.Response | None] = [None] * len(bodies)
    barrier = threading.Barrier(len(bodies))

    def send(index: int) -> None:
        barrier.wait()
        responses[index] = requests.post(url, data=bodies[index], timeout=120)

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(bodies))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return responses  # type: ignore[return-value]


def _bomb() -> bytes:
    return encode(Image.new("1", (9000, 5000)), "PNG")  # 45 MP > the 40 MP default limit, ~6 kB


def _truncated() -> bytes:
    data = encode(noise_image(300, 200), "JPEG")
    return data[: len(data) // 2]


def test_good_image_gets_topk(torchserve):
    urls, _ = torchserve
    response = requests.post(f"{urls['inference']}/predictions/{MODEL}", data=encode(noise_image(), "JPEG"), timeout=120)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert len(answer) == 3 and all(label.startswith("class_") for label in answer)


def test_bad_requests_fail_alone_inside_a_real_batch(torchserve):
    urls, run = torchserve
    url = f"{urls['inference']}/predictions/{MODEL}"
    cases = [
        ("good", encode(noise_image(seed=1), "JPEG"), 200),
        ("truncated", _truncated(), 400),
        ("bomb", _bomb(), 413),
        ("good", encode(noise_image(seed=2), "PNG"), 200),
        ("good", encode(noise_image(seed=3), "JPEG"), 200),
        ("text", b"definitely not an image", 400),
        ("good", encode(noise_image(seed=4), "WEBP"), 200),
        ("blank", b"   ", 400),
    ]
    responses = post_concurrently(url, [body for _, body, _ in cases])
    assert [r.status_code for r in responses] == [code for _, _, code in cases], [r.text for r in responses]
    for (name, _, code), response in zip(cases, responses):
        body = response.json()
        if code != 200:
            assert body["code"] == code and body["message"], (name, body)
    assert "max_pixels" in responses[2].json()["message"]
    assert _batch_sizes_seen(run.run_dir) & {3, 4}, "requests were never batched together"


def test_empty_body_is_a_400(torchserve):
    urls, _ = torchserve
    response = requests.post(f"{urls['inference']}/predictions/{MODEL}", data=b"", timeout=120)
    assert response.status_code == 400 and "empty" in response.json()["message"], response.text


def _batch_sizes_seen(run_dir: Path) -> set[int]:
    """Batch sizes the handler reported (from the backend metrics TorchServe logs)."""
    text = "".join(p.read_text(errors="replace") for p in (run_dir / "logs").glob("*.log"))
    sizes = set()
    for line in text.splitlines():
        if f"{tsvk_metrics.BATCH_SIZE}." in line:
            value = line.split(f"{tsvk_metrics.BATCH_SIZE}.", 1)[1].split(":", 1)[1].split("|", 1)[0]
            sizes.add(int(float(value)))
    return sizes


def test_worker_survives_and_keeps_answering(torchserve):
    urls, _ = torchserve
    url = f"{urls['inference']}/predictions/{MODEL}"
    for body in (b"", _bomb(), _truncated()):
        requests.post(url, data=body, timeout=120)
    assert requests.post(url, data=encode(noise_image(seed=9), "JPEG"), timeout=120).status_code == 200
    workers = requests.get(f"{urls['management']}/models/{MODEL}", timeout=10).json()[0]["workers"]
    assert [w["status"] for w in workers] == ["READY"]


def _scrape_until_all_present(urls: dict[str, str], wanted: set[str]) -> str:
    deadline = time.monotonic() + 30
    while True:
        text = requests.get(f"{urls['metrics']}/metrics", timeout=10).text
        found = {name for name in wanted if f"\n{name}{{" in text}
        if found == wanted or time.monotonic() > deadline:
            assert found == wanted, text[-3000:]
            return text
        time.sleep(1)


def test_handler_metrics_on_prometheus_endpoint(torchserve):
    """With metrics_config = TorchServe's default metrics.yaml + tsvk.metrics.model_metrics_yaml_section()."""
    urls, _ = torchserve
    requests.post(f"{urls['inference']}/predictions/{MODEL}", data=encode(noise_image(), "JPEG"), timeout=120)
    requests.post(f"{urls['inference']}/predictions/{MODEL}", data=_bomb(), timeout=120)
    text = _scrape_until_all_present(urls, set(tsvk_metrics.metric_definitions()))
    assert f'{tsvk_metrics.PREPROCESS_MS}{{ModelName="{MODEL}",Level="Model",Backend="cpu",' in text
    assert f'{tsvk_metrics.REJECTED_TOTAL}{{ModelName="{MODEL}",Level="Model",Status="413",' in text


def test_metrics_also_appear_with_auto_detect_instead_of_a_metrics_yaml(tmp_path):
    """The alternative config: model_metrics_auto_detect=true and no metrics_config."""
    with serving(tmp_path, metrics_config=False) as (urls, _):
        requests.post(f"{urls['inference']}/predictions/{MODEL}", data=encode(noise_image(), "JPEG"), timeout=120)
        text = _scrape_until_all_present(urls, {tsvk_metrics.PREPROCESS_MS, tsvk_metrics.INFERENCE_MS, tsvk_metrics.BATCH_SIZE})
    assert f'{tsvk_metrics.BATCH_SIZE}{{ModelName="{MODEL}",Level="Model",Backend="cpu",' in text
