"""The robustness run's hostile classes, routing, counting and per-class figures, without a server:
every class of attack is present for every task and transport, built the same from the same seed, and
each is what it claims to be (a scan bomb repeats its scan, a bomb declares its pixels, expansion stays
under the request limit); inputs are counted from the answers; a run without a drain measurement fails."""

from __future__ import annotations

import io
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from PIL import Image
from tritonclient.grpc import service_pb2

from tsvk_tools.lab.robustness import attacks, hostile
from tsvk.common import TASKS
from tsvk_tools.lab.robustness.attacks import FRONT_GRPC, FRONT_REST, PREDICTIONS
from tsvk_tools.lab.robustness.client import Answer, histogram
from tsvk_tools.lab.robustness.parts import FUZZ_ROUTE_CYCLE, fuzz_route
from tsvk_tools.lab.robustness.robustness_cli import counted_inputs, drain_part
from tsvk_tools.lab.robustness.grpc_calls import Outcome as GrpcOutcome, summary as grpc_summary
from tsvk_tools.lab.robustness.service import ServiceSpec
from tsvk_tools.engines.kserve.engine_process import ENGINE as KSERVE

PHOTO = attacks.noise_photo(0, (64, 48))
ISSUE_CLASSES = ("scan bomb", "pixel bomb png", "pixel bomb gif", "pixel bomb bmp", "pixel bomb jpeg", "pixel bomb webp",
                 "pixel bomb jpeg-progressive", "nested json", "oip wrong types", "malformed binary header", "json expansion")


@pytest.fixture(scope="module")
def classes():
    return {task: attacks.hostile_classes(task, PHOTO, seed=3) for task in TASKS}


@pytest.mark.parametrize("task", TASKS)
def test_every_class_of_attack_is_sent_to_every_task(classes, task):
    assert set(ISSUE_CLASSES) | {f"options {task}"} == set(classes[task])
    assert all(classes[task][name] for name in classes[task])
    transports = {a.transport for attacks_ in classes[task].values() for a in attacks_}
    assert transports == {PREDICTIONS, FRONT_REST, FRONT_GRPC}


def test_the_same_seed_builds_the_same_bytes(classes):
    again = attacks.hostile_classes("detect", PHOTO, seed=3)
    assert [a.payload for c in again.values() for a in c] == [a.payload for c in classes["detect"].values() for a in c]


def test_the_scan_bomb_repeats_one_ac_scan_of_a_progressive_jpeg_within_the_pixel_bound():
    bomb = attacks.scan_bomb(repeats=50, side=512)
    plain = attacks.progressive_jpeg(512)
    assert len(attacks.jpeg_scans(bomb)) == len(attacks.jpeg_scans(plain)) + 50
    assert all(s[2] > 0 for s in attacks.jpeg_scans(bomb)[-45:-5]) or len(attacks.jpeg_scans(bomb)) > 50
    image = Image.open(io.BytesIO(bomb))
    assert image.size == (512, 512) and image.info.get("progressive") or image.info.get("progression")
    image.load()  # decoders accept the repeats (with a warning): the cost is real work, not an error


def test_pixel_bombs_declare_144_megapixels_in_every_format():
    for fmt, bomb in attacks.pixel_bombs().items():
        if fmt == "webp":
            continue  # libwebp refuses a canvas larger than its frame; corpus.declare_size sends a real 49 MP one
        assert Image.open(io.BytesIO(bomb)).size == (attacks.BOMB_SIDE, attacks.BOMB_SIDE) == (12_000, 12_000), fmt


def test_json_expansion_stays_just_under_the_request_limit_and_parses():
    for attack in attacks.json_expansion():
        body = attack.payload
        assert attacks.EXPANSION_BYTES - 64 < len(body) <= attacks.EXPANSION_BYTES < 16 * 2**20
        assert body.count(b"[],") > len(body) // 3 - 30
    for attack in attacks.json_expansion(size=30_000):  # the same bodies, small enough to parse here
        assert len(attack.payload) <= 30_000 and json.loads(attack.payload)


def test_nested_json_is_deep():
    depths = [a.payload.count(b"[") + a.payload.count(b"{") for a in attacks.nested_json(__import__("random").Random(0))]
    assert min(depths) >= 600 and max(depths) >= 50_000


def test_oip_documents_carry_each_wrong_type():
    documents = [json.loads(a.payload) for a in attacks.oip_wrong_types(PHOTO) if a.transport == PREDICTIONS]
    tensors = [d["inputs"][0] for d in documents if isinstance(d.get("inputs"), list) and d["inputs"] and isinstance(d["inputs"][0], dict)]
    assert any(isinstance(t.get("name"), list) for t in tensors)
    assert any(t.get("shape") == ["1"] for t in tensors) and any(t.get("datatype") == "FP64" for t in tensors)
    assert any(len(json.dumps(t.get("data"))) > 4 * 2**20 for t in tensors)


def test_grpc_attacks_are_model_infer_requests():
    for attack in attacks.oip_wrong_types(PHOTO):
        if attack.transport == FRONT_GRPC:
            request = service_pb2.ModelInferRequest.FromString(
                service_pb2.ModelInferRequest(model_name="m").SerializeToString() + attack.payload
            )
            assert request.model_name == "m" and len(request.inputs) == 1


def test_binary_headers_lie_about_their_lengths():
    lengths = [dict(a.headers)["Inference-Header-Content-Length"] for a in attacks.malformed_binary_headers(PHOTO)]
    assert {"abc", "-1", "99999999999999999999"} <= set(lengths)


@pytest.mark.parametrize(
    "task,option,values",
    [
        ("detect", "score_threshold", {"0", "NaN", "-1", "abc"}),
        ("detect", "max_detections", {"1000000000", "-5"}),
        ("classify", "topk", {"1000000", "-1"}),
        ("segment", "label_map_max_side", {"70000", "-1", "NaN"}),
    ],
)
def test_options_of_each_task_are_pushed_to_their_extremes(task, option, values):
    bodies = [a.payload for a in attacks.option_fields(task, PHOTO)]
    form_values = {
        b.split(f'name="{option}"\r\n\r\n'.encode())[1].split(b"\r\n")[0].decode() for b in bodies if f'name="{option}"'.encode() in b
    }
    assert values <= form_values


def test_large_allowed_photos_are_small_on_the_wire_and_within_the_pixel_bound():
    burst = attacks.large_burst(8, 2000)
    assert len(burst) == 8 and not any(a.hostile for a in burst)
    image = Image.open(io.BytesIO(burst[0].payload))
    assert image.size == (2000, 2000) and len(burst[0].payload) < 100_000


def test_fuzz_routes_reach_every_model_and_the_front_in_their_shares():
    tasks = {"tiny": "classify", "det": "detect", "seg": "segment"}
    routes = [fuzz_route(i, tasks, front=True) for i in range(10 * FUZZ_ROUTE_CYCLE)]
    assert routes.count(("det", "predictions")) == 10 and routes.count(("seg", "predictions")) == 40
    assert routes.count(("tiny", "front")) == 40 and routes.count(("tiny", "predictions")) == 310
    assert {fuzz_route(i, {"tiny": "classify"}, front=False) for i in range(FUZZ_ROUTE_CYCLE)} == {("tiny", "predictions")}


def test_inputs_are_counted_from_the_answers_not_the_arguments():
    counted = counted_inputs({"fuzz": {"inputs": 9_000, "answered": 9_000}, "hostile classes": {"inputs": 600, "answered": 599}})
    assert (counted["sent"], counted["answered"]) == (9_600, 9_599) and not any(counted["checks"].values())
    assert not any(counted_inputs({})["checks"].values())


def test_a_run_without_a_drain_measurement_fails_its_drain_checks():
    assert not any(drain_part(None, None)["checks"].values())
    measured = drain_part(lambda spec, load: {"accepted": 40, "lost": 0, "exit_s": 12.0, "drain_timeout_s": 30.0}, None)
    assert all(measured["checks"].values())


def test_the_drain_of_the_engine_speaking_the_protocol_checks_its_grpc_calls_too():
    spec = ServiceSpec(Path("store"), "tiny", Path("work"), oip=True, engine=KSERVE)
    rest_only = {"accepted": 40, "lost": 0, "exit_s": 12.0, "drain_timeout_s": 30.0}
    assert not drain_part(lambda spec, load: rest_only, spec)["checks"]["every gRPC call in flight at the stop answered"]
    with_grpc = {**rest_only, "grpc_in_flight": {"sent": 16, "answered": 16, "answered_after_stop_began": 9}}
    assert all(drain_part(lambda spec, load: with_grpc, spec)["checks"].values())


def test_grpc_calls_at_the_stop_are_counted_by_what_each_got_and_when():
    outcomes = [GrpcOutcome("OK", 9.0), GrpcOutcome("OK", 11.0), GrpcOutcome("CANCELLED", 11.0), GrpcOutcome()]
    assert grpc_summary(outcomes, stop_began=10.0) == {"sent": 4, "answered": 2, "answered_after_stop_began": 1,
                                                       "statuses": {"OK": 2, "CANCELLED": 1, "no end": 1}}


def test_an_undocumented_503_is_counted_apart_from_overload_and_deadline():
    failed_batch = Answer(503, 0.1, "InternalServerException", "torchserve", b'{"code": 503, "type": "InternalServerException"}')
    deadline = Answer(503, 0.1, "deadline_exceeded", "tsvk", b'{"error": "deadline_exceeded", "source": "tsvk"}')
    queue_full = Answer(
        503, 0.1, "ServiceUnavailableException", "torchserve", b'{"message": "Model \\"m\\" has no worker to serve inference request."}'
    )
    assert histogram([failed_batch, deadline, queue_full]) == {"503": 2, "503 InternalServerException": 1}


def test_a_good_answer_is_judged_on_its_status_and_labels():
    alone = Answer(200, 0.1, None, "tsvk", json.dumps([{"label": "cat", "score": 0.91}, {"label": "dog", "score": 0.5}]).encode())
    batched = Answer(200, 0.1, None, "tsvk", json.dumps([{"label": "cat", "score": 0.90999}, {"label": "dog", "score": 0.5}]).encode())
    failed = Answer(503, 0.1, None, "torchserve", b"{}")
    assert hostile.answer_signature(alone) == hostile.answer_signature(batched) != hostile.answer_signature(failed)


def test_per_class_figures_count_what_was_sent_and_answered(monkeypatch):
    service = SimpleNamespace(batches={"m": 4}, run=None, target_for=lambda m: None, photo=PHOTO)
    answers = iter([Answer(400, 0.01, "bad_image", "tsvk"), Answer(0, 5.0, "ReadTimeout", "client"), Answer(413, 0.02, "x", "tsvk")])
    monkeypatch.setattr(hostile, "send_attack", lambda service, model, attack: next(answers))
    monkeypatch.setattr(hostile, "send", lambda target, body, *a, **k: Answer(200, 0.1, None, "tsvk", b'{"cat": 0.9}'))
    monkeypatch.setattr(hostile, "WorkerMeter", _FakeMeter)
    monkeypatch.setattr(hostile.watch, "worker_pids", lambda run, model: {7})
    figures = hostile.attack_class(
        service,
        "m",
        [attacks.Attack("k", PREDICTIONS, body=b"x")] * 3,
        {"signature": (200, ("cat",)), "worker_s_per_request": 0.05, "growth_mb": 3.0},
    )
    assert (figures["sent"], figures["answered"]) == (3, 2) and figures["statuses"] == {"0": 1, "400": 1, "413": 1}
    assert figures["good_beside"] == [(200, True)] and figures["worst_worker_growth_mb"] == 12.0
    assert figures["extra_worker_growth_mb"] == 9.0  # beyond the 3 MiB one good request costs
    assert figures["extra_worker_s_per_input"] == pytest.approx((0.5 - 0.05) / 3, abs=1e-3)


class _FakeMeter:
    def __init__(self, service):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.cpu_s, self.growth_mb = 0.5, 12.0


def test_a_hostile_option_answered_200_is_charged_as_an_ordinary_answer(monkeypatch):
    """An option at its allowed extreme beside a valid photo is served in full: its worker time is an ordinary
    answer's, and only what the burst cost beyond its ordinary answers is extra."""
    service = SimpleNamespace(batches={"m": 2}, run=None, target_for=lambda m: None, photo=PHOTO)
    monkeypatch.setattr(hostile, "send_attack", lambda service, model, attack: Answer(200, 0.1, None, "tsvk", b'{"cat": 0.9}'))
    monkeypatch.setattr(hostile, "send", lambda target, body, *a, **k: Answer(200, 0.1, None, "tsvk", b'{"cat": 0.9}'))
    monkeypatch.setattr(hostile, "WorkerMeter", _FakeMeter)
    monkeypatch.setattr(hostile.watch, "worker_pids", lambda run, model: {7})
    # one burst of two attacks and a good request; 0.5 s of worker time against 0.1 s per ordinary answer
    figures = hostile.attack_class(
        service,
        "m",
        [attacks.Attack("k", PREDICTIONS, body=b"x")] * 2,
        {"signature": (200, ("cat",)), "worker_s_per_request": 0.1, "growth_mb": 3.0},
    )
    assert figures["extra_worker_s_per_input"] == pytest.approx((0.5 - 3 * 0.1) / 2, abs=1e-3)


def test_the_good_baseline_is_a_burst_shaped_as_the_attacks(monkeypatch):
    service = SimpleNamespace(batches={"m": 5}, run=None, target_for=lambda m: None, photo=PHOTO)
    sent = []
    monkeypatch.setattr(hostile, "send", lambda target, body, *a, **k: sent.append(body) or Answer(200, 0.1, None, "tsvk", b"{}"))
    monkeypatch.setattr(hostile, "WorkerMeter", _FakeMeter)
    baseline = hostile.good_baseline(service, "m")
    assert len(sent) == 2 + 5  # warm-up, reference, then a burst of a full batch
    assert baseline["worker_s_per_request"] == pytest.approx(0.5 / 5) and baseline["growth_mb"] == 12.0
