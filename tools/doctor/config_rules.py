"""Rules for a TorchServe config.properties: the ones `tsvk config` applies when it writes one.

Each rule takes the parsed config (and, where it needs them, the archives it serves) and returns
findings. The ranges come from tools/limits.py, the worker and thread rule from the generator
(workers x threads never above the vCPUs), the security defaults from what `tsvk config` writes.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from urllib.parse import urlparse

from tsvk.common import HandlerSettings, ServedConfig
from tsvk.worker import THREADS_KEY_PREFIX

from ..limits import BOUNDS, JAVA_INT_MAX
from . import torchserve as ts
from .findings import ERROR, WARNING, Finding
from .properties import Properties

LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")
REGISTRATION_RISK = ("anyone who reaches it can register a model from a URL, and a model is code TorchServe runs "
                     "(the ShellTorch attack, CVE-2023-43654)")


@dataclass
class ServedModel:
    """One model of the config, as TorchServe will start it."""

    name: str
    entry: dict  # its `models=` entry (the default version), {} when only load_models names it
    workers: int
    settings: HandlerSettings | None = None  # a tsvk archive's settings
    foreign: bool = False  # its archive was read and its handler is not tsvk's (tsvk.* keys do not reach it)
    overrides: dict = field(default_factory=dict)  # what the archive's model-config.yaml forces


@dataclass
class Context:
    props: Properties
    vcpus: int
    cores_torch_sees: int  # torch's default intra-op threads in a worker that sets none
    models: list[ServedModel]
    fix_command: str  # the `tsvk config` line that writes a correct config


def unknown_keys(ctx: Context) -> list[Finding]:
    findings = []
    for key in ctx.props.values:
        if key in ts.KEYS or key.startswith(ts.TSVK_PREFIX):
            continue
        close = difflib.get_close_matches(key, sorted(ts.KEYS), n=1)
        findings.append(Finding(WARNING, ctx.props.where(key), f"TorchServe 0.12 ignores the key {key!r}",
                                "a key TorchServe does not know is kept and never read, so the setting silently has no effect",
                                f"did you mean {close[0]!r}?" if close else "remove it, or move it where its reader looks "
                                "(an environment variable, the archive's model-config.yaml)"))
    return findings


def exposure(ctx: Context) -> list[Finding]:
    props, findings = ctx.props, []
    registration = is_true(props.get("enable_model_api", "false"))
    management = props.get("management_address", ts.DEFAULT_ADDRESSES["management_address"])
    if not _local(management):
        severity, why = (ERROR, f"model registration is on, so {REGISTRATION_RISK}") if registration else (
            WARNING, "whoever reaches it can scale workers to exhaust memory, or unregister the models")
        findings.append(Finding(severity, props.where("management_address"), f"the management API listens on {management}",
                                why, f"management_address=http://127.0.0.1:{_port(management, 8081)} (`{ctx.fix_command}` writes it)"))
    grpc = props.get("grpc_management_address", ts.DEFAULT_ADDRESSES["grpc_management_address"])
    if not _local(grpc):
        findings.append(Finding(ERROR if registration else WARNING, props.where("grpc_management_address"),
                                f"gRPC management listens on {grpc}", "it is the same management API over gRPC",
                                "grpc_management_address=127.0.0.1"))
    metrics = props.get("metrics_address", ts.DEFAULT_ADDRESSES["metrics_address"])
    if not _local(metrics):
        findings.append(Finding(WARNING, props.where("metrics_address"), f"metrics listen on {metrics}",
                                "model names, load and latencies are visible to anyone on the network",
                                "metrics_address=http://127.0.0.1:8082 unless a scraper outside the host needs them"))
    if registration:
        urls = props.get("allowed_urls", ts.DEFAULT_ALLOWED_URLS)
        findings.append(Finding(WARNING, props.where("enable_model_api"), "model registration is on (enable_model_api=true)",
                                f"a registered model is code the workers run; archives may come from {urls!r}",
                                "enable_model_api=false and list the archives in load_models; if registration is needed, "
                                "allowed_urls=file://<model store>/.* only"))
    return findings


def auth(ctx: Context) -> list[Finding]:
    props, findings = ctx.props, []
    if is_true(props.get("disable_token_authorization", "false")):
        findings.append(Finding(WARNING, props.where("disable_token_authorization"), "token authorization is off",
                                "any client that reaches a port can infer and, on the management port, manage",
                                f"disable_token_authorization=false (`{ctx.fix_command}` keeps it on; `tsvk serve` renews the keys)"))
    if is_true(props.get("enable_envvars_config", "false")):
        findings.append(Finding(WARNING, props.where("enable_envvars_config"), "TS_* environment variables override this file",
                                "what runs is no longer what the file says (a stray TS_MANAGEMENT_ADDRESS exposes management)",
                                "enable_envvars_config=false"))
    return findings


def limits(ctx: Context) -> list[Finding]:
    props, findings = ctx.props, []
    # key, the limits.py range it falls in, and how many of the key's units one unit of that range is
    checks = [("max_request_size", "max_request_mb", 2**20), ("job_queue_size", "concurrency", 2),
              ("default_response_timeout", "response_timeout_s", 1), ("default_startup_timeout", "response_timeout_s", 1)]
    for key, bound, scale in checks:
        findings += _number_problems(props, key, props.get(key), bound, scale)
    for model in ctx.models:
        for field_name, bound in (
            ("batchSize", "batch"),
            ("maxBatchDelay", "max_batch_delay_ms"),
            ("responseTimeout", "response_timeout_s"),
            ("startupTimeout", "response_timeout_s"),
            ("minWorkers", "workers"),
            ("maxWorkers", "workers"),
        ):
            value = model.entry.get(field_name)
            if value is not None:
                findings += _number_problems(props, f"models[{model.name}].{field_name}", value, bound, 1, key="models")
        unknown = set(model.entry) - ts.MODEL_FIELDS
        if unknown:
            findings.append(
                Finding(
                    WARNING,
                    props.where("models"),
                    f"{model.name}: TorchServe 0.12 ignores {', '.join(sorted(unknown))}",
                    "fields it does not know have no effect",
                    f"use {', '.join(sorted(ts.MODEL_FIELDS))}",
                )
            )
    return findings


def threads(ctx: Context) -> list[Finding]:
    """Workers x intra-op threads, summed over the models, must not pass the vCPUs (the generator's rule)."""
    total, parts = 0, []
    for model in ctx.models:
        per_worker = _intra_threads(ctx, model)
        total += model.workers * per_worker
        parts.append(f"{model.name} {model.workers} x {per_worker}")
    if total <= ctx.vcpus or not ctx.models:
        return []
    unset = [m.name for m in ctx.models if _intra_threads(ctx, m) == ctx.cores_torch_sees and not _threads_key(ctx, m)]
    why = (
        f"{total} torch threads on {ctx.vcpus} vCPUs (the cgroup CPU quota and affinity mask) wait on each other at every "
        "operator: throughput falls and p99 climbs"
    )
    if unset:
        why += (
            f"; {', '.join(unset)} set no thread count, so each worker takes torch's default, every core it sees ({ctx.cores_torch_sees})"
        )
    return [
        Finding(
            WARNING,
            ctx.props.where("models"),
            f"workers x threads = {' + '.join(parts)} = {total} on {ctx.vcpus} vCPUs",
            why,
            f"`{ctx.fix_command}` (single-threaded workers, at most one per vCPU); for other handlers, "
            "torch.set_num_threads(1) in initialize and minWorkers = maxWorkers <= vCPUs",
        )
    ]


def _intra_threads(ctx: Context, model: ServedModel) -> int:
    value = _threads_key(ctx, model)
    if value and not model.foreign:
        try:
            return max(1, int(value.split(",")[0]))
        except ValueError:
            pass
    return ctx.cores_torch_sees


def _threads_key(ctx: Context, model: ServedModel) -> str | None:
    return ctx.props.get(f"{THREADS_KEY_PREFIX}{model.name}")


def _number_problems(props: Properties, name: str, raw, bound: str, scale: float, key: str | None = None) -> list[Finding]:
    key = key or name
    if raw is None:
        return []
    try:
        value = int(raw)
    except (TypeError, ValueError):
        return [
            Finding(
                ERROR,
                props.where(key),
                f"{name}={raw!r} is not a whole number",
                "TorchServe stops at start with a NumberFormatException",
                "write a whole number",
            )
        ]
    low, high = BOUNDS[bound]
    low, high = int(low * scale), min(JAVA_INT_MAX, int(high * scale))
    if value > JAVA_INT_MAX:
        return [
            Finding(ERROR, props.where(key), f"{name}={value} does not fit a Java int", "TorchServe cannot parse it", f"at most {high}")
        ]
    if value < low or value > high:
        why = (
            "a bound this large lets one request or queue take memory without limit" if value > high else "below this nothing can be served"
        )
        return [Finding(WARNING, props.where(key), f"{name}={value} is outside {low}..{high}", why, f"a value from {low} to {high}")]
    return []


def is_true(value: str | None) -> bool:
    return str(value).strip().lower() == "true"


def _host(address: str) -> str:
    parsed = urlparse(address if "://" in address else f"//{address}")
    return parsed.hostname or address


def _local(address: str) -> bool:
    return _host(address) in LOCAL_HOSTS or _host(address).startswith("127.")


def _port(address: str, default: int) -> int:
    try:
        return urlparse(address).port or default
    except ValueError:
        return default


def parse_models(props: Properties) -> tuple[dict[str, dict], list[Finding]]:
    """`models=` (or `model_snapshot`) as {name: default version's entry}; a value TorchServe cannot parse is an error."""
    config = ServedConfig.of(props.values)
    if config.problem is None:
        return {model.name: dict(model.fields) for model in config.models}, []
    return {model.name: dict(model.fields) for model in config.models}, [
        Finding(ERROR, props.where(config.models_key), config.problem, "TorchServe refuses to start",
                'models={"<name>": {"1.0": {"marName": "<name>.mar", "minWorkers": 1, ...}}}')
    ]


RULES = (unknown_keys, exposure, auth, limits, threads)
