"""Shared fixtures: test-made weights and archives built once per session, marks by folder."""

from __future__ import annotations

import faulthandler
import os
from pathlib import Path

import pytest

# gRPC's fork handlers, on by default in grpcio, run at every fork() of this process (its gRPC threads start when a
# test module imports grpc) and abort it now and then when a gRPC thread is busy (grpc/grpc#31885). The tests fork only
# to exec, which is what disabling them is documented for; set before anything imports grpc.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")

ROOT = Path(__file__).resolve().parent
# Where a CI run keeps what it needs to say should the test process itself die (a native abort or crash ends it before
# pytest can report): the test running at the time, and every thread's stack. .ci/run prints both when `make test` fails.
CRASH_RECORD = ROOT.parent / "build" / "test-crash"
RUNNING_TEST = CRASH_RECORD / "running-test"
STACKS = CRASH_RECORD / "stacks.log"
_STACKS_FILE = pytest.StashKey()


def _in_ci() -> bool:
    return os.environ.get("CI") == "true"


@pytest.hookimpl(trylast=True)  # after pytest's own faulthandler plugin, which would take the handler back
def pytest_configure(config):
    """In CI, a fatal signal's stacks go to STACKS (pytest's own handler would print them where the log's tail cuts them)."""
    if _in_ci():
        CRASH_RECORD.mkdir(parents=True, exist_ok=True)
        config.stash[_STACKS_FILE] = open(STACKS, "w")  # noqa: SIM115 - open for the whole session: faulthandler writes on a crash
        faulthandler.enable(file=config.stash[_STACKS_FILE], all_threads=True)


def pytest_unconfigure(config):
    stacks = config.stash.get(_STACKS_FILE, None)
    if stacks is not None:
        faulthandler.disable()
        stacks.close()


def pytest_runtest_logstart(nodeid, location):
    if _in_ci():
        RUNNING_TEST.write_text(nodeid + "\n")



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
