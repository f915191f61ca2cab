"""The service a worker runs (read, decode, task, model, answer) and what a worker process needs around it:
threads, deadlines, stopping, metrics, heap trimming, start counting. `__all__` is what tools/ may import."""

from .deadline import ARRIVAL_HEADER, DEADLINE_KEY_PREFIX, parse_arrival
from .heap import freeze_startup_objects
from .service import ServiceSpec, VisionService
from .stopping import STOP_MARKER_ENV, refusal
from .threads import THREADS_KEY_PREFIX, threads_from_config

__all__ = ["ARRIVAL_HEADER", "DEADLINE_KEY_PREFIX", "STOP_MARKER_ENV", "THREADS_KEY_PREFIX", "ServiceSpec", "VisionService",
           "freeze_startup_objects", "parse_arrival", "refusal", "threads_from_config"]
