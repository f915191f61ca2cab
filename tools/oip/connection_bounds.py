"""How long and how much a client may hold of tsvk's own servers, read once from config.properties.

Slow and idle clients (a connection that never sends a request, headers sent a byte every few seconds, keep-alive
connections left idle) cost a server no CPU but a connection each; bounded here, they cannot crowd out the clients
that send requests. Every bound has a key of its own, `tsvk.http.<field>` for the REST servers (the engine's and the
OIP front's, uvicorn: tools/oip/bounded_http.py) and `tsvk.grpc.<field>` for the gRPC servers (grpcio); its default is
tools/defaults.py's. TorchServe's config has no key for any of them (its Netty frontend bounds only the size of a
request's line and headers), and TorchServe ignores these keys.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from tsvk.common import RequestError

from .. import defaults

HTTP_PREFIX = "tsvk.http."
GRPC_PREFIX = "tsvk.grpc."


@dataclass(frozen=True)
class HttpBounds:
    """The REST servers' bounds on slow and idle clients (each field's meaning: tools/defaults.py)."""

    header_timeout_s: float = defaults.HTTP_HEADER_TIMEOUT_S
    body_timeout_s: float = defaults.HTTP_BODY_TIMEOUT_S
    max_header_bytes: int = defaults.HTTP_MAX_HEADER_BYTES
    max_headers: int = defaults.HTTP_MAX_HEADERS
    keep_alive_s: float = defaults.HTTP_KEEP_ALIVE_S
    max_connections: int = defaults.HTTP_MAX_CONNECTIONS
    backlog: int = defaults.HTTP_BACKLOG

    @classmethod
    def from_properties(cls, properties: dict[str, str]) -> "HttpBounds":
        return _read(cls, HTTP_PREFIX, properties)


@dataclass(frozen=True)
class GrpcBounds:
    """The gRPC servers' bounds (each field's meaning: tools/defaults.py), and the grpcio server arguments they become."""

    max_concurrent_rpcs: int = defaults.GRPC_MAX_CONCURRENT_RPCS
    handshake_timeout_s: float = defaults.GRPC_HANDSHAKE_TIMEOUT_S
    max_connection_idle_s: float = defaults.GRPC_MAX_CONNECTION_IDLE_S
    max_connection_age_s: float = defaults.GRPC_MAX_CONNECTION_AGE_S
    max_connection_age_grace_s: float = defaults.GRPC_MAX_CONNECTION_AGE_GRACE_S
    keepalive_time_s: float = defaults.GRPC_KEEPALIVE_TIME_S
    keepalive_timeout_s: float = defaults.GRPC_KEEPALIVE_TIMEOUT_S
    max_ping_strikes: int = defaults.GRPC_MAX_PING_STRIKES
    max_metadata_bytes: int = defaults.GRPC_MAX_METADATA_BYTES

    @classmethod
    def from_properties(cls, properties: dict[str, str]) -> "GrpcBounds":
        return _read(cls, GRPC_PREFIX, properties)

    def server_options(self) -> list[tuple[str, int]]:
        """grpc core's channel arguments (grpc_types.h) for these bounds; the concurrent calls are aio.server's own
        argument. The metadata's soft and hard limits are the same, so a call over it is always refused (between the
        two, core refuses at random)."""
        return [
            ("grpc.server_handshake_timeout_ms", _ms(self.handshake_timeout_s)),
            ("grpc.max_connection_idle_ms", _ms(self.max_connection_idle_s)),
            ("grpc.max_connection_age_ms", _ms(self.max_connection_age_s)),
            ("grpc.max_connection_age_grace_ms", _ms(self.max_connection_age_grace_s)),
            ("grpc.keepalive_time_ms", _ms(self.keepalive_time_s)),
            ("grpc.keepalive_timeout_ms", _ms(self.keepalive_timeout_s)),
            ("grpc.http2.max_ping_strikes", self.max_ping_strikes),
            ("grpc.max_metadata_size", self.max_metadata_bytes),
            ("grpc.absolute_max_metadata_size", self.max_metadata_bytes),
        ]


class HeadersTooLarge(RequestError):
    """A request line and headers over `max_header_bytes` or `max_headers`: the connection closes unread."""

    status, kind, code = 431, "RequestHeaderFieldsTooLarge", "headers_too_large"


class RequestTimeout(RequestError):
    """A request line and headers that began but did not end within `header_timeout_s`."""

    status, kind, code = 408, "RequestTimeout", "request_timeout"


class TooManyConnections(RequestError):
    """A request on a connection over `max_connections`: TorchServe's name for a 503, tsvk's code."""

    status, kind, code = 503, "ServiceUnavailableException", "too_many_connections"


def key_of(bounds_type: type, field: str) -> str:
    """The config.properties key of one bound (`tsvk.http.header_timeout_s`)."""
    return (HTTP_PREFIX if bounds_type is HttpBounds else GRPC_PREFIX) + field


def _read(cls, prefix: str, properties: dict[str, str]):
    """The bounds the config sets, the defaults for the rest; a value that is not a positive number of the field's
    kind is a ValueError naming its key (the server refuses to start on it)."""
    values, problems = {}, []
    for field in dataclasses.fields(cls):
        text = properties.get(prefix + field.name)
        if text is None:
            continue
        whole = field.type == "int"  # annotations are text here (from __future__ import annotations)
        value = _positive(text.strip(), int if whole else float)
        if value is None:
            problems.append(f"{prefix + field.name} must be a positive {'whole number' if whole else 'number'}, got {text!r}")
        else:
            values[field.name] = value
    if problems:
        raise ValueError("; ".join(problems))
    return cls(**values)


def _positive(text: str, kind: type) -> int | float | None:
    try:
        value = kind(text)
    except ValueError:
        return None
    return value if 0 < value < float("inf") else None  # NaN compares false both ways


def _ms(seconds: float) -> int:
    return int(seconds * 1000)
