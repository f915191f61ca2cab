"""TorchServe 0.12 on the config `tsvk config --tls-key/--tls-cert --protocol oip` writes: it serves every address over
https with the key files (and its gRPC over TLS), and tsvk's clients of it verify the certificate: `tsvk serve`'s
readiness wait (/ping and the management API), the Open Inference Protocol front (it forwards to https and serves
https and TLS gRPC itself), `tsvk predict` in each protocol, `tsvk status`, and the drain of `tsvk stop` (the metrics
API)."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
import requests

from tests.support.tls import self_signed
from tests.support.torchserve import archive_tiny, running_torchserve
from tsvk_tools.client.predict import predict
from tsvk_tools.client.status import gather
from tsvk_tools.oip.config import read_front_config
from tsvk_tools.oip.process import front_urls, start_front, wait_front_ready
from tsvk_tools.config.ports import free_ports, serving_on_free_ports
from tsvk_tools.tls import verifying

pytestmark = pytest.mark.integration

MODEL = "tiny"


def test_torchserve_serves_the_generated_tls_config_and_tsvk_clients_verify_it(tmp_path):
    pair = self_signed(tmp_path / "keys")
    store = archive_tiny(tmp_path / "model_store")
    rest, grpc = free_ports(2)
    request = serving_on_free_ports(model_store=store, vcpus=2, workers=1, batch=1, max_batch_delay_ms=10, auth=True,
                                    protocol="oip", oip_rest_port=rest, oip_grpc_port=grpc, tls_key=pair.key, tls_cert=pair.cert)
    with running_torchserve(request, tmp_path / "torchserve") as run:  # ready: /ping and the management API over https
        assert all(run.url(api).startswith("https://") for api in ("inference", "management", "metrics"))
        start_front(run.config, run.run_dir)
        wait_front_ready(read_front_config(run.config), run.run_dir)  # its /v2/health/ready, over https
        for protocol in ("predictions", "oip-rest", "oip-grpc"):
            assert len(json.loads(predict(run.run_dir, "skimage:chelsea", MODEL, protocol))) == 3, protocol
        models = gather(run.run_dir)["models"]
        assert [m["name"] for m in models] == [MODEL] and models[0]["ready"], models
        assert requests.get(run.url("metrics") + "/metrics", verify=pair.cert, timeout=30).status_code == 200
        assert _tls_version(request.grpc_inference_port, pair.cert) in ("TLSv1.2", "TLSv1.3")  # enable_grpc_ssl=true
        assert front_urls(read_front_config(run.config))[0].startswith("https://")
        report = run.stop(drain_timeout=10)  # the drain reads the https metrics API
        assert report is not None and report.in_flight_at_stop == 0 and report.arrived >= 1, report


def _tls_version(port: int, certificate: Path) -> str | None:
    """The TLS version a gRPC (HTTP/2) handshake on `port` agrees, verified against `certificate`."""
    context = verifying(certificate)
    context.set_alpn_protocols(["h2"])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as plain, context.wrap_socket(plain, server_hostname="127.0.0.1") as tls:
        return tls.version()
