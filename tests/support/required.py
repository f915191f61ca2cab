"""Packages requirements.txt pins, imported by the tests that need them: skipped with the install command on a
developer's machine that lacks one, but a failure in CI (CI=true), where `.ci/run` installed every pin, so a broken
install cannot turn into green skips."""

from __future__ import annotations

import importlib
import os
from types import ModuleType

import pytest


def pinned(module: str, install: str) -> ModuleType:
    try:
        return importlib.import_module(module)
    except ImportError as err:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{module} is pinned in requirements.txt but does not import ({err}): `make setup` installs it", pytrace=False)
        pytest.skip(f"{module} is not installed: {install}", allow_module_level=True)
