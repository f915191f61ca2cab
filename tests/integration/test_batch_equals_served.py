"""A batch row is the served answer: for a classifier, a detector (with an answer option) and a segmenter,
each input's row from `tsvk batch` carries the very status and body bytes a real TorchServe 0.12 gives when
the same file is POSTed to /predictions (TorchServe writes a handler's dict as `json.dumps(answer,
indent=2)`: ts/protocol/otf_message_handler.py), bad inputs included.

TorchServe serves each request here alone (sent one after another), while the batch run scores the
classifier's and the segmenter's inputs in the archive's batches: their rows must not depend on which inputs
share a batch. A detector's answer does, in its last digits (see BATCH), on the server as offline."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import requests

from tests.support.batch_inputs import write_inputs
from tests.support.task_models import DETECTOR, SEGMENTER, decisive_weights
from tests.support.torchserve import archive_tiny, running_torchserve
from tsvk_tools.build.archive import build_archive
from tsvk_tools.build.build import BuildRequest
from tsvk_tools.cli import main as tsvk
from tsvk_tools.serve.ports import serving_on_free_ports

pytestmark = pytest.mark.integration

OPTIONS = {"tiny": {}, DETECTOR: {"score_threshold": "0.3"}, SEGMENTER: {"label_map_max_side": "64"}}
# An R-CNN pads the photos of one forward pass to one size, so its answer for a photo moves in the last digits
# with the photos beside it, on TorchServe as here; a request served alone is what the batch run matches with
# batches of one. The classifier and the segmenter run at the archive's batch size.
BATCH = {"tiny": (), DETECTOR: ("--batch", "1"), SEGMENTER: ()}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    work = tmp_path_factory.mktemp("batch_served")
    store = archive_tiny(work / "model_store")
    build_archive(BuildRequest(model=DETECTOR, backend="torchscript", weights=str(decisive_weights(DETECTOR, work / "d.pt")),
                               max_batch=4), store)
    build_archive(BuildRequest(model=SEGMENTER, backend="export", max_batch=4,
                               weights=str(decisive_weights(SEGMENTER, work / "s.pt", std=1.0))), store)
    request = serving_on_free_ports(model_store=store, vcpus=3, workers=1, batch=4, max_batch_delay_ms=20, auth=False)
    with running_torchserve(request, work) as run:
        yield run.url("inference"), store, work


@pytest.mark.parametrize("model", ["tiny", DETECTOR, SEGMENTER])
def test_each_batch_row_is_the_status_and_body_predictions_gives_for_the_same_bytes(served, model, tmp_path):
    url, store, _ = served
    files = write_inputs(tmp_path / "photos", good_format="PNG")
    output = tmp_path / "rows.jsonl"
    options = [arg for name, value in OPTIONS[model].items() for arg in ("--option", f"{name}={value}")]
    assert tsvk(["batch", "--archive", str(store / f"{model}.mar"), "--input", str(tmp_path / "photos"),
                 "--output", str(output), "--workers", "2", "--quiet", *BATCH[model], *options]) == 0
    rows = {Path(row["input"]).name: row for row in map(json.loads, output.read_text().splitlines())}
    assert set(rows) == set(files)
    for name, data in files.items():
        if OPTIONS[model]:
            served_answer = requests.post(f"{url}/predictions/{model}", files={"data": data}, data=OPTIONS[model], timeout=300)
        else:
            served_answer = requests.post(f"{url}/predictions/{model}", data=data, timeout=300)
        row = rows[name]
        assert row["status"] == served_answer.status_code, name
        assert json.dumps(row["answer"], indent=2).encode() == served_answer.content, name
    assert sum(row["status"] == 200 for row in rows.values()) == 3
