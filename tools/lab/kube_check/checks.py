"""What kube-check asks a running pod from outside it, each answer a Check that passed or failed.

Addresses and ports come from the rendered config (the ConfigMap), so a check follows what the chart
says: metrics where metrics_address puts them, the management API where management_address does.
"""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from urllib.parse import urlsplit

import numpy as np

from tsvk.request import oip

from .pod import Pod

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")
NOT_AN_IMAGE = b"this is not an image, it is a sentence"


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str

    def to_json(self) -> dict:
        return asdict(self)


def port_of(properties: dict[str, str], key: str) -> int:
    return urlsplit(properties[key]).port


def host_of(properties: dict[str, str], key: str) -> str:
    return urlsplit(properties[key]).hostname


def post(url: str, body: bytes, content_type: str = "application/octet-stream", timeout: float = 120) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=body, headers={"Content-Type": content_type}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def is_top_k(answer) -> bool:
    """A classifier's answer: {label: probability, ...}."""
    return isinstance(answer, dict) and bool(answer) and all(isinstance(v, (int, float)) for v in answer.values())


def predictions(address: str, port: int, model: str, photo: bytes) -> Check:
    status, body = post(f"http://{address}:{port}/predictions/{model}", photo)
    answer = json.loads(body) if status == 200 else None
    ok = status == 200 and is_top_k(answer)
    return Check("/predictions answers a photo", ok, f"{status}: {body[:160].decode(errors='replace')}")


def bad_image(address: str, port: int, model: str) -> Check:
    status, body = post(f"http://{address}:{port}/predictions/{model}", NOT_AN_IMAGE)
    return Check("a bad image gets a 4xx", 400 <= status < 500, f"{status}: {body[:160].decode(errors='replace')}")


def oip_infer(address: str, rest_port: int, grpc_port: int, model: str, photo: bytes, grpc: bool) -> Check:
    """One photo through the Open Inference Protocol, with tritonclient as a user's program sends it."""
    from tritonclient.utils import InferenceServerException

    if grpc:
        import tritonclient.grpc as client

        server = client.InferenceServerClient(f"{address}:{grpc_port}")
    else:
        import tritonclient.http as client

        server = client.InferenceServerClient(f"{address}:{rest_port}")
    name = f"OIP {'gRPC' if grpc else 'REST'} answers a photo"
    tensor = client.InferInput(oip.IMAGES, [1], "BYTES")
    tensor.set_data_from_numpy(np.array([photo], dtype=np.object_))
    try:
        result = server.infer(model, [tensor])
    except InferenceServerException as err:
        return Check(name, False, f"{err.status()}: {err.message()}")
    labels = result.as_numpy(oip.LABELS)
    probabilities = result.as_numpy(oip.PROBABILITIES)
    ok = labels is not None and probabilities is not None and labels.shape[0] == 1 and probabilities.shape == labels.shape
    return Check(name, ok, f"top-1 {labels[0][0]!r} {float(probabilities[0][0]):.3f}" if ok else "no labels/probabilities")


def refused(address: str, port: int, timeout: float = 3) -> tuple[bool, str]:
    """Nobody outside the pod gets a connection on this port."""
    try:
        with socket.create_connection((address, port), timeout=timeout):
            return False, f"{address}:{port} accepted a connection"
    except OSError as err:
        return True, f"{address}:{port}: {err}"


def management_closed(address: str, properties: dict[str, str]) -> Check:
    closed, detail = refused(address, port_of(properties, "management_address"))
    return Check("the management API is not reachable from outside the pod", closed, detail)


def metrics(pod: Pod, address: str, properties: dict[str, str], container: str = "torchserve") -> Check:
    """Metrics where metrics_address says: inside the pod only on loopback, else from outside too."""
    port = port_of(properties, "metrics_address")
    if host_of(properties, "metrics_address") in LOOPBACK_HOSTS:
        inside = pod.exec(container, ["curl", "--fail", "--silent", "--show-error", f"http://127.0.0.1:{port}/metrics"])
        closed, detail = refused(address, port)
        ok = inside.returncode == 0 and "ts_" in inside.stdout and closed
        return Check("metrics on the pod's loopback only (metrics_address)", ok,
                     f"inside: exit {inside.returncode}, {len(inside.stdout)} bytes; outside: {detail}")
    try:
        with urllib.request.urlopen(f"http://{address}:{port}/metrics", timeout=10) as response:
            text = response.read().decode(errors="replace")
        return Check("metrics served to the pod's network (metrics_address)", "ts_" in text, f"{len(text)} bytes")
    except OSError as err:
        return Check("metrics served to the pod's network (metrics_address)", False, str(err))


def user_and_root_filesystem(pod: Pod, pod_spec: dict, container: str) -> list[Check]:
    """The container runs as the chart's user and group, on a root filesystem it cannot write."""
    context = {**pod_spec.get("securityContext", {}), **_container(pod_spec, container).get("securityContext", {})}
    uid = pod.exec(container, ["id", "-u"]).stdout.strip()
    gid = pod.exec(container, ["id", "-g"]).stdout.strip()
    want = (str(context.get("runAsUser")), str(context.get("runAsGroup")))
    write = pod.exec(container, ["touch", "/kube-check-write-test"])
    readonly = pod.inspect(container)["HostConfig"].get("ReadonlyRootfs")
    return [
        Check(f"{container} runs as the chart's user", (uid, gid) == want and int(uid) >= 10000,
              f"uid {uid} gid {gid}, chart {want[0]}/{want[1]}"),
        Check(f"{container} has a read-only root filesystem", write.returncode != 0 and bool(readonly),
              f"ReadonlyRootfs={readonly}; touch /: {write.stderr.strip()[:120]}"),
    ]


def _container(pod_spec: dict, name: str) -> dict:
    return next(c for c in pod_spec["containers"] if c["name"] == name)
