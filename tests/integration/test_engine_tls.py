"""tsvk's own engine serving TLS from TorchServe's config keys, as `tsvk config --tls-key/--tls-cert` writes them.

One engine, started by `tsvk serve`'s own code (its readiness wait asks /ping over https): real clients verify it
against the certificate and get answers on every listener, /predictions and the Open Inference Protocol's REST
(https), its gRPC (TLS, tritonclient with the certificate as root) and /metrics (https); tsvk's own clients (`tsvk
predict` in each protocol, `tsvk status`) follow the config. Plain HTTP or plain gRPC to those ports gets no answer,
nor does a client that does not trust the certificate. A config the engine cannot serve stops its start with exit
status 2 and one `not starting:` line saying what to set, never a plain-HTTP fallback.
"""

from __future__ import annotations

import json
import socket
import ssl
from pathlib import Path

import pytest
import requests

from tests.support.engine import running_engine
from tests.support.handler_fakes import encode, photo
from tests.support.tls import self_signed
from tests.support.torchserve import archive_tiny
from tsvk_tools.client.predict import predict
from tsvk_tools.client.status import gather
from tsvk_tools.engines.kserve.engine_process import start_engine
from tsvk_tools.config.ports import free_ports, serving_on_free_ports
from tsvk_tools.tls import verifying

pytestmark = pytest.mark.integration

MODEL = "tiny"


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return self_signed(tmp_path_factory.mktemp("tls_keys"))


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    return archive_tiny(tmp_path_factory.mktemp("tls_store") / "model_store")


@pytest.fixture(scope="module")
def engine(store, pair, tmp_path_factory):
    rest, grpc = free_ports(2)
    request = serving_on_free_ports(model_store=store, vcpus=2, workers=1, batch=1, max_batch_delay_ms=10, auth=True,
                                    protocol="oip", oip_rest_port=rest, oip_grpc_port=grpc, tls_key=pair.key, tls_cert=pair.cert)
    with running_engine(request, tmp_path_factory.mktemp("tls_engine")) as run:
        yield run


def test_the_config_serves_https_addresses_with_the_key_files(engine, pair):
    properties = engine.properties
    assert engine.url("inference").startswith("https://127.0.0.1:") and properties["metrics_address"].startswith("https://")
    assert (properties["private_key_file"], properties["certificate_file"]) == (str(pair.key), str(pair.cert))


def test_predictions_and_ping_answer_over_https_verified_against_the_certificate(engine, pair):
    base = engine.url("inference")
    assert requests.get(f"{base}/ping", headers=engine.headers("inference"), verify=pair.cert, timeout=30).json() == {"status": "Healthy"}
    answer = requests.post(f"{base}/predictions/{MODEL}", data=encode(photo("chelsea")), headers=engine.headers("inference"),
                           verify=pair.cert, timeout=60)
    assert answer.status_code == 200 and len(answer.json()) == 3, answer.text


def test_plain_http_to_the_https_port_gets_no_answer(engine):
    with pytest.raises(requests.exceptions.ConnectionError):
        requests.get(engine.url("inference").replace("https://", "http://") + "/ping", headers=engine.headers("inference"), timeout=10)


def test_a_client_that_does_not_trust_the_certificate_is_not_answered(engine):
    with pytest.raises(requests.exceptions.SSLError):
        requests.get(f"{engine.url('inference')}/ping", headers=engine.headers("inference"), timeout=10)  # the system's CAs only


@pytest.mark.parametrize("api", ["inference", "metrics"])
def test_only_forward_secret_aead_ciphers_are_offered_under_tls_1_2(engine, pair, api):
    """A TLS 1.2 client offering RSA key exchange only (no forward secrecy) is refused; ECDHE with AES-GCM is served."""
    assert _handshake(engine.url(api), pair.cert, "ECDHE-RSA-AES128-GCM-SHA256") == "TLSv1.2"
    with pytest.raises(ssl.SSLError):
        _handshake(engine.url(api), pair.cert, "AES128-GCM-SHA256")


def _handshake(url: str, certificate: Path, ciphers: str) -> str | None:
    """The version a TLS 1.2 handshake with only `ciphers` agrees on `url`'s port, verified against `certificate`."""
    context = verifying(certificate)
    context.maximum_version = ssl.TLSVersion.TLSv1_2
    context.set_ciphers(ciphers)
    port = int(url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as plain, context.wrap_socket(plain, server_hostname="127.0.0.1") as tls:
        return tls.version()


def test_metrics_are_served_over_https(engine, pair):
    url = engine.url("metrics") + "/metrics"
    answer = requests.get(url, verify=pair.cert, timeout=30)
    assert answer.status_code == 200 and "# TYPE" in answer.text
    with pytest.raises(requests.exceptions.ConnectionError):
        requests.get(url.replace("https://", "http://"), timeout=10)


def test_grpc_serves_tls_to_a_client_that_trusts_the_certificate(engine, pair):
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    target = engine.oip_urls()[1]
    headers = {"authorization": engine.headers("inference")["Authorization"]}
    secure = grpcclient.InferenceServerClient(target, ssl=True, root_certificates=str(pair.cert))
    assert secure.is_server_ready(headers=headers) and secure.is_model_ready(MODEL, headers=headers)
    plain = grpcclient.InferenceServerClient(target)
    with pytest.raises(InferenceServerException):
        plain.is_server_live(headers=headers, client_timeout=10)


@pytest.mark.parametrize("protocol", ["predictions", "oip-rest", "oip-grpc"])
def test_tsvk_predict_follows_the_config_over_tls(engine, protocol):
    answer = json.loads(predict(engine.run_dir, "skimage:chelsea", MODEL, protocol))
    assert len(answer) == 3 and abs(sum(answer.values()) - 1) < 0.5, answer


def test_tsvk_status_says_the_https_address(engine):
    report = gather(engine.run_dir)
    assert report["running"] and report["addresses"]["inference"].startswith("https://")


def _config(tmp_path: Path, store: Path, **properties: str) -> Path:
    inference, metrics = free_ports(2)
    lines = {"model_store": str(store), "models": "{}", "inference_address": f"https://127.0.0.1:{inference}",
             "metrics_address": f"http://127.0.0.1:{metrics}", "disable_token_authorization": "true", **properties}
    config = tmp_path / "config.properties"
    config.write_text("".join(f"{key}={value}\n" for key, value in lines.items()))
    return config


def _refusal(config: Path, run_dir: Path) -> tuple[int, list[str]]:
    """The engine's exit status and its `not starting:` lines."""
    run = start_engine(config, run_dir)
    try:
        status = run.process.wait(timeout=120)
    finally:
        run.stop(drain_timeout=0)
    return status, [line for line in run.stdout_since_start().splitlines() if "not starting:" in line]


@pytest.mark.parametrize("case, says", [
    ("no key files", "inference_address=https://127.0.0.1:"),
    ("a keystore", "keystore=/etc/ts/keystore.p12 is a Java keystore, which tsvk cannot read: convert it to PEM"),
    ("a key others may read", "may be read by others (mode 644): run `chmod 600"),
    ("a missing key file", "cannot be read: No such file or directory"),
])
def test_what_the_engine_cannot_serve_stops_its_start_in_one_line(case, says, tmp_path):
    pair = self_signed(tmp_path / "keys")
    properties = {"no key files": {}, "a keystore": {"keystore": "/etc/ts/keystore.p12", "keystore_pass": "changeit"},
                  "a key others may read": pair.properties(),
                  "a missing key file": {**pair.properties(), "private_key_file": str(tmp_path / "absent.key")}}[case]
    pair.key.chmod(0o644 if case == "a key others may read" else 0o600)
    (tmp_path / "store").mkdir()
    status, lines = _refusal(_config(tmp_path, tmp_path / "store", **properties), tmp_path / "run")
    assert status == 2 and len(lines) == 1 and says in lines[0], (status, lines)
