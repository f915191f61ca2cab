"""The bounds on slow and idle clients: read from config.properties (a value that is not a positive number names its
key), turned into grpcio's server arguments and a uvicorn config, fitted to the open-files limit, and documented."""

from __future__ import annotations

import dataclasses
import resource
from pathlib import Path

import pytest
import uvicorn

from tsvk_tools import defaults
from tsvk_tools.oip import bounded_http
from tsvk_tools.oip.bounded_http import BoundedHttpToolsProtocol, bound_uvicorn, fit_open_files
from tsvk_tools.oip.config import read_front_config
from tsvk_tools.oip.connection_bounds import GrpcBounds, HttpBounds, key_of

DOCS = Path(__file__).resolve().parents[2] / "docs" / "engines.md"


def _keys(kind) -> list[str]:
    return [key_of(kind, field.name) for field in dataclasses.fields(kind)]


def test_without_keys_every_bound_is_the_default():
    assert HttpBounds.from_properties({}) == HttpBounds()
    assert HttpBounds().header_timeout_s == defaults.HTTP_HEADER_TIMEOUT_S and HttpBounds().max_connections == defaults.HTTP_MAX_CONNECTIONS
    assert GrpcBounds.from_properties({}).max_concurrent_rpcs == defaults.GRPC_MAX_CONCURRENT_RPCS


def test_each_key_sets_its_bound():
    bounds = HttpBounds.from_properties({"tsvk.http.header_timeout_s": "2.5", "tsvk.http.max_connections": "300", "other": "x"})
    assert (bounds.header_timeout_s, bounds.max_connections, bounds.keep_alive_s) == (2.5, 300, defaults.HTTP_KEEP_ALIVE_S)
    assert GrpcBounds.from_properties({"tsvk.grpc.handshake_timeout_s": "3"}).handshake_timeout_s == 3.0


@pytest.mark.parametrize("value", ["0", "-1", "ten", "nan", "inf", ""])
def test_a_value_that_is_not_a_positive_number_names_its_key(value):
    with pytest.raises(ValueError, match=f"tsvk.http.keep_alive_s must be a positive number, got {value!r}"):
        HttpBounds.from_properties({"tsvk.http.keep_alive_s": value})


def test_a_count_must_be_whole_and_every_bad_key_is_named_at_once():
    with pytest.raises(ValueError) as err:
        HttpBounds.from_properties({"tsvk.http.max_headers": "1.5", "tsvk.http.backlog": "-3"})
    assert "tsvk.http.max_headers must be a positive whole number, got '1.5'" in str(err.value)
    assert "tsvk.http.backlog must be a positive whole number, got '-3'" in str(err.value)


def test_the_grpc_bounds_become_grpc_core_s_arguments_in_milliseconds():
    options = dict(GrpcBounds(handshake_timeout_s=2.5, max_connection_idle_s=65, max_metadata_bytes=4096).server_options())
    assert options["grpc.server_handshake_timeout_ms"] == 2500 and options["grpc.max_connection_idle_ms"] == 65_000
    assert options["grpc.max_metadata_size"] == options["grpc.absolute_max_metadata_size"] == 4096
    assert {"grpc.max_connection_age_ms", "grpc.max_connection_age_grace_ms", "grpc.keepalive_time_ms", "grpc.keepalive_timeout_ms",
            "grpc.http2.max_ping_strikes"} <= set(options)


def test_a_uvicorn_config_is_set_to_serve_within_the_bounds():
    config = uvicorn.Config(app=lambda *_: None, limit_concurrency=5)
    bounds = HttpBounds(keep_alive_s=7.0, backlog=99, max_connections=123)
    assert bound_uvicorn(config, bounds) == bounds
    assert issubclass(config.http, BoundedHttpToolsProtocol) and config.http.bounds == bounds
    assert (config.timeout_keep_alive, config.backlog, config.limit_concurrency, config.ws) == (7.0, 99, None, "none")


def test_the_connections_are_fitted_to_the_open_files_limit(monkeypatch):
    monkeypatch.setattr(bounded_http.resource, "getrlimit", lambda _: (2048, 2048))
    monkeypatch.setattr(bounded_http.resource, "setrlimit", lambda *_: pytest.fail("the soft limit is the hard one already"))
    assert fit_open_files(HttpBounds(max_connections=10_000)).max_connections == 2048 - 512  # a quarter kept for the rest
    assert fit_open_files(HttpBounds(max_connections=100)).max_connections == 100


def test_the_soft_open_files_limit_is_raised_to_the_hard_one(monkeypatch):
    raised = []
    monkeypatch.setattr(bounded_http.resource, "getrlimit", lambda _: (1024, 65536))
    monkeypatch.setattr(bounded_http.resource, "setrlimit", lambda kind, limits: raised.append((kind, limits)))
    assert fit_open_files(HttpBounds(max_connections=10_000)).max_connections == 10_000
    assert raised == [(resource.RLIMIT_NOFILE, (65536, 65536))]


def test_the_front_reads_the_bounds_from_its_config(tmp_path):
    config = tmp_path / "config.properties"
    config.write_text("tsvk.oip.rest_port=8000\nmodels={}\ntsvk.http.max_headers=12\ntsvk.grpc.max_concurrent_rpcs=7\n")
    front = read_front_config(config)
    assert (front.http_bounds.max_headers, front.grpc_bounds.max_concurrent_rpcs) == (12, 7)


@pytest.mark.parametrize("key", _keys(HttpBounds) + _keys(GrpcBounds))
def test_every_bound_s_key_is_documented(key):
    assert f"`{key}`" in DOCS.read_text(), f"docs/engines.md does not name {key}"
