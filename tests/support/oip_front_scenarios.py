"""The front's side of TorchServe, exercised against a real aiohttp server standing in for TorchServe's
inference API (the narrowest seam): it records what arrives and answers as the handler does.

The scenarios import the KServe SDK, which registers the protocol's protobuf messages in the same pool
tritonclient uses; so tests/unit/test_oip_front.py runs each in a process of its own and gets plain data back.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
from aiohttp import web
from kserve.errors import InvalidInput
from kserve.protocol.infer_type import InferInput, InferRequest

from tsvk.request import oip
from tsvk.common.errors import BadImage
from tsvk_tools.oip.config import ModelTensors
from tsvk_tools.oip.forward import ForwardedError, TorchServeModel
from tsvk_tools.oip.health import TorchServeHealth
from tsvk_tools.oip.upstream import TorchServeClient

BAD = b"not an image"


class FakeTorchServe:
    """/ping and /predictions/tiny on a free port; every request is recorded."""

    def __init__(self):
        self.pings = 0
        self.bodies: list[tuple[str, bytes]] = []

    async def ping(self, request):
        self.pings += 1
        await asyncio.sleep(0.05)  # long enough for concurrent askers to overlap
        return web.json_response({"status": "Healthy"})

    async def predict(self, request):
        body = await request.read()
        self.bodies.append((request.content_type, body))
        if body == BAD:
            return web.json_response(BadImage("cannot identify the image").body(), status=400)
        return web.json_response({"cat": 0.75, "dog": 0.25})

    async def __aenter__(self):
        app = web.Application()
        app.router.add_get("/ping", self.ping)
        app.router.add_post("/predictions/tiny", self.predict)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc):
        await self.runner.cleanup()


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _run(scenario):
    async def main():
        client = TorchServeClient()
        try:
            async with FakeTorchServe() as torchserve:
                return await scenario(torchserve, client)
        finally:
            await client.close()
    return asyncio.run(main())


def pings_of_twenty_concurrent_askers() -> dict:
    clock = Clock()

    async def scenario(torchserve, client):
        health = TorchServeHealth(client, f"{torchserve.url}/ping", clock=clock)
        answers = await asyncio.gather(*(health.healthy() for _ in range(20)))
        first = torchserve.pings
        await health.healthy()
        clock.now += health.ttl_s  # a second later the answer is asked again
        await health.healthy()
        return {"all_healthy": all(answers), "first": first, "total": torchserve.pings}

    return _run(scenario)


def health_of_an_unreachable_torchserve() -> bool:
    async def scenario(torchserve, client):
        return await TorchServeHealth(client, "http://127.0.0.1:9/ping").healthy()

    return _run(scenario)


def _model(url: str, client: TorchServeClient) -> TorchServeModel:
    tensors = ModelTensors("tiny", crop=8, k=2, timeout_s=10)
    return TorchServeModel(tensors, url, max_images=4, client=client, health=TorchServeHealth(client, f"{url}/ping"))


def _images_request(values) -> InferRequest:
    tensor = InferInput(oip.IMAGES, [len(values)], "BYTES", data=list(values))
    return InferRequest(model_name="tiny", infer_inputs=[tensor], request_id="r1")


def forwarded_images(values: list) -> dict:
    """What reached TorchServe for each image, and the response's tensors."""
    async def scenario(torchserve, client):
        response = await _model(torchserve.url, client).predict(_images_request(values))
        outputs = {output.name: output for output in response.outputs}
        return {"bodies": torchserve.bodies, "id": response.id,
                "shapes": {name: output.shape for name, output in outputs.items()},
                "probabilities": np.asarray(outputs[oip.PROBABILITIES].data, dtype=np.float32).tolist()}

    return _run(scenario)


def failure_of(values: list, url: str | None = None) -> dict:
    """The status and message a request fails with."""
    async def scenario(torchserve, client):
        try:
            await _model(url or torchserve.url, client).predict(_images_request(values))
        except ForwardedError as error:
            return {"status": error.status, "message": error.message}
        return {"status": 200, "message": ""}

    return _run(scenario)


def serve_front_beside_fake_torchserve(rest_port: int, grpc_port: int, run_dir: str) -> None:
    """The real front (tools/oip/server.py) on `rest_port`, forwarding to a FakeTorchServe; until SIGTERM."""
    import threading

    from tsvk_tools.oip.config import FrontConfig
    from tsvk_tools.oip.server import serve

    started, holder = threading.Event(), {}

    def fake_in_its_own_loop() -> None:
        async def keep() -> None:
            async with FakeTorchServe() as torchserve:
                holder["url"] = torchserve.url
                started.set()
                await asyncio.Event().wait()
        asyncio.run(keep())

    threading.Thread(target=fake_in_its_own_loop, daemon=True).start()
    started.wait(10)
    config = FrontConfig(torchserve_url=holder["url"], address="127.0.0.1", rest_port=rest_port, grpc_port=grpc_port,
                         max_images=4, max_request_bytes=2**20, models=(ModelTensors("tiny", 32, 2, 10.0),))
    serve(config, Path(run_dir))


def refusal_of_bytes_contents(raw: bytes) -> str:
    """What the front says of BYTES raw contents `raw` (as kserve's gRPC servicer sets them from
    raw_input_contents): the message of the InvalidInput it raises, or what else it raised."""
    tensor = InferInput("images", [1], "BYTES")
    tensor._raw_data = raw
    try:
        TorchServeModel._items(None, tensor)
    except InvalidInput as err:
        return f"InvalidInput: {err}"
    except Exception as err:  # noqa: BLE001 - the scenario reports what escaped, the test judges it
        return f"{type(err).__name__}: {err}"
    return "accepted"
