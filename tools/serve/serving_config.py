"""Thread-tuned TorchServe config.properties: the toolkit's central promise.

TorchServe's defaults start one worker per vCPU and let every worker use every core, so on a small box
the workers fight over the same cores. Here the plan is explicit: workers x threads never exceeds the
vCPUs, batches are sized to what each archive was compiled for, and the admin surfaces stay on
localhost. Every property is written with a one-line comment saying why it has its value.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from tsvk.common import TUNED_KEY_PREFIX, HandlerSettings, ServedConfig, ServingDefaults, escape_value, task_kind
from tsvk.worker import DEADLINE_KEY_PREFIX, THREADS_KEY_PREFIX, threads_from_config

from .. import defaults
from ..archive.archive_info import MODEL_VERSION, list_archives, read_archive_settings
from ..cpus import detect_vcpus
from ..errors import UsageError
from ..fsutil import write_text_atomic
from ..limits import BOUNDS, bound_problem, model_name_problem
from ..tls import CERTIFICATE_FILE, GRPC_SSL, PRIVATE_KEY_FILE, TlsError, is_https, served_tls
from .worker_plan import cpu_workers, memory_budget_mb, worker_estimate_mb


@dataclass(frozen=True)
class ServingRequest:
    """What the user asked for; None means: decide from the machine and the archives."""

    vcpus: int | None = None
    workers: int | None = None
    gpus: int | None = None
    batch: int | None = None
    max_batch_delay_ms: int | None = None
    response_timeout_s: int | None = None
    models: tuple[str, ...] | None = None
    model_store: Path = Path(defaults.MODEL_STORE)
    archive_check: bool = True
    auth: bool = True
    concurrency: int = defaults.CONCURRENCY
    core_pinning: bool = False
    max_request_mb: int = defaults.MAX_REQUEST_MB
    deadline_ms: int | None = None
    token_expiry_min: int = defaults.TOKEN_EXPIRY_MIN  # `tsvk serve` renews the keys at half this age (tools/keys.py)
    inference_address: str = defaults.INFERENCE_ADDRESS
    management_address: str = defaults.MANAGEMENT_ADDRESS
    metrics_address: str = defaults.METRICS_ADDRESS
    grpc_inference_port: int = defaults.GRPC_INFERENCE_PORT
    grpc_management_port: int = defaults.GRPC_MANAGEMENT_PORT
    memory_mb: int | None = None  # what TorchServe may use; None: the cgroup limit, else the machine's memory
    protocol: str = defaults.PROTOCOL  # "oip": also the Open Inference Protocol front `tsvk serve` starts
    oip_address: str = defaults.OIP_ADDRESS
    oip_rest_port: int = defaults.OIP_REST_PORT
    oip_grpc_port: int = defaults.OIP_GRPC_PORT
    tls_key: Path | None = None  # with tls_cert: https on every address, gRPC over TLS (TorchServe's keys; tools/tls.py)
    tls_cert: Path | None = None


@dataclass(frozen=True)
class ModelPlan:
    name: str
    workers: int
    batch: int
    max_batch_delay_ms: int
    response_timeout_s: int
    intra_op_threads: int
    inter_op_threads: int = 1
    measured: str = ""  # `tsvk tune`: the measurement that chose these numbers, written above the model's lines


@dataclass(frozen=True)
class ModelChoice:
    """Numbers for one model decided elsewhere (by `tsvk tune`'s measurements) instead of by the rule."""

    workers: int
    intra_op_threads: int
    inter_op_threads: int
    batch: int
    max_batch_delay_ms: int
    measured: str = ""


@dataclass(frozen=True)
class ServingPlan:
    request: ServingRequest
    vcpus: int
    gpus: int
    models: tuple[ModelPlan, ...] = field(default_factory=tuple)
    origin: str = "tsvk config"  # the command that wrote the file, named in its first line

    @property
    def total_workers(self) -> int:
        return sum(m.workers for m in self.models)


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
    plan = plan_serving(request)
    write_text_atomic(Path(output), render_properties(plan))
    return plan


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


def write_plan(plan: ServingPlan, output: Path) -> ServingPlan:
    write_text_atomic(Path(output), render_properties(plan))
    return plan


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
        served_tls(_tls_properties(request))
    except TlsError as err:
        return [str(err)]
    return []


def _tls_properties(request: ServingRequest) -> dict[str, str]:
    """TorchServe's key file settings, as absolute paths (the server runs in its run directory)."""
    return {PRIVATE_KEY_FILE: os.path.abspath(request.tls_key), CERTIFICATE_FILE: os.path.abspath(request.tls_cert)}


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


def render_properties(plan: ServingPlan) -> str:
    """The config.properties text: deterministic, one `# why` comment above every property, each value escaped
    so that TorchServe's Java reader gets it exactly (handlers/tsvk/common/properties.py)."""
    lines = [f"# Generated by `{plan.origin}`; edit the command, not this file.", f"# Plan: {_summary(plan)}", ""]
    for why, key, value in _properties(plan):
        lines += [f"# {why}", f"{key}={escape_value(value)}"]
    return "\n".join(lines) + "\n"


def _summary(plan: ServingPlan) -> str:
    per_model = ", ".join(f"{m.name}: {m.workers} worker(s) x {m.intra_op_threads} thread(s), batch {m.batch}" for m in plan.models)
    return f"{plan.vcpus} vCPUs, {plan.gpus} GPU(s); {per_model}"


def _properties(plan: ServingPlan) -> list[tuple[str, str, str]]:
    return (
        _network(plan)
        + _tls(plan)
        + _security(plan)
        + _capacity(plan)
        + _models(plan)
        + _threads(plan)
        + _deadlines(plan)
        + _pinning(plan)
        + _open_inference_protocol(plan)
    )


def _network(plan: ServingPlan) -> list[tuple[str, str, str]]:
    r = plan.request
    return [
        ("predictions are the public API: listen on every interface", "inference_address", _scheme(r, r.inference_address)),
        ("model management stays on localhost unless deliberately exposed", "management_address", _scheme(r, r.management_address)),
        ("metrics stay on localhost unless a scraper outside the host needs them", "metrics_address", _scheme(r, r.metrics_address)),
        ("TorchServe always starts gRPC too (it cannot be switched off): keep it on localhost", "grpc_inference_address", "127.0.0.1"),
        ("gRPC model management on localhost only", "grpc_management_address", "127.0.0.1"),
        ("gRPC inference port (TorchServe's default 7070)", "grpc_inference_port", str(r.grpc_inference_port)),
        ("gRPC management port (TorchServe's default 7071)", "grpc_management_port", str(r.grpc_management_port)),
        ("Prometheus text format on /metrics, including the handler's own metrics", "metrics_mode", "prometheus"),
        ("handler metrics (preprocess/inference ms, batch size) are published without a metrics yaml", "model_metrics_auto_detect", "true"),
        (
            f"photos up to {r.max_request_mb} MiB (TorchServe's default 6.5 MiB rejects large phone JPEGs)",
            "max_request_size",
            str(r.max_request_mb * 1024 * 1024),
        ),
    ]


def _scheme(request: ServingRequest, address: str) -> str:
    """With --tls-key and --tls-cert every address is https (TorchServe chooses TLS by the address's scheme)."""
    if request.tls_key is None or not address.startswith("http://"):
        return address
    return "https://" + address.removeprefix("http://")


def _tls(plan: ServingPlan) -> list[tuple[str, str, str]]:
    """TorchServe's own TLS keys, which tsvk's engine reads too (tools/tls.py)."""
    if plan.request.tls_key is None:
        return []
    files = _tls_properties(plan.request)
    return [
        ("TLS: the addresses above are https, served with this private key (PEM, unencrypted, readable by its owner only; "
         "TorchServe reads RSA keys)", PRIVATE_KEY_FILE, files[PRIVATE_KEY_FILE]),
        ("and its certificate (PEM, the server's first): it must name the hosts clients connect to (127.0.0.1 for tsvk's "
         "own, as 0.0.0.0 is asked there); tsvk's clients trust it", CERTIFICATE_FILE, files[CERTIFICATE_FILE]),
        ("gRPC over TLS too, with the same key and certificate (TorchServe's gRPC ports; the Open Inference Protocol's)",
         GRPC_SSL, "true"),
    ]


def _security(plan: ServingPlan) -> list[tuple[str, str, str]]:
    r = plan.request
    store = Path(r.model_store).resolve() if r.archive_check else Path(r.model_store)
    auth = [
        (
            "token authorization on: TorchServe writes key_file.json at start; send 'Authorization: Bearer <inference key>'",
            "disable_token_authorization",
            "false",
        ),
        (
            f"keys expire after {r.token_expiry_min} min (TorchServe's default, 60, is implicit); `tsvk serve` renews them at "
            "half that age and clients re-read key_file.json when refused (docs/robustness.md)",
            "token_expiration_min",
            str(r.token_expiry_min),
        ),
    ]
    if not r.auth:
        auth = [
            (
                "token authorization off (--auth off): protect the ports another way (network policy, private network)",
                "disable_token_authorization",
                "true",
            )
        ]
    return auth + [
        ("the model-registration API is off: only the archives named below are ever served", "enable_model_api", "false"),
        ("archives may only come from the model store, never from a URL", "allowed_urls", f"file://{re.escape(str(store))}/.*"),
        ("TS_* environment variables cannot silently override this file", "enable_envvars_config", "false"),
    ]


def _capacity(plan: ServingPlan) -> list[tuple[str, str, str]]:
    r = plan.request
    netty = max(1, min(4, plan.vcpus // 2))
    client = max(1, min(4, plan.total_workers))
    queue = max(100, 2 * r.concurrency)
    lines = [
        ("the model store holding the archives", "model_store", str(Path(r.model_store).resolve() if r.archive_check else r.model_store)),
        ("HTTP I/O threads: request parsing is cheap, so few threads leave the cores to torch", "number_of_netty_threads", str(netty)),
        ("frontend-to-worker I/O threads: one per worker, at most 4", "netty_client_threads", str(client)),
        (f"room for {r.concurrency} concurrent clients twice over before TorchServe answers 503", "job_queue_size", str(queue)),
        (
            "workers for any model registered without its own entry below",
            "default_workers_per_model",
            str(plan.models[0].workers if plan.models else 1),
        ),
        ("seconds a request may wait for its worker", "default_response_timeout", str(max(m.response_timeout_s for m in plan.models))),
    ]
    gpus = plan.gpus
    gpu_why = (
        "no GPU: workers run on the CPU"
        if gpus == 0
        else (
            f"{gpus} GPU(s); TorchServe assigns each model's workers round-robin, "
            f"{', '.join(f'{m.name} {m.workers / gpus:g} per GPU' for m in plan.models)}"
        )
    )
    lines.append((gpu_why, "number_of_gpu", str(gpus)))
    return lines


def _models(plan: ServingPlan) -> list[tuple[str, str, str]]:
    entries = {
        m.name: {
            MODEL_VERSION: {
                "defaultVersion": True,
                "marName": f"{m.name}.mar",
                "minWorkers": m.workers,
                "maxWorkers": m.workers,
                "batchSize": m.batch,
                "maxBatchDelay": m.max_batch_delay_ms,
                "responseTimeout": m.response_timeout_s,
            }
        }
        for m in plan.models
    }
    why = (
        "fixed worker counts (min = max: no scaling surprises): as asked, one per GPU or the archive's suggestion, else on the "
        "CPU\n# one single-threaded worker per vCPU, as many as memory holds; batch size within each archive's compiled max batch"
        "\n# and, for a detector on CPU workers, within one forward slice of its largest inputs"
    )
    tuned = "; ".join(f"{m.name}: {m.measured}" for m in plan.models if m.measured)
    return [
        ("serve exactly these archives at start", "load_models", ",".join(f"{m.name}.mar" for m in plan.models)),
        (f"{why}\n# tuned: {tuned}" if tuned else why, "models", json.dumps(entries, sort_keys=True, separators=(",", ":"))),
    ]


def _deadlines(plan: ServingPlan) -> list[tuple[str, str, str]]:
    deadline = plan.request.deadline_ms
    if deadline is None:
        return []
    return [
        (
            f"{m.name}: a request that waited over {deadline} ms before reaching a worker is answered 503 deadline_exceeded "
            "without being computed (arrival from the X-Request-Start header)",
            f"{DEADLINE_KEY_PREFIX}{m.name}",
            str(deadline),
        )
        for m in plan.models
    ]


def _threads(plan: ServingPlan) -> list[tuple[str, str, str]]:
    lines = []
    for m in plan.models:
        lines.append((_threads_why(plan, m), f"{THREADS_KEY_PREFIX}{m.name}", f"{m.intra_op_threads},{m.inter_op_threads}"))
        if m.measured:
            lines.append((f"{m.name}: what `tsvk tune` measured for these workers, threads, batch and delay (`tsvk config --tuned` "
                          "reads it back)", f"{TUNED_KEY_PREFIX}{m.name}", m.measured))
    return lines


def _threads_why(plan: ServingPlan, model: ModelPlan) -> str:
    if model.measured:
        return (
            f"{model.name}: {model.intra_op_threads} intra-op, {model.inter_op_threads} inter-op torch thread(s) per worker, "
            "read by the tsvk handler at load"
        )
    return (
        f"{model.name}: {plan.vcpus} vCPUs / {plan.total_workers} worker(s) = {model.intra_op_threads} torch thread(s) per worker, "
        "read by the tsvk handler at load"
    )


def _pinning(plan: ServingPlan) -> list[tuple[str, str, str]]:
    if not plan.request.core_pinning:
        return []
    threads = plan.models[0].intra_op_threads
    return [
        ("pin each worker to its own cores with torch.backends.xeon.run_cpu (one instance per worker)", "cpu_launcher_enable", "true"),
        (
            f"{threads} core(s) per instance; taskset instead of numactl, which slim images lack",
            "cpu_launcher_args",
            f"--ncores-per-instance {threads} --disable-numactl",
        ),
    ]


def _open_inference_protocol(plan: ServingPlan) -> list[tuple[str, str, str]]:
    """The front's settings (tools/oip): TorchServe ignores these keys, `tsvk serve` reads them."""
    r = plan.request
    if r.protocol != "oip":
        return []
    where = "localhost only" if r.oip_address in ("127.0.0.1", "::1", "localhost") else "as asked (--oip-address)"
    return [
        (
            f"Open Inference Protocol (KServe v2) front, started by `tsvk serve` or the Helm chart (protocol=oip): "
            f"listens on {r.oip_address} ({where})",
            "tsvk.oip.address",
            r.oip_address,
        ),
        ("its REST port (/v2/...; inference requests need the same token as /predictions)", "tsvk.oip.rest_port", str(r.oip_rest_port)),
        ("its gRPC port (inference.GRPCInferenceService)", "tsvk.oip.grpc_port", str(r.oip_grpc_port)),
        (
            "images one request may hold; each becomes one TorchServe request, batched with all others",
            "tsvk.oip.max_images",
            str(defaults.OIP_MAX_IMAGES),
        ),
    ]
