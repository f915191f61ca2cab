"""Per-request failures: each carries the HTTP status, a machine-readable code and a message.

The handler catches these per request, so one bad image fails alone and the rest of the batch is
answered normally. Every body the handler writes has an `error` field (e.g. `image_too_large`);
TorchServe's own error bodies never do, so a client can tell "your image is too big" (ours) from
"the worker died" or "token authorization failed" (TorchServe's) even where the status is the same.
"""

from __future__ import annotations

from typing import Any

ERROR_SOURCE = "tsvk"


class RequestError(Exception):
    """A request that cannot be answered; `status` goes to TorchServe, `body()` to the client."""

    status = 400
    kind = "InvalidInput"
    code = "bad_request"

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message

    def detached(self) -> "RequestError":
        """This error without its traceback and the exceptions it was raised from, to keep after its except
        block. A kept traceback holds its frames and, through each frame's caller, every local of the batch
        (request bytes, decoded images, tensors) in a reference cycle with the dict that keeps the error:
        only the garbage collector's rare full passes free it, so a served worker's memory grew with each
        failed request until one ran."""
        self.__traceback__ = None
        self.__context__ = None
        self.__cause__ = None
        return self

    def body(self) -> dict[str, Any]:
        """TorchServe's error shape (code, type, message) plus our machine-readable `error` and source."""
        return {"code": self.status, "type": self.kind, "error": self.code, "source": ERROR_SOURCE, "message": self.message}


class BadRequest(RequestError):
    """The request holds no usable payload (no body, JSON without an image, text that is not base64)."""


class BadImage(BadRequest):
    """The payload is not a decodable image: empty, corrupt, truncated, or unknown bytes."""

    code = "bad_image"


class BadTensor(BadRequest):
    """An Open Inference Protocol input with the wrong name, datatype, shape or data (handlers/tsvk/request/oip.py)."""

    code = "bad_tensor"


class JsonTooDeep(BadRequest):
    """A JSON body nested deeper than the limit (request/json_body.py), refused before it is parsed."""

    code = "json_too_deep"


class UnsupportedFormat(RequestError):
    """A recognised image format the handler does not decode (TIFF, HEIC, ...)."""

    status = 415
    kind = "UnsupportedMediaType"
    code = "unsupported_format"


class ImageTooLarge(RequestError):
    """The image header declares more pixels than preprocess.max_pixels allows (decompression bomb)."""

    status = 413
    kind = "ImageTooLarge"
    code = "image_too_large"


class DecodeTooCostly(ImageTooLarge):
    """The JPEG's markers ask for more decoding work (scans, blocks x scans) than the limits allow (scan bomb)."""

    code = "decode_too_costly"


class JsonTooLarge(RequestError):
    """A JSON body larger, or holding more values, than the limits allow (request/json_body.py), refused before it is parsed."""

    status = 413
    kind = "PayloadTooLarge"
    code = "json_too_large"


class RequestTooLarge(RequestError):
    """A request body larger than the server's max_request_size: refused from its Content-Length, or as it arrives
    when it declares none (chunked), after reading no more than the limit and one message."""

    status = 413
    kind = "PayloadTooLarge"
    code = "request_too_large"


class DeadlineExceeded(RequestError):
    """The request waited longer than the model's deadline before its batch reached the worker."""

    status = 503
    kind = "ServiceUnavailable"
    code = "deadline_exceeded"


class ServerStopping(RequestError):
    """The server is stopping (stopping.py): a request that reached the worker after every earlier one was
    answered is refused unread, so that the stop cuts none; it may be sent again."""

    status = 503
    kind = "ServiceUnavailable"
    code = "server_stopping"


class InferenceFailed(RequestError):
    """The model failed on a batch; every request of that batch gets this, and the worker lives on."""

    status = 500
    kind = "InferenceError"
    code = "inference_failed"


ERROR_CLASSES = (BadRequest, BadImage, BadTensor, JsonTooDeep, UnsupportedFormat, ImageTooLarge, DecodeTooCostly, JsonTooLarge,
                 RequestTooLarge, DeadlineExceeded, ServerStopping, InferenceFailed)
PHRASES = {400: "Bad Request", 413: "Payload Too Large", 415: "Unsupported Media Type", 500: "Internal Server Error",
           503: "Service Unavailable"}
