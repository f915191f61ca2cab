"""The guard in front of both servers reads a body that declares no length only up to max_request_size and one more
message, then answers 413 and closes: counted over an endless chunked body, the bytes it took are bounded."""

from __future__ import annotations

import asyncio
import json

import pytest

from tsvk_tools.oip.server import PROTOCOL_PATHS, Guard

LIMIT = 2**20
MESSAGE = 64 * 1024  # the size uvicorn hands a chunked body on in, at most one socket read
ENGINE_PATHS = r"^/predictions/[^/]+/?$"


class _Reader:
    """An app that reads the whole body, as the engine's /predictions and KServe's FastAPI do, then answers 200."""

    async def __call__(self, scope, receive, send):
        while (message := await receive()).get("more_body"):
            pass
        if message["type"] == "http.disconnect":
            return
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})


class _EndlessBody:
    """A client sending a chunked body that never ends: `taken` counts the bytes the server read. A server that reads
    on far past the limit is stopped as the client leaving would stop it (a disconnect), so the test fails, not hangs."""

    def __init__(self):
        self.taken = 0

    async def __call__(self):
        if self.taken > 16 * LIMIT:
            return {"type": "http.disconnect"}
        self.taken += MESSAGE
        return {"type": "http.request", "body": b"\xff" * MESSAGE, "more_body": True}


def _send_through(path: str, method: str) -> tuple[list[dict], int]:
    guard = Guard(_Reader(), LIMIT, paths=f"{PROTOCOL_PATHS}|{ENGINE_PATHS}")
    body, sent = _EndlessBody(), []

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": method, "path": path, "headers": [(b"transfer-encoding", b"chunked")]}
    asyncio.run(guard(scope, body, send))
    return sent, body.taken


@pytest.mark.parametrize("path", ["/predictions/tiny", "/v2/models/tiny/infer"])
@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE"])
def test_an_endless_chunked_body_is_read_to_the_limit_and_one_message_then_refused(path, method):
    sent, taken = _send_through(path, method)
    assert taken <= LIMIT + MESSAGE
    start, answer = sent
    assert start["status"] == 413 and (b"connection", b"close") in start["headers"]
    body = json.loads(answer["body"])
    assert (body["code"], body["error"], body["source"]) == (413, "request_too_large", "tsvk")
