"""Command-line options: presets, the central figure, and refusals that name what is allowed."""

import pytest

from tsvk_tools.lab.bench.options import BenchOptions
from tsvk_tools.lab.bench.bench_cli import build_parser, options_from_args
from tsvk_tools.errors import UsageError


def _options(*argv):
    return options_from_args(build_parser().parse_args(list(argv)), list(argv))


def test_full_run_defaults_to_resnet152_and_every_system():
    options = _options()
    assert options.model == "resnet152"
    assert "decentralized" in options.systems and "ceiling" in options.systems
    assert options.command.startswith("tsvk bench")


def test_quick_uses_a_small_model_unless_one_is_named():
    assert _options("--quick").model == "resnet18"
    assert _options("--quick", "--model", "resnet50", "--jobs", "10").jobs == 10
    assert _options("--quick", "--model", "resnet50").model == "resnet50"


def test_central_figure_is_stock_defaults_against_ours_at_concurrency_32():
    options = _options("--central-figure", "--model", "resnet50")
    assert options.systems == ("torchserve_default", "ours")
    assert options.concurrency == 32
    assert options.tag == "central"


def test_images_and_systems_are_lists():
    options = _options("--image", "skimage:coffee,skimage:chelsea", "--systems", "ours,ceiling")
    assert options.images == ("skimage:coffee", "skimage:chelsea")
    assert options.systems == ("ours", "ceiling")


def test_unknown_system_is_refused_with_the_choices(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--systems", "ours,tensorflow_serving"])
    assert "torchserve_default" in capsys.readouterr().err


def test_invalid_combinations_are_reported_together():
    with pytest.raises(UsageError) as info:
        BenchOptions(batch=16, max_batch=8, backend="onnx", jobs=0)
    message = str(info.value)
    assert "batch (16) must not exceed max_batch (8)" in message
    assert "backend must be one of" in message
    assert "jobs must be >= 1" in message


def test_warmup_defaults_to_two_rounds_of_a_full_batch():
    assert BenchOptions(concurrency=32, batch=8).warmup_requests == 32
    assert BenchOptions(concurrency=4, batch=8).warmup_requests == 8
    assert BenchOptions(warmup=0).warmup_requests == 0


def test_unmeasured_load_precedes_time_bounded_rounds_only():
    from tsvk_tools.lab.bench.options import WARMUP_SECONDS

    assert BenchOptions(round_seconds=20).warmup_load_seconds == WARMUP_SECONDS > 0
    assert BenchOptions(round_seconds=0).warmup_load_seconds == 0
    assert BenchOptions(round_seconds=0, warmup_seconds=3).warmup_load_seconds == 3
    assert BenchOptions(round_seconds=20, warmup_seconds=0).warmup_load_seconds == 0
    with pytest.raises(UsageError, match="warmup_seconds must be >= 0"):
        BenchOptions(warmup_seconds=-1)


def test_task_models_get_the_systems_that_serve_them():
    from tsvk_tools.lab.bench.options import TASK_SYSTEMS

    detector = BenchOptions(model="fasterrcnn_mobilenet_v3_large_320_fpn")
    segmenter = BenchOptions(model="deeplabv3_mobilenet_v3_large")
    assert detector.systems == TASK_SYSTEMS["detect"] and {"ours_fast", "ceiling_fast"} <= set(detector.systems)
    assert (detector.fast_backend, detector.fast_precision) == ("openvino", "int8")
    assert segmenter.systems == TASK_SYSTEMS["segment"] and {"ours_fast", "ceiling_fast", "ceiling_pipeline_fast"} <= set(segmenter.systems)
    assert segmenter.fast_precision == "int8"
    with pytest.raises(UsageError, match="ours_oip_rest cannot serve the detect model"):
        BenchOptions(model="fasterrcnn_mobilenet_v3_large_320_fpn", systems=("ours", "ours_oip_rest"))


def test_another_models_run_does_not_overwrite_the_presets_latest():
    assert _options().tag == ""
    assert _options("--model", "resnet152").tag == ""
    assert _options("--model", "deeplabv3_mobilenet_v3_large").tag == "deeplabv3_mobilenet_v3_large"
    assert _options("--quick").tag == "quick"
    assert _options("--quick", "--model", "resnet50").tag == "resnet50-quick"
    assert _options("--model", "resnet50", "--tag", "mine").tag == "mine"


def test_quick_is_one_short_round_of_every_system_at_its_first_variant():
    quick, full = _options("--quick"), _options()
    assert (quick.rounds, quick.round_seconds, quick.warmup_seconds, quick.max_variants) == (1, 3.0, 1.0, 1)
    assert (full.rounds, full.round_seconds, full.warmup_seconds, full.max_variants) == (3, 20.0, None, None)
    assert quick.systems == full.systems  # the same rows, shorter
    assert (_options("--quick", "--rounds", "2", "--round-seconds", "5").rounds,
            _options("--quick", "--rounds", "2", "--round-seconds", "5").round_seconds) == (2, 5.0)


def test_a_hand_tuned_system_tries_at_most_max_variants():
    from types import SimpleNamespace

    from tsvk_tools.lab.bench.harness import _variants_to_try

    system = SimpleNamespace(variants=lambda ctx: [{"workers": 1}, {"workers": 2}, {"workers": 4}])
    assert _variants_to_try(system, SimpleNamespace(options=SimpleNamespace(max_variants=1))) == [{"workers": 1}]
    assert len(_variants_to_try(system, SimpleNamespace(options=SimpleNamespace(max_variants=None)))) == 3
    with pytest.raises(UsageError, match="max_variants must be >= 1, got 0"):
        BenchOptions(max_variants=0)


def test_photos_as_sent_is_its_own_set_with_its_own_tag_and_rows():
    options = _options("--quick", "--photos", "as-sent")
    assert options.as_sent and options.tag == "as-sent-quick"
    assert {"torchserve_draft", "litserve_draft"} < set(options.systems)
    assert _options("--quick", "--photos", "as-sent-no-heic").tag == "as-sent-no-heic-quick"
    default = _options("--quick")
    assert not default.as_sent and default.photos == "default" and default.tag == "quick"
    assert not {"torchserve_draft", "litserve_draft"} & set(default.systems)  # asked for by name only


def test_an_unknown_photo_set_is_refused_with_the_choices(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--photos", "phone"])
    assert "--photos: must be one of default, as-sent, as-sent-no-heic; got 'phone'" in capsys.readouterr().err
    with pytest.raises(UsageError, match="photos must be one of default, as-sent, as-sent-no-heic, got 'raw'"):
        BenchOptions(photos="raw")


def test_photos_as_sent_and_image_are_not_mixed():
    with pytest.raises(UsageError, match="photos as-sent is its own set of photos; leave out images"):
        _options("--photos", "as-sent", "--image", "skimage:coffee")
