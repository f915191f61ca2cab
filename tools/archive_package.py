"""Modules of an archive's own `tsvk` package, whichever layout it was packed with.

A TorchServe worker, a kserve engine worker and a batch worker all import the copy of `tsvk` the archive carries
(first on sys.path), not the checkout's; archives packed before tsvk had rooms keep the service in tsvk/service.py
and the heap in tsvk/heap.py. Standard library only: a worker imports this before the archive's package.

Where tsvk is installed in editable mode (`make setup`), setuptools' finder maps every `tsvk.<name>` to the checkout,
whichever copy of `tsvk` was imported: asked for `tsvk.worker`, an archive packed before the rooms would get the
checkout's. A module found outside the folder of the `tsvk` that was imported is therefore not the archive's.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

SERVICE_MODULES = ("tsvk.worker", "tsvk.service")  # VisionService (and ServiceSpec where it has one), newest first
HEAP_MODULES = ("tsvk.worker", "tsvk.heap")


def first_module(names: tuple[str, ...]) -> ModuleType:
    """The first of `names` the archive's package has (ModuleNotFoundError for the last when none)."""
    for name in names[:-1]:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError:
            continue
        if inside_its_package(module):
            return module
        _forget(name)
    return importlib.import_module(names[-1])


def inside_its_package(module: ModuleType) -> bool:
    """Whether `module` was read from the folder of the top-level package imported under its name."""
    top = sys.modules[module.__name__.partition(".")[0]]
    return Path(module.__file__).resolve().is_relative_to(Path(top.__file__).resolve().parent)


def _forget(name: str) -> None:
    """Drop a module found elsewhere, its submodules and its parent's attribute: nothing later may use it."""
    for key in [key for key in sys.modules if key == name or key.startswith(name + ".")]:
        del sys.modules[key]
    parent, _, child = name.rpartition(".")
    if parent in sys.modules and hasattr(sys.modules[parent], child):
        delattr(sys.modules[parent], child)
