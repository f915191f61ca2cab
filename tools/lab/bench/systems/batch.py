"""`tsvk batch` as a benchmark row: the archive scored offline from a list of the bench photos, on local worker
processes (`batch`, `batch_fast`) or on a Ray started by the command on this machine (`batch_ray`,
`batch_ray_fast`). The run is started on more inputs than a round needs; once its first rows are written
(the workers have loaded), it runs the seconds of unmeasured load the servers get after their warm-up (first
calls, a Ray's own start-up work settling), then the rows written during the round's seconds give its rate;
then it is stopped.
Each worker's peak resident memory (VmHWM) is read just before the stop.
"""

from __future__ import annotations

import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psutil

from ....errors import UsageError
from .base import RunContext, System
from .process import clean_env

INPUTS = 200_000  # more than any round scores: the round's seconds bound the run
START_TIMEOUT_S = 600.0
POLL_S = 0.25
RAY_ACTOR_MARK = "ArchiveActor"  # Ray names an actor's process after its class: ray::MapWorker(MapBatches(ArchiveActor))


class BatchLocal(System):
    name = "batch"
    label = "tsvk batch: local worker processes"
    description = ("`tsvk batch` on a list of the bench photos' JPEG files: the serving plan's single-threaded worker "
                   "processes, one per vCPU, each running the archive's service on batches of the served size; rate "
                   "from the rows written during the round, after the workers loaded")
    self_timed = True
    engine: tuple[str, ...] = ()

    def archive(self, ctx: RunContext) -> Path:
        return ctx.ours_mar

    def prepare(self, ctx: RunContext) -> None:
        self.archive(ctx)

    def unavailable(self, ctx: RunContext) -> str:
        return "" if ctx.options.device == "cpu" else "the batch rows run on the CPU"

    def run(self, ctx: RunContext, variant: dict) -> dict:
        work = ctx.system_dir(self.name)
        listing = work / "inputs.txt"
        listing.write_text("".join(f"{ctx.photos[i % len(ctx.photos)].file}\n" for i in range(INPUTS)))
        output = work / f"rows-{time.time_ns()}.jsonl"
        command = [sys.executable, "-m", "tsvk_tools.cli", "batch", "--archive", str(self.archive(ctx)), "--input",
                   str(listing), "--output", str(output), "--batch", str(ctx.options.batch), "--quiet", *self.engine]
        started = time.monotonic()
        run = subprocess.Popen(command, env=clean_env(), stdout=subprocess.DEVNULL, stderr=open(work / "batch.log", "ab"))
        try:
            first_at, _ = _wait_for_rows(run, output)
            ready_s = first_at - started
            time.sleep(ctx.options.warmup_load_seconds)
            measured_from, first = time.monotonic(), _count_rows(output)
            time.sleep(ctx.options.round_seconds)
            rows, ended = _count_rows(output), time.monotonic()
            memory = [_peak_mb(p) for p in self.workers(run)]
        finally:
            run.send_signal(signal.SIGTERM)
            try:
                run.wait(timeout=60)
            except subprocess.TimeoutExpired:
                run.kill()
                run.wait()
        rate = (rows - first) / (ended - measured_from)
        return {"requests": rows - first, "errors": 0, "throughput_ips": round(rate, 2), "latency_ms": {}, "ready_s": round(ready_s, 2),
                "top1": {}, "load_window": (measured_from, ended), "details": {"workers": len(memory), "peak_rss_mb_per_worker": memory,
                                        "peak_rss_mb_per_worker_max": max(memory, default=None),
                                        "peak_rss_mb_per_worker_mean": round(statistics.mean(memory), 1) if memory else None,
                                        "batch": ctx.options.batch, "engine": " ".join(self.engine) or "local",
                                        "throughput_means": "rows written during the round / its seconds, counted after "
                                                            "the first rows (workers loaded) and the warm-up seconds"}}

    def workers(self, run: subprocess.Popen) -> list[psutil.Process]:
        """The worker processes: the command's children running tsvk_tools.batch.worker."""
        return [p for p in psutil.Process(run.pid).children(recursive=True) if "tsvk_tools.batch.worker" in " ".join(_cmdline(p))]


class BatchLocalFast(BatchLocal):
    name = "batch_fast"
    label = "tsvk batch: local worker processes, fastest CPU artifact"
    description = "as batch, for the archive ours_fast serves"

    def archive(self, ctx: RunContext) -> Path:
        return ctx.fast_mar


class BatchRay(BatchLocal):
    name = "batch_ray"
    label = "tsvk batch --ray local: Ray Data actors on this machine"
    description = ("as batch, on Ray Data: a Ray of this machine's vCPUs started by the command, one actor per vCPU "
                   "holding the archive")
    engine = ("--ray", "local")

    def unavailable(self, ctx: RunContext) -> str:
        try:
            import ray  # noqa: F401
        except ImportError:
            return "ray is not installed (pip install 'tsvk[ray]')"
        return super().unavailable(ctx)

    def workers(self, run: subprocess.Popen) -> list[psutil.Process]:
        return [p for p in psutil.process_iter() if RAY_ACTOR_MARK in " ".join(_cmdline(p)) or RAY_ACTOR_MARK in _name(p)]


class BatchRayFast(BatchRay):
    name = "batch_ray_fast"
    label = "tsvk batch --ray local: Ray Data actors, fastest CPU artifact"
    description = "as batch_ray, for the archive ours_fast serves"

    def archive(self, ctx: RunContext) -> Path:
        return ctx.fast_mar


def _wait_for_rows(run: subprocess.Popen, output: Path) -> tuple[float, int]:
    """When the first rows were written, and how many."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if run.poll() is not None:
            raise UsageError(f"tsvk batch ended ({run.returncode}) before writing a row; see its batch.log")
        rows = _count_rows(output)
        if rows:
            return time.monotonic(), rows
        time.sleep(POLL_S / 5)
    raise UsageError(f"tsvk batch wrote no row in {START_TIMEOUT_S:.0f} s")


def _count_rows(output: Path) -> int:
    try:
        with open(output, "rb") as rows:
            return sum(chunk.count(b"\n") for chunk in iter(lambda: rows.read(1 << 20), b""))
    except FileNotFoundError:
        return 0


def _peak_mb(process: psutil.Process) -> float | None:
    """The process's peak resident memory (VmHWM), MiB."""
    try:
        for line in Path(f"/proc/{process.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


def _cmdline(process: psutil.Process) -> list[str]:
    try:
        return process.cmdline()
    except (psutil.Error, OSError):
        return []


def _name(process: psutil.Process) -> str:
    try:
        return process.name()
    except (psutil.Error, OSError):
        return ""
