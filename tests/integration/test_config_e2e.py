"""Generated configs on a real TorchServe: workers, batch and threads are what was generated."""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor

from pathlib import Path

import psutil
import pytest
import requests

from tsvk.worker.metrics import BATCH_SIZE, INFERENCE_MS, PREPROCESS_MS
from tests.support.torchserve import post_image, running_torchserve
from tsvk_tools.config.ports import serving_on_free_ports
from tsvk_tools.images import jpeg_bytes, photo_array
from tsvk_tools import defaults
from tsvk_tools.config.allocator import JEMALLOC_SONAME, find_jemalloc, resolve

PLANS = [
    pytest.param(dict(vcpus=2, workers=2, batch=4), 2, 1, 4, id="2vcpu-2workers-x1thread"),
    pytest.param(dict(vcpus=2, workers=1, batch=4), 1, 2, 4, id="2vcpu-1worker-x2threads-batch4"),
]


def worker_thread_lines(run) -> list[tuple[int, int]]:
    """(intra, inter) torch threads each worker reported after applying the plan."""
    log = (run.run_dir / "logs" / "model_log.log").read_text()
    return [(int(a), int(b)) for a, b in re.findall(r"threads=intra (\d+), inter (\d+)", log)]


def batch_sizes_seen(run) -> list[int]:
    """Batch sizes the handler recorded: the frontend log keeps every sample, /metrics only the last."""
    log = (run.run_dir / "logs" / "ts_log.log").read_text()
    return [int(float(v)) for v in re.findall(rf"\[METRICS\]{BATCH_SIZE}\.\w+:([0-9.]+)\|", log)]


def processes_on_jemalloc(run) -> dict[str, bool]:
    """Frontend and workers of `run`: whether each has jemalloc mapped."""
    processes = [p for p in psutil.Process(run.pid).children(recursive=True)
                 if any(word in " ".join(p.cmdline()) for word in ("ModelServer", "model_service_worker"))]
    assert len(processes) >= 2, "no frontend or no worker found"
    return {f"{p.pid} {p.name()}": JEMALLOC_SONAME in Path(f"/proc/{p.pid}/maps").read_text() for p in processes}


def model_description(run) -> dict:
    response = requests.get(f"{run.url('management')}/models/resnet18", headers=run.headers("management"), timeout=10)
    response.raise_for_status()
    return response.json()[0]


@pytest.mark.parametrize("fields, workers, threads, batch", PLANS)
def test_generated_config_is_what_runs(resnet18_store, tmp_path, fields, workers, threads, batch):
    body = jpeg_bytes(photo_array("astronaut"), size=(640, 480))
    with running_torchserve(serving_on_free_ports(model_store=resnet18_store, **fields), tmp_path) as run:
        description = model_description(run)
        assert (description["minWorkers"], description["maxWorkers"], description["batchSize"]) == (workers, workers, batch)
        assert len([w for w in description["workers"] if w["status"] == "READY"]) == workers
        assert worker_thread_lines(run) == [(threads, 1)] * workers
        on_jemalloc = processes_on_jemalloc(run)  # the default allocator
        assert set(on_jemalloc.values()) == {resolve(defaults.ALLOCATOR)[0] == "jemalloc"}, on_jemalloc

        with ThreadPoolExecutor(max_workers=12) as pool:
            statuses = [r.status_code for r in pool.map(lambda _: post_image(run, "resnet18", body), range(24))]
        assert statuses == [200] * 24

        ping = requests.get(f"{run.url('inference')}/ping", headers=run.headers("inference"), timeout=10)
        assert ping.status_code == 200 and ping.json()["status"] == "Healthy"
        metrics = requests.get(f"{run.url('metrics')}/metrics", timeout=10).text
        assert all(re.search(rf"^{name}\{{", metrics, re.M) for name in (BATCH_SIZE, INFERENCE_MS, PREPROCESS_MS)), metrics
        pids = [run.pid] + [p.pid for p in psutil.Process(run.pid).children(recursive=True)]
    assert not [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]


def test_batches_really_form(resnet18_store, tmp_path):
    """With one worker and a 200 ms batch window, concurrent requests are answered in batches > 1."""
    body = jpeg_bytes(photo_array("chelsea"), size=(640, 480))
    request = serving_on_free_ports(model_store=resnet18_store, vcpus=2, workers=1, batch=4, max_batch_delay_ms=200)
    allocator = "jemalloc" if find_jemalloc() else "glibc"  # CI installs libjemalloc2: the other allocator
    with running_torchserve(request, tmp_path, allocator=allocator) as run:
        assert set(processes_on_jemalloc(run).values()) == {allocator == "jemalloc"}
        with ThreadPoolExecutor(max_workers=8) as pool:
            assert all(r.status_code == 200 for r in pool.map(lambda _: post_image(run, "resnet18", body), range(16)))
        sizes = batch_sizes_seen(run)
    assert max(sizes) > 1, f"no batch larger than 1 formed: {sizes}"
