"""The front's side of TorchServe: its cached health, and each image forwarded as a /predictions body.

A real aiohttp server stands in for TorchServe's inference API (the narrowest seam): it records what
arrives and answers as the handler does.
"""

from __future__ import annotations

import asyncio
import base64

import numpy as np
import pytest
from aiohttp import web
from kserve.protocol.infer_type import InferInput, InferRequest

from tsvk import oip
from tsvk.errors import BadImage
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


def test_concurrent_askers_share_one_ping_until_it_is_stale():
    clock = Clock()

    async def scenario(torchserve, client):
        health = TorchServeHealth(client, f"{torchserve.url}/ping", clock=clock)
        answers = await asyncio.gather(*(health.healthy() for _ in range(20)))
        first = torchserve.pings
        await health.healthy()
        clock.now += health.ttl_s  # a second later the answer is asked again
        await health.healthy()
        return answers, first, torchserve.pings

    answers, first, total = _run(scenario)
    assert all(answers) and first == 1 and total == 2


def test_an_unreachable_torchserve_is_not_healthy():
    async def scenario(torchserve, client):
        return await TorchServeHealth(client, "http://127.0.0.1:9/ping").healthy()

    assert _run(scenario) is False


def _model(url: str, client: TorchServeClient) -> TorchServeModel:
    tensors = ModelTensors("tiny", crop=8, k=2, timeout_s=10)
    return TorchServeModel(tensors, url, max_images=4, client=client, health=TorchServeHealth(client, f"{url}/ping"))


def _images_request(values) -> InferRequest:
    tensor = InferInput(oip.IMAGES, [len(values)], "BYTES", data=list(values))
    return InferRequest(model_name="tiny", infer_inputs=[tensor], request_id="r1")


def test_images_travel_as_they_came_and_answers_become_tensors():
    jpeg = b"\xff\xd8raw jpeg bytes"
    png = b"\x89PNG png bytes"
    wrapped = base64.b64encode(jpeg).decode()[:8] + "\n" + base64.b64encode(jpeg).decode()[8:]  # the handler unwraps it

    async def scenario(torchserve, client):
        response = await _model(torchserve.url, client).predict(_images_request([jpeg, base64.b64encode(png).decode(), wrapped]))
        return response, torchserve.bodies

    response, bodies = _run(scenario)
    assert bodies == [("application/octet-stream", jpeg), ("application/octet-stream", png), ("application/octet-stream", wrapped.encode())]
    outputs = {output.name: output for output in response.outputs}
    assert outputs[oip.PROBABILITIES].shape == [3, 2] and outputs[oip.LABELS].shape == [3, 2]
    assert np.allclose(np.asarray(outputs[oip.PROBABILITIES].data, dtype=np.float32).reshape(3, 2), [[0.75, 0.25]] * 3)
    assert response.id == "r1"


def test_a_bad_image_fails_the_request_with_the_handler_code_and_which_image():
    async def scenario(torchserve, client):
        with pytest.raises(ForwardedError) as failure:
            await _model(torchserve.url, client).predict(_images_request([b"\xff\xd8fine", BAD]))
        return failure.value

    error = _run(scenario)
    assert error.status == 400 and error.message == "bad_image: image 2 of 2: cannot identify the image"


def test_torchserve_gone_is_a_503_saying_so():
    async def scenario(torchserve, client):
        with pytest.raises(ForwardedError) as failure:
            await _model("http://127.0.0.1:9", client).predict(_images_request([b"\xff\xd8fine"]))
        return failure.value

    error = _run(scenario)
    assert error.status == 503 and error.message.startswith("torchserve_unreachable")
