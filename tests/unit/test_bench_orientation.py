"""Whether a system answers a sideways photo as displayed: its answer to the photo as sent against its answers to the
upright and the stored twin (tools/lab/bench/orientation.py), the rows a report keeps, and how they are rendered."""

from __future__ import annotations

from pathlib import Path

import requests

from tsvk_tools.lab.bench import orientation
from tsvk_tools.lab.bench.assets import Photo
from tsvk_tools.lab.bench.harness import with_orientation
from tsvk_tools.lab.bench.orientation import AS_DISPLAYED, AS_STORED, REFUSED, UNDECIDED, Asked, answer_scores, verdict
from tsvk_tools.lab.bench.photo_report import photo_lines
from tsvk_tools.measure.stats import combine_rounds

UPRIGHT = {"tabby": 0.0030, "tiger cat": 0.0021, "lynx": 0.0012}
STORED = {"tabby": 0.0026, "tiger cat": 0.0024, "Egyptian cat": 0.0013}  # the same top-1: random weights mostly agree
NEAR_UPRIGHT = {"tabby": 0.00301, "tiger cat": 0.00209, "lynx": 0.0012}


def test_an_answer_matching_the_upright_twin_is_as_displayed():
    assert verdict(Asked(200, NEAR_UPRIGHT), Asked(200, UPRIGHT), Asked(200, STORED)) == AS_DISPLAYED


def test_an_answer_equal_to_the_stored_twins_is_as_stored_even_with_the_same_top1():
    sent = Asked(200, dict(STORED))
    assert sent.top1 == Asked(200, UPRIGHT).top1 == "tabby"
    assert verdict(sent, Asked(200, UPRIGHT), Asked(200, STORED)) == AS_STORED


def test_an_answer_between_the_twins_or_twins_alike_is_undecided():
    between = {label: (UPRIGHT.get(label, 0) + STORED.get(label, 0)) / 2 for label in set(UPRIGHT) | set(STORED)}
    assert verdict(Asked(200, between), Asked(200, UPRIGHT), Asked(200, STORED)) == UNDECIDED
    assert verdict(Asked(200, UPRIGHT), Asked(200, UPRIGHT), Asked(200, UPRIGHT)) == UNDECIDED
    assert verdict(Asked(200, UPRIGHT), Asked(413, error="too large"), Asked(200, STORED)) == UNDECIDED
    assert verdict(Asked(200, None), Asked(200, UPRIGHT), Asked(200, STORED)) == UNDECIDED  # no top-k answer (a detector)


def test_a_refused_photo_is_refused():
    assert verdict(Asked(413, error="image_too_large"), Asked(200, UPRIGHT), Asked(200, STORED)) == REFUSED


def test_every_answer_shape_gives_its_probabilities():
    assert answer_scores({"tabby": 0.5, "lynx": 0.25}) == {"tabby": 0.5, "lynx": 0.25}
    assert answer_scores([{"tabby": 0.5}]) == {"tabby": 0.5}
    oip = {"outputs": [{"name": "probabilities", "data": [0.5, 0.25]}, {"name": "labels", "data": ["tabby", "lynx"]}]}
    assert answer_scores(oip) == {"tabby": 0.5, "lynx": 0.25}
    assert answer_scores({"boxes": [[1, 2, 3, 4]]}) is None
    assert answer_scores("tabby") is None


class _Response:
    def __init__(self, status_code: int, answer=None, text: str = ""):
        self.status_code, self._answer, self.text = status_code, answer, text

    def json(self):
        return self._answer


class _Target:
    """A system that answers each body from a table, refusing bodies it does not know."""

    def __init__(self, answers: dict[bytes, dict]):
        self.answers, self.asked = answers, []

    def make_body(self, image: bytes) -> bytes:
        return image

    def post(self, session, body: bytes):
        self.asked.append(body)
        if body == b"broken":
            raise requests.ConnectionError("reset")
        return _Response(200, self.answers[body]) if body in self.answers else _Response(413, text='{"code": "image_too_large"}')


def _photo(tmp_path: Path, name: str, sent: bytes, sideways: bool = True) -> Photo:
    file = tmp_path / f"{name}.jpg"
    file.write_bytes(sent)
    if not sideways:
        return Photo(name, sent, file)
    (tmp_path / f"{name}-upright.jpg").write_bytes(b"upright")
    (tmp_path / f"{name}-stored.jpg").write_bytes(b"stored")
    return Photo(name, sent, file, "12 MP JPEG", tmp_path / f"{name}-upright.jpg", tmp_path / f"{name}-stored.jpg")


def test_a_system_is_asked_each_sideways_photo_three_ways(tmp_path):
    photos = [_photo(tmp_path, "shown", b"shown"), _photo(tmp_path, "flat", b"flat", sideways=False),
              _photo(tmp_path, "huge", b"huge")]
    target = _Target({b"shown": NEAR_UPRIGHT, b"upright": UPRIGHT, b"stored": STORED, b"flat": UPRIGHT})
    rows = orientation.check_photos(target, photos)
    assert target.asked == [b"shown", b"upright", b"stored", b"huge", b"upright", b"stored"]  # the upright photo is not asked
    assert [(row["photo"], row["verdict"]) for row in rows] == [("shown", AS_DISPLAYED), ("huge", REFUSED)]
    assert rows[0]["top1_sent"] == rows[0]["top1_upright"] == "tabby"
    assert rows[0]["distance_to_upright"] < rows[0]["distance_to_stored"]
    assert rows[1]["errors"] == {"sent": '413 {"code": "image_too_large"}'}
    assert orientation.tally(rows) == {AS_DISPLAYED: 1, AS_STORED: 0, UNDECIDED: 0, REFUSED: 1}


def test_a_failed_connection_is_a_refusal_not_a_crash(tmp_path):
    rows = orientation.check_photos(_Target({b"upright": UPRIGHT, b"stored": STORED}), [_photo(tmp_path, "p", b"broken")])
    assert rows[0]["verdict"] == REFUSED and rows[0]["errors"]["sent"].startswith("0 ConnectionError")


def test_a_self_timed_systems_answers_give_the_same_rows(tmp_path):
    photos = [_photo(tmp_path, "a", b"a"), _photo(tmp_path, "b", b"b")]
    assert orientation.check_files(photos) == [photos[0].file, photos[0].upright, photos[0].stored,
                                               photos[1].file, photos[1].upright, photos[1].stored]
    answers = [{"status": 200, "answer": STORED}, {"status": 200, "answer": UPRIGHT}, {"status": 200, "answer": STORED},
               {"status": 413, "error": "too large"}, {"status": 413, "error": "too large"}, {"status": 200, "answer": STORED}]
    rows = orientation.rows_from_answers(photos, answers)
    assert [row["verdict"] for row in rows] == [AS_STORED, REFUSED]


def test_the_report_shows_each_asked_system_and_what_it_refused():
    rows = [{"photo": "12mp", "verdict": AS_DISPLAYED, "top1_sent": "tabby", "top1_upright": "tabby"},
            {"photo": "48mp", "verdict": REFUSED, "top1_sent": None, "top1_upright": "tabby", "errors": {"sent": "413 too large"}}]
    result = {"systems": {"ours": {"label": "tsvk", "orientation": rows}, "ceiling": {"label": "Ceiling"}},
              "photo_set": {"name": "as-sent", "photos": ["12.2 MP JPEG"], "proportions": {"12.2 MP JPEG": 1.0}},
              "decode_floor": [{"photo": "12mp", "kind": "12.2 MP JPEG", "megapixels": 12.2, "bytes": 3_100_000, "floor_ms": 40.0,
                                "tsvk_ms": 60.0, "tsvk_vs_floor": 1.5, "full_decode_ms": 150.0}]}
    text = "\n".join(photo_lines(result))
    assert "| tsvk | 1 | 0 | 0 | 1 | 1 of 1 |" in text
    assert "- ours: 48mp: 413 too large" in text
    assert "Ceiling |" not in text
    assert "12.2 MP JPEG 100%" in text
    assert "| 12.2 MP JPEG | 12.2 | 3.1 | 40.0 | 60.0 | 1.5 | 150.0 |" in text
    assert photo_lines({"systems": {"ours": {"label": "tsvk"}}}) == []  # the default photos: no such sections


def test_the_answers_of_the_first_round_stay_whichever_round_is_typical():
    rows = [{"photo": "12mp", "verdict": AS_DISPLAYED}]
    rounds = [{"throughput_ips": 1.0, "orientation": rows}, {"throughput_ips": 3.0}, {"throughput_ips": 2.0}]
    combined = with_orientation(combine_rounds(rounds), rounds)
    assert combined["throughput_ips"] == 2.0 and combined["orientation"] == rows
    assert "orientation" not in with_orientation(combine_rounds(rounds[1:]), rounds[1:])
