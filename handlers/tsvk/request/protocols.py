"""Each request read once, and each answer written, in the protocol the request spoke.

A JSON body with `inputs` is an Open Inference Protocol request (oip.py): one image, as base64 text in a
BYTES tensor, or one preprocessed FP32 image; anything else is TorchServe's /predictions (predictions.py).
`read_request` says which protocol a request spoke, so its answer (or its error) is written in the same one.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping

from ..common.errors import BadRequest, RequestError
from ..common.task_kinds import task_kind
from . import oip, predictions
from .base import OIP, Request, unreadable
from .json_body import limits_for_pixels


def read_request(request: Any, crop: int, parameters: tuple[str, ...] = (), task: str = "classify") -> Request:
    """One request, read; never raises: a request that cannot be read, whatever the reason, carries its
    error, so it fails alone and the rest of its batch is answered.

    `parameters` are the task's answer options (form fields) that may arrive beside the image. The Open
    Inference Protocol's tensors are stated for classifiers only (top-k probabilities and labels), so it is
    refused for the other tasks."""
    try:
        request = request if isinstance(request, Mapping) else {"body": request}  # a bare body, as tools pass one
        request = predictions.parsed_json_body(request, limits_for_pixels(oip.element_count((3, crop, crop))))
        document = oip.document_of(predictions.pick_field(request))
        if document is None:
            return Request(image=predictions.image_bytes(request, parameters), fields=request)
        read = oip.read_oip(document, crop, request)
        if read.error is None and not task_kind(task).top_k:
            refused = BadRequest(f"this model's task is {task}, and the Open Inference Protocol is served for "
                                 "classifiers only: send the image to /predictions")
            return replace(read, image=None, pixels=None, error=refused)
        return read
    except RequestError as err:
        return Request(error=err.detached())
    except Exception as err:  # noqa: BLE001 - whatever a request holds (RecursionError, TypeError...), it fails alone
        return Request(error=unreadable(err))


def write_answer(request: Request | None, answer: Any, model_name: str) -> Any:
    """The answer in the protocol its request spoke (/predictions where the request is not known)."""
    if request is None or request.protocol != OIP:
        return predictions.write_answer(answer)
    return oip.write_answer(request, answer, model_name)


def write_error(request: Request | None, error: RequestError) -> dict[str, Any]:
    if request is None or request.protocol != OIP:
        return predictions.write_error(error)
    return oip.write_error(error)
