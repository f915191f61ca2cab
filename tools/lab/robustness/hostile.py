"""Send each hostile class (attacks.py) to each model over each transport, a good request in every
batch, and measure per class: statuses, the slowest answer, the worker time it cost beyond ordinary
requests, the worst worker RSS growth, worker deaths, and whether the good requests beside it were
answered as they are alone. Also: a burst of large but allowed photos, and good requests through the
OIP front with tritonclient (the real client)."""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Sequence

from tsvk.common import task_kind

from ...keys import call_with_fresh_key, current_key
from ...measure.sampler import cpu_seconds
from . import checks, watch
from .attacks import FRONT_REST, PREDICTIONS, Attack, hostile_classes, large_burst
from .checks import judged
from .client import CLIENT_ERROR, Answer, histogram, send
from .parts import Service, _deaths

GRPC_INFER = "/inference.GRPCInferenceService/ModelInfer"
# gRPC codes as the HTTP statuses the reports count (the front maps its refusals the same way round)
GRPC_STATUS = {"OK": 200, "INVALID_ARGUMENT": 400, "UNAUTHENTICATED": 401, "NOT_FOUND": 404, "RESOURCE_EXHAUSTED": 413,
               "UNIMPLEMENTED": 501, "UNAVAILABLE": 503, "DEADLINE_EXCEEDED": 504}
# 404: a model the front does not serve (it serves classifiers); 422: the front's schema validation;
# 503: only the documented ones (Answer.label counts the rest apart)
HOSTILE_ALLOWED = (200, 400, 401, 404, 413, 415, 422, 503)
NOT_SERVED = 404  # an input answered so never reached a worker: left out of the worker time per input


def send_attack(service: Service, model: str, attack: Attack) -> Answer:
    """One attack over its transport; a front transport without a front is recorded as not sent (404)."""
    if attack.transport == PREDICTIONS:
        return send(service.target_for(model), attack.payload, attack.content_type)
    if service.front is None:
        return Answer(404, 0.0, "no OIP front", "client")
    if attack.transport == FRONT_REST:
        return send(service.front_target(model), attack.payload, attack.content_type, extra_headers=dict(attack.headers))
    return send_grpc(service, model, attack.payload)


def send_grpc(service: Service, model: str, request: bytes) -> Answer:
    """A serialized ModelInferRequest to the front's gRPC port, the model named in front of it
    (serialized protobuf messages merge when concatenated), with the current inference key."""
    import grpc
    from tritonclient.grpc import service_pb2

    named = service_pb2.ModelInferRequest(model_name=model).SerializeToString() + request
    started = time.monotonic()

    def call(auth: dict[str, str]) -> tuple[int, bytes]:
        metadata = [(k.lower(), v) for k, v in auth.items()]
        with grpc.insecure_channel(service.front[1], options=[("grpc.max_send_message_length", 64 * 2**20)]) as channel:
            infer = channel.unary_unary(GRPC_INFER, request_serializer=None, response_deserializer=None)
            try:
                infer(named, metadata=metadata, timeout=service.client_timeout_s)
                return 200, b""
            except grpc.RpcError as err:
                details = (err.details() or "").encode()
                return GRPC_STATUS.get(err.code().name, 500), err.code().name.encode() + b": " + details

    status, body = call_with_fresh_key(call, service.run.run_dir)
    return Answer(status, time.monotonic() - started, body.split(b":")[0].decode() or None, "front", body)


def answer_signature(answer: Answer) -> tuple:
    """What must not change when a good request shares its batch with hostile ones: the status and
    every label the answer names (scores may move in the last digits between batch sizes)."""
    try:
        body = json.loads(answer.body)
    except ValueError:
        return answer.status, ()
    return answer.status, tuple(sorted(_labels(body)))


def _labels(value) -> list[str]:
    if isinstance(value, dict):
        return [str(k) for k in value if not isinstance(value[k], (dict, list))] + [x for v in value.values() for x in _labels(v)]
    if isinstance(value, list):
        return [x for v in value for x in _labels(v)]
    return [value] if isinstance(value, str) and len(value) < 64 else []


class WorkerMeter:
    """Worker CPU seconds and per-worker peak RSS while a block runs (sampled every 0.1 s)."""

    def __init__(self, service: Service):
        self.service = service

    def __enter__(self):
        self.rss_before = watch.worker_rss(self.service.run)
        self.cpu_before = _worker_cpu_s(self.service)
        self.peak = watch.PeakWorkerRss(self.service.run).__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.peak.__exit__(*exc)
        self.cpu_s = _worker_cpu_s(self.service) - self.cpu_before
        common = self.rss_before.keys() & self.peak.peaks_mb.keys()
        self.growth_mb = max((self.peak.peaks_mb[w] - self.rss_before[w] for w in common), default=None)


def _worker_cpu_s(service: Service) -> float:
    return sum(cpu_seconds(process) or 0.0 for name, process in watch.named(service.run).items() if name.startswith("worker"))


ATTACK_BURST = 4  # requests sent together at least, so a good request shares its batch with hostile ones


def burst_size(service: Service, model: str) -> int:
    """Requests sent together to `model`: a full batch, at least ATTACK_BURST (with a batch of 2, the good
    request's batch mate is one of the burst's hostile inputs all the same)."""
    return max(ATTACK_BURST, service.batches.get(model, 2))


def good_baseline(service: Service, model: str) -> dict:
    """A good request alone (the reference answer, after one to warm up), then a burst of good requests
    shaped as the attacks' bursts: the worker time of each and the worker growth of the burst are what
    ordinary answers cost, and what an attack is measured beyond."""
    send(service.target_for(model), service.photo)
    reference = send(service.target_for(model), service.photo)
    burst = burst_size(service, model)
    with WorkerMeter(service) as meter:
        together = _together([lambda: send(service.target_for(model), service.photo) for _ in range(burst)])
    return {"reference": reference, "signature": answer_signature(reference), "statuses": histogram([reference, *together]),
            "worker_s_per_request": meter.cpu_s / burst, "growth_mb": meter.growth_mb or 0.0}


def _together(jobs: Sequence) -> list[Answer]:
    """Every job at once: a barrier releases them together, so the server batches them."""
    barrier = threading.Barrier(len(jobs))

    def run(job):
        barrier.wait()
        return job()

    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        return list(pool.map(run, jobs))


def attack_class(service: Service, model: str, attacks: list[Attack], baseline: dict) -> dict:
    """The class's inputs in bursts of (batch - 1) with one good request each; its figures."""
    batch = burst_size(service, model)
    pids_before = watch.worker_pids(service.run, model)
    hostile_answers, good = [], []
    with WorkerMeter(service) as meter:
        for start in range(0, len(attacks), batch - 1):
            chunk = attacks[start:start + batch - 1]
            jobs = [lambda a=a: send_attack(service, model, a) for a in chunk] + [lambda: send(service.target_for(model), service.photo)]
            *answers, good_answer = _together(jobs)
            hostile_answers += answers
            good.append((good_answer.status, answer_signature(good_answer) == baseline["signature"]))
    pids_after = watch.worker_pids(service.run, model)
    sent = len(hostile_answers)
    reached = sum(1 for a in hostile_answers if a.status != NOT_SERVED)
    # A hostile input answered 200 (an option at its allowed extreme, beside a valid photo) is an ordinary answer
    # as far as the worker's time goes: it is charged like the good requests, and only the rest is extra.
    ordinary = len(good) + sum(1 for a in hostile_answers if a.status == 200)
    extra_s = (meter.cpu_s - ordinary * baseline["worker_s_per_request"]) / reached if reached else 0.0
    extra_mb = None if meter.growth_mb is None else meter.growth_mb - baseline.get("growth_mb", 0.0)
    return {
        "hostile": attacks[0].hostile if attacks else True, "sent": sent,
        "answered": sum(1 for a in hostile_answers if a.status != CLIENT_ERROR),
        "transports": sorted({a.transport for a in attacks}), "statuses": histogram(hostile_answers),
        "slowest_s": round(max((a.seconds for a in hostile_answers), default=0.0), 3),
        "extra_worker_s_per_input": round(max(0.0, extra_s), 3),
        "worst_worker_growth_mb": None if meter.growth_mb is None else round(meter.growth_mb, 1),
        "extra_worker_growth_mb": None if extra_mb is None else round(max(0.0, extra_mb), 1),
        "worker_deaths": _deaths(pids_before, pids_after), "pids_before": sorted(pids_before or ()), "pids_after": sorted(pids_after or ()),
        "good_beside": good, "errors": sorted({f"{a.label}:{a.error}" for a in hostile_answers if a.status != 200})[:12],
    }


def hostile(service: Service, seed: int) -> dict:
    """Every hostile class against every served model; per-class figures and the checks over them."""
    per_class, baselines = {}, {}
    for model, task in service.tasks.items():
        baselines[model] = good_baseline(service, model)
        for name, attacks in hostile_classes(task, service.photo, seed).items():
            print(f"robustness: {model}: {name} ({len(attacks)} inputs)", flush=True)
            per_class[f"{model}: {name}"] = attack_class(service, model, attacks, baselines[model])
    statuses = _sum_histograms(c["statuses"] for c in per_class.values())
    pids_ok = [checks.no_worker_died(set(c["pids_before"]) if c["pids_before"] else None, set(c["pids_after"]) if c["pids_after"] else None)
               for c in per_class.values()]
    dead = [v.reason for v in pids_ok if not v.ok]
    return {
        "models": dict(service.tasks),
        "inputs": sum(c["sent"] for c in per_class.values()),
        "answered": sum(c["answered"] for c in per_class.values()),
        "statuses": statuses,
        "good_baselines": {m: {k: v for k, v in b.items() if k != "reference"} for m, b in baselines.items()},
        "per_class": per_class,
        **judged(
            {
                "0 worker deaths": checks.Verdict(
                    not dead and bool(pids_ok), "; ".join(dead[:4]) or f"no worker died in {len(pids_ok)} classes"
                ),
                "only allowed statuses (no undocumented 5xx)": checks.statuses_allowed(statuses, HOSTILE_ALLOWED),
                "every hostile input refused or bounded (worker time, memory)": checks.hostile_bounded(per_class),
                "good requests in the same batch answered as alone": checks.good_answered_beside_hostile(
                    [g for c in per_class.values() for g in c["good_beside"]]
                ),
            }
        ),
    }


def _sum_histograms(histograms) -> dict[str, int]:
    total: dict[str, int] = {}
    for h in histograms:
        for status, n in h.items():
            total[status] = total.get(status, 0) + n
    return dict(sorted(total.items()))


def large_photos(service: Service, count: int, side: int) -> dict:
    """`count` large but allowed photos at once to each detector and segmenter: each answered; the
    peak worker RSS growth (goal: checks.BURST_GROWTH_MB)."""
    per_model, statuses = {}, []
    for model, task in service.tasks.items():
        if task_kind(task).crops:  # a classifier's crop does not grow with the photo
            continue
        burst = large_burst(count, side)
        with WorkerMeter(service) as meter:
            answers = _together([lambda a=a: send_attack(service, model, a) for a in burst])
        statuses += [a.status for a in answers]
        per_model[model] = {
            "photos": count,
            "megapixels": round(side * side / 1e6, 1),
            "statuses": histogram(answers),
            "slowest_s": round(max(a.seconds for a in answers), 2),
            "peak_worker_growth_mb": None if meter.growth_mb is None else round(meter.growth_mb, 1),
        }
    growths = [m["peak_worker_growth_mb"] for m in per_model.values()]
    return {
        "per_model": per_model,
        **judged(
            {
                "every large allowed photo answered 200": checks.all_status(statuses, 200, "large allowed photos"),
                f"peak worker growth under {checks.BURST_GROWTH_MB:g} MiB": checks.below(
                    None if not growths or None in growths else max(growths), checks.BURST_GROWTH_MB, "peak worker RSS growth (MiB)"
                ),
            }
        ),
    }


def oip_clients(service: Service) -> dict:
    """Good requests through the front with tritonclient (HTTP and gRPC), to the classifier: the same
    top label as /predictions gives for the same photo."""
    import numpy as np

    classifier = next((m for m, t in service.tasks.items() if task_kind(t).top_k), None)
    if service.front is None or classifier is None:
        return {**judged({"tritonclient HTTP and gRPC answered as /predictions": checks.failed("no OIP front or no classifier served")})}
    expected = _top_label(send(service.target_for(classifier), service.photo).body)
    images = np.array([service.photo], dtype=np.object_)
    got = {}
    for transport in ("http", "grpc"):
        try:
            got[transport] = _triton_top_label(transport, service, classifier, images)
        except Exception as err:  # the client's own exception types: recorded as what was answered
            got[transport] = f"failed: {type(err).__name__}: {str(err)[:200]}"
    agree = expected is not None and all(label == expected for label in got.values())
    return {
        "expected": expected,
        "answered": got,
        **judged({"tritonclient HTTP and gRPC answered as /predictions": checks.Verdict(agree, f"/predictions {expected!r}, front {got}")}),
    }


def _top_label(body: bytes) -> str | None:
    try:
        answer = json.loads(body)
    except ValueError:
        return None
    return max(answer, key=answer.get) if isinstance(answer, dict) and answer else None


def _triton_top_label(transport: str, service: Service, model: str, images) -> str:
    if transport == "http":
        import tritonclient.http as client
    else:
        import tritonclient.grpc as client
    rest, grpc_target = service.front
    triton = client.InferenceServerClient(rest.removeprefix("http://") if transport == "http" else grpc_target)
    tensor = client.InferInput("images", [1], "BYTES")
    tensor.set_data_from_numpy(images)
    key = current_key(service.run.run_dir)
    headers = {"authorization": f"Bearer {key}"} if key else {}
    labels = triton.infer(model, [tensor], headers=headers).as_numpy("labels")
    first = labels[0][0]
    return first.decode() if isinstance(first, bytes) else str(first)
