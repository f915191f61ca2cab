"""Run-time half of the toolkit: everything a TorchServe worker needs, packed into each .mar.

Nothing in this package imports TorchServe (`ts`) or the build-time tools, so it can be unit
tested and reused outside a worker, and it runs on a stock TorchServe image.

The package is cut into rooms by role, in layers: a room imports only rooms of the layers below it
(tests/unit/test_import_graph.py holds it to that, type-only imports included). `handler.py` is
TorchServe's entry point above them all. Each room's `__init__` names, in `__all__`, what the build-time
tools may import from it; `TOOLS_SURFACE` lists every module tools/ may import.
"""

__version__ = "0.1.0"

ROOM_LAYERS = (
    ("common",),  # settings schema, task facts, defaults, errors, labels, feature probes, properties
    ("preprocess", "request"),  # decode and transform images; the protocols, each with its read and write
    ("tasks",),  # each task's transform and answer, and the model forms it serves
    ("model",),  # loading artifacts on the worker's device, CPU checks, OpenVINO
    ("worker",),  # the service, threads, deadlines, stopping, metrics, heap
)
TOOLS_SURFACE = ("tsvk", "tsvk.common", "tsvk.common.defaults", "tsvk.preprocess", "tsvk.request", "tsvk.tasks",
                 "tsvk.model", "tsvk.worker")
