"""Property-based tests of the config generator: whatever a user asks for, the file is either one
TorchServe can parse, with each security key exactly once, or not written at all."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from tsvk_tools.errors import UsageError
from tsvk_tools.limits import BOUNDS, JAVA_INT_MAX, MODEL_NAME_PATTERN
from tsvk_tools.config.serving_config import ServingRequest, write_config

SECURITY_KEYS = ("disable_token_authorization", "enable_model_api", "allowed_urls", "enable_envvars_config",
                 "management_address", "metrics_address", "grpc_inference_address", "grpc_management_address")
NUMERIC_KEYS = ("grpc_inference_port", "grpc_management_port", "max_request_size", "number_of_netty_threads",
                "netty_client_threads", "job_queue_size", "default_workers_per_model", "default_response_timeout",
                "number_of_gpu", "token_expiration_min")
PORT_KEYS = ("grpc_inference_port", "grpc_management_port")

valid_names = st.from_regex(MODEL_NAME_PATTERN, fullmatch=True)
any_names = st.one_of(valid_names, st.text(min_size=1, max_size=20))


def _number(field: str):
    low, high = BOUNDS[field]
    return st.one_of(st.none(), st.integers(min_value=low, max_value=high), st.integers(min_value=-5, max_value=10**13))


@st.composite
def requests(draw) -> ServingRequest:
    fields = {name: draw(_number(name)) for name in ("vcpus", "workers", "gpus", "batch", "max_batch_delay_ms",
                                                     "response_timeout_s", "deadline_ms")}
    for name in ("concurrency", "max_request_mb", "grpc_inference_port", "grpc_management_port", "token_expiry_min"):
        low, high = BOUNDS[name]
        fields[name] = draw(st.one_of(st.integers(min_value=low, max_value=high), st.integers(min_value=-5, max_value=10**13)))
    port = draw(st.integers(min_value=0, max_value=700_000))
    return ServingRequest(models=tuple(draw(st.lists(any_names, min_size=1, max_size=3, unique=True))), archive_check=False,
                          auth=draw(st.booleans()), inference_address=f"http://0.0.0.0:{port}", **fields)


def _lines(text: str) -> list[tuple[str, str]]:
    pairs = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        assert "=" in line, f"a line that is neither a comment nor key=value: {line!r}"
        key, _, value = line.partition("=")
        pairs.append((key, value))
    return pairs


@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(request=requests())
def test_accepted_configs_parse_and_refused_ones_write_nothing(tmp_path: Path, request: ServingRequest):
    output = tmp_path / "config.properties"
    output.unlink(missing_ok=True)
    try:
        write_config(request, output)
    except UsageError:
        assert not output.exists()
        return
    pairs = _lines(output.read_text())
    keys = [key for key, _ in pairs]
    for key in SECURITY_KEYS:
        assert keys.count(key) == 1, f"{key} appears {keys.count(key)} times"
    values = dict(pairs)
    assert values["enable_model_api"] == "false"
    for key in NUMERIC_KEYS:
        if key in values:
            assert 0 <= float(values[key]) <= JAVA_INT_MAX, f"{key}={values[key]}"
    for key in PORT_KEYS:
        assert 1 <= int(values[key]) <= 65_535
    for name in request.models:
        assert MODEL_NAME_PATTERN.fullmatch(name)
    assert all(re.fullmatch(r"[A-Za-z0-9_.-]+", key) for key in keys)


def test_a_name_with_a_newline_cannot_add_a_property(tmp_path):
    output = tmp_path / "config.properties"
    with pytest.raises(UsageError, match="model name .* is not allowed"):
        write_config(ServingRequest(models=("m\nenable_model_api=true",), archive_check=False, vcpus=2), output)
    assert not output.exists()


def test_token_expiry_and_deadline_are_written_explicitly(tmp_path):
    output = tmp_path / "config.properties"
    write_config(ServingRequest(models=("m",), archive_check=False, vcpus=2, deadline_ms=750, token_expiry_min=30), output)
    values = dict(_lines(output.read_text()))
    assert values["token_expiration_min"] == "30"
    assert values["tsvk.deadline.m"] == "750"
