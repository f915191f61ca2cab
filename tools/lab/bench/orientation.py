"""Does a system answer a sideways photo as it is displayed? Each sideways photo of the set is sent three ways: as
sent (stored sideways, EXIF orientation 6 or 8; the HEIC's also as the file's own rotation, `irot`), `upright` (its
pixels turned upright, no EXIF: the photo as displayed) and `stored` (the same pixels without the EXIF or rotation: the
photo as stored), each in the photo's own format. A system that applies the orientation answers the first as it
answers `upright`; one that ignores it answers exactly as it answers `stored` (the same pixels); one that cannot read
the format (HEIC, for a server without a HEIF decoder) refuses all three.

The bench's weights are seeded random: such a network gives nearly every photo the same top-1 (ResNet-18's is one
class for upright and sideways photos alike), so top-1 alone cannot tell the two apart. The whole answer can: its
top-k probabilities move about 100 times more between the upright and the stored pixels than between the photo as
sent and its upright twin (JPEG re-encoding, DCT scaling). The verdict is whichever twin the answer is nearer, and
only where it is `DECISIVE` times nearer to one than to the other; otherwise it is undecided. Top-1 is reported beside it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import requests

from tsvk.request import oip

DECISIVE = 4.0  # the nearer twin must be this many times nearer than the other
AS_DISPLAYED, AS_STORED, UNDECIDED, REFUSED = "as displayed", "as stored", "undecided", "refused"
VERDICTS = (AS_DISPLAYED, AS_STORED, UNDECIDED, REFUSED)
WAYS = ("sent", "upright", "stored")  # the three requests per sideways photo, in this order


@dataclass(frozen=True)
class Asked:
    """One answer: its status, the {label: probability} it gave (None when it gave none) and the error's start."""

    status: int
    scores: dict[str, float] | None = None
    error: str = ""

    @property
    def top1(self) -> str | None:
        return max(self.scores, key=self.scores.get) if self.scores else None


def answer_scores(answer) -> dict[str, float] | None:
    """{label: probability} of an answer: TorchServe's shape (every /predictions here), or the Open Inference Protocol's
    labels and probabilities outputs; None for anything else."""
    if isinstance(answer, list) and answer:
        answer = answer[0]
    if isinstance(answer, dict) and isinstance(answer.get("outputs"), list):
        outputs = {o.get("name"): o.get("data") for o in answer["outputs"] if isinstance(o, dict)}
        labels, probabilities = outputs.get(oip.LABELS), outputs.get(oip.PROBABILITIES)
        return dict(zip(map(str, labels), map(float, probabilities))) if labels and probabilities else None
    if isinstance(answer, dict) and answer and all(isinstance(v, (int, float)) for v in answer.values()):
        return {str(k): float(v) for k, v in answer.items()}
    return None


def distance(a: dict[str, float], b: dict[str, float]) -> float:
    """Summed absolute difference of two answers' probabilities, a label missing from one counting as 0 there."""
    return sum(abs(a.get(label, 0.0) - b.get(label, 0.0)) for label in set(a) | set(b))


def verdict(sent: Asked, upright: Asked, stored: Asked) -> str:
    """Which twin the answer to the photo as sent matches: as displayed, as stored, undecided, or refused."""
    if sent.status != 200:
        return REFUSED
    if sent.scores is None or upright.scores is None or stored.scores is None:  # a refused twin, or no top-k answer
        return UNDECIDED
    to_upright, to_stored = distance(sent.scores, upright.scores), distance(sent.scores, stored.scores)
    if to_upright * DECISIVE <= to_stored and to_upright < to_stored:
        return AS_DISPLAYED
    if to_stored * DECISIVE <= to_upright and to_stored < to_upright:
        return AS_STORED
    return UNDECIDED


def ask(target, session: requests.Session, image: bytes) -> Asked:
    """One request with the photo, the answer read whole (a target is an HttpTarget or a gRPC target like it)."""
    try:
        response = target.post(session, target.make_body(image))
    except requests.RequestException as err:
        return Asked(0, error=f"{type(err).__name__}: {err}"[:200])
    if response.status_code != 200:
        return Asked(response.status_code, error=" ".join(response.text.split())[:200])
    try:
        return Asked(200, answer_scores(response.json()))
    except ValueError:
        return Asked(200, error="the answer is not JSON")


def check_photos(target, photos: Sequence) -> list[dict]:
    """Each sideways photo asked three ways, one request at a time (a batch of one: its answer depends on it alone)."""
    rows = []
    with requests.Session() as session:
        for photo in photos:
            if photo.upright is None:
                continue
            answers = [ask(target, session, data) for data in (photo.data, photo.upright.read_bytes(), photo.stored.read_bytes())]
            rows.append(photo_row(photo.name, answers))
    return rows


def check_files(photos: Sequence) -> list[Path]:
    """The files a self-timed system answers for the check: each sideways photo as sent, upright and as stored."""
    return [path for photo in photos if photo.upright is not None for path in (photo.file, photo.upright, photo.stored)]


def rows_from_answers(photos: Sequence, answers: Sequence[dict]) -> list[dict]:
    """`check_photos`' rows from a self-timed system's answers to `check_files` ({"status", "answer" or "error"} each)."""
    asked = [Asked(a["status"], answer_scores(a.get("answer")), a.get("error", "")) for a in answers]
    sideways = [photo for photo in photos if photo.upright is not None]
    return [photo_row(photo.name, asked[3 * i: 3 * i + 3]) for i, photo in enumerate(sideways)]


def photo_row(name: str, answers: Sequence[Asked]) -> dict:
    """What the report keeps of one photo's three answers."""
    sent, upright, stored = answers
    row = {"photo": name, "verdict": verdict(sent, upright, stored)}
    row.update({f"top1_{way}": answer.top1 for way, answer in zip(WAYS, answers)})
    if sent.scores and upright.scores and stored.scores:
        row["distance_to_upright"] = round(distance(sent.scores, upright.scores), 6)
        row["distance_to_stored"] = round(distance(sent.scores, stored.scores), 6)
    errors = {way: f"{answer.status} {answer.error}".strip() for way, answer in zip(WAYS, answers) if answer.scores is None}
    if errors:
        row["errors"] = errors
    return row


def tally(rows: Sequence[dict]) -> dict[str, int]:
    """How many photos got each verdict."""
    return {name: sum(1 for row in rows if row["verdict"] == name) for name in VERDICTS}
