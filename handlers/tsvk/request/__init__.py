"""The protocols a request may speak (TorchServe's /predictions, the Open Inference Protocol), each with
its read and its write, and the bounded JSON parsing they share. `__all__` is what tools/ may import."""

from . import oip
from .base import OIP, PREDICTIONS, Request
from .json_body import JsonLimits, check_json, limits_for_pixels
from .predictions import image_bytes
from .protocols import read_request, write_answer, write_error

__all__ = ["OIP", "PREDICTIONS", "JsonLimits", "Request", "check_json", "image_bytes", "limits_for_pixels", "oip",
           "read_request", "write_answer", "write_error"]
