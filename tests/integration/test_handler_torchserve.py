"""The handler in a real TorchServe 0.12: batches of 4 formed by concurrent requests, per-request
errors (400 corrupt / empty / non-image, 413 bomb) beside 200s of the same batch, and the handler's
metrics on the Prometheus endpoint.

The .mar is the tiny custom model of tests/fixtures built by `tsvk archive` (eager, random weights),
served with a config from `tsvk config`, so this test needs no weights download.
"""

from __future__ import annotations

import base64
import contextlib
import json
import time
from pathlib import Path

import pytest
import requests
import yaml
from PIL import Image

from tests.support.handler_fakes import encode, noise_image
from tests.support.torchserve import model_metrics_yaml_section, post_concurrently, running_torchserve
from tsvk.worker import metrics as tsvk_metrics
from tsvk_tools.cli import main as tsvk
from tsvk_tools.config.ports import serving_on_free_ports

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"

MODEL = "tiny"
LABELS = {"cat", "dog", "bird"}
BATCH_SIZE = 4


def build_mar(model_store: Path) -> None:
    assert tsvk(["archive", "--model", MODEL, "--backend", "eager", "--model-file", str(FIXTURES / "tiny_model.py"),
                 "--model-factory", "TinyNet", "--resize", "40", "--crop", "32", "--labels", str(FIXTURES / "tiny_labels.txt"),
                 "--weights", "none", "--max-batch", str(BATCH_SIZE), "--model-store", str(model_store)]) == 0


def write_metrics_yaml(path: Path) -> Path:
    """TorchServe's default metrics config plus the handler's model_metrics."""
    import ts

    config = yaml.safe_load((Path(ts.__file__).parent / "configs" / "metrics.yaml").read_text())
    for kind, entries in model_metrics_yaml_section().items():
        config["model_metrics"].setdefault(kind, []).extend(entries)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


@contextlib.contextmanager
def serving(work: Path, metrics_config: bool = True):
    """One worker, batchSize 4, 1 s batch delay, auth off; metrics from a metrics yaml or auto-detected."""
    model_store = work / "model_store"
    build_mar(model_store)
    request = serving_on_free_ports(model_store=model_store, vcpus=1, workers=1, batch=BATCH_SIZE, max_batch_delay_ms=1000, auth=False)
    extra = {"metrics_config": str(write_metrics_yaml(work / "metrics.yaml"))} if metrics_config else {}
    with running_torchserve(request, work, extra_properties=extra) as run:
        urls = {api: run.url(api) for api in ("inference", "management", "metrics")}
        yield urls, run


@pytest.fixture(scope="module")
def torchserve(tmp_path_factory):
    with serving(tmp_path_factory.mktemp("ts"), metrics_config=True) as server:
        yield server


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
    assert len(answer) == 3 and set(answer) == LABELS


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


def test_hostile_json_fails_alone_and_is_parsed_by_the_handler_not_torchserve(torchserve):
    """TorchServe parses application/json bodies in the worker before the handler runs unless told not to: a
    deep one made the handler raise RecursionError (503 for its whole batch), a 12 MiB `[[],[],...]` cost the
    worker ~300 MiB. The handler turns that parse off at load and refuses both from counts over the bytes."""
    urls, _ = torchserve
    good = json.dumps({"image": base64.b64encode(encode(noise_image(seed=5), "JPEG")).decode()}).encode()
    cases = [(good, 200), (b'{"image":' + b"[" * 1000 + b"]" * 1000 + b"}", 400),
             (b"[" + b"[]," * (12 * 2**20 // 3) + b"[]]", 413), (good, 200)]
    responses = post_concurrently(f"{urls['inference']}/predictions/{MODEL}", [body for body, _ in cases],
                                  headers={"Content-Type": "application/json"})
    assert [r.status_code for r in responses] == [code for _, code in cases], [r.text[:200] for r in responses]
    assert [responses[1].json()["error"], responses[2].json()["error"]] == ["json_too_deep", "json_too_large"]
    assert set(responses[0].json()) == set(responses[3].json()) == LABELS


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
    """With metrics_config = TorchServe's default metrics.yaml + the handler's metric definitions."""
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
