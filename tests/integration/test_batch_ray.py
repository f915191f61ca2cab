"""`tsvk batch --ray` on a real Ray cluster of two nodes on this machine (`ray start --head` and a second
`ray start --address`, tests/support/ray_cluster.py): Ray Data actors on both nodes hold the archive, and the
rows equal those of the run on local worker processes, input for input. A run begun locally and killed is
finished on Ray with every input once."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.batch_inputs import write_inputs
from tests.support.ray_cluster import two_node_cluster
from tests.support.required import pinned
from tests.support.torchserve import archive_tiny

pinned("ray", "pip install 'ray[data]' (make setup)")
pytestmark = [pytest.mark.slow, pytest.mark.ray_cluster]

INPUTS = 120
# One image a forward pass: a batch's size and members differ between the local workers and Ray's blocks (its
# last, partial batches), and a CPU kernel chosen for another batch size may round the last digit differently;
# one at a time, the answers are equal byte for byte
BATCH = "1"


def rows_by_id(path: Path) -> dict[int, dict]:
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    by_id = {row["id"]: row for row in rows}
    assert len(by_id) == len(rows), "an input has two rows"
    return by_id


def batch(archive: Path, listing: Path, output: Path, *extra: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tsvk_tools.cli", "batch", "--archive", str(archive), "--input", str(listing),
                           "--output", str(output), "--batch", BATCH, *extra], capture_output=True, text=True, timeout=900,
                          env=env)


@pytest.fixture(scope="module")
def cluster():
    with two_node_cluster(cpus_per_node=1) as joined:
        yield joined


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    work = tmp_path_factory.mktemp("ray_batch")
    files = sorted(write_inputs(work / "photos"))
    listing = work / "inputs.txt"
    listing.write_text("".join(f"photos/{files[i % len(files)]}\n" for i in range(INPUTS)))
    archive = archive_tiny(work / "store") / "tiny.mar"
    local = work / "local.jsonl"
    done = batch(archive, listing, local, "--workers", "2")
    assert done.returncode == 0, done.stderr
    return archive, listing, work, rows_by_id(local)


def test_rows_on_a_two_node_ray_cluster_equal_the_local_run(cluster, inputs):
    archive, listing, work, local = inputs
    address, env = cluster
    output = work / "ray.jsonl"
    done = batch(archive, listing, output, "--ray", address, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert rows_by_id(output) == local
    assert f"done: {INPUTS} of {INPUTS} inputs" in done.stdout


def test_a_local_run_killed_midway_is_finished_on_ray_with_every_input_once(cluster, inputs):
    archive, listing, work, local = inputs
    output = work / "resumed.jsonl"
    command = [sys.executable, "-m", "tsvk_tools.cli", "batch", "--archive", str(archive), "--input", str(listing),
               "--output", str(output), "--batch", BATCH, "--workers", "1", "--quiet"]
    run = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and (not output.exists() or output.stat().st_size == 0):
        time.sleep(0.05)
    run.send_signal(signal.SIGKILL)
    run.wait()
    partial = len(output.read_text().splitlines())
    assert 0 < partial < INPUTS, f"the kill came too late to test a resume: {partial} rows"
    address, env = cluster
    done = batch(archive, listing, output, "--ray", address, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert rows_by_id(output) == local
