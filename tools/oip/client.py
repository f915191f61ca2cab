"""`tsvk predict --protocol oip-rest|oip-grpc`: one image through the front, with tritonclient.

The same call a user's program makes; the inference key goes in the Authorization header (REST) or
the `authorization` metadata (gRPC), and is read again from the key file when TorchServe refuses it.
"""

from __future__ import annotations

import json

import numpy as np

from tsvk.request import oip

from ..errors import UsageError
from ..keys import current_key
from .config import read_front_config
from .process import front_pid, front_urls


def predict_oip(run, model: str, image: bytes, grpc: bool) -> str:
    """The top-k of one image as {label: probability}, asked over the Open Inference Protocol."""
    rest, target = run.oip_urls() if hasattr(run, "oip_urls") else _front_urls(run)  # the kserve engine speaks it itself
    client = _grpc_client(target) if grpc else _http_client(rest)
    probabilities, labels = _infer(client, model, image, run.run_dir, grpc)
    return json.dumps({_text(label): float(p) for label, p in zip(labels[0], probabilities[0])}, indent=2)


def _front_urls(run) -> tuple[str, str]:
    if front_pid(run.run_dir) is None:
        raise UsageError(f"no Open Inference Protocol front runs next to the TorchServe in {run.run_dir}; "
                         "serve a config from `tsvk config --protocol oip`")
    return front_urls(read_front_config(run.config))


def _http_client(rest: str):
    import tritonclient.http as client

    return client, client.InferenceServerClient(rest.removeprefix("http://"))


def _grpc_client(target: str):
    import tritonclient.grpc as client

    return client, client.InferenceServerClient(target)


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
