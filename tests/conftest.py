"""Shared fixtures: test-made weights and archives built once per session, marks by folder."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config, items):
    """Mark tests by folder, so `-m "not integration"` and friends work without per-file marks."""
    for item in items:
        parts = Path(str(item.fspath)).relative_to(ROOT).parts
        if parts and parts[0] in ("integration", "helm", "gpu"):
            item.add_marker(getattr(pytest.mark, parts[0]))


@pytest.fixture(scope="session")
def resnet18_weights(tmp_path_factory) -> Path:
    """A seeded random resnet18 state_dict with a wide classifier, so top-5 classes are well separated."""
    import torch
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.resnet18()
    torch.nn.init.normal_(model.fc.weight, std=0.5)
    path = tmp_path_factory.mktemp("weights") / "resnet18_seeded.pth"
    torch.save(model.state_dict(), path)
    return path


@pytest.fixture(scope="session")
def resnet18_store(tmp_path_factory, resnet18_weights) -> Path:
    """A model store holding one AOTInductor resnet18 fp32 archive (max batch 4), built once per session: fp32 whatever
    the CPU, since the tests serving it compare its answers with the eager model's."""
    from tsvk_tools.archive.pack import build_archive
    from tsvk_tools.archive.build import BuildRequest
    from tsvk.common.settings import ServingDefaults

    store = tmp_path_factory.mktemp("store")
    request = BuildRequest(model="resnet18", weights=str(resnet18_weights), precision="fp32", max_batch=4,
                           serving=ServingDefaults(batch_size=4))
    build_archive(request, store)
    return store
