"""The service a worker runs (read, decode, task, model, answer) and what a worker process needs around it:
threads, deadlines, stopping, metrics, heap trimming, start counting. `__all__` is what tools/ may import.

The service is imported on first use of its names, not with the package: it imports torch and torchvision
(seconds of CPU, hundreds of MiB), and the processes that read only a deadline header, a refusal or a thread
plan (the kserve engine's server, the OIP front) must not pay for them."""

import importlib

from .deadline import ARRIVAL_HEADER, DEADLINE_KEY_PREFIX, parse_arrival
from .heap import freeze_startup_objects
from .stopping import STOP_MARKER_ENV, refusal
from .threads import THREADS_KEY_PREFIX, threads_from_config

_SERVICE_NAMES = ("ServiceSpec", "VisionService")


def __getattr__(name: str):
    """The service's names, imported when first asked for (PEP 562)."""
    if name in _SERVICE_NAMES:
        return getattr(importlib.import_module(".service", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["ARRIVAL_HEADER", "DEADLINE_KEY_PREFIX", "STOP_MARKER_ENV", "THREADS_KEY_PREFIX", "ServiceSpec", "VisionService",
           "freeze_startup_objects", "parse_arrival", "refusal", "threads_from_config"]
