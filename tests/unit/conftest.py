"""Fixtures the unit tests share."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from tsvk.common import features

from tests.support.fake_cuda import FakeCuda
from tsvk_tools.images import jpeg_bytes, photo_array


@pytest.fixture
def cuda(monkeypatch):
    """Two fake GPUs (tests/support/fake_cuda.py); probe results taken on them are forgotten after."""
    yield FakeCuda(device_count=2).install(monkeypatch)
    monkeypatch.undo()
    features.reset_cache()


@pytest.fixture
def avx2_only_cpu(monkeypatch):
    """torch's own CPU checks (torch.cpu._is_avx512_supported, ...) answering as an AVX2-only CPU would."""
    for probe in ("_is_avx512_supported", "_is_vnni_supported", "_is_amx_tile_supported"):
        monkeypatch.setattr(torch.cpu, probe, lambda: False)


@pytest.fixture
def photos_dir(tmp_path) -> Path:
    """Ten small real-photo JPEGs: crops of scikit-image's photos at several offsets."""
    directory = tmp_path / "photos"
    directory.mkdir()
    for name in ("chelsea", "coffee", "astronaut"):
        array = photo_array(name)
        for i in range(4 if name == "chelsea" else 3):
            (directory / f"{name}_{i}.jpg").write_bytes(jpeg_bytes(array[20 * i:, 30 * i:], size=(64, 48)))
    return directory
