"""The service a worker runs (read, decode, task, model, answer) and what a worker process needs around it:
threads, deadlines, stopping, metrics, heap trimming, start counting. `__all__` is what tools/ may import.

The service is imported on first use of its names, not with the package: it imports torch and torchvision
(seconds of CPU, hundreds of MiB), and the processes that read only a deadline header, a refusal or a thread
plan (the kserve engine's server, the OIP front) must not pay for them."""

from ..common.lazy import lazy_attributes
from .deadline import ARRIVAL_HEADER, DEADLINE_KEY_PREFIX, parse_arrival
from .heap import freeze_startup_objects, reuse_freed_heap
from .stopping import STOP_MARKER_ENV, refusal
from .threads import THREADS_KEY_PREFIX, threads_from_config

__getattr__ = lazy_attributes(__name__, {"ServiceSpec": ".service", "VisionService": ".service"})

__all__ = ["ARRIVAL_HEADER", "DEADLINE_KEY_PREFIX", "STOP_MARKER_ENV", "THREADS_KEY_PREFIX", "ServiceSpec", "VisionService",
           "freeze_startup_objects", "parse_arrival", "refusal", "reuse_freed_heap", "threads_from_config"]
