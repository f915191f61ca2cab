"""tsvk's own engine (`tsvk serve --engine kserve`) against a real TorchServe 0.12 on the same archives: one archive
per task (classify, detect, segment), the same model store, the same generated config (other ports).

TorchServe's answers are what the engine's must equal: the JSON of every task's answer, and the statuses, bodies
and headers of TorchServe's own answers (/ping, an unknown model or version, a refused key, a bad image). The engine
runs no Java and its workers import the archive's own tsvk (checked in the worker). Also: an archive the engine
cannot serve is refused in one line naming it while the others start (the engine on jemalloc, where installed: every
process of it maps the allocator asked for), and a worker killed mid-batch has its
requests answered 503 within a second and is replaced. What the engine is given at start is bounded: a zip bomb, a
truncated archive, a model name or marName leading out of the run directory or the store are refused alone; with
token authorization on, a run directory of another user's stops the start.
"""

from __future__ import annotations

import base64
import io
import json
import os
import re
import signal
import subprocess
import threading
import time
import zipfile
from pathlib import Path

import numpy as np
import psutil
import pytest
import requests
from PIL import Image

from tests.support.engine import running_engine
from tests.support.handler_fakes import encode, photo
from tests.support.task_models import DETECTOR, SEGMENTER, decisive_weights
from tests.support.torchserve import archive_tiny, post_concurrently, running_torchserve
from tsvk_tools.archive.pack import build_archive
from tsvk_tools.archive.build import BuildRequest
from tsvk_tools.cli import main as tsvk
from tsvk.worker import ARRIVAL_HEADER
from tsvk_tools.engines.kserve.arrival import TRUSTED_PROXIES_KEY
from tsvk_tools.engines.kserve.engine_process import find_engine, start_engine
from tsvk_tools.errors import UsageError
from tsvk_tools.engines.kserve.files import MODELS_DIR, STATUS_FILE, WORKER_LOG
from tsvk_tools.client.predict import predict
from tsvk_tools.images import image_bytes
from tsvk_tools.keys import KEY_FILE, current_key
from tsvk_tools.config.allocator import JEMALLOC_SONAME, find_jemalloc
from tsvk_tools.config.ports import free_ports, serving_on_free_ports
from tsvk_tools.config.serving_config import write_config
from tsvk.common import escape_value, read_properties

pytestmark = pytest.mark.integration

CLASSIFIER = "tiny"
PHOTOS = ("chelsea", "coffee")
SAME_HEADERS = ("cache-control", "pragma", "expires", "content-type")


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("engine_store")
    store = archive_tiny(work / "model_store")
    detector = decisive_weights(DETECTOR, work / "detector.pt")
    segmenter = decisive_weights(SEGMENTER, work / "segmenter.pt", std=1.0)
    build_archive(BuildRequest(model=DETECTOR, backend="torchscript", weights=str(detector), max_batch=4, score_threshold=0.3), store)
    build_archive(BuildRequest(model=SEGMENTER, backend="export", weights=str(segmenter), max_batch=4), store)
    return store


def _request(store: Path, **fields):
    return serving_on_free_ports(model_store=store, vcpus=3, workers=1, batch=4, max_batch_delay_ms=100, auth=True, **fields)


@pytest.fixture(scope="module")
def both(store, tmp_path_factory):
    """(TorchServe's run, the engine's run) on the same store and config settings, served side by side."""
    work = tmp_path_factory.mktemp("engine_both")
    with running_torchserve(_request(store), work / "torchserve") as torchserve, running_engine(_request(store), work / "kserve") as engine:
        yield torchserve, engine


def test_each_worker_takes_its_threads_from_what_the_server_read_not_from_the_file(both):
    """Workers x threads on both engines as the config plans them (3 vCPUs, one worker a model: 1 thread each); the
    engine's workers were handed their model's part of the config by the server, and say so."""
    torchserve, engine = both
    said = {run.engine: re.findall(r"tsvk loaded (\S+) .*threads=intra (\d+), inter (\d+) \(([^)]*)\)",
                                    (run.run_dir / "logs" / WORKER_LOG).read_text()) for run in (torchserve, engine)}
    for run in (torchserve, engine):
        assert sorted((name, intra, inter) for name, intra, inter, _ in said[run.engine]) == \
            sorted((name, "1", "1") for name in (CLASSIFIER, DETECTOR, SEGMENTER)), said
    assert {source for *_, source in said[engine.engine]} == {"the server"}
    assert all(source.startswith("config ") for *_, source in said[torchserve.engine])


def _post(run, path: str, body: bytes, headers: dict | None = None, **kwargs) -> requests.Response:
    headers = run.headers("inference") if headers is None else headers
    return requests.post(f"{run.url('inference')}{path}", data=body, headers=headers, timeout=120, **kwargs)


def test_the_engine_runs_no_java_and_no_torchserve_module(both):
    _, engine = both
    processes = [psutil.Process(engine.pid), *psutil.Process(engine.pid).children(recursive=True)]
    commands = [" ".join(p.cmdline()) for p in processes]
    assert len(processes) >= 4, commands  # the server and one worker per model
    assert not any("java" in c or "org.pytorch.serve" in c or "model_service_worker" in c for c in commands), commands
    for process in processes:
        maps = Path(f"/proc/{process.pid}/maps").read_text()
        assert "libjvm" not in maps
    status = json.loads((engine.run_dir / STATUS_FILE).read_text())
    assert sorted(m["name"] for m in status["models"]) == sorted([CLASSIFIER, DETECTOR, SEGMENTER])


@pytest.mark.parametrize("model", [CLASSIFIER, DETECTOR, SEGMENTER])
def test_every_task_answers_the_same_json_on_both_engines(both, model):
    torchserve, engine = both
    for name in PHOTOS:
        body = encode(photo(name), "PNG")
        expected, got = _post(torchserve, f"/predictions/{model}", body), _post(engine, f"/predictions/{model}", body)
        assert (got.status_code, expected.status_code) == (200, 200), (got.text[:300], expected.text[:300])
        assert got.headers.get("content-type") == expected.headers.get("content-type")
        _assert_same_answer(model, expected.json(), got.json())
        assert got.content == expected.content or model != CLASSIFIER  # byte for byte where the floats agree exactly


def _assert_same_answer(model: str, expected, got) -> None:
    if model == CLASSIFIER:
        assert list(got) == list(expected)
        assert np.allclose(list(got.values()), list(expected.values()), atol=1e-6)
    elif model == DETECTOR:
        assert len(got) == len(expected) > 0
        assert sorted(a["label"] for a in got) == sorted(a["label"] for a in expected)
        boxes = lambda answer: np.array(sorted(a["box"] + [a["score"]] for a in answer))  # noqa: E731
        assert np.allclose(boxes(got), boxes(expected), atol=0.02)
    else:
        assert (got["width"], got["height"]) == (expected["width"], expected["height"])
        assert [c["label"] for c in got["classes"]] == [c["label"] for c in expected["classes"]]
        maps = [np.array(Image.open(io.BytesIO(base64.b64decode(a["label_map"]["data"])))) for a in (got, expected)]
        assert (maps[0] == maps[1]).mean() >= 0.999


def test_form_uploads_and_options_answer_alike(both):
    torchserve, engine = both
    body = encode(photo("chelsea"), "PNG")
    expected, got = (requests.post(f"{run.url('inference')}/predictions/{DETECTOR}", files={"data": body}, data={"max_detections": "2"},
                                   headers=run.headers("inference"), timeout=120) for run in (torchserve, engine))
    assert got.status_code == expected.status_code == 200, got.text
    _assert_same_answer(DETECTOR, expected.json(), got.json())
    assert len(got.json()) == 2


@pytest.mark.parametrize("case", ["ping", "ping without key", "ping by POST", "wrong key", "unknown model", "unknown version",
                                  "bad image", "versioned", "versioned with a trailing slash", "empty GET", "DELETE"])
def test_torchserves_own_answers_are_the_same(both, case):
    torchserve, engine = both
    answers = [_ask(run, case) for run in (torchserve, engine)]
    expected, got = answers
    assert got.status_code == expected.status_code, (case, got.text, expected.text)
    if case.startswith("versioned"):
        assert got.json().keys() == expected.json().keys()
    else:
        assert got.content == expected.content, (case, got.content, expected.content)
    for header in SAME_HEADERS:
        assert got.headers.get(header) == expected.headers.get(header), (case, header)
    assert len(got.headers["x-request-id"]) == len(expected.headers["x-request-id"])


def _ask(run, case: str) -> requests.Response:
    url, auth, image = run.url("inference"), run.headers("inference"), encode(photo("chelsea"))
    if case == "ping":
        return requests.get(f"{url}/ping", headers=auth, timeout=30)
    if case == "ping without key":
        return requests.get(f"{url}/ping", timeout=30)
    if case == "ping by POST":
        return requests.post(f"{url}/ping", headers=auth, timeout=30)
    if case == "wrong key":
        return requests.post(f"{url}/predictions/{CLASSIFIER}", data=image, headers={"Authorization": "Bearer nope"}, timeout=30)
    if case == "unknown model":
        return requests.post(f"{url}/predictions/nope", data=image, headers=auth, timeout=30)
    if case == "unknown version":
        return requests.post(f"{url}/predictions/{CLASSIFIER}/9.9", data=image, headers=auth, timeout=30)
    if case == "bad image":
        return requests.post(f"{url}/predictions/{CLASSIFIER}", data=b"\xff\xd8\xff not a jpeg", headers=auth, timeout=30)
    if case == "versioned":
        return requests.post(f"{url}/predictions/{CLASSIFIER}/1.0", data=image, headers=auth, timeout=30)
    if case == "versioned with a trailing slash":
        return requests.post(f"{url}/predictions/{CLASSIFIER}/1.0/", data=image, headers=auth, timeout=30)
    if case == "DELETE":  # TorchServe hands any method's (empty) body to the handler
        return requests.delete(f"{url}/predictions/{CLASSIFIER}", headers=auth, timeout=30)
    return requests.get(f"{url}/predictions/{CLASSIFIER}", headers=auth, timeout=30)


def test_the_open_inference_protocol_answers_the_classifier(both):
    _, engine = both
    image = base64.b64encode(encode(photo("chelsea"))).decode()
    document = {"inputs": [{"name": "images", "datatype": "BYTES", "shape": [2], "data": [image, image]}]}
    response = requests.post(f"{engine.url('inference')}/v2/models/{CLASSIFIER}/infer", json=document,
                             headers=engine.headers("inference"), timeout=60)
    assert response.status_code == 200, response.text
    outputs = {o["name"]: o for o in response.json()["outputs"]}
    assert outputs["labels"]["shape"] == [2, 3] and outputs["probabilities"]["shape"] == [2, 3]
    expected = _post(engine, f"/predictions/{CLASSIFIER}", encode(photo("chelsea"))).json()
    assert outputs["labels"]["data"][:3] == list(expected)
    refused = requests.post(f"{engine.url('inference')}/v2/models/{CLASSIFIER}/infer", json=document, timeout=60)
    assert refused.status_code == 400 and "InvalidKeyException" in refused.text


def _broken_copies(store: Path, into: Path) -> Path:
    """The tiny archive, plus two copies the engine cannot serve: one naming TorchServe's stock handler, one whose
    artifact is missing."""
    into.mkdir(parents=True, exist_ok=True)
    source = store / f"{CLASSIFIER}.mar"
    (into / source.name).write_bytes(source.read_bytes())
    with zipfile.ZipFile(source) as mar:
        files = {name: mar.read(name) for name in mar.namelist()}
    manifest = json.loads(files["MAR-INF/MANIFEST.json"])
    stock_manifest = {**manifest, "model": {**manifest["model"], "handler": "image_classifier"}}
    stock = {**files, "MAR-INF/MANIFEST.json": json.dumps(stock_manifest).encode()}
    settings = files["model-config.yaml"].decode()
    artifact = next(line.split(":", 1)[1].strip() for line in settings.splitlines() if line.strip().startswith("file:"))
    missing = {name: data for name, data in files.items() if name != artifact}
    for name, contents in (("stock", stock), ("noartifact", missing)):
        with zipfile.ZipFile(into / f"{name}.mar", "w") as mar:
            for member, data in contents.items():
                mar.writestr(member, data)
    return into


def test_an_archive_it_cannot_serve_is_refused_in_one_line_and_the_others_start(tmp_path, capsys):
    broken = _broken_copies(archive_tiny(tmp_path / "tiny_store"), tmp_path / "store")
    request = _request(broken)
    config = tmp_path / "config.properties"
    assert (
        tsvk(
            [
                "config",
                "--model-store",
                str(broken),
                "--vcpus",
                "3",
                "--workers",
                "1",
                "--auth",
                "off",
                "--output",
                str(config),
                "--inference-address",
                request.inference_address,
                "--management-address",
                request.management_address,
                "--metrics-address",
                request.metrics_address,
                "--grpc-inference-port",
                str(request.grpc_inference_port),
                "--grpc-management-port",
                str(request.grpc_management_port),
            ]
        )
        == 0
    )
    run_dir = tmp_path / "run"
    allocator = "jemalloc" if find_jemalloc() else "glibc"  # CI installs libjemalloc2: not the default allocator
    try:
        assert tsvk(["serve", "--engine", "kserve", "--config", str(config), "--run-dir", str(run_dir), "--allocator", allocator]) == 0
        out = capsys.readouterr().out
        assert f"allocator: {allocator}" in out
        on_jemalloc = _on_jemalloc(run_dir)
        assert set(on_jemalloc.values()) == {allocator == "jemalloc"}, on_jemalloc
        refusals = [line for line in out.splitlines() if line.startswith("not serving")]
        assert len(refusals) == 2, out
        assert any("stock.mar" in line and "image_classifier" in line and "stock" in line for line in refusals), refusals
        assert any("noartifact.mar" in line and "missing" in line for line in refusals), refusals
        answer = requests.post(f"{request.inference_address}/predictions/{CLASSIFIER}", data=encode(photo("chelsea")), timeout=60)
        assert answer.status_code == 200 and len(answer.json()) == 3
        assert requests.post(f"{request.inference_address}/predictions/stock", data=b"x", timeout=60).status_code == 404
        assert tsvk(["status", "--run-dir", str(run_dir)]) == 0
        assert "engine kserve running" in capsys.readouterr().out
        assert tsvk(["predict", "--run-dir", str(run_dir), "--model", CLASSIFIER]) == 0
    finally:
        assert tsvk(["stop", "--run-dir", str(run_dir)]) == 0
    assert "stopped engine kserve" in capsys.readouterr().out


def test_archives_that_cannot_be_unpacked_safely_and_entries_leading_out_are_refused_alone_the_others_serve(tmp_path):
    store = archive_tiny(tmp_path / "store")
    config = tmp_path / "engine.properties"
    write_config(_request(store), config)
    with zipfile.ZipFile(store / "bomb.mar", "w", zipfile.ZIP_DEFLATED) as bomb:
        bomb.writestr("padding.bin", bytes(64 * 2**20))  # 64 MiB of zeros in about 64 KiB
    (store / "cut.mar").write_bytes((store / f"{CLASSIFIER}.mar").read_bytes()[:4096])
    properties = read_properties(config)
    models = json.loads(properties["models"])
    entry = next(iter(models[CLASSIFIER].values()))
    models.update({"bomb": {"1.0": {**entry, "marName": "bomb.mar"}}, "cut": {"1.0": {**entry, "marName": "cut.mar"}},
                   "../escape": {"1.0": entry}, "outside": {"1.0": {**entry, "marName": f"../store/{CLASSIFIER}.mar"}}})
    config.write_text("".join(f"{key}={escape_value(value)}\n" for key, value in {**properties, "models": json.dumps(models)}.items()))
    run = start_engine(config, tmp_path / "run")
    try:
        run.wait_ready(timeout=300)
        refusals = run.refusals()
        assert len(refusals) == 4, refusals
        assert any(line.startswith("not serving bomb.mar: ") and "zip bomb" in line for line in refusals), refusals
        assert any(line.startswith("not serving cut.mar: ") and "not a readable model archive" in line for line in refusals), refusals
        assert any(line.startswith("not serving model '../escape': ") and "use letters, digits" in line for line in refusals), refusals
        assert any(line.startswith("not serving model 'outside': ") and "marName" in line for line in refusals), refusals
        assert sorted(os.listdir(tmp_path / "run" / MODELS_DIR)) == [CLASSIFIER]
        assert _post(run, f"/predictions/{CLASSIFIER}", encode(photo("chelsea"))).status_code == 200
    finally:
        run.stop(drain_timeout=5)


@pytest.mark.skipif(os.geteuid() != 0, reason="giving the run directory to another user needs root")
def test_with_token_authorization_a_run_directory_of_another_user_is_refused_at_start(tmp_path):
    store, run_dir = tmp_path / "store", tmp_path / "run"
    store.mkdir()
    run_dir.mkdir(mode=0o700)
    os.chown(run_dir, os.geteuid() + 12345, -1)
    inference, metrics = free_ports(2)
    config = tmp_path / "config.properties"
    config.write_text(f"model_store={store}\nmodels={{}}\ninference_address=http://127.0.0.1:{inference}\n"
                      f"metrics_address=http://127.0.0.1:{metrics}\n")  # token authorization on: TorchServe's default
    run = start_engine(config, run_dir)
    try:
        with pytest.raises(UsageError, match=r"not starting: the run directory .* belongs to uid \d+, not to this user"):
            run.wait_ready(timeout=120)
    finally:
        run.stop(drain_timeout=5)
    assert not (run_dir / KEY_FILE).exists()


def _on_jemalloc(run_dir: Path) -> dict[str, bool]:
    """The engine's server, fork server and worker: whether each has jemalloc mapped."""
    server = psutil.Process(find_engine(run_dir).pid)
    processes = [server, *server.children(recursive=True)]
    assert len(processes) >= 3, "no fork server or no worker found"
    return {f"{p.pid} {' '.join(p.cmdline()[1:4])}": JEMALLOC_SONAME in Path(f"/proc/{p.pid}/maps").read_text() for p in processes}


def _unread_socket_bytes(pid: int) -> int:
    """Bytes waiting unread on the Unix sockets process `pid` holds: the Recv-Q that `ss -x` reads from the kernel."""
    listing = subprocess.run(["ss", "-x", "-p", "-H"], capture_output=True, text=True, check=True).stdout
    return sum(int(line.split()[2]) for line in listing.splitlines() if f"pid={pid}," in line)


def _wait_until_unread_by(pid: int, timeout: float = 60) -> None:
    """Until a batch has reached the stopped worker `pid`'s socket, unread."""
    deadline = time.monotonic() + timeout
    while _unread_socket_bytes(pid) == 0:
        assert time.monotonic() < deadline, f"no batch reached worker {pid} in {timeout:.0f} s"
        time.sleep(0.05)


def test_a_worker_killed_mid_batch_is_answered_503_within_a_second_and_replaced(tmp_path):
    store = archive_tiny(tmp_path / "slow_store", "SlowTinyNet")
    request = serving_on_free_ports(model_store=store, vcpus=2, workers=1, batch=4, max_batch_delay_ms=300, auth=False)
    with running_engine(request, tmp_path / "slow") as engine:
        url = f"{engine.url('inference')}/predictions/{CLASSIFIER}"
        status = lambda: json.loads((engine.run_dir / STATUS_FILE).read_text())["models"][0]  # noqa: E731
        worker = status()["workers"][0]["pid"]
        os.kill(worker, signal.SIGSTOP)  # the worker holds the next batch until it is killed
        answered: list[tuple[float, requests.Response]] = []
        senders = [
            threading.Thread(
                target=lambda: answered.append((time.monotonic(), requests.post(url, data=encode(photo("chelsea")), timeout=60)))
            )
            for _ in range(3)
        ]
        for sender in senders:
            sender.start()
        _wait_until_unread_by(worker)  # the batch is formed (300 ms) and sent to the stopped worker
        killed_at = time.monotonic()
        os.kill(worker, signal.SIGKILL)
        for sender in senders:
            sender.join(10)
        assert len(answered) == 3
        assert all(r.status_code == 503 and r.json()["error"] == "worker_died" for _, r in answered), [r.text for _, r in answered]
        assert max(t for t, _ in answered) - killed_at < 1.0
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not (status()["starts"] == 2 and status()["ready"]):
            time.sleep(0.2)
        assert status()["deaths"] == 1 and status()["workers"][0]["pid"] != worker
        responses = post_concurrently(url, [encode(photo("coffee"))] * 2)
        assert [r.status_code for r in responses] == [200, 200]


def test_the_protocol_over_grpc_and_rest_answers_as_predictions(tmp_path):
    """A config from `tsvk config --protocol oip`: the engine serves the protocol's gRPC too (no front process), and
    `tsvk predict` reaches it over both transports with the inference key."""
    store = archive_tiny(tmp_path / "store")
    rest_port, grpc_port = free_ports(2)
    request = _request(store, protocol="oip", oip_rest_port=rest_port, oip_grpc_port=grpc_port)
    with running_engine(request, tmp_path / "oip") as engine:
        expected = _post(engine, f"/predictions/{CLASSIFIER}", image_bytes("skimage:chelsea")).json()
        for protocol in ("oip-grpc", "oip-rest"):
            answer = json.loads(predict(engine.run_dir, "skimage:chelsea", CLASSIFIER, protocol))
            assert list(answer) == list(expected)
            assert np.allclose(list(answer.values()), list(expected.values()), atol=1e-6)


def test_with_token_authorization_every_grpc_call_needs_the_key(tmp_path):
    """Health, metadata and inference alike, asked by Triton's own gRPC client: a call without the key, or with another,
    is refused UNAUTHENTICATED before KServe's handler runs; with the key each answers."""
    from tritonclient.grpc import InferenceServerClient, InferInput
    from tritonclient.utils import InferenceServerException

    store = archive_tiny(tmp_path / "store")
    rest_port, grpc_port = free_ports(2)
    request = _request(store, protocol="oip", oip_rest_port=rest_port, oip_grpc_port=grpc_port)
    with running_engine(request, tmp_path / "grpc") as engine:
        client = InferenceServerClient(f"127.0.0.1:{grpc_port}")
        key = current_key(engine.run_dir)
        image = InferInput("images", [1], "BYTES")
        image.set_data_from_numpy(np.array([image_bytes("skimage:chelsea")], dtype=np.object_))
        calls = {
            "ServerLive": lambda headers: client.is_server_live(headers=headers),
            "ServerReady": lambda headers: client.is_server_ready(headers=headers),
            "ServerMetadata": lambda headers: client.get_server_metadata(headers=headers),
            "ModelReady": lambda headers: client.is_model_ready(CLASSIFIER, headers=headers),
            "ModelMetadata": lambda headers: client.get_model_metadata(CLASSIFIER, headers=headers),
            "ModelInfer": lambda headers: client.infer(CLASSIFIER, [image], headers=headers),
        }
        for name, call in calls.items():
            for headers in (None, {"authorization": "Bearer not-the-key"}, {"authorization": "Bearer"}):
                with pytest.raises(InferenceServerException) as refused:
                    call(headers)
                assert refused.value.status() == "StatusCode.UNAUTHENTICATED", name
                assert "InvalidKeyException" in refused.value.message() and key not in refused.value.message()
            assert call({"authorization": f"Bearer {key}"}), name
        client.close()


@pytest.mark.parametrize("trusted, status", [(None, 200), ("127.0.0.0/8", 503)])
def test_an_arrival_stamp_is_believed_only_from_a_trusted_proxy(tmp_path, trusted, status):
    """A request stamped ten minutes ago, against a one-minute deadline: from a peer the config does not trust the
    engine stamps it itself and answers it; from a trusted proxy the stamp stands and the request is shed unread."""
    store = archive_tiny(tmp_path / "store")
    extra = {TRUSTED_PROXIES_KEY: trusted} if trusted else {}
    with running_engine(_request(store, deadline_ms=60_000), tmp_path / "engine", extra_properties=extra) as engine:
        headers = {**engine.headers("inference"), ARRIVAL_HEADER: f"t={time.time() - 600:.6f}"}
        response = _post(engine, f"/predictions/{CLASSIFIER}", image_bytes("skimage:chelsea"), headers=headers)
        assert response.status_code == status, response.text
        if status == 503:
            assert response.json()["error"] == "deadline_exceeded"


def test_a_trusted_proxies_value_that_is_no_address_stops_the_start_naming_it(tmp_path):
    store = archive_tiny(tmp_path / "store")
    with pytest.raises(UsageError, match="tsvk.trusted_proxies must list IP addresses or networks"):
        with running_engine(_request(store), tmp_path / "engine", timeout=60, extra_properties={TRUSTED_PROXIES_KEY: "proxy"}):
            pass
