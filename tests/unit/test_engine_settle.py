"""A stop of the engine answers a request its client had sent before the stop, even one the server had not read yet.

A real uvicorn (the engine's REST server) on a loopback port: a client connects, the server accepts the connection,
the client sends its request, and the graceful shutdown begins in the same turn of the event loop, before the server
has read a byte of it. uvicorn's own shutdown then closes the connection as idle; with the settle step the engine
adds (tools/engines/kserve/server.py), the request is read and answered first. The gRPC server's stop, begun beside
uvicorn's shutdown, settles too: calls that reached it while its event loop was busy are taken up and answered.
"""

from __future__ import annotations

import asyncio
import socket
import time

import uvicorn

from tsvk_tools.engines.kserve.server import settle_before_shutdown
from tsvk_tools.config.ports import free_ports

REQUEST = b"POST /predictions/tiny HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 5\r\n\r\nhello"


async def _app(scope, receive, send):
    if scope["type"] != "http":
        return
    await receive()
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


async def _started(port: int) -> uvicorn.Server:
    """A uvicorn server listening, as its serve() starts one (uvicorn/server.py, 0.54: _serve up to startup)."""
    config = uvicorn.Config(_app, host="127.0.0.1", port=port, log_config=None, lifespan="off")
    config.load()
    server = uvicorn.Server(config)
    server.lifespan = config.lifespan_class(config)
    await server.startup()
    return server


async def _answer_to_a_request_sent_as_the_stop_begins(settle: bool) -> bytes:
    (port,) = free_ports(1)
    server = await _started(port)
    if settle:
        settle_before_shutdown(server)
    client = socket.create_connection(("127.0.0.1", port))
    client.settimeout(10)
    try:
        while not server.server_state.connections:  # accepted: an open connection with no request read yet
            await asyncio.sleep(0.01)
        client.sendall(REQUEST)  # on the loopback the bytes are in the server's socket now, unread
        await server.shutdown()  # in this same turn of the loop, as a SIGTERM arriving now
        answer = b""
        while chunk := await asyncio.to_thread(_recv, client):
            answer += chunk
        return answer
    finally:
        client.close()


def _recv(client: socket.socket) -> bytes:
    try:
        return client.recv(65536)
    except ConnectionResetError:
        return b""


def test_uvicorn_alone_cuts_a_request_it_had_not_read():
    """The failure the settle step exists for: without it the client gets no answer."""
    assert asyncio.run(_answer_to_a_request_sent_as_the_stop_begins(settle=False)) == b""


def test_the_settle_step_answers_it():
    answer = asyncio.run(_answer_to_a_request_sent_as_the_stop_begins(settle=True))
    assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"ok"), answer


def test_no_new_connection_is_taken_once_the_stop_began():
    """The listeners close before the settle: a client connecting during it is refused, not taken in and cut."""

    async def scenario() -> bool:
        (port,) = free_ports(1)
        server = await _started(port)
        settle_before_shutdown(server, settle_s=1.0)
        stopping = asyncio.create_task(server.shutdown())
        await asyncio.sleep(0.3)  # inside the settle
        try:
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
            refused = False
        except ConnectionRefusedError:
            refused = True
        await stopping
        return refused

    assert asyncio.run(scenario())


GRPC_CALLS = 8
GRPC_METHOD = "/tsvk.test.Echo/Call"


async def _echo_after_a_while(request: bytes, context) -> bytes:
    await asyncio.sleep(0.2)
    return request


async def _grpc_answers_to_calls_sent_as_the_stop_begins(settle_s: float) -> list[str]:
    """A real uvicorn and a real grpc.aio server stopped together (the gRPC stop `beside` uvicorn's shutdown), with
    GRPC_CALLS calls that reached the gRPC server while its event loop was busy: none had been taken up yet."""
    import grpc
    from grpc import aio

    rest_port, grpc_port = free_ports(2)
    server = await _started(rest_port)
    calls = aio.server()
    calls.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
        "tsvk.test.Echo", {"Call": grpc.unary_unary_rpc_method_handler(_echo_after_a_while)}),))
    calls.add_insecure_port(f"127.0.0.1:{grpc_port}")
    await calls.start()
    settle_before_shutdown(server, settle_s=settle_s, beside=(lambda: calls.stop(5),))
    channel = grpc.insecure_channel(f"127.0.0.1:{grpc_port}")
    try:
        grpc.channel_ready_future(channel).result(timeout=10)
        sent = [channel.unary_unary(GRPC_METHOD).future(b"hello", timeout=30) for _ in range(GRPC_CALLS)]
        time.sleep(0.5)  # the event loop busy (blocked): the calls arrive, the server takes none of them up
        await server.shutdown()  # in this same turn of the loop, as a SIGTERM arriving now
        return await asyncio.to_thread(lambda: [f.code().name if f.exception() else f.result().decode() for f in sent])
    finally:
        channel.close()


def test_grpc_stopped_at_once_cancels_the_calls_it_had_not_taken_up():
    """The failure the gRPC settle exists for: calls its clients sent before the stop are cancelled."""
    assert "CANCELLED" in asyncio.run(_grpc_answers_to_calls_sent_as_the_stop_begins(settle_s=0.0))


def test_after_the_settle_grpc_answers_every_call_that_had_reached_it():
    assert asyncio.run(_grpc_answers_to_calls_sent_as_the_stop_begins(settle_s=0.5)) == ["hello"] * GRPC_CALLS
