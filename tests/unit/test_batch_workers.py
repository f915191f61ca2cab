"""Who scores a batch run: the serving plan's workers and batch, a worker on its GPU (the GPU path, checked
on this CPU machine at the seam with two fake GPUs, tests/support/fake_cuda.py), the Ray actors' share of a
cluster, and the progress line and summary a run shows."""

from __future__ import annotations

import io
import json
import sys

import pytest
import torch

from tests.support.handler_fakes import encode, photo, write_tiny_eager_archive
from tests.support.torchserve import archive_tiny
from tests.unit.test_worker_gpu import _fake_loading
from tsvk_tools.batch.plan import plan_batch
from tsvk_tools.batch.ray_actor import not_done
from tsvk_tools.batch.ray_engine import plan_actors
from tsvk_tools.batch.run_summary import Progress
from tsvk_tools.batch.scorer import ArchiveScorer, WorkerSpec, row


@pytest.fixture(autouse=True)
def worker_globals(monkeypatch):
    """A scorer run in the test process sets torch's threads and sys.path, as a worker does: put them back."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def test_the_plan_is_servings_single_threaded_workers_per_vcpu_or_one_per_gpu(tmp_path):
    archive = archive_tiny(tmp_path) / "tiny.mar"
    cpu = plan_batch(archive, vcpus=4)
    assert (cpu.workers, cpu.threads, cpu.batch, cpu.gpus) == (4, 1, 4, 0)
    assert [cpu.gpu_of(n) for n in range(cpu.workers)] == [None] * 4
    gpu = plan_batch(archive, vcpus=8, gpus=2)
    assert (gpu.workers, gpu.threads) == (2, 4)
    assert [gpu.gpu_of(n) for n in range(gpu.workers)] == [0, 1]
    assert plan_batch(archive, vcpus=4, workers=1, batch=2).batch == 2


def test_a_batch_worker_given_gpu_1_loads_and_runs_there_as_a_served_worker_does(tmp_path, monkeypatch, cuda):
    write_tiny_eager_archive(tmp_path, preprocess={"resize": 40, "crop": 32, "backend": "cpu"})
    _fake_loading(monkeypatch, cuda, tmp_path)
    scorer = ArchiveScorer(WorkerSpec(str(tmp_path), "tiny", 4, 2**20, gpu_id=1))
    assert scorer.service.model.device == torch.device("cuda", 1)
    assert cuda.events[:2] == [("set_device", 1), ("load_model", 1)]


def test_a_cpu_worker_scores_inputs_into_rows_in_input_order(tmp_path):
    write_tiny_eager_archive(tmp_path, preprocess={"resize": 40, "crop": 32, "backend": "cpu"})
    (tmp_path / "cat.jpg").write_bytes(encode(photo("chelsea")))
    scorer = ArchiveScorer(WorkerSpec(str(tmp_path), "tiny", 4, 2**20))
    assert torch.get_num_threads() == 1  # the plan's single thread, read as a served worker reads it
    rows = [json.loads(r) for r in scorer.score([7, 3], [str(tmp_path / "cat.jpg"), str(tmp_path / "none.jpg")])]
    assert [(r["id"], r["status"], r["code"]) for r in rows] == [(7, 200, None), (3, 400, "unreadable_input")]
    assert rows[0]["answer"] and all(label.startswith("class_") and 0 < p < 1 for label, p in rows[0]["answer"].items())


def test_ray_actors_take_one_gpu_each_or_the_plans_threads_of_cpu():
    assert plan_actors({"CPU": 16.0, "GPU": 2.0}, threads=8) == plan_actors({"GPU": 2}, threads=1)
    gpu = plan_actors({"CPU": 16.0, "GPU": 2.0}, threads=8)
    assert (gpu.actors, gpu.num_gpus, gpu.gpu_id) == (2, 1, 0)
    cpu = plan_actors({"CPU": 6.0}, threads=2)
    assert (cpu.actors, cpu.num_cpus, cpu.num_gpus, cpu.gpu_id) == (3, 2, 0, None)


def test_the_ray_filter_keeps_only_ids_whose_rows_are_not_written():
    import numpy as np

    bits = np.array([0b00000101, 0b10000000], dtype=np.uint8)  # ids 0, 2 and 15 done
    assert not_done({"id": np.arange(16)}, bits)["id"].tolist() == [1, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14]


def test_progress_shows_rate_and_eta_and_the_summary_counts_failures_by_code():
    stream = io.StringIO()
    progress = Progress(total=10, already=4, stream=stream)
    progress.logging = True
    progress.add([row(4, "/a.jpg", 200, {"cat": 1.0}), row(5, '/b", "status": 200.jpg', 400, {"error": "bad_image"}),
                  row(6, "/c.jpg", 413, {"error": "image_too_large"})])
    progress.show(final=True)
    line = stream.getvalue().splitlines()[-1]
    assert "7/10 (70.0%)" in line and "img/s" in line and "ETA" in line and "failed 2" in line
    summary = progress.summary()
    assert "done: 7 of 10 inputs (3 in this run, 4 before it)" in summary
    assert "answered: 1; failed: 2 (bad_image 1, image_too_large 1)" in summary and "images/s" in summary
