"""Fixtures the unit tests share."""

from __future__ import annotations

import pytest
from tsvk import features

from tests.support.fake_cuda import FakeCuda


@pytest.fixture
def cuda(monkeypatch):
    """Two fake GPUs (tests/support/fake_cuda.py); probe results taken on them are forgotten after."""
    yield FakeCuda(device_count=2).install(monkeypatch)
    monkeypatch.undo()
    features.reset_cache()
