"""The four Open Inference Protocol clients the tests use, behind one small interface.

tritonclient (HTTP and gRPC) and the KServe SDK's InferenceRESTClient / InferenceGRPCClient: clients
written by others, so the front is held to the protocol as they speak it. Each failure is reported as
(HTTP status or gRPC code name, message).
"""

from __future__ import annotations

import numpy as np


class CallFailed(Exception):
    def __init__(self, status: str, message: str):
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message


class TritonHTTP:
    name, transport = "tritonclient-http", "rest"

    def __init__(self, rest_url: str, grpc_target: str):
        import tritonclient.http as client

        self.module = client
        self.client = client.InferenceServerClient(rest_url.removeprefix("http://"))

    def live(self) -> bool:
        return self.client.is_server_live()

    def ready(self) -> bool:
        return self.client.is_server_ready()

    def model_ready(self, model: str) -> bool:
        return self.client.is_model_ready(model)

    def metadata(self, model: str) -> dict:
        return self.client.get_model_metadata(model)

    def server_metadata(self) -> dict:
        return self.client.get_server_metadata()

    def infer(self, model: str, name: str, datatype: str, values: np.ndarray, headers: dict[str, str]):
        from tritonclient.utils import InferenceServerException

        tensor = self.module.InferInput(name, list(values.shape), datatype)
        tensor.set_data_from_numpy(values)
        try:
            result = self.client.infer(model, [tensor], headers=headers)
        except InferenceServerException as err:
            raise CallFailed(str(err.status()), err.message()) from None
        return result.as_numpy("probabilities"), result.as_numpy("labels")


class TritonGRPC(TritonHTTP):
    name, transport = "tritonclient-grpc", "grpc"

    def __init__(self, rest_url: str, grpc_target: str):
        import tritonclient.grpc as client

        self.module = client
        self.client = client.InferenceServerClient(grpc_target)

    def metadata(self, model: str) -> dict:
        return self.client.get_model_metadata(model, as_json=True)

    def server_metadata(self) -> dict:
        return self.client.get_server_metadata(as_json=True)

    def infer(self, model, name, datatype, values, headers):
        return super().infer(model, name, datatype, values, {k.lower(): v for k, v in headers.items()})


class KServeWorker:
    """The KServe clients' own process (kserve_worker.py): the SDK and tritonclient cannot share one."""

    _process = None

    @classmethod
    def call(cls, **call) -> object:
        import json
        import subprocess
        import sys
        from pathlib import Path

        if cls._process is None or cls._process.poll() is not None:
            script = Path(__file__).with_name("kserve_worker.py")
            cls._process = subprocess.Popen([sys.executable, str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        cls._process.stdin.write(json.dumps(call) + "\n")
        cls._process.stdin.flush()
        answer = json.loads(cls._process.stdout.readline())
        if "error" in answer:
            raise AssertionError(f"the KServe client failed: {answer['error']}")
        return answer["result"]

    @classmethod
    def stop(cls) -> None:
        if cls._process is not None:
            cls._process.stdin.close()
            cls._process.wait(timeout=30)
            cls._process = None


class KServeREST:
    name, transport = "kserve-rest", "rest"

    def __init__(self, rest_url: str, grpc_target: str):
        self.url = rest_url

    def _call(self, op: str, **fields):
        return KServeWorker.call(transport=self.transport, url=self.url, op=op, **fields)

    def live(self) -> bool:
        return self._call("live")

    def ready(self) -> bool:
        return self._call("ready")

    def model_ready(self, model: str) -> bool:
        return self._call("model_ready", model=model)

    def infer(self, model, name, datatype, values, headers):
        result = self._call("infer", model=model, name=name, datatype=datatype, values=_encoded(values), headers=dict(headers))
        if "failed" in result:
            raise CallFailed(*result["failed"])
        return _decoded(result["probabilities"]), _decoded(result["labels"])


class KServeGRPC(KServeREST):
    name, transport = "kserve-grpc", "grpc"

    def __init__(self, rest_url: str, grpc_target: str):
        self.url = grpc_target


def _encoded(values: np.ndarray) -> dict:
    import base64

    if values.dtype == np.object_:
        return {"dtype": "object", "shape": list(values.shape), "items": [base64.b64encode(v).decode() for v in values.reshape(-1)]}
    return {"dtype": str(values.dtype), "shape": list(values.shape), "b64": base64.b64encode(values.tobytes()).decode()}


def _decoded(spec: dict) -> np.ndarray:
    import base64

    if "items" in spec:
        return np.array(spec["items"], dtype=np.object_).reshape(spec["shape"])
    return np.frombuffer(base64.b64decode(spec["b64"]), dtype=spec["dtype"]).reshape(spec["shape"])


CLIENTS = (TritonHTTP, TritonGRPC, KServeREST, KServeGRPC)
# What each kind of failure looks like to a REST client (HTTP status) and to a gRPC client (status code).
EXPECTED = {
    "invalid": {"rest": "400", "grpc": "StatusCode.INVALID_ARGUMENT"},
    "not_found": {"rest": "404", "grpc": "StatusCode.NOT_FOUND"},
    "unauthenticated": {"rest": "401", "grpc": "StatusCode.UNAUTHENTICATED"},
}
