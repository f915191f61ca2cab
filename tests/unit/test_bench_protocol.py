"""`tsvk bench protocol`: what it reads from hey's report, and the ratio it draws from the rounds."""

from __future__ import annotations

import pytest

from tsvk_tools.errors import UsageError
from tsvk_tools.lab.bench.protocol import answers_by_status, main, render, summarize

# the tail of a report in hey's format (its template in requester/print.go: status lines, then errors with counts)
HEY_REPORT = """
Latency distribution:
  99% in 2.6105 secs

Status code distribution:
  [200]\t584 responses
  [503]\t3 responses

Error distribution:
  [2]\tPost "http://127.0.0.1:8080/predictions/resnet50": context deadline exceeded
"""


def test_answers_are_read_per_status_and_errors_without_a_status_are_not_answers():
    assert answers_by_status(HEY_REPORT) == {200: 584, 503: 3}
    assert answers_by_status("Error distribution:\n  [8]\tPost ...: connection refused\n") == {}


def _path(rate: float, server_ms: float = 1.0) -> dict:
    return {"answers_per_s": rate, "answered": int(rate * 25), "other_statuses": {}, "server_cpu_ms": server_ms, "workers_cpu_ms": 140.0}


def test_the_ratio_is_the_median_of_each_rounds_ratio_with_the_rounds_kept():
    rounds = [{"round": 0, "predictions": _path(14.0), "oip_rest": _path(12.6, 3.5)},
              {"round": 1, "predictions": _path(13.0), "oip_rest": _path(13.0, 3.4)},
              {"round": 2, "predictions": _path(14.0), "oip_rest": _path(13.3, 3.6)}]
    summary = summarize(rounds)
    assert summary["ratio_per_round"] == [0.9, 1.0, 0.95]
    assert summary["ratio"] == 0.95
    assert summary["predictions"]["answers_per_s"] == 14.0 and summary["predictions"]["min"] == 13.0
    assert summary["oip_rest"]["server_cpu_ms"] == 3.5
    result = {"archive": "resnet50.mar", "rounds": 3, "seconds": 25, "concurrency": 32, "command": "tsvk bench protocol",
              "finished": "now", "machine": {"cpu": "AMD EPYC", "vcpus": 2}, "summary": summary}
    text = render(result)
    assert "**oip_rest / predictions: 0.950**" in text and "AMD EPYC, 2 vCPUs" in text


def test_a_missing_archive_is_refused_by_name(tmp_path):
    with pytest.raises(UsageError, match="no-such.mar"):
        main(["--archive", str(tmp_path / "no-such.mar")])


def test_rounds_below_one_are_refused_by_the_parser(capsys):
    with pytest.raises(SystemExit):
        main(["--rounds", "0"])
    assert "--rounds" in capsys.readouterr().err


def test_the_result_is_written_as_json_and_markdown_under_its_time(tmp_path, capsys):
    from datetime import datetime, timezone

    from tsvk_tools.lab.bench.result_document import write_json_and_markdown

    base = write_json_and_markdown({"ratio": 0.95}, "# report\n", tmp_path / "out", datetime(2026, 11, 28, 4, 0, 39, tzinfo=timezone.utc),
                                   "protocol")
    assert base == tmp_path / "out" / "20261128T040039Z-protocol"
    assert base.with_suffix(".json").read_text() == '{\n  "ratio": 0.95\n}\n'
    assert base.with_suffix(".md").read_text() == "# report\n"
    assert "wrote" in capsys.readouterr().out
