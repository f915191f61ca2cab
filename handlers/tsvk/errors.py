"""Per-request failures: each carries the HTTP status and a message the client can act on.

The handler catches these per request, so one bad image fails alone and the rest of the batch is
answered normally.
"""

from __future__ import annotations

from typing import Any


class RequestError(Exception):
    """A request that cannot be answered; `status` goes to TorchServe, `body()` to the client."""

    status = 400
    kind = "InvalidInput"

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message

    def body(self) -> dict[str, Any]:
        return {"code": self.status, "type": self.kind, "message": self.message}


class BadRequest(RequestError):
    """The request does not hold a usable image (empty, corrupt, truncated, not an image)."""


class ImageTooLarge(RequestError):
    """The image header declares more pixels than preprocess.max_pixels allows (decompression bomb)."""

    status = 413
    kind = "ImageTooLarge"


class InferenceFailed(RequestError):
    """The model failed on a batch; every request of that batch gets this, and the worker lives on."""

    status = 500
    kind = "InferenceError"
