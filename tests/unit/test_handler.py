"""The handler end to end on a fake TorchServe context: answers, per-request errors, metrics."""

import base64
import inspect
import json
import struct
from pathlib import Path

import pytest
import torch
from PIL import Image

from tsvk.worker import metrics as tsvk_metrics
from tsvk.worker.service import VisionService
from tsvk.common.settings import SettingsError
from tsvk.worker.stopping import STOP_MARKER_ENV

from tests.support.handler_fakes import FakeContext, encode, noise_image, photo, write_tiny_eager_archive
from tests.support.torchserve import model_metrics_yaml_section

torch.set_num_threads(1)
HANDLERS = Path(__file__).resolve().parents[2] / "handlers"


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    model_dir = tmp_path_factory.mktemp("archive")
    return model_dir, write_tiny_eager_archive(model_dir)


@pytest.fixture
def context(archive):
    model_dir, config = archive
    return FakeContext(model_dir, config)


@pytest.fixture
def service(context):
    return VisionService.from_context(context)


def _good(seed=0):
    return encode(noise_image(64, 48, seed=seed), "JPEG")


def _bomb():
    return encode(Image.new("1", (9000, 5000)), "PNG")  # 45 MP > the 40 MP default limit


def test_answers_are_topk_label_probability_dicts(service, context):
    answers = service.handle([{"data": _good()}, {"body": encode(photo("coffee", (80, 60)), "PNG")}], context)
    assert len(answers) == 2 and context.statuses == {}
    for answer in answers:
        assert len(answer) == 3  # runtime.topk in the archive
        assert all(label.startswith("class_") for label in answer)
        probabilities = list(answer.values())
        assert probabilities == sorted(probabilities, reverse=True) and 0 < sum(probabilities) <= 1.0 + 1e-6


def test_same_image_same_answer_whatever_the_encoding(service, context):
    data = _good(3)
    answers = service.handle(
        [{"data": data}, {"body": base64.b64encode(data).decode()}, {"body": {"image": base64.b64encode(data).decode()}}], context
    )
    assert answers[0] == answers[1] == answers[2]


def test_bad_requests_fail_alone_with_their_own_status(service, context):
    truncated = encode(noise_image(300, 200), "JPEG")
    batch = [
        {"data": _good(1)},
        {"data": truncated[: len(truncated) // 2]},
        {"body": b""},
        {"body": b"this is plain text"},
        {"data": _bomb()},
        {"data": _good(2)},
    ]
    answers = service.handle(batch, context)
    assert len(answers) == len(batch)
    assert {i: code for i, (code, _) in context.statuses.items()} == {1: 400, 2: 400, 3: 400, 4: 413}
    assert "cannot decode the JPEG image" in answers[1]["message"]
    assert "empty" in answers[2]["message"]
    assert "not a recognised image" in answers[3]["message"]
    assert answers[4] == {
        "code": 413,
        "type": "ImageTooLarge",
        "error": "image_too_large",
        "source": "tsvk",
        "message": answers[4]["message"],
    }
    assert [answers[i]["error"] for i in (1, 2, 3)] == ["bad_image"] * 3
    assert "max_pixels" in answers[4]["message"]
    assert all(label.startswith("class_") for label in answers[0]) and all(label.startswith("class_") for label in answers[5])
    json.dumps(answers)  # TorchServe json-encodes each answer


def test_answers_do_not_depend_on_batch_neighbours(service, context):
    alone = service.handle([{"data": _good(5)}], context)[0]
    among = service.handle([{"data": _good(6)}, {"data": b"junk"}, {"data": _good(5)}], context)[2]
    assert alone.keys() == among.keys()
    assert list(alone.values()) == pytest.approx(list(among.values()), abs=1e-5)


def test_inference_failure_answers_500_for_that_batch_and_the_worker_lives(service, context, monkeypatch, caplog):
    def broken(batch):
        raise RuntimeError("kernel exploded")

    monkeypatch.setattr(service.model, "forward", broken)
    answers = service.handle([{"data": _good()}, {"data": b""}], context)
    assert context.statuses[0][0] == 500 and answers[0]["message"].startswith("inference failed")
    assert "kernel exploded" not in answers[0]["message"] and "kernel exploded" in caplog.text  # the log has the cause
    assert context.statuses[1][0] == 400
    monkeypatch.undo()
    context.statuses.clear()
    assert service.handle([{"data": _good()}], context)[0] and context.statuses == {}


def test_batches_larger_than_the_artifact_are_run_in_chunks(service, context, monkeypatch):
    sizes = []
    real = service.model.forward
    monkeypatch.setattr(service.model, "forward", lambda batch: sizes.append(len(batch)) or real(batch))
    answers = service.handle([{"data": _good(i)} for i in range(11)], context)
    assert len(answers) == 11 and sizes == [8, 3]  # artifact.max_batch defaults to 8


def test_metrics_per_batch_with_the_backend_dimension(service, context):
    service.handle([{"data": _good()}, {"data": b""}, {"data": _bomb()}], context)
    recorded = context.metrics
    assert recorded.values(tsvk_metrics.BATCH_SIZE) == [3]
    assert recorded.values(tsvk_metrics.IMAGES_TOTAL) == [1]
    assert len(recorded.values(tsvk_metrics.PREPROCESS_MS)) == len(recorded.values(tsvk_metrics.INFERENCE_MS)) == 1
    assert all(value >= 0 for value in recorded.values(tsvk_metrics.PREPROCESS_MS))
    backends = {dims.get("Backend") for _, name, _, dims in recorded.calls if name != tsvk_metrics.REJECTED_TOTAL}
    assert backends == {"cpu"}
    assert {tuple(dims) for _, _, _, dims in recorded.calls} <= {("ModelName", "Level", "Backend"), ("ModelName", "Level", "Status")}
    assert {dims["ModelName"] for _, _, _, dims in recorded.calls} == {"tiny"}
    rejected = {dims["Status"]: value for _, name, value, dims in recorded.calls if name == tsvk_metrics.REJECTED_TOTAL}
    assert rejected == {"400": 1, "413": 1}


def test_a_broken_metrics_sink_does_not_fail_requests(service, context):
    class Broken:
        def __getattr__(self, name):
            raise RuntimeError("metrics cache full")

    service.metrics.metrics = Broken()
    assert service.handle([{"data": _good()}], context)[0]


def test_metric_definitions_match_what_is_recorded():
    definitions = tsvk_metrics.metric_definitions()
    assert set(definitions) == {
        tsvk_metrics.PREPROCESS_MS,
        tsvk_metrics.INFERENCE_MS,
        tsvk_metrics.BATCH_SIZE,
        tsvk_metrics.IMAGES_TOTAL,
        tsvk_metrics.REJECTED_TOTAL,
        tsvk_metrics.WORKER_STARTS,
    }
    section = model_metrics_yaml_section()
    assert {entry["name"] for entry in section["gauge"]} == {
        tsvk_metrics.PREPROCESS_MS,
        tsvk_metrics.INFERENCE_MS,
        tsvk_metrics.BATCH_SIZE,
        tsvk_metrics.WORKER_STARTS,
    }


def test_missing_labels_give_index_strings(tmp_path):
    config = write_tiny_eager_archive(tmp_path, labels=False)
    context = FakeContext(tmp_path, config)
    answer = VisionService.from_context(context).handle([{"data": _good()}], context)[0]
    assert all(label.isdigit() for label in answer)


def test_labels_in_synset_form_use_the_name(tmp_path):
    config = write_tiny_eager_archive(tmp_path)
    (tmp_path / "index_to_name.json").write_text(json.dumps({str(i): [f"n0{i}", f"name_{i}"] for i in range(10)}))
    context = FakeContext(tmp_path, config)
    answer = VisionService.from_context(context).handle([{"data": _good()}], context)[0]
    assert all(label.startswith("name_") for label in answer)


def test_classes_named_alike_are_all_answered():
    """ImageNet names two classes "crane": a top-k answer keeps both, the second with its index."""
    from tsvk.tasks.answers import topk_answers

    logits = torch.tensor([[0.0, 3.0, 2.0, 1.0]])
    answer = topk_answers(logits, ["tench", "crane", "crane", "maillot"], k=3)[0]
    assert list(answer) == ["crane", "crane (2)", "maillot"]


def test_bad_settings_fail_at_load_naming_the_key(tmp_path):
    config = write_tiny_eager_archive(tmp_path)
    config["tsvk"]["preprocess"]["backend"] = "opencv"
    with pytest.raises(SettingsError, match="tsvk.preprocess.backend must be one of auto, cvcuda, cuda, cpu, got 'opencv'"):
        VisionService.from_context(FakeContext(tmp_path, config))


def test_the_cvcuda_cache_limit_must_be_a_whole_number_of_mib(tmp_path):
    config = write_tiny_eager_archive(tmp_path)
    config["tsvk"]["preprocess"]["cvcuda_cache_mb"] = -1
    with pytest.raises(SettingsError, match="tsvk.preprocess.cvcuda_cache_mb"):
        VisionService.from_context(FakeContext(tmp_path, config))


def test_jpeg_dct_scaling_must_be_a_boolean(tmp_path):
    config = write_tiny_eager_archive(tmp_path)
    config["tsvk"]["preprocess"]["jpeg_dct_scaling"] = "yes"
    with pytest.raises(SettingsError, match="tsvk.preprocess.jpeg_dct_scaling"):
        VisionService.from_context(FakeContext(tmp_path, config))


def test_cuda_artifact_on_this_cpu_worker_fails_at_load(tmp_path):
    config = write_tiny_eager_archive(tmp_path)
    config["tsvk"]["artifact"]["device"] = "cuda"
    with pytest.raises(RuntimeError, match="compiled for cuda but this worker has no GPU"):
        VisionService.from_context(FakeContext(tmp_path, config, gpu_id=0))


def test_load_log_line_names_format_device_precision_backend_batch_and_threads(archive, caplog):
    model_dir, config = archive
    with caplog.at_level("INFO", logger="tsvk.worker.service"):
        VisionService.from_context(FakeContext(model_dir, config, batch_size=4))
    line = next(r.getMessage() for r in caplog.records if "tsvk loaded" in r.getMessage())
    for expected in ("format=eager", "device=cpu", "precision=fp32", "preprocess=cpu", "batch_size=4", "threads=intra"):
        assert expected in line


# --- the TorchServe side of the seam -------------------------------------------------------------


@pytest.mark.parametrize(
    "module_name, class_name",
    [("image_classifier", "ImageClassifier"), ("object_detector", "ObjectDetector"), ("image_segmenter", "ImageSegmenter")],
)
def test_handler_module_defines_exactly_one_class(monkeypatch, module_name, class_name):
    """TorchServe's model loader takes the one class a handler module defines; the shared base is imported."""
    import importlib

    from tsvk.handler import TorchServeHandler

    monkeypatch.syspath_prepend(str(HANDLERS))
    module = importlib.import_module(module_name)
    defined = [c for _, c in inspect.getmembers(module, inspect.isclass) if c.__module__ == module.__name__]
    assert [c.__name__ for c in defined] == [class_name] and issubclass(defined[0], TorchServeHandler)


def test_per_request_status_reaches_torchserve_response_message(archive, monkeypatch):
    """Drive the real ts Context and encoder: the code set for index i is what TorchServe sends for i."""
    from ts.context import Context, RequestProcessor
    from ts.protocol.otf_message_handler import create_predict_response

    monkeypatch.syspath_prepend(str(HANDLERS))
    import image_classifier

    model_dir, config = archive
    context = Context("tiny", str(model_dir), {}, 4, None, "0.12.0", model_yaml_config=config)
    context.metrics = None
    handler = image_classifier.ImageClassifier()
    handler.initialize(context)
    requests = [{"data": _good()}, {"data": b"not an image"}, {"data": _bomb()}]
    context.request_processor = [RequestProcessor({}) for _ in requests]
    answers = handler.handle(requests, context)
    message = create_predict_response(answers, {0: "a", 1: "b", 2: "c"}, "Prediction success", 200, context=context)
    assert _per_request_codes(bytes(message)) == [200, 400, 413]


def _per_request_codes(message: bytes) -> list[int]:
    """Parse TorchServe's predict response: batch code, message, then per request id/type/code/phrase/headers/body."""
    offset = 4
    (length,) = struct.unpack_from("!i", message, offset)
    offset += 4 + length
    codes = []
    while offset < len(message) - 4:
        (id_length,) = struct.unpack_from("!i", message, offset)
        offset += 4 + id_length
        (type_length,) = struct.unpack_from("!i", message, offset)
        offset += 4 + type_length
        (code, phrase_length) = struct.unpack_from("!ii", message, offset)
        codes.append(code)
        offset += 8 + phrase_length
        (header_count,) = struct.unpack_from("!i", message, offset)
        offset += 4
        for _ in range(header_count):
            for _ in range(2):
                (size,) = struct.unpack_from("!i", message, offset)
                offset += 4 + size
        (body_length,) = struct.unpack_from("!i", message, offset)
        offset += 4 + body_length
    return codes


def _cyclic_garbage_after(run) -> list:
    """What only the cycle collector would free after `run()`: collected with DEBUG_SAVEALL, so kept to look at."""
    import gc

    gc.collect()
    gc.disable()
    try:
        run()
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        return list(gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


def test_failed_requests_leave_no_batch_in_reference_cycles(service, context):
    """A kept error's traceback held the batch's frames (its request bytes and tensors) in a cycle that
    only a full collection frees; a served worker grew with every failed request until one ran."""
    truncated = _good()[:300]
    batch = [{"data": _good(1)}, {"data": truncated}, {"data": b"not an image"}, {"data": _bomb()}, {"data": b""}]
    answered = []
    garbage = _cyclic_garbage_after(lambda: answered.append(service.handle(batch, context)))
    assert sorted(code for code, _ in context.statuses.values()) == [400, 400, 400, 413]  # four failed, one answered
    held = [o for o in garbage if isinstance(o, torch.Tensor) or type(o).__name__ in ("frame", "traceback")]
    assert not held, f"{len(held)} tensors/frames/tracebacks of the batch left to the cycle collector"


def test_initialize_freezes_what_the_load_created(archive, monkeypatch):
    import gc

    monkeypatch.delenv("TS_DECODE_INPUT_REQUEST", raising=False)  # initialize sets it: restored after the test
    monkeypatch.syspath_prepend(str(HANDLERS))
    import image_classifier

    model_dir, config = archive
    gc.unfreeze()
    try:
        image_classifier.ImageClassifier().initialize(FakeContext(model_dir, config))
        assert gc.get_freeze_count() > 1000
    finally:
        gc.unfreeze()


def test_once_the_stop_marker_exists_every_request_of_a_batch_is_refused_unanswered_with_503(context, tmp_path, monkeypatch):
    marker = tmp_path / "stopping"
    monkeypatch.setenv(STOP_MARKER_ENV, str(marker))
    service = VisionService.from_context(context)
    assert service.handle([{"data": _good()}], context)[0] and context.statuses == {}
    marker.touch()
    oip = {"body": json.dumps({"inputs": [{"name": "x", "shape": [1], "datatype": "BYTES", "data": ["a"]}]}).encode()}
    answers = service.handle([{"data": _good()}, oip], context)
    assert {i: code for i, (code, _) in context.statuses.items()} == {0: 503, 1: 503}
    assert answers[0]["error"] == "server_stopping" and "send this request again" in answers[0]["message"]
    assert answers[1]["error"].startswith("server_stopping: ")  # the Open Inference Protocol's error shape
