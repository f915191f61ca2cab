"""The front bounds a request's JSON before FastAPI and KServe's pydantic request parse it: the size, depth
and values the handler allows, counted over the body's bytes, so a hostile body is refused at its size."""

from __future__ import annotations

import asyncio
import json
import tracemalloc

from tsvk.common.defaults import MAX_JSON_VALUES
from tsvk_tools.defaults import OIP_JSON_PIXEL_IMAGES
from tsvk.request.json_body import JsonLimits
from tsvk_tools.oip.config import FrontConfig, ModelTensors
from tsvk_tools.oip.server import Guard, front_json_limits

INFER = "/v2/models/resnet18/infer"
LIMIT = 16 * 2**20
JSON_BOMB = b'{"inputs": [' + b"[]," * (16 * 2**20 // 3 - 10) + b"[]]}"  # KServe's request: 572 MiB once parsed


class _App:
    """The KServe app behind the guard: records the body it would have parsed."""

    def __init__(self):
        self.bodies: list[bytes] = []

    async def __call__(self, scope, receive, send):
        message = await receive()
        self.bodies.append(message["body"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})


def _post(guard, body: bytes, headers: dict[bytes, bytes] | None = None, chunk: int = 65536) -> tuple[int, dict]:
    """POST `body` through the guard in chunks, as uvicorn hands it on; the status and JSON the client gets."""
    chunks = [body[i:i + chunk] for i in range(0, len(body), chunk)] or [b""]
    messages = [{"type": "http.request", "body": part, "more_body": i < len(chunks) - 1} for i, part in enumerate(chunks)]
    sent = []

    async def receive():
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": INFER,
             "headers": [(b"content-length", str(len(body)).encode()), *(headers or {}).items()]}
    asyncio.run(guard(scope, receive, send))
    return sent[0]["status"], json.loads(sent[1]["body"])


def test_a_json_bomb_is_refused_before_the_app_parses_it():
    app = _App()
    guard = Guard(app, LIMIT)
    tracemalloc.start()
    status, body = _post(guard, JSON_BOMB)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert status == 413 and body["error"].startswith("json_too_large: JSON body holds up to")
    assert app.bodies == [] and peak < 2.5 * len(JSON_BOMB)  # the body read once, joined once; nothing parsed


def test_deep_json_is_refused_400_naming_the_limit():
    app = _App()
    status, body = _post(Guard(app, LIMIT), b'{"inputs": ' + b"[" * 2000 + b"]" * 2000 + b"}")
    assert status == 400 and body["error"] == "json_too_deep: JSON body is nested 2001 deep; the limit is 32"
    assert app.bodies == []


def test_a_good_request_reaches_the_app_whole():
    app = _App()
    request = json.dumps({"inputs": [{"name": "images", "datatype": "BYTES", "shape": [1], "data": ["aGk="]}]}).encode()
    assert _post(Guard(app, LIMIT), request, chunk=7)[0] == 200
    assert app.bodies == [request]


def test_only_the_json_part_of_a_binary_request_is_counted():
    """The binary extension's tensor bytes are not JSON: commas and brackets in them are not values."""
    app = _App()
    header = json.dumps({"inputs": [{"name": "images", "datatype": "BYTES", "shape": [1],
                                     "parameters": {"binary_data_size": 4_000_000}}]}).encode()
    request = header + b"[]," * (4_000_000 // 3)
    status, _ = _post(Guard(app, LIMIT, JsonLimits(max_values=1000)), request,
                      {b"inference-header-content-length": str(len(header)).encode()})
    assert status == 200 and app.bodies == [request]
    assert _post(Guard(_App(), LIMIT, JsonLimits(max_values=1000)), request)[0] == 413


def test_the_front_allows_a_few_images_of_pixels_at_its_largest_crop():
    models = (ModelTensors("small", 224, 5, 120.0), ModelTensors("large", 600, 5, 120.0))
    config = FrontConfig("http://127.0.0.1:8080", "127.0.0.1", 8000, 8001, 64, LIMIT, models)
    assert front_json_limits(config).max_values == MAX_JSON_VALUES + OIP_JSON_PIXEL_IMAGES * 3 * 600 * 600
    assert front_json_limits(FrontConfig("u", "a", 1, 2, 64, LIMIT, models[:1])).max_values == MAX_JSON_VALUES + 8 * 3 * 224 * 224
