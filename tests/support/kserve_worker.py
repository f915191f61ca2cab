"""Runs the KServe SDK's inference clients in a process of their own, one JSON request per stdin line.

The KServe SDK and tritonclient each register the protocol's gRPC messages (package `inference`) in
protobuf's one default descriptor pool, so the two cannot be imported into one process; the tests talk
to this worker instead (tests/support/oip_clients.py). Arrays travel as base64 of their bytes.
"""

import asyncio
import base64
import json
import sys

import numpy as np


def _array(spec):
    if spec["dtype"] == "object":
        return np.array([base64.b64decode(item) for item in spec["items"]], dtype=np.object_).reshape(spec["shape"])
    return np.frombuffer(base64.b64decode(spec["b64"]), dtype=spec["dtype"]).reshape(spec["shape"])


def _encoded(values):
    if values.dtype == np.object_:
        return {"shape": list(values.shape), "items": [v.decode() if isinstance(v, bytes) else str(v) for v in values.reshape(-1)]}
    return {
        "shape": list(values.shape),
        "b64": base64.b64encode(np.ascontiguousarray(values).tobytes()).decode(),
        "dtype": str(values.dtype),
    }


def _request(call):
    from kserve import InferInput, InferRequest

    tensor = InferInput(name=call["name"], shape=call["values"]["shape"], datatype=call["datatype"])
    tensor.set_data_from_numpy(_array(call["values"]), binary_data=True)
    return InferRequest(model_name=call["model"], infer_inputs=[tensor])


async def _rest(call):
    import httpx
    from kserve import InferenceRESTClient, RESTConfig

    client, url = InferenceRESTClient(RESTConfig(protocol="v2", timeout=60)), call["url"]
    try:
        if call["op"] == "live":
            return await client.is_server_live(url)
        if call["op"] == "ready":
            return await client.is_server_ready(url)
        if call["op"] == "model_ready":
            return await client.is_model_ready(url, call["model"])
        try:
            return await client.infer(url, _request(call), call["model"], headers=dict(call["headers"]))
        except httpx.HTTPStatusError as err:
            return {"failed": [str(err.response.status_code), err.response.text]}
    finally:
        await client.close()


async def _grpc(call):
    import grpc
    from kserve import InferenceGRPCClient

    client = InferenceGRPCClient(call["url"], timeout=60, retries=0)
    try:
        if call["op"] == "live":
            return await client.is_server_live()
        if call["op"] == "ready":
            return await client.is_server_ready()
        if call["op"] == "model_ready":
            return await client.is_model_ready(call["model"])
        try:
            metadata = tuple((k.lower(), v) for k, v in call["headers"].items())
            return await client.infer(_request(call), headers=metadata)
        except grpc.aio.AioRpcError as err:
            return {"failed": [str(err.code()), err.details() or ""]}
    finally:
        await client.close()


def _answer(result):
    if isinstance(result, (bool, dict)):
        return {"result": result}
    outputs = {output.name: output.as_numpy() for output in result.outputs}
    return {"result": {name: _encoded(values) for name, values in outputs.items()}}


def main():
    for line in sys.stdin:
        call = json.loads(line)
        try:
            answer = _answer(asyncio.run(_rest(call) if call["transport"] == "rest" else _grpc(call)))
        except Exception as err:  # noqa: BLE001 - report it to the test, keep serving
            answer = {"error": f"{type(err).__name__}: {err}"}
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    main()
