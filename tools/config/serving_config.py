"""Thread-tuned TorchServe config.properties: the toolkit's central promise.

TorchServe's defaults start one worker per vCPU and let every worker use every core, so on a small box
the workers fight over the same cores. Here the plan is explicit: workers x threads never exceeds the
vCPUs, batches are sized to what each archive was compiled for, and the admin surfaces stay on
localhost. Every property is written with a one-line comment saying why it has its value.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import replace
from pathlib import Path

from tsvk.common import TUNED_KEY_PREFIX, HandlerSettings, ServedConfig, ServingDefaults, task_kind
from tsvk.worker import threads_from_config

from .. import defaults
from ..archive.archive_info import list_archives, read_archive_settings
from ..cpus import detect_vcpus
from ..errors import UsageError
from ..limits import BOUNDS, bound_problem, model_name_problem
from ..tls import TlsError, is_https, served_tls
from .plan import ModelChoice, ModelPlan, ServingPlan, ServingRequest, tls_properties
from .rendering import write_plan
from .worker_plan import cpu_workers, memory_budget_mb, worker_estimate_mb


def plan_serving(request: ServingRequest) -> ServingPlan:
    """Validate the request against the machine and the archives; every problem is reported at once."""
    problems = _check_counts(request)
    if problems:
        raise UsageError("; ".join(problems))
    vcpus = request.vcpus or detect_vcpus()
    gpus = request.gpus if request.gpus is not None else _detect_gpus()
    names, archives = _resolve_models(request)
    workers = _workers(request, gpus, names, archives, max(1, vcpus // len(names)))
    batches = {name: request.batch or planned_batch(archives.get(name), gpus) for name in names}
    problems = [p for p in map(model_name_problem, names) if p]  # archives named by their files, too
    problems += [p for p in (batch_problem(name, batches[name], archives.get(name)) for name in names) if p]
    problems += _vcpu_problems(sum(workers.values()), vcpus, len(names))
    if problems:
        raise UsageError("; ".join(problems))
    threads = max(1, vcpus // max(1, sum(workers.values())))
    models = tuple(_plan_model(name, request, archives.get(name), workers[name], batches[name], threads) for name in names)
    return ServingPlan(request, vcpus, gpus, models)


def write_config(request: ServingRequest, output: Path) -> ServingPlan:
    return write_plan(plan_serving(request), output)


def plan_with_choices(request: ServingRequest, choices: dict[str, ModelChoice], origin: str = "tsvk config") -> ServingPlan:
    """The rule's plan with each model's workers, threads, batch and delay replaced by `choices`.

    Everything else (addresses, security, queue, timeouts) stays the generator's, so a tuned config
    differs from a generated one only in the numbers. The same limits hold: batch within the
    archive's compiled max batch, and workers x intra-op threads, summed over the models, within the
    vCPUs."""
    base = plan_serving(replace(request, workers=None, batch=None, max_batch_delay_ms=None, models=tuple(choices)))
    models = tuple(_chosen(m, choices[m.name]) for m in base.models)
    problems = [
        p for c in choices.values() for name in ("workers", "batch", "max_batch_delay_ms") if (p := bound_problem(name, getattr(c, name)))
    ]
    problems += [p for m in models if (p := batch_problem(m.name, m.batch, _archive_settings(request, m.name)))]
    threads = sum(m.workers * m.intra_op_threads for m in models)
    if threads > base.vcpus:
        problems.append(f"workers x intra-op threads, summed over the models, is {threads}: more than the {base.vcpus} vCPUs")
    if any(min(c.intra_op_threads, c.inter_op_threads) < 1 for c in choices.values()):
        problems.append("intra-op and inter-op threads must be at least 1")
    if problems:
        raise UsageError("; ".join(problems))
    return replace(base, models=models, origin=origin)


def tuned_choices(config: Path) -> dict[str, ModelChoice]:
    """Per model, the numbers a config written by `tsvk tune` holds, with the measurement behind them
    (its `tsvk.tuned.<model>` line). Refused when the file holds no tuned model."""
    if not Path(config).is_file():
        raise UsageError(f"--tuned {config}: no such file; write it with `tsvk tune`")
    served = ServedConfig.read(config)
    choices = {}
    for model in served.models:
        threads, measured = threads_from_config(served.properties, model.name), served.tuned(model.name)
        if threads is not None and measured is not None:
            choices[model.name] = ModelChoice(model.workers, threads[0], threads[1], model.batch_size, model.max_batch_delay_ms, measured)
    if not choices:
        raise UsageError(f"--tuned {config} holds no tuned model (no {TUNED_KEY_PREFIX}<model> line); write it with `tsvk tune`")
    return choices


def _chosen(model: ModelPlan, choice: ModelChoice) -> ModelPlan:
    return replace(
        model,
        workers=choice.workers,
        batch=choice.batch,
        max_batch_delay_ms=choice.max_batch_delay_ms,
        intra_op_threads=choice.intra_op_threads,
        inter_op_threads=choice.inter_op_threads,
        measured=choice.measured,
    )


def _archive_settings(request: ServingRequest, name: str) -> HandlerSettings | None:
    if not request.archive_check:
        return None
    path = list_archives(request.model_store).get(name)
    return read_archive_settings(path) if path else None


def planned_batch(settings: HandlerSettings | None, gpus: int) -> int:
    """The archive's suggested batch; for a detector on CPU workers, at most what one forward slice
    (`detect.cpu_forward_pixels`) holds of its largest inputs. A larger batch runs slice after slice no
    faster per image while its first requests wait for its last: Mask R-CNN's batch of eight takes about
    90 s of one thread, near the response timeout past which TorchServe kills the worker."""
    suggested = _suggested(settings).batch_size
    if settings is None or gpus or not task_kind(settings.task).image_list:
        return suggested
    resize = settings.preprocess.resize
    largest_input = resize * (settings.preprocess.max_size or 2 * resize)  # no cap on the longer side: assume 2:1
    return max(1, min(suggested, settings.detect.cpu_forward_pixels // largest_input))


def _suggested(settings: HandlerSettings | None) -> ServingDefaults:
    """What the archive suggests; without archives (--no-archive-check), what an archive suggests by default."""
    return settings.serving if settings else ServingDefaults()


def _workers(request: ServingRequest, gpus: int, names: list[str], archives: dict[str, HandlerSettings], cpu_share: int) -> dict[str, int]:
    """Asked-for workers; else one per GPU; else what an archive built with `--workers` suggests; else, on the
    CPU, single-threaded workers as memory holds (worker_plan.py); without the archive (--no-archive-check),
    `defaults.WORKERS`, since nothing tells how much memory a worker takes."""
    if request.workers or gpus:
        return {name: request.workers or gpus for name in names}
    fixed = {
        name: _suggested(archives.get(name)).workers or defaults.WORKERS
        for name in names
        if name not in archives or archives[name].serving.workers is not None
    }
    planned = [name for name in names if name not in fixed]
    if not planned:
        return fixed
    paths = list_archives(request.model_store)
    estimates = {name: worker_estimate_mb(paths[name]) for name in names if name in paths}
    budget, _ = memory_budget_mb(request.memory_mb)
    budget -= sum(count * estimates.get(name, 0.0) for name, count in fixed.items())
    chosen = fixed | cpu_workers({name: cpu_share for name in planned}, {name: estimates[name] for name in planned}, budget)
    return {name: chosen[name] for name in names}


def _check_counts(request: ServingRequest) -> list[str]:
    """Every number within what TorchServe parses, every name and address one property line long."""
    problems = [p for p in (bound_problem(name, getattr(request, name)) for name in BOUNDS) if p]
    if request.protocol not in defaults.PROTOCOLS:
        problems.append(f"--protocol must be one of {', '.join(defaults.PROTOCOLS)}, got {request.protocol!r}")
    if not re.fullmatch(r"[0-9A-Za-z.:\-]+", request.oip_address or ""):
        problems.append(f"--oip-address must be a host name or IP address, got {request.oip_address!r}")
    if request.vcpus and request.workers and request.workers > request.vcpus:
        problems.append(f"--workers ({request.workers}) must not exceed --vcpus ({request.vcpus})")
    for name in ("inference_address", "management_address", "metrics_address"):
        problems += _address_problems(name, getattr(request, name))
    problems += _tls_problems(request)
    problems += [p for p in map(model_name_problem, request.models or ()) if p]
    if any(ord(c) < 32 for c in str(request.model_store)):
        problems.append(f"--model-store must be a path without control characters, got {str(request.model_store)!r}")
    return problems


def _address_problems(name: str, address: str) -> list[str]:
    match = re.fullmatch(r"https?://[A-Za-z0-9.\-]+:(\d{1,5})|https?://\[[0-9A-Fa-f:.]+\]:(\d{1,5})", address)
    port = int(match.group(1) or match.group(2)) if match else 0
    if not 1 <= port <= 65_535:
        return [f"--{name.replace('_', '-')} must look like http://HOST:PORT with a port from 1 to 65535, got {address!r}"]
    return []


def _tls_problems(request: ServingRequest) -> list[str]:
    """--tls-key and --tls-cert together; where the files are checked (as archives are), checked as the servers will."""
    if (request.tls_key is None) != (request.tls_cert is None):
        return ["--tls-key and --tls-cert go together: give both (PEM files: the private key and its certificate)"]
    https = [name for name in ("inference_address", "management_address", "metrics_address") if is_https(getattr(request, name))]
    if https and request.tls_key is None:
        return [f"--{https[0].replace('_', '-')} {getattr(request, https[0])} is https: give --tls-key and --tls-cert (PEM files)"]
    if request.tls_key is None or not request.archive_check:
        return []
    try:
        served_tls(tls_properties(request))
    except TlsError as err:
        return [str(err)]
    return []


def _resolve_models(request: ServingRequest) -> tuple[list[str], dict[str, HandlerSettings]]:
    """Model names to serve and, when archives are checked, each archive's settings."""
    if not request.archive_check:
        if not request.models:
            raise UsageError("--models must name the models when archives are not checked (--no-archive-check)")
        return list(request.models), {}
    available = list_archives(request.model_store)
    if not available:
        raise UsageError(f"no .mar archives in {request.model_store}; build one with `tsvk archive --model {defaults.MODEL}`")
    names = list(request.models) if request.models else list(available)
    unknown = [n for n in names if n not in available]
    if unknown:
        raise UsageError("; ".join(_unknown_model_message(n, available, request.model_store) for n in unknown))
    return names, {n: read_archive_settings(available[n]) for n in names}


def _unknown_model_message(name: str, available: dict, store: Path) -> str:
    close = difflib.get_close_matches(name, list(available), n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    return f"unknown model {name!r}: no {name}.mar in {store} (available: {', '.join(available)}){hint}"


def batch_problem(name: str, batch: int, settings: HandlerSettings | None) -> str | None:
    """Why `batch` cannot be served from `name`'s archive (above its compiled max batch), or None."""
    if settings is None or batch <= settings.artifact.max_batch:
        return None
    return (
        f"--batch {batch} is above what {name}.mar was compiled for (max batch {settings.artifact.max_batch}); "
        f"use --batch <= {settings.artifact.max_batch} or rebuild it with --max-batch {batch}"
    )


def _vcpu_problems(total_workers: int, vcpus: int, models: int) -> list[str]:
    if total_workers <= vcpus:
        return []
    return [
        f"--workers x models = {total_workers} exceeds --vcpus = {vcpus}; each worker needs at least one vCPU, "
        f"so use --workers <= {max(1, vcpus // max(1, models))}"
    ]


def _plan_model(name: str, request: ServingRequest, settings: HandlerSettings | None, workers: int, batch: int, threads: int) -> ModelPlan:
    suggested = _suggested(settings)
    return ModelPlan(
        name=name,
        workers=workers,
        batch=batch,
        max_batch_delay_ms=_given_or(request.max_batch_delay_ms, suggested.max_batch_delay_ms),
        response_timeout_s=_given_or(request.response_timeout_s, suggested.response_timeout_s),
        intra_op_threads=threads,
    )


def _given_or(value: int | None, default: int) -> int:
    return default if value is None else value


def _detect_gpus() -> int:
    try:
        import torch

        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:  # a broken CUDA install means: plan for the CPU
        return 0
