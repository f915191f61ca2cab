"""The vision service every engine runs, knowing none of them: load once, then answer batches.

`VisionService.load` takes a `ServiceSpec` (the unpacked archive, its settings, the serving config) and
`answer_batch` takes request bodies and their arrival times; an engine is an adapter around those two.
TorchServe's is `from_context` / `handle`, which only translate its context (system_properties,
model_yaml_config, metrics, request headers, set_response_status) to and from them, so tests drive it
with a small fake and each handler module stays a few lines; tsvk's own engine (tsvk_tools.engines.kserve)
calls `load` and `answer_batch` in its worker processes. The settings name the task (classify, detect, segment); the task
(`tasks/`) owns the transform and the answer, while reading, decoding, errors, metrics, threads and
loading are the same for all. Every request of a batch gets exactly one answer (top-k, boxes, a label
map), or an error body with its own HTTP status; nothing a client sends can kill the worker.

A batch moves through three stages (read, preprocess, infer); each returns what it produced and
which requests it failed, and `BatchRecord` collects those fates, so no stage writes into another's
state. Protocols meet the service only at its two edges: `request.read_request` reads each request once
(an encoded image, or pixels the client preprocessed itself, whatever the protocol), and
`request.write_answer` / `write_error` write each answer in the protocol its request spoke.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch

from ..common import features
from .deadline import arrival_times, batch_time_budget_s, deadline_from_config, request_age_ms
from ..preprocess.decode import EncodedImage, probe
from ..common.errors import PHRASES, BadImage, DeadlineExceeded, InferenceFailed, RequestError
from .heap import HeapTrimmer, reuse_freed_heap
from ..request import Request, read_request, write_answer, write_error
from ..request.base import unreadable
from ..common.labels import load_labels
from ..tasks.loaded_model import LoadedModel
from ..model.loading import bind_worker_device, load_model, worker_device
from ..model.cpu_precision import BF16_REMEDY, cpu_flags, emulated_bf16
from .metrics import BatchMetrics
from ..preprocess import BackendChoice, build_preprocessor
from ..common.settings import HandlerSettings
from .stopping import StopMarker, refusal
from ..tasks import task_class
from ..tasks.base import Task
from ..tasks.geometry import check_resized_pixels
from ..common.properties import read_properties
from .threads import apply_threads, find_torchserve_config, resolve_threads
from .worker_starts import record_worker_start

log = logging.getLogger(__name__)


@dataclass
class BatchOutcome:
    """One answer per request, and the HTTP status of each."""

    answers: list[Any]
    statuses: list[int]


@dataclass(frozen=True)
class StageResult:
    """What one stage produced, by input position, and the requests it failed."""

    produced: Mapping[int, Any] = field(default_factory=dict)
    failed: Mapping[int, RequestError] = field(default_factory=dict)


@dataclass(frozen=True)
class Prepared:
    """The preprocessed batch (the task's model input): its i-th image is the request at `positions[i]`."""

    positions: list[int]
    batch: Any
    failed: Mapping[int, RequestError]


@dataclass(frozen=True)
class Admitted:
    """One request's image header (or the pixels its client preprocessed) and its answer options."""

    image: EncodedImage | torch.Tensor
    options: dict


class BatchRecord:
    """Each request's fate in one batch, assembled from the stages' results in the order they ran."""

    def __init__(self, size: int):
        self.size = size
        self.failures: dict[int, RequestError] = {}
        self.answers: dict[int, Any] = {}

    def add(self, failed: Mapping[int, RequestError], answers: Mapping[int, Any] | None = None) -> None:
        self.failures.update(failed)
        self.answers.update(answers or {})

    def outcome(self, requests: Sequence[Request] | None = None, model_name: str = "") -> BatchOutcome:
        """Each answer or error written in the protocol its request spoke."""
        request = (lambda i: requests[i]) if requests else (lambda i: None)
        answers = [write_error(request(i), self.failures[i]) if i in self.failures
                   else write_answer(request(i), self.answers.get(i), model_name) for i in range(self.size)]
        statuses = [self.failures[i].status if i in self.failures else 200 for i in range(self.size)]
        return BatchOutcome(answers, statuses)


@dataclass(frozen=True)
class WorkerInfo:
    """What the worker learned about itself at load: its deadline, the time it gives one batch (a share of
    its response timeout) and how many workers started before it."""

    deadline_ms: int | None = None
    start_number: int = 0
    batch_budget_s: float | None = None  # None: a batch runs to its end


@dataclass(frozen=True)
class ServiceSpec:
    """What loading a service needs, whatever serves it: the unpacked archive and its settings (model-config.yaml),
    the serving config (threads, deadline, response timeout; None: the archive's own values) and the worker's GPU.

    The serving config comes as `served_properties`, what the server read of it for this model
    (ServedConfig.for_worker), or else as `config_path`, the file read here (TorchServe gives its workers nothing else)."""

    model_dir: Path
    model_yaml_config: Mapping[str, Any]
    model_name: str | None = None  # None: the name in the settings
    gpu_id: int | str | None = None  # None: the CPU
    config_path: Path | None = None
    batch_size: int | None = None  # for the load log line only: the engine batches
    metrics: Any = None  # a TorchServe-shaped metrics cache (metrics.py), or None: no metrics from the service
    gauge_type: Any = None
    served_properties: Mapping[str, str] | None = None

    def serving_properties(self) -> tuple[Mapping[str, str] | None, str]:
        """The serving config's properties for this model, and where they came from (for the load log line)."""
        if self.served_properties is not None:
            return self.served_properties, "the server"
        if self.config_path is not None:
            return read_properties(self.config_path), f"config {self.config_path}"
        return None, ""


class VisionService:
    def __init__(self, task: Task, metrics: BatchMetrics | None = None, worker: WorkerInfo = WorkerInfo(),
                 stop_marker: StopMarker | None = None):
        self.task = task
        self.settings: HandlerSettings = task.settings
        self.model: LoadedModel = task.model
        self.preprocessor = task.preprocessor
        self.labels = task.labels
        self.metrics = metrics
        self.worker = worker
        self.heap = HeapTrimmer(self.settings.runtime.heap_trim_interval_ms)
        self.stop_marker = stop_marker or StopMarker()

    @classmethod
    def load(cls, spec: "ServiceSpec") -> "VisionService":
        """Read the settings, set threads, load the model and pick the preprocessing backend."""
        settings = HandlerSettings.from_model_yaml(spec.model_yaml_config)
        model_name = spec.model_name or settings.model_name
        device = worker_device(spec.gpu_id)
        bind_worker_device(device)  # before any CUDA work: libraries allocate on the current device
        config, source = spec.serving_properties()
        plan = resolve_threads(settings.runtime, model_name, config, source)
        apply_threads(plan)  # before loading: some loaders start thread pools
        labels = load_labels(spec.model_dir / settings.labels_file)
        model = load_model(settings.artifact, spec.model_dir, device, num_classes=len(labels) if labels else None, task=settings.task)
        preprocessor, choice = build_preprocessor(settings.preprocess, model.device, model.input_dtype)
        worker = WorkerInfo(deadline_from_config(config or {}, model_name), record_worker_start(spec.model_dir),
                            batch_time_budget_s(config or {}, model_name))
        _log_loaded(settings, model, choice, spec.batch_size, plan.source, worker)
        if settings.runtime.heap_trim_interval_ms:  # freed memory is kept only where a trimmer hands it back
            reuse_freed_heap()
        metrics = BatchMetrics(spec.metrics, choice.name, model_name, spec.gauge_type, worker.start_number)
        return cls(task_class(settings.task)(settings, model, preprocessor, labels), metrics, worker)

    @classmethod
    def from_context(cls, context: Any, gauge_type: Any = None) -> "VisionService":
        """TorchServe's load: the service's spec read from its context, and the config its frontend started on."""
        properties = context.system_properties
        return cls.load(ServiceSpec(Path(properties.get("model_dir") or "."), context.model_yaml_config,
                                    getattr(context, "model_name", None), properties.get("gpu_id"), find_torchserve_config(),
                                    properties.get("batch_size"), getattr(context, "metrics", None), gauge_type))

    def handle(self, data: Sequence[Any], context: Any = None) -> list[Any]:
        """TorchServe's entry point: arrival times read from its context, answers in request order, statuses set on it."""
        outcome = self.answer_batch(data, arrival_times(context, len(data)) if context is not None else None)
        if context is not None:
            report_statuses(context, outcome.statuses)
        return outcome.answers

    def answer_batch(self, data: Sequence[Any], arrivals: Sequence[float | None] | None = None) -> BatchOutcome:
        """Any engine's entry point: one answer and status per request body, in order; then the heap is
        trimmed when it is time (heap.py)."""
        started = time.monotonic()
        outcome = self.answer(data, arrivals)
        self.heap.after_batch(time.monotonic() - started)
        return outcome

    def answer(self, data: Sequence[Any], arrivals: Sequence[float | None] | None = None) -> BatchOutcome:
        record = BatchRecord(len(data))
        started = time.perf_counter()  # preprocessing time includes reading the headers: a bomb's cost shows
        requests = [read_request(body, self.settings.preprocess.crop, self.task.parameters, self.settings.task) for body in data]
        if self.stop_marker.stopping():  # a stop is under way: refuse before decoding, in the protocol each request spoke
            record.add({position: refusal() for position in range(len(data))})
            return record.outcome(requests, self.settings.model_name)
        read = self._admit(requests, arrivals)
        record.add(read.failed)
        prepared = self._preprocess(read.produced)
        record.add(prepared.failed)
        preprocessed = time.perf_counter()
        inferred = self._infer(prepared, read.produced, started)
        record.add(inferred.failed, inferred.produced)
        finished = time.perf_counter()
        outcome = record.outcome(requests, self.settings.model_name)
        if self.metrics is not None:
            preprocess_ms, inference_ms = (preprocessed - started) * 1e3, (finished - preprocessed) * 1e3
            self.metrics.record(len(data), len(prepared.positions), preprocess_ms, inference_ms, outcome.statuses)
        return outcome

    def _admit(self, requests: Sequence[Request], arrivals: Sequence[float | None] | None) -> StageResult:
        """Each request's image header (or its preprocessed pixels) and answer options, or why it is refused
        (too old, unreadable, too large, bad option)."""
        admitted: dict[int, Admitted] = {}
        failed: dict[int, RequestError] = {}
        for position, request in enumerate(requests):
            late = self._late(arrivals[position] if arrivals else None)
            if late is not None or request.error is not None:
                failed[position] = late or request.error
                continue
            try:
                options = self.task.options(request.fields)  # a bad option is refused before the image is probed
                admitted[position] = Admitted(self._image_or_pixels(request), options)
            except RequestError as err:
                failed[position] = err.detached()
            except Exception as err:  # noqa: BLE001 - whatever the request holds, fail it alone
                failed[position] = unreadable(err)
        return StageResult(admitted, failed)

    def _image_or_pixels(self, request: Request) -> EncodedImage | torch.Tensor:
        """The image's header, checked against the pixel limits before any backend (CPU, nvJPEG, CV-CUDA)
        decodes it; or the pixels a client preprocessed itself."""
        if request.pixels is None:
            limits = self.settings.preprocess
            image = probe(request.image, limits.max_pixels, limits.max_jpeg_scans, limits.max_jpeg_scan_blocks,
                          max_jpeg_pixels=limits.max_jpeg_pixels, min_short_side=self.preprocessor.min_short_side)
            check_resized_pixels(image, limits)
            return image
        return torch.from_numpy(request.pixels)

    def _late(self, arrival_s: float | None) -> DeadlineExceeded | None:
        deadline = self.worker.deadline_ms
        age = request_age_ms(arrival_s) if deadline else None
        if age is None or age <= deadline:
            return None
        return DeadlineExceeded(
            f"request waited {age:.0f} ms before reaching a worker; the deadline is {deadline} ms "
            "(the server is overloaded: retry later or with fewer concurrent requests)"
        )

    def _preprocess(self, items: Mapping[int, Admitted]) -> Prepared:
        """Input positions that made it into the batch, the batch, and the requests that did not."""
        ready = {p: item.image for p, item in items.items() if isinstance(item.image, torch.Tensor)}
        prepared = self._preprocess_encoded({p: item for p, item in items.items() if not isinstance(item.image, torch.Tensor)})
        return self._with_ready(prepared, ready) if ready else prepared

    def _with_ready(self, prepared: Prepared, ready: Mapping[int, torch.Tensor]) -> Prepared:
        """Pixels the clients preprocessed themselves join the batch in input order, on the model's device and dtype."""
        rows = dict(zip(prepared.positions, prepared.batch)) if prepared.batch is not None else {}
        rows.update({p: pixels.to(self.model.device, self.model.input_dtype) for p, pixels in ready.items()})
        order = sorted(rows)
        return Prepared(order, torch.stack([rows[p] for p in order]), prepared.failed)

    def _preprocess_encoded(self, encoded: Mapping[int, Admitted]) -> Prepared:
        if not encoded:
            return Prepared([], None, {})
        order = sorted(encoded)
        try:
            return self._prepare(order, encoded)
        except Exception:  # noqa: BLE001 - find the images that fail alone; the rest of the batch goes on
            log.exception("preprocessing failed for a batch of %d; preparing its images one by one", len(order))
        failing = {p: error for p in order if (error := self._fails_alone(p, encoded)) is not None}
        rest = [p for p in order if p not in failing]
        if not rest:
            return Prepared([], None, failing)
        try:
            prepared = self._prepare(rest, encoded)
        except Exception:  # noqa: BLE001 - each image prepares alone but not together: the backend is at fault
            log.exception("preprocessing failed again for the %d images that prepare alone", len(rest))
            error = InferenceFailed("preprocessing failed for this batch (the worker's log has the cause)")
            return Prepared([], None, {**failing, **{p: error for p in rest}})
        return Prepared(prepared.positions, prepared.batch, {**failing, **prepared.failed})

    def _prepare(self, order: list[int], encoded: Mapping[int, Admitted]) -> Prepared:
        result = self.task.prepare([encoded[p].image for p in order])
        failed = {order[i]: error for i, error in result.failed.items()}
        return Prepared([order[i] for i in result.kept], result.batch, failed)

    def _fails_alone(self, position: int, encoded: Mapping[int, Admitted]) -> RequestError | None:
        """Why this image cannot be prepared, or None where it can: an image that fails alone is its request's
        400, whatever the exception (its transform is what the image asks for: an extreme shape, say)."""
        try:
            self._prepare([position], encoded)
        except Exception:  # noqa: BLE001
            image = encoded[position].image
            size = f"{image.width}x{image.height} {image.format} " if isinstance(image, EncodedImage) else ""
            log.warning("the %simage of request %d fails to prepare alone", size, position, exc_info=True)
            return BadImage(f"cannot preprocess the {size}image: its transform fails on it (an extreme shape, say)")
        return None

    def _infer(self, prepared: Prepared, read: Mapping[int, Admitted], started: float) -> StageResult:
        """The task's answers by input position, or every position failed when the model fails; the images
        the batch had no time left for (see `WorkerInfo.batch_budget_s`) are refused 503."""
        if prepared.batch is None or not prepared.positions:
            return StageResult()
        budget = self.worker.batch_budget_s
        try:
            answers = self.task.answer_within(
                prepared.batch, [read[p].options for p in prepared.positions], started + budget if budget else None
            )
        except Exception:  # noqa: BLE001 - the model failing fails this batch, not the worker
            log.exception("inference failed for a batch of %d", len(prepared.positions))
            error = InferenceFailed("inference failed for this batch (the worker's log has the cause)")
            return StageResult(failed={p: error for p in prepared.positions})
        unanswered = prepared.positions[len(answers) :]
        if unanswered:
            log.warning(
                "batch of %d out of time after %d answers (%.0f s of the response timeout's share)",
                len(prepared.positions),
                len(answers),
                budget,
            )
        late = (
            DeadlineExceeded(
                f"the worker's batch ran out of time before this image ({budget:.0f} s of its response timeout); "
                "retry later, or send fewer large photos at once"
            )
            if unanswered
            else None
        )
        return StageResult(dict(zip(prepared.positions, answers)), {p: late for p in unanswered})


def _log_loaded(
    settings: HandlerSettings, model: LoadedModel, choice: BackendChoice, batch_size: Any, threads_from: str, worker: WorkerInfo
) -> None:
    """The one line an operator reads to know what this worker runs, and on what."""
    log.info(
        "tsvk loaded %s (task %s): artifact format=%s file=%s device=%s precision=%s preprocess=%s (%s) "
        "batch_size=%s threads=intra %d, inter %d (%s)%s; deadline %s; features %s",
        settings.model_name,
        settings.task,
        settings.artifact.format,
        settings.artifact.file,
        model.device,
        settings.artifact.precision,
        choice.name,
        choice.reason,
        batch_size,
        torch.get_num_threads(),
        torch.get_num_interop_threads(),
        threads_from,
        f"; {model.note}" if model.note else "",
        f"{worker.deadline_ms} ms" if worker.deadline_ms else "none",
        features.describe(("cuda", "nvjpeg", "cvcuda", "heif", "avif", "spng"), model.device),
    )
    _warn_emulated_bf16(settings, model)
    log.info(
        "tsvk worker start %d for %s since the model was loaded (a count above the model's workers means workers died and were restarted)",
        worker.start_number,
        settings.model_name,
    )


def _warn_emulated_bf16(settings: HandlerSettings, model: LoadedModel) -> None:
    """A bf16 archive on a CPU that emulates bf16 serves, slower than fp32 would: said once per worker, with the fix."""
    problem = emulated_bf16(settings.artifact.precision, model.device.type, cpu_flags())
    if problem:
        log.warning("tsvk: %s is %s; %s", settings.model_name, problem, BF16_REMEDY)


def report_statuses(context: Any, statuses: list[int]) -> None:
    """Per-request HTTP status: TorchServe 0.12 sends the code set for each index with that response."""
    for index, status in enumerate(statuses):
        if status != 200:
            context.set_response_status(status, PHRASES.get(status, "Error"), index)
