"""One batch run: list the inputs (once), plan the workers as serving would, score every input not yet in the
output on local worker processes or on Ray, write each row as it comes, and say how it went."""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Iterator


from .. import defaults
from ..archive.archive_info import read_archive_settings
from ..errors import UsageError
from .local import LocalWorkers, Task
from .plan import BatchPlan, plan_batch
from .run_summary import Progress
from .scorer import WorkerSpec
from .sources import DEFAULT_COLUMN, input_kind, stream_inputs
from .state import JOURNAL_FILE, DoneIds, InputList, RowFile, RunState
from .tables import OUTPUT_FORMATS, output_format, write_parquet


@dataclass(frozen=True)
class BatchRequest:
    archive: Path
    input: Path
    output: Path
    column: str = DEFAULT_COLUMN
    workers: int | None = None  # None: the serving plan's
    batch: int | None = None  # None: the archive's
    options: tuple[str, ...] = ()  # NAME=VALUE answer options, sent with every input as a served request's form fields
    max_request_mb: int = defaults.MAX_REQUEST_MB
    ray: str | None = None  # a Ray address, or "local"; None: worker processes on this machine
    quiet: bool = False


def run_batch(request: BatchRequest) -> Progress:
    """Score every input once into the output; a second run with the same arguments resumes the first."""
    fmt = output_format(request.output)
    if not request.archive.is_file():
        raise UsageError(f"--archive {request.archive}: no such file; build one with `tsvk archive`")
    options = answer_options(request.archive, request.options)
    plan = plan_batch(request.archive, workers=request.workers, batch=request.batch)
    state = RunState.beside(request.output)
    count = prepare_list(state, request, plan, options)
    if (state.meta() or {}).get("finished"):
        progress = Progress(count, count, quiet=request.quiet)
        print(f"tsvk batch: {request.output} is already complete ({count} inputs); move it away to run again")
        return progress
    rows_path = request.output if fmt == "jsonl" else state.path(JOURNAL_FILE)
    done = DoneIds(count)
    rows = RowFile(rows_path, done)
    progress = Progress(count, done.done, quiet=request.quiet)
    if not request.quiet:
        print(f"tsvk batch: {count} inputs, {done.done} already done; {plan.describe()}")
    listing = InputList(state)
    try:
        spec = WorkerSpec(str(state.unpack_archive(request.archive)), plan.model_name, plan.batch,
                          request.max_request_mb * 2**20, plan.threads, None, options)
        score(request, plan, spec, state, done, listing, lambda lines: _write(rows, progress, lines))
    finally:
        rows.close()
        listing.close()
    if fmt == "parquet":
        write_parquet(rows_path, request.output)
    state.write_meta({**state.meta(), "finished": True})
    state.finish()
    progress.show(final=True)
    return progress


def score(request: BatchRequest, plan: BatchPlan, spec: WorkerSpec, state: RunState, done: DoneIds, listing: InputList,
          write: Callable[[list[str]], None]) -> None:
    """Every input not yet done, scored on Ray where asked, else on this machine's worker processes."""
    if request.ray:
        from .ray_engine import score_on_ray  # Ray is optional: imported only for --ray

        score_on_ray(request.ray, spec, plan, state, done, write)
        return
    specs = [WorkerSpec(**{**asdict(spec), "gpu_id": plan.gpu_of(n)}) for n in range(plan.workers)]
    with LocalWorkers(specs, state.folder) as workers:
        workers.run(tasks(done, listing, plan.batch), write)


def tasks(done: DoneIds, listing: InputList, batch: int) -> Iterator[Task]:
    """The inputs not yet done, `batch` at a time, read from the list as they are needed."""
    missing = done.missing()
    while ids := list(itertools.islice(missing, batch)):
        yield Task(ids, listing.sources(ids))


def prepare_list(state: RunState, request: BatchRequest, plan: BatchPlan, options: dict) -> int:
    """The number of inputs: listed now for a new run, or the count a started run listed with the same arguments."""
    fingerprint = run_fingerprint(request, plan, options)
    meta = state.meta()
    if meta is not None:
        if meta.get("fingerprint") != fingerprint:
            raise UsageError(f"{request.output} belongs to a run with other arguments ({state.folder / 'run.json'}); "
                             f"run that again to resume it, or move {request.output} and {state.folder} away to start over")
        return meta["count"]
    if request.output.exists():
        raise UsageError(f"{request.output} exists and no run of these arguments wrote it; move it away or name "
                         "another --output")
    count = state.write_list(stream_inputs(request.input, request.column))
    state.write_meta({"fingerprint": fingerprint, "count": count})
    return count


def run_fingerprint(request: BatchRequest, plan: BatchPlan, options: dict) -> dict:
    """What must not change between a run and its resumption: the archive, the inputs, how they are answered."""
    return {"archive": _file_identity(request.archive), "input": _file_identity(request.input),
            "column": request.column, "options": options, "batch": plan.batch, "max_request_mb": request.max_request_mb,
            "output": output_format(request.output)}


def answer_options(archive: Path, pairs: tuple[str, ...]) -> dict[str, str]:
    """NAME=VALUE pairs checked against the options the archive's task takes."""
    from tsvk.tasks import task_class  # the task modules import torch: the other commands start without it

    allowed = task_class(read_archive_settings(archive).task).parameters
    options = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or name not in allowed:
            raise UsageError(f"--option {pair!r}: must be NAME=VALUE with NAME one of {', '.join(allowed) or 'none'} "
                             f"(this archive's task takes those)")
        options[name] = value
    return options


def _file_identity(path: Path) -> dict:
    resolved = path.resolve()
    kind = input_kind(resolved) if path.exists() else "missing"
    stat = resolved.stat()
    same = {} if kind == "folder" else {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
    return {"path": str(resolved), "kind": kind, **same}


def _write(rows: RowFile, progress: Progress, lines: list[str]) -> None:
    rows.write(lines)
    rows.flush()
    progress.add(lines)


__all__ = ["BatchRequest", "OUTPUT_FORMATS", "run_batch"]
