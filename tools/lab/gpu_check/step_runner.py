"""Run the steps of a GPU check one after another, each in its own process group, and write the report.

While a step runs, nvidia-smi is asked once a second how much memory each GPU holds; the largest value
is the step's GPU memory peak (whatever process held it, and also for a step that crashed)."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from ...measure.sampler import Periodic
from ...errors import UsageError
from .gpu_report import build_report, write_report
from .steps import Step, plan
from .weights import SEEDED, seeded_path, write_seeded_weights

WORK_ROOT = Path(".tsvk/gpu-check")  # logs and archives of each run (git-ignored)
OUTPUT_DIR = Path("benchmarks/results")  # the report, to be committed
TAIL_LINES = 40
STOP_GRACE_S = 30  # after SIGTERM (the benchmark stops its servers on it), then SIGKILL
MEMORY_POLL_S = 1.0
MEMORY_QUERY = ("nvidia-smi", "--query-gpu=index,memory.used", "--format=csv,noheader,nounits")


def require_cuda() -> None:
    """Refuse, before anything is written, on a machine without a usable CUDA device."""
    import torch

    if not torch.cuda.is_available():
        raise UsageError(
            f"no CUDA device here (torch {torch.__version__}: torch.cuda.is_available() is False), and every step of "
            "the GPU check needs one; run `tsvk gpu-check` (make gpu-check) on a machine with an NVIDIA GPU and its "
            "driver, e.g. a cloud GPU instance"
        )


def check(model: str, weights: str, output_dir: Path = OUTPUT_DIR, names: tuple[str, ...] = (),
          log: Callable[[str], None] = print) -> tuple[dict, dict[str, Path]]:
    """Every step (or those named), then the report; returns it and the files written."""
    require_cuda()
    started = datetime.now(timezone.utc)
    work_dir = WORK_ROOT / started.strftime("%Y%m%dT%H%M%SZ")
    steps = select(plan(work_dir.resolve(), model, weights), names)
    work_dir.mkdir(parents=True, exist_ok=True)
    if weights == SEEDED and any(step.name.startswith("archive-") for step in steps):
        try:
            write_seeded_weights(model, seeded_path(model, work_dir.resolve()))
        except ValueError as err:  # torchvision's "Unknown model name"
            raise UsageError(f"--model {model}: {err}; seeded weights are made for torchvision's classifiers") from None
    options = {"model": model, "weights": weights}

    def write(results: list[dict]) -> tuple[dict, dict[str, Path]]:
        report = build_report(results, started, datetime.now(timezone.utc), options)
        return report, write_report(report, output_dir)

    return run_steps(steps, work_dir, log, on_step=write)


def select(steps: list[Step], names: tuple[str, ...]) -> list[Step]:
    if not names:
        return steps
    known = [step.name for step in steps]
    unknown = [name for name in names if name not in known]
    if unknown:
        raise UsageError(f"unknown step(s) {', '.join(unknown)}; choose from {', '.join(known)}")
    return [step for step in steps if step.name in names]


def run_steps(steps: list[Step], work_dir: Path, log: Callable[[str], None] = print,
              on_step: Callable[[list[dict]], Any] = lambda results: results) -> Any:
    """Each step in turn; `on_step(results so far)` after each (the check rewrites its report there, so a
    check stopped half way leaves the report of what ran); returns the last call's answer."""
    results: list[dict] = []
    answer = None
    for number, step in enumerate(steps, 1):
        log(f"gpu-check [{number}/{len(steps)}] {step.name}: {step.purpose} (log: {work_dir / step.name}.log)")
        results.append(run_step(step, work_dir))
        log(f"gpu-check [{number}/{len(steps)}] {step.name}: {results[-1]['status']} in {results[-1]['duration_s']} s")
        answer = on_step(results)
    return answer


def run_step(step: Step, work_dir: Path) -> dict:
    """One step's record: command, status, exit status, duration, key figures, and the tail of a failure."""
    log_path = work_dir / f"{step.name}.log"
    started = time.monotonic()
    with open(log_path, "w") as out, MemoryPeaks() as memory:
        exit_status, timed_out = _run(step, out)
    duration = round(time.monotonic() - started, 1)
    output = log_path.read_text(errors="replace")
    figures = _figures(step, output, work_dir)
    status = step_status(exit_status, timed_out, figures)
    return {"name": step.name, "purpose": step.purpose, "command": shlex.join(step.argv), "same_as": step.same_as,
            "status": status, "exit_status": exit_status, "duration_s": duration, "timeout_s": step.timeout_s,
            "figures": figures, "error_tail": _error_tail(status, output, figures),
            "gpu_memory_peak_mib": memory.peaks, "log": str(log_path)}


def step_status(exit_status: int | None, timed_out: bool, figures: dict) -> str:
    """A step passes only when it exited 0 and ran everything it holds: pytest exits 0 when a test skips (a
    GPU package missing), and a check whose tests skipped has not shown that they pass."""
    if timed_out:
        return "timed out"
    if exit_status != 0:
        return "failed"
    return "incomplete" if figures.get("skipped") else "passed"


def _error_tail(status: str, output: str, figures: dict) -> str:
    """What a reader needs to see under a step that did not pass: what was skipped, or the output's end."""
    if status == "passed":
        return ""
    if status == "incomplete":
        return "\n".join(["skipped, so not shown to pass:", *figures.get("skipped_tests", [])])
    return tail(output)


def _run(step: Step, out) -> tuple[int | None, bool]:
    """(exit status, timed out); the step's whole process group is stopped when it overruns."""
    try:
        process = subprocess.Popen(step.argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    except OSError as err:
        out.write(f"gpu-check: cannot start {step.argv[0]}: {err}\n")
        return None, False
    try:
        return process.wait(timeout=step.timeout_s), False
    except subprocess.TimeoutExpired:
        out.write(f"\ngpu-check: stopped after its {step.timeout_s} s limit\n")
        _stop_group(process)
        return process.returncode, True


def _stop_group(process: subprocess.Popen) -> None:
    for sig, grace in ((signal.SIGTERM, STOP_GRACE_S), (signal.SIGKILL, None)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def _figures(step: Step, output: str, work_dir: Path) -> dict:
    """Whatever the step left to read; a step that failed early may have left nothing, and that is reported."""
    try:
        return step.figures(output, work_dir)
    except Exception as err:  # noqa: BLE001 - a missing file must not lose the other steps' report
        return {"headline": f"no figures: {type(err).__name__}: {err}"}


class MemoryPeaks(Periodic):
    """The most memory each GPU held (MiB, by index) while the `with` block ran, sampled from nvidia-smi."""

    def __init__(self, query: Callable[[], dict[str, int]] | None = None, interval_s: float = MEMORY_POLL_S):
        self.query = query or gpu_memory_used
        self.interval = interval_s
        self.peaks: dict[str, int] = {}

    def tick(self) -> None:
        for index, used in self.query().items():
            self.peaks[index] = max(used, self.peaks.get(index, 0))


def gpu_memory_used() -> dict[str, int]:
    """MiB in use per GPU index now; {} where nvidia-smi is missing or fails."""
    try:
        lines = subprocess.run(MEMORY_QUERY, capture_output=True, text=True, timeout=10).stdout.splitlines()
    except (OSError, subprocess.TimeoutExpired):
        return {}
    used = {}
    for line in lines:
        index, _, mib = line.partition(",")
        if mib.strip().isdigit():
            used[index.strip()] = int(mib)
    return used


def tail(output: str, lines: int = TAIL_LINES) -> str:
    return "\n".join(output.rstrip().splitlines()[-lines:])
