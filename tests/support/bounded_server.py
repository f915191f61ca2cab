"""A uvicorn server of the test's own process serving an ASGI app with tsvk's bounded protocol, in a thread."""

from __future__ import annotations

import asyncio
import threading
import time
from contextlib import contextmanager
from typing import Iterator

import uvicorn

from tsvk_tools.config.ports import free_ports
from tsvk_tools.oip.bounded_http import bound_uvicorn
from tsvk_tools.oip.connection_bounds import HttpBounds


@contextmanager
def bounded_server(app, bounds: HttpBounds, protocol=None) -> Iterator[int]:
    """The port `app` is served on within `bounds` until the block ends; `protocol`, given the bounded protocol class,
    returns the one to serve with (a subclass that records what it is handed, say)."""
    (port,) = free_ports(1)
    config = uvicorn.Config(app, host="127.0.0.1", port=port, lifespan="off", log_level="warning")
    bound_uvicorn(config, bounds)
    if protocol is not None:
        config.http = protocol(config.http)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=asyncio.run, args=(server.serve(),), daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    try:
        yield port
    finally:
        server.should_exit = True
        thread.join(10)
