"""The CPU worker rule of `tsvk config`: single-threaded workers, one per vCPU of a model's share, as many as
memory holds; an archive built with --workers, --workers itself and GPUs still decide first."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest
import yaml

from tsvk_tools import defaults
from tsvk.common.settings import ArtifactSettings, HandlerSettings, ServingDefaults
from tsvk_tools.config.serving_config import ServingRequest, plan_serving
from tsvk_tools.config.worker_plan import cpu_workers, worker_estimate_mb

MIB = 2**20


def store(tmp_path, **models) -> "Path":
    """Archives of the given size in MiB; a (size, workers) pair is an archive built with --workers."""
    for name, spec in models.items():
        size_mb, workers = spec if isinstance(spec, tuple) else (spec, None)
        settings = HandlerSettings(model_name=name, artifact=ArtifactSettings(file="model.pt2", format="aoti", max_batch=8),
                                   serving=ServingDefaults(workers=workers))
        with zipfile.ZipFile(tmp_path / f"{name}.mar", "w", compression=zipfile.ZIP_STORED) as archive:
            archive.writestr("model-config.yaml", yaml.safe_dump({"tsvk": settings.to_dict()}))
            archive.writestr("model.pt2", b"\0" * (size_mb * MIB))
    return tmp_path


def _plan(tmp_path, memory_mb=None, vcpus=4, **models):
    plan = plan_serving(ServingRequest(vcpus=vcpus, gpus=0, memory_mb=memory_mb, model_store=store(tmp_path, **models)))
    return {m.name: (m.workers, m.intra_op_threads) for m in plan.models}


def test_with_memory_to_spare_every_vcpu_gets_a_single_threaded_worker(tmp_path):
    assert _plan(tmp_path, memory_mb=100_000, m=1) == {"m": (4, 1)}


def test_short_memory_gives_fewer_workers_with_more_threads(tmp_path):
    one = worker_estimate_mb(store(tmp_path, m=1) / "m.mar")
    budget = int(defaults.FRONTEND_MB + 2 * one) + 1  # room for two workers, not four
    assert _plan(tmp_path, memory_mb=budget, m=1) == {"m": (2, 2)}
    assert _plan(tmp_path, memory_mb=256, m=1) == {"m": (1, 4)}  # never fewer than one


def test_an_archive_built_with_workers_keeps_them(tmp_path):
    assert _plan(tmp_path, memory_mb=100_000, m=(1, 1)) == {"m": (1, 4)}


def test_asked_for_workers_win(tmp_path):
    plan = plan_serving(ServingRequest(vcpus=4, gpus=0, workers=2, model_store=store(tmp_path, m=1)))
    assert (plan.models[0].workers, plan.models[0].intra_op_threads) == (2, 2)


def test_the_estimate_grows_with_the_archive(tmp_path):
    small, large = worker_estimate_mb(store(tmp_path, s=1) / "s.mar"), worker_estimate_mb(store(tmp_path, l=50) / "l.mar")
    assert large - small == pytest.approx(defaults.WORKER_ARCHIVE_FACTOR * 49, rel=0.01)


def test_the_model_taking_the_most_memory_gives_up_workers_first():
    workers = cpu_workers({"big": 2, "small": 2}, {"big": 1500.0, "small": 700.0}, defaults.FRONTEND_MB + 1500 + 2 * 700 + 1)
    assert workers == {"big": 1, "small": 2}
