"""uvicorn's httptools protocol with the bounds on slow and idle clients that uvicorn does not have.

Checked against uvicorn 0.54.0 (uvicorn/protocols/http/httptools_impl.py, uvicorn/config.py, uvicorn/server.py) and
httptools 0.9.0, the versions requirements.txt pins:
- uvicorn's "auto" HTTP protocol is httptools' wherever httptools is installed (uvicorn[standard] installs it), and
  `h11_max_incomplete_event_size` bounds the h11 protocol only: with httptools nothing bounds the request line or the
  headers (llhttp buffers a header value of any size: 20 MB were taken without an error) nor counts them.
- `timeout_keep_alive` is armed only when a response is complete, and cancelled by the next byte: a connection that
  never sends a request, or sends its headers (or its body) a byte every few seconds, has no timer at all and is held
  until the server stops. uvicorn has no other timeout on reading a request.
- `limit_concurrency` counts every open connection (idle ones too) and every running task when a request's headers are
  complete, and answers beyond it 503 in plain text; `backlog` is listen()'s (the kernel caps it at somaxconn).
So tsvk's REST servers run this protocol. A request's line and headers must arrive within `header_timeout_s` of their
first byte (of the connection's opening, for its first request), else 408 and the connection is closed (just closed
if nothing came); at most `max_header_bytes` and `max_headers` of them, else 431 and closed; a body whose bytes stop
for `body_timeout_s` is closed; a request arriving while more than `max_connections` connections are open is answered
503 too_many_connections in tsvk's error shape (uvicorn's rule, tsvk's words), its connection closed. Idle keep-alive
connections are closed by uvicorn's own timer after `keep_alive_s`.
"""

from __future__ import annotations

import json
import logging
import random
import resource
from contextlib import suppress
from dataclasses import replace

import httptools
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from tsvk.common import RequestError

from .. import defaults
from .connection_bounds import HttpBounds, HeadersTooLarge, RequestTimeout, TooManyConnections, key_of

log = logging.getLogger("tsvk.http")

_HEADERS, _BODY, _BETWEEN = "reading headers", "reading the body", "between requests"
READ_BYTES = 1 << 20  # one read of a connection: asyncio reads 256 KiB, so a 4 MB photo took 16 reads, each parsed and queued
_CLOCK_SLACK_S = 0.001  # a timer may fire this much before its deadline by the loop's clock
# A connection's header deadline is drawn from the last fifth of the bound: connections opened together (a swarm's
# ramp) are then not all closed together, and reopened together, every cycle; their closes spread out over cycles.
_HEADER_SPREAD = 0.2
_QUIET = logging.getLogger("tsvk.http.refused")
_QUIET.setLevel(logging.ERROR)


class _Refused(Exception):
    """Raised in a parser callback to stop httptools (`_stop_parsing`)."""


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """One connection, as uvicorn's httptools protocol serves it, within `bounds`; `bound_uvicorn` makes a subclass
    holding the server's bounds."""

    bounds: HttpBounds = HttpBounds()

    def connection_made(self, transport) -> None:
        self._phase, self._header_bytes, self._header_count = _HEADERS, 0, 0
        self._body_seen, self._body_left = 0, 0
        self._refusal: RequestError | None = None
        self._deadline, self._timer = 0.0, None
        super().connection_made(transport)
        transport.max_size = READ_BYTES
        self._expect_within(self._header_time_s())

    def connection_lost(self, exc) -> None:
        self._stop_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._body_left:
            return self._unparsed_body_received(data)
        if self._phase == _BETWEEN:  # the next request's first bytes (or bytes that begin none: CRLFs)
            self._start_headers()
        if self._phase == _HEADERS:
            self._header_bytes += len(data)
        else:
            self._expect_within(self.bounds.body_timeout_s)
        super().data_received(data)
        if self._phase == _HEADERS and self._header_bytes > self.bounds.max_header_bytes:
            self._refuse(_too_large(f"over {self.bounds.max_header_bytes} bytes", "max_header_bytes"))
        elif self._phase == _BODY:
            self._body_left = self._unread_declared_body()

    def _unread_declared_body(self) -> int:
        """The bytes of this request's body still to come where its length is declared and the parser has checked it
        (a Content-Length llhttp accepted, no Transfer-Encoding, no upgrade); 0 where the parser must go on reading."""
        if self.transport.is_closing() or self.parser.should_upgrade():
            return 0
        names = [name for name, _ in self.headers]
        if b"transfer-encoding" in names or b"content-length" not in names:
            return 0
        declared = self.headers[len(names) - 1 - names[::-1].index(b"content-length")][1]
        return max(0, int(declared) - self._body_seen) if declared.strip().isdigit() else 0

    def _unparsed_body_received(self, data: bytes) -> None:
        """The rest of a body of declared length, passed on as the very objects the socket read: parsing it would only
        copy it (httptools hands each piece on as a new bytes object). The request then ends as the parser would end it,
        and the next one is read by a fresh parser (the old one still expects this body)."""
        self._expect_within(self.bounds.body_timeout_s)
        body, rest = (data, b"") if len(data) <= self._body_left else (data[: self._body_left], data[self._body_left :])
        self._body_left -= len(body)
        self.on_body(body)
        if self._body_left:
            return
        self.parser = _request_parser(self)
        self.on_message_complete()
        if rest:
            self.data_received(rest)

    def on_message_begin(self) -> None:
        if self._phase == _BETWEEN:  # a pipelined request, in the same bytes as the end of the last one
            self._start_headers()
        self._header_count, self._body_seen = 0, 0
        super().on_message_begin()

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_count += 1
        if self._header_count > self.bounds.max_headers:
            self._stop_parsing(_too_large(f"over {self.bounds.max_headers} header fields", "max_headers"))
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        # The bytes counted as they arrive cannot tell where the headers end; these are theirs alone.
        size = len(self.url) + sum(len(name) + len(value) + 4 for name, value in self.headers)
        if size > self.bounds.max_header_bytes:
            self._stop_parsing(_too_large(f"{size} bytes, over {self.bounds.max_header_bytes}", "max_header_bytes"))
        self._phase = _BODY
        self._expect_within(self.bounds.body_timeout_s)
        if len(self.connections) > self.bounds.max_connections:
            self.app = _too_many_connections(self.bounds.max_connections)  # the answer closes the connection
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        """uvicorn appends each piece to a bytearray and hands the app `bytes()` of it: two copies of every piece of a
        photo. Starting from an empty bytes object instead, `+=` keeps the piece itself and `bytes()` of it is the piece:
        the app gets the very object httptools made. uvicorn stops reading past 64 KiB of unread body, so a second piece
        is rarely appended (then joined once, as before)."""
        self._body_seen += len(body)
        if not self.cycle.body:
            self.cycle.body = b""
        super().on_body(body)

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._phase = _BETWEEN  # the answer may take long; the next request's bytes start the clock again
        self._stop_timer()

    def send_400_response(self, msg: str) -> None:
        if self._refusal is None:
            return super().send_400_response(msg)
        return self._refuse(self._refusal)

    def _stop_parsing(self, refusal: RequestError) -> None:
        """Raised in a parser callback, `refusal` stops httptools: uvicorn's data_received then answers 400 through
        send_400_response (which sends the refusal) after a warning that the request was malformed; it was not, so
        this connection's warnings go to a logger that keeps them quiet (a flood of refusals floods no log)."""
        self._refusal = refusal
        self.logger = _QUIET
        raise _Refused

    def _start_headers(self) -> None:
        self._phase, self._header_bytes, self._header_count = _HEADERS, 0, 0
        self._expect_within(self._header_time_s())

    def _header_time_s(self) -> float:
        return self.bounds.header_timeout_s * random.uniform(1 - _HEADER_SPREAD, 1)

    def _expect_within(self, seconds: float) -> None:
        """The client must send what the phase waits for within `seconds`; one timer per connection, moved only
        when the deadline comes earlier (a later one is found when the timer fires)."""
        self._deadline = self.loop.time() + seconds
        if self._timer is not None and self._timer.when() <= self._deadline:
            return
        self._stop_timer()
        self._timer = self.loop.call_at(self._deadline, self._on_deadline)

    def _stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _on_deadline(self) -> None:
        self._timer = None
        if self.transport.is_closing() or self._phase == _BETWEEN:
            return None
        if self._phase == _BODY and self.flow.read_paused:  # the server, not the client, stopped reading the body
            return self._expect_within(self.bounds.body_timeout_s)
        if self._deadline - self.loop.time() > _CLOCK_SLACK_S:  # bytes came since the timer was set
            self._timer = self.loop.call_at(self._deadline, self._on_deadline)
            return None
        if self._phase == _HEADERS and self._header_bytes:
            return self._refuse(RequestTimeout(f"the request's line and headers did not arrive within {self.bounds.header_timeout_s:g} s "
                                               f"({key_of(HttpBounds, 'header_timeout_s')})"))
        self.transport.close()  # nothing was sent (an idle connection), or a body stopped: there is no one to answer
        return None

    def _refuse(self, error: RequestError) -> None:
        """The refusal in tsvk's error shape, then the connection closed (the rest of the request is never read)."""
        self._stop_timer()
        if self.transport.is_closing():
            return
        self.transport.write(_response(error))
        self.transport.close()


def _request_parser(protocol: HttpToolsProtocol) -> httptools.HttpRequestParser:
    """A parser as uvicorn makes one for a connection (uvicorn/protocols/http/httptools_impl.py, __init__)."""
    parser = httptools.HttpRequestParser(protocol)
    with suppress(AttributeError):  # httptools < 0.6.3 has no leniencies
        parser.set_dangerous_leniencies(lenient_data_after_close=True)
    return parser


def _too_large(what: str, field: str) -> HeadersTooLarge:
    return HeadersTooLarge(f"the request's line and headers are {what}, the limit ({key_of(HttpBounds, field)})")


def _response(error: RequestError) -> bytes:
    body = json.dumps(error.body()).encode()
    head = b"content-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n" % len(body)
    return STATUS_LINE[error.status] + head + body


def _too_many_connections(limit: int):
    """The ASGI app that answers a request on a connection over the bound: 503, retry on a new connection later."""
    error = TooManyConnections(f"more than {limit} connections are open to this server ({key_of(HttpBounds, 'max_connections')}); "
                               "retry on a new connection")
    body = json.dumps(error.body()).encode()

    async def app(scope, receive, send) -> None:
        await send({"type": "http.response.start", "status": error.status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"retry-after", b"1"), (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})

    return app


def bound_uvicorn(config, bounds: HttpBounds) -> HttpBounds:
    """A uvicorn Config set to serve within `bounds`; returns the bounds in effect (the connections fitted to the
    process's open-files limit, raised to its hard limit first)."""
    fitted = fit_open_files(bounds)
    config.http = type("BoundedHttpTools", (BoundedHttpToolsProtocol,), {"bounds": fitted})
    config.timeout_keep_alive = fitted.keep_alive_s
    config.backlog = fitted.backlog
    config.limit_concurrency = None  # the protocol applies the same rule, answered in tsvk's shape
    config.ws = "none"  # no path is a WebSocket; an upgraded connection would leave these bounds
    return fitted


def fit_open_files(bounds: HttpBounds) -> HttpBounds:
    """`bounds` with at most as many connections as open files allow (the soft limit raised to the hard one first),
    less a reserve for everything else the process opens: past it accept() fails and new clients wait in the backlog."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    room = soft - min(defaults.HTTP_OPEN_FILES_RESERVE, soft // 4) if soft != resource.RLIM_INFINITY else bounds.max_connections
    if room >= bounds.max_connections:
        return bounds
    log.warning("%s lowered from %d to %d: the open-files limit is %d (ulimit -n)", key_of(HttpBounds, "max_connections"),
                bounds.max_connections, max(1, room), soft)
    return replace(bounds, max_connections=max(1, room))
