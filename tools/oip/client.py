"""`tsvk predict --protocol oip-rest|oip-grpc`: one image through the front, with tritonclient.

The same call a user's program makes; the inference key goes in the Authorization header (REST) or
the `authorization` metadata (gRPC), and is read again from the key file when TorchServe refuses it.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from tsvk.request import oip

from ..errors import UsageError
from ..keys import current_key
from ..tls import tls_of
from .config import read_front_config
from .process import front_pid, front_urls


def predict_oip(run, model: str, image: bytes, grpc: bool) -> str:
    """The top-k of one image as {label: probability}, asked over the Open Inference Protocol; over TLS where the config
    serves it, verified against its certificate_file (tools/tls.py)."""
    rest, target = run.oip_urls() if hasattr(run, "oip_urls") else _front_urls(run)  # the kserve engine speaks it itself
    tls = tls_of(run.properties)
    certificate = tls.cert_file if tls is not None else None
    client = _grpc_client(target, certificate if tls is not None and tls.grpc else None) if grpc else _http_client(rest, certificate)
    probabilities, labels = _infer(client, model, image, run.run_dir, grpc)
    return json.dumps({_text(label): float(p) for label, p in zip(labels[0], probabilities[0])}, indent=2)


def _front_urls(run) -> tuple[str, str]:
    if front_pid(run.run_dir) is None:
        raise UsageError(f"no Open Inference Protocol front runs next to the TorchServe in {run.run_dir}; "
                         "serve a config from `tsvk config --protocol oip`")
    return front_urls(read_front_config(run.config))


def _http_client(rest: str, certificate: Path | None):
    """tritonclient's REST client; for an https URL, verified (host name included) against the system's authorities and
    `certificate`."""
    import tritonclient.http as client

    scheme, _, address = rest.partition("://")
    if scheme != "https":
        return client, client.InferenceServerClient(address)
    options = {"ca_certs": str(certificate)} if certificate is not None else None  # its transport's own default context
    return client, client.InferenceServerClient(address, ssl=True, ssl_options=options)


def _grpc_client(target: str, certificate: Path | None):
    """tritonclient's gRPC client; over TLS with `certificate` as its root where the config serves gRPC with TLS."""
    import tritonclient.grpc as client

    if certificate is None:
        return client, client.InferenceServerClient(target)
    return client, client.InferenceServerClient(target, ssl=True, root_certificates=str(certificate))


def _infer(client, model: str, image: bytes, run_dir, grpc: bool, attempts: int = 3):
    from tritonclient.utils import InferenceServerException

    module, server = client
    tensor = module.InferInput(oip.IMAGES, [1], "BYTES")
    tensor.set_data_from_numpy(np.array([image], dtype=np.object_))
    for attempt in range(attempts):
        key = current_key(run_dir)
        headers = {"authorization" if grpc else "Authorization": f"Bearer {key}"} if key else {}
        try:
            result = server.infer(model, [tensor], headers=headers)
            return result.as_numpy(oip.PROBABILITIES), result.as_numpy(oip.LABELS)
        except InferenceServerException as err:
            if "InvalidKeyException" in (err.message() or "") and attempt + 1 < attempts:
                continue  # the key was renewed meanwhile: read the file again
            raise UsageError(f"{model} answered {err.status()}: {err.message()}") from None
    raise AssertionError("unreachable")


def _text(label) -> str:
    return label.decode() if isinstance(label, bytes) else str(label)
