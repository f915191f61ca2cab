"""`tsvk bench engines`: its summary of the rounds and the import floor it reports beside the cold start."""

from __future__ import annotations

from tsvk_tools.lab.bench.engines import import_seconds, render, summarize


def _round(index: int, engine: str, cold: float, pss: float) -> dict:
    return {"round": index, "engine": engine, "cold_start_s": cold, "pss_mib": pss, "rss_mib": pss * 1.5, "processes": 4}


def _rounds() -> list[dict]:
    return [_round(0, "torchserve", 10.0, 1200.0), _round(0, "kserve", 7.0, 800.0),
            {"round": 0, "engine": "imports", "import_preload_s": 6.5, "import_without_torchvision_s": 4.0},
            _round(1, "kserve", 6.0, 820.0), _round(1, "torchserve", 9.0, 1210.0),
            {"round": 1, "engine": "imports", "import_preload_s": 7.5, "import_without_torchvision_s": 4.2}]


def test_summary_keeps_the_import_rounds_apart_from_the_engines():
    summary = summarize(_rounds())
    assert summary["kserve"]["cold_start_s"] == {"median": 6.5, "min": 6.0, "max": 7.0}
    assert summary["imports"] == {"import_preload_s": 7.0, "import_without_torchvision_s": 4.1}
    assert summary["ratios"]["cold_start_s"] == round(6.5 / 9.5, 2)


def test_report_names_the_floor_and_half_of_torchserve():
    rounds = _rounds()
    result = {"model": "resnet18", "workers": 2, "rounds": 2, "command": "tsvk bench engines", "finished": "now", "shared": False,
              "machine": {"cpu": "cpu", "vcpus": 2, "loadavg_end": [1.0, 1.0, 1.0]}, "rounds_raw": rounds, "summary": summarize(rounds)}
    text = render(result)
    assert "takes 7.00 s, without torchvision 4.10 s; half of TorchServe's cold start is 4.75 s" in text
    assert "| 0 | imports |" not in text


def test_import_seconds_times_a_fresh_interpreter():
    assert 0 < import_seconds(("json",)) < 30
