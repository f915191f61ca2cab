"""Request deadlines: a request that waited too long before reaching the worker is refused, not computed.

TorchServe 0.12's own `clientTimeoutInMills` drops an expired request without ever answering it (its
BatchAggregator logs "Drop ... due to client timeout" and the client waits until its own timeout), so
tsvk enforces the deadline in the worker instead, where the request can still be answered: 503 with
`error: deadline_exceeded`, at once and without decoding or running the model.

The worker cannot see how long a request sat in TorchServe's queue, so the arrival time travels with
the request in the `X-Request-Start` header, the convention load balancers use (nginx
`t=${msec}`, Heroku `t=<microseconds>`): `t=<unix time>` or a bare number, in seconds,
milliseconds or microseconds (told apart by magnitude). `tsvk config --deadline-ms` writes
`tsvk.deadline.<model>=<ms>` into the config, which the worker reads like its threads. Requests
without the header are never refused for age.

A batch has a deadline too: TorchServe kills a worker whose batch outlives the model's response timeout
(every request of the batch fails and the model loads again), so the worker reads that timeout from the
same config and gives a batch `BATCH_TIME_SHARE` of it (`batch_time_budget_s`); a task that computes a
batch in parts stops before a part that would pass it.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from ..common.defaults import BATCH_TIME_SHARE, RESPONSE_TIMEOUT_S
from ..common.served_config import ServedConfig

log = logging.getLogger(__name__)

DEADLINE_KEY_PREFIX = "tsvk.deadline."
ARRIVAL_HEADER = "X-Request-Start"
_PLAUSIBLE_AGE_S = 86_400.0  # a stamp more than a day off is a broken clock, not a late request


def deadline_from_config(properties: dict[str, str], model_name: str) -> int | None:
    """The model's deadline in ms from the TorchServe config, or None (no deadline)."""
    raw = properties.get(DEADLINE_KEY_PREFIX + model_name)
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        log.warning("ignoring %s%s=%r: expected milliseconds", DEADLINE_KEY_PREFIX, model_name, raw)
        return None
    return value if value > 0 else None


def response_timeout_from_config(properties: dict[str, str], model_name: str) -> int:
    """The model's response timeout in seconds as TorchServe applies it: its entry in `models`, else
    `default_response_timeout`, else TorchServe's own default (the same 120 s as tsvk's)."""
    config = ServedConfig.of(properties)
    model = config.model(model_name)
    if model is not None and model.response_timeout_s > 0:
        return model.response_timeout_s
    fallback = config.integer("default_response_timeout", RESPONSE_TIMEOUT_S)
    return fallback if fallback > 0 else RESPONSE_TIMEOUT_S


def batch_time_budget_s(properties: dict[str, str], model_name: str) -> float:
    """Seconds one batch may take before its remaining parts are refused rather than computed."""
    return BATCH_TIME_SHARE * response_timeout_from_config(properties, model_name)


def parse_arrival(value: Any) -> float | None:
    """Unix time in seconds from an X-Request-Start value, or None when it is missing or unreadable."""
    if isinstance(value, (bytes, bytearray)):
        value = value.decode("ascii", errors="replace")
    if not isinstance(value, str):
        return None
    text = value.strip()
    if text.startswith("t="):
        text = text[2:]
    try:
        stamp = float(text)
    except ValueError:
        return None
    for divisor in (1.0, 1e3, 1e6):  # seconds, ms, us: today's unix time is ~1.8e9 s
        if stamp / divisor < 1e10:
            return stamp / divisor
    return None


def request_age_ms(arrival_s: float | None, now_s: float | None = None) -> float | None:
    """How long ago the request arrived, or None where the stamp is missing or implausible."""
    if arrival_s is None:
        return None
    age = (time.time() if now_s is None else now_s) - arrival_s
    return age * 1e3 if -1.0 <= age <= _PLAUSIBLE_AGE_S else None


def arrival_times(context: Any, count: int) -> list[float | None]:
    """Each request's X-Request-Start from TorchServe's context (headers travel there, not in the data)."""
    getter = getattr(context, "get_request_header", None)
    if getter is None:
        return [None] * count
    arrivals = []
    for index in range(count):
        try:
            value = getter(index, ARRIVAL_HEADER) or getter(index, ARRIVAL_HEADER.lower())
        except Exception:  # noqa: BLE001 - a context without headers means: no deadline information
            value = None
        arrivals.append(parse_arrival(value))
    return arrivals
