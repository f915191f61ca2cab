"""A request body bounded as it arrives, whatever its framing, on every method.

A Content-Length above the limit is refused before a byte of the body is read; a chunked body declares no length,
so the only bound on it is to count the bytes of the ASGI `http.request` messages as they come (as Starlette's form
parser counts a part, and TorchServe's Netty frontend, HttpObjectAggregator, counts a message) and to stop reading at
the first message that takes the count past the limit. The server then holds at most the limit plus one message
(uvicorn hands the body on as the socket is read, in pieces of at most the event loop's read size, 256 KiB) before
the client is answered 413.
"""

from __future__ import annotations

from tsvk.common import RequestTooLarge

# The answer closes the connection: the rest of a refused body is never read, so the connection cannot carry another
# request (uvicorn closes the socket once the answer is sent).
CLOSE = (b"connection", b"close")


class BodyTooLarge(Exception):
    """Raised by `BoundedReceive` when the body passes the limit; `refusal` is the client's 413."""

    def __init__(self, limit: int):
        super().__init__(f"request body over {limit} bytes")
        self.refusal = too_large(limit)


def too_large(limit: int, declared: int | None = None) -> RequestTooLarge:
    """The 413 in tsvk's words, naming the limit and the setting that sets it."""
    setting = "max_request_size in the server's config.properties"
    if declared is None:
        return RequestTooLarge(f"the body passed {limit} bytes, the limit ({setting}), as it arrived: it was not read further")
    return RequestTooLarge(f"the body is {declared} bytes; the limit is {limit} bytes ({setting})")


class BoundedReceive:
    """An ASGI `receive` that counts the body's bytes as they arrive and raises BodyTooLarge past `limit`, so whatever
    reads the body (the server's own code, Starlette's form parser, KServe's app) holds no more than the limit."""

    def __init__(self, receive, limit: int):
        self.receive = receive
        self.limit = limit
        self.received = 0

    async def __call__(self):
        message = await self.receive()
        if message["type"] == "http.request":
            self.received += len(message.get("body", b""))
            if self.received > self.limit:
                raise BodyTooLarge(self.limit)
        return message


async def read_body(receive) -> bytes | None:
    """The whole body through `receive` (a BoundedReceive raises past its limit); None when the client left first."""
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


def declared_length(headers: dict[bytes, bytes]) -> int | None:
    """The Content-Length the client sent, or None without one (uvicorn refuses a malformed one before the app)."""
    length = headers.get(b"content-length")
    return int(length) if length is not None else None
