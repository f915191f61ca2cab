"""Modules of an archive's own `tsvk` package, whichever layout it was packed with.

A TorchServe worker, a kserve engine worker and a batch worker all import the copy of `tsvk` the archive carries
(first on sys.path), not the checkout's; archives packed before tsvk had rooms keep the service in tsvk/service.py
and the heap in tsvk/heap.py. Standard library only: a worker imports this before the archive's package.
"""

from __future__ import annotations

import importlib
from types import ModuleType

SERVICE_MODULES = ("tsvk.worker", "tsvk.service")  # VisionService (and ServiceSpec where it has one), newest first
HEAP_MODULES = ("tsvk.worker", "tsvk.heap")


def first_module(names: tuple[str, ...]) -> ModuleType:
    """The first of `names` the archive's package has (ModuleNotFoundError for the last when none)."""
    for name in names[:-1]:
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError:
            continue
    return importlib.import_module(names[-1])
