"""TLS as TorchServe's config keys set it (tools/tls.py): what a server of tsvk's serves, what it refuses in one line
saying what to set, and what `tsvk config --tls-key/--tls-cert` writes (the same keys TorchServe reads)."""

from __future__ import annotations

import contextlib
import http.server
import threading

import pytest

from tests.support.tls import self_signed
from tsvk_tools.doctor.engine_rules import tls_findings
from tsvk_tools.doctor.properties import read
from tsvk_tools.errors import UsageError
from tsvk_tools.engines.shared.run import get as _get
from tsvk_tools.config.rendering import render_properties
from tsvk_tools.config.serving_config import ServingRequest, plan_serving
from tsvk_tools.tls import TlsError, client_context, served_tls, tls_warnings
from tsvk.common import read_properties


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return self_signed(tmp_path_factory.mktemp("tls"))


def test_a_key_and_its_certificate_are_served_and_grpc_takes_them_too(pair):
    tls = served_tls({**pair.properties(), "inference_address": "https://0.0.0.0:8443"})
    assert (tls.key_file, tls.cert_file, tls.grpc) == (pair.key, pair.cert, True)
    assert tls_warnings(tls, pair.properties()) == []
    assert served_tls({"inference_address": "http://0.0.0.0:8080"}) is None


def test_enable_grpc_ssl_false_leaves_grpc_in_plain_text_and_says_so(pair):
    properties = {**pair.properties(), "enable_grpc_ssl": "false"}
    tls = served_tls(properties)
    assert tls.grpc is False
    assert any("gRPC is served in plain text" in line for line in tls_warnings(tls, properties))


@pytest.mark.parametrize("properties, says", [
    ({"inference_address": "https://0.0.0.0:8443"}, "inference_address=https://0.0.0.0:8443 is https, but private_key_file and "
                                                    "certificate_file are not set: set both"),
    ({"metrics_address": "HTTPS://127.0.0.1:8445"}, "metrics_address=HTTPS://127.0.0.1:8445 is https"),
    ({"enable_grpc_ssl": "true"}, "enable_grpc_ssl=true, but private_key_file and certificate_file are not set"),
    ({"private_key_file": "/k.pem"}, "private_key_file is set but certificate_file is not: set both"),
    ({"certificate_file": "/c.pem"}, "certificate_file is set but private_key_file is not: set both"),
    ({"private_key_file": "key.pem", "certificate_file": "/c.pem"}, "private_key_file=key.pem is a relative path: set it to an absolute"),
    ({"keystore": "keystore.p12", "keystore_pass": "changeit", "inference_address": "https://0.0.0.0:8443"},
     "keystore=keystore.p12 is a Java keystore, which tsvk cannot read: convert it to PEM"),
])
def test_what_cannot_be_served_is_refused_saying_what_to_set(properties, says):
    with pytest.raises(TlsError, match="^" + says.replace("(", r"\(").replace(".", r"\.")):
        served_tls(properties)


def test_a_keystore_is_refused_with_the_conversion_to_pem_and_the_keys_to_set():
    with pytest.raises(TlsError) as refused:
        served_tls({"keystore": "/etc/ts/keystore.p12"})
    message = str(refused.value)
    assert "openssl pkcs12 -in /etc/ts/keystore.p12 -nodes -nocerts -out key.pem" in message
    assert "set private_key_file and certificate_file" in message and "remove keystore" in message


def test_a_missing_key_file_is_refused_naming_it(pair, tmp_path):
    with pytest.raises(TlsError, match=f"private_key_file {tmp_path}/absent.key cannot be read: No such file"):
        served_tls({"private_key_file": str(tmp_path / "absent.key"), "certificate_file": str(pair.cert)})


def test_a_missing_certificate_is_refused_naming_it(pair, tmp_path):
    with pytest.raises(TlsError, match=f"certificate_file {tmp_path}/absent.pem cannot be read"):
        served_tls({"private_key_file": str(pair.key), "certificate_file": str(tmp_path / "absent.pem")})


@pytest.mark.parametrize("mode", [0o644, 0o604, 0o606, 0o666])
def test_a_private_key_others_may_read_is_refused_with_the_chmod(tmp_path, mode):
    pair = self_signed(tmp_path)
    pair.key.chmod(mode)
    with pytest.raises(TlsError, match=rf"private_key_file {pair.key} may be read by others \(mode {mode:o}\): run `chmod 600 "):
        served_tls(pair.properties())


def test_a_private_key_its_group_may_read_is_served_with_a_warning(tmp_path):
    pair = self_signed(tmp_path)
    pair.key.chmod(0o640)  # a Kubernetes secret mounted for the pod's fsGroup
    tls = served_tls(pair.properties())
    assert any(f"{pair.key} may be read by its group (mode 640)" in line for line in tls_warnings(tls, pair.properties()))


def test_an_encrypted_key_is_refused_not_asked_for_its_pass_phrase(tmp_path):
    pair = self_signed(tmp_path, password=b"secret")
    with pytest.raises(TlsError, match=f"private_key_file {pair.key} is encrypted: give it unencrypted"):
        served_tls(pair.properties())


def test_a_key_that_is_not_the_certificates_is_refused(tmp_path):
    one, other = self_signed(tmp_path, "one"), self_signed(tmp_path, "other")
    with pytest.raises(TlsError, match="are not a PEM private key and its certificate"):
        served_tls({"private_key_file": str(one.key), "certificate_file": str(other.cert)})


def test_a_file_that_is_not_pem_is_refused(tmp_path):
    pair = self_signed(tmp_path)
    pair.cert.write_text("not a certificate\n")
    with pytest.raises(TlsError, match="are not a PEM private key and its certificate"):
        served_tls(pair.properties())


def test_tsvk_config_with_tls_writes_torchserves_keys_and_https_addresses(pair, tmp_path):
    request = ServingRequest(vcpus=2, archive_check=False, models=("m",), tls_key=pair.key, tls_cert=pair.cert,
                             inference_address="http://0.0.0.0:8443", metrics_address="https://127.0.0.1:8445")
    config = tmp_path / "config.properties"
    config.write_text(render_properties(plan_serving(request)))
    properties = read_properties(config)
    assert [properties[f"{api}_address"] for api in ("inference", "management", "metrics")] == [
        "https://0.0.0.0:8443", "https://127.0.0.1:8081", "https://127.0.0.1:8445"]
    assert (properties["private_key_file"], properties["certificate_file"]) == (str(pair.key), str(pair.cert))
    assert properties["enable_grpc_ssl"] == "true"
    assert served_tls(properties).grpc


def test_tsvk_config_writes_relative_key_paths_as_absolute_ones(pair, tmp_path, monkeypatch):
    monkeypatch.chdir(pair.key.parent)
    request = ServingRequest(vcpus=2, archive_check=False, models=("m",), tls_key=pair.key.name, tls_cert=pair.cert.name)
    config = tmp_path / "config.properties"
    config.write_text(render_properties(plan_serving(request)))
    assert read_properties(config)["private_key_file"] == str(pair.key)


def test_tsvk_config_takes_tls_key_and_cert_together_only(pair):
    with pytest.raises(UsageError, match="--tls-key and --tls-cert go together: give both"):
        plan_serving(ServingRequest(vcpus=2, archive_check=False, models=("m",), tls_key=pair.key))


def test_tsvk_config_refuses_an_https_address_without_the_files():
    with pytest.raises(UsageError, match="--inference-address https://0.0.0.0:8443 is https: give --tls-key and --tls-cert"):
        plan_serving(ServingRequest(vcpus=2, archive_check=False, models=("m",), inference_address="https://0.0.0.0:8443"))


def test_tsvk_config_checks_the_files_as_the_server_will(tmp_path):
    pair = self_signed(tmp_path)
    pair.key.chmod(0o644)
    with pytest.raises(UsageError, match="may be read by others"):
        plan_serving(ServingRequest(vcpus=2, archive_check=True, model_store=tmp_path, tls_key=pair.key, tls_cert=pair.cert))


def test_tsvk_doctor_says_what_the_engine_would_refuse_and_warn_of(tmp_path):
    pair = self_signed(tmp_path)
    config = tmp_path / "config.properties"
    config.write_text("inference_address=https://0.0.0.0:8443\n")
    refused = tls_findings("kserve", read(config))
    assert [f.severity for f in refused] == ["error"] and "is https, but private_key_file and certificate_file" in refused[0].problem
    assert tls_findings("torchserve", read(config)) == []
    pair.key.chmod(0o640)
    config.write_text("".join(f"{key}={value}\n" for key, value in pair.properties().items()))
    assert [(f.severity, "may be read by its group" in f.problem) for f in tls_findings("kserve", read(config))] == [("warning", True)]


@contextlib.contextmanager
def _https_server(pair):
    """A real HTTPS server on 127.0.0.1 with the pair's key and certificate, answering GET / with 200."""
    class Ok(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *_):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Ok)
    server.socket = served_tls(pair.properties()).server_context().wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_tsvk_clients_verify_an_https_server_against_the_configs_certificate(pair):
    with _https_server(pair) as url:
        assert _get(url + "/", {}, client_context(pair.properties())) == (200, "ok")


def test_tsvk_clients_stop_where_the_certificate_does_not_verify_never_going_on(tmp_path):
    elsewhere = self_signed(tmp_path, hosts=("api.example.com",), addresses=())  # names a host clients do not connect to
    with _https_server(elsewhere) as url:
        with pytest.raises(UsageError, match=r"the server's certificate does not verify \(.*127\.0\.0\.1.*\); tsvk trusts"):
            _get(url + "/", {}, client_context(elsewhere.properties()))
        with pytest.raises(UsageError, match="certificate does not verify"):
            _get(url + "/", {}, client_context({}))  # the system's authorities only: a self-signed certificate is unknown
