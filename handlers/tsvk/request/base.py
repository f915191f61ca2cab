"""One request as the service reads it, whatever protocol it spoke: the names of the protocols, and
the `Request` each protocol's reader returns."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from ..common.errors import BadRequest, RequestError

log = logging.getLogger(__name__)

PREDICTIONS = "predictions"  # TorchServe's /predictions shapes: an image in, {label: probability} out
OIP = "oip"  # the Open Inference Protocol: tensors in, tensors out
PROTOCOLS = (PREDICTIONS, OIP)


@dataclass(frozen=True)
class Request:
    """What one request holds once read: an encoded image, preprocessed pixels (3, H, W), or why it cannot be
    read; the protocol its answer is written in; and its fields (its JSON body parsed), where the task reads
    its answer options, so nothing reads the request a second time."""

    protocol: str = PREDICTIONS
    image: bytes | None = None
    pixels: np.ndarray | None = None
    error: RequestError | None = None
    request_id: str | None = None
    fields: Mapping[str, Any] | None = None


def unreadable(err: Exception) -> BadRequest:
    """A 400 for a request that made reading it fail in a way no check foresaw. The exception goes to the worker's log,
    not to the client: its text can name the server's files and libraries."""
    log.warning("cannot read a request: %s: %s", type(err).__name__, err, exc_info=err)
    return BadRequest("cannot read the request: it failed in a way no check foresaw (the worker's log has the cause)")
