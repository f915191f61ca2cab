"""The ceiling summary: the best batch size is the ceiling, and decode/preprocess rates travel with it."""

from tsvk_tools.bench.apps.ceiling_probe import timed_calls
from tsvk_tools.bench.systems.ceiling import summarize_probe

PROBE = {
    "ready_s": 3.2, "threads": 2, "format": "aoti", "top1": {"0": "tabby"},
    "decode_images_per_s": 900.0, "preprocess_images_per_s": 300.0,
    "batches": {
        "1": {"images_per_s": 60.0, "mean_images_per_s": 58.0, "calls": 10, "call_ms": [16.0] * 10},
        "8": {"images_per_s": 88.0, "mean_images_per_s": 85.0, "calls": 4, "call_ms": [90.0, 91.0, 92.0, 99.0]},
    },
}


def test_best_batch_is_the_ceiling():
    summary = summarize_probe(PROBE)
    assert summary["throughput_ips"] == 88.0
    assert summary["details"]["best_batch"] == 8
    assert summary["requests"] == 10 + 4 * 8
    assert summary["latency_ms"]["p50"] == 91.5
    assert summary["details"]["preprocess_images_per_s"] == 300.0


def test_timed_calls_makes_at_least_the_minimum_calls():
    counter = []
    durations = timed_calls(lambda: counter.append(1), seconds=0.0, min_calls=3)
    assert len(durations) == len(counter) == 3
