"""Names a package exports but imports from its modules only when first asked for (PEP 562 `__getattr__`).

Modules that import torch and torchvision cost seconds of CPU and hundreds of MiB. A package keeps its light
names eager and these lazy, so a process that needs only the light ones (an engine's server reading a deadline
header, `tsvk status`) starts without them."""

from __future__ import annotations

import importlib
from typing import Any, Callable


def lazy_attributes(package: str, module_of: dict[str, str]) -> Callable[[str], Any]:
    """A module-level `__getattr__` for `package`: `module_of` maps each lazy name to its relative module."""

    def __getattr__(name: str) -> Any:
        module = module_of.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module, package), name)

    return __getattr__
