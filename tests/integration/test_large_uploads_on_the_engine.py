"""`tsvk robustness --parts "large uploads"` against tsvk's engine, short: eight 48 MP phone JPEGs at once (the full run
sends 16) to the tiny model's two workers behind a job queue of four. Every check must hold: each upload answered 200
or 503 queue full, the refused ones answered before their bodies were sent whole, the server's growth within what the
config lets it hold, each worker within tsvk config's estimate."""

from __future__ import annotations

import argparse

import pytest

from tests.support.torchserve import archive_tiny
from tsvk_tools.lab.robustness.robustness_cli import LARGE_UPLOADS, run_robustness

pytestmark = pytest.mark.integration
UPLOADS = 8


@pytest.fixture(scope="module")
def part(tmp_path_factory):
    work = tmp_path_factory.mktemp("uploads")
    store = archive_tiny(work / "store")
    args = argparse.Namespace(model="tiny", model_store=store, work_dir=work / "run", parts=LARGE_UPLOADS, engine="kserve",
                              large_uploads=UPLOADS)
    return run_robustness(args)["parts"][LARGE_UPLOADS]


def test_every_check_holds(part):
    assert all(part["checks"].values()), part["reasons"]
    assert part["weaknesses"] == {}


def test_the_uploads_past_the_queue_were_refused_before_they_were_read(part):
    refused = part["answers"].get("503 queue full", 0)
    assert part["uploads"] == UPLOADS and sum(part["answers"].values()) == UPLOADS and refused >= 1
    assert part["refused_sent_bytes"]["whole"] == 0 and part["refused_sent_bytes"]["max"] < part["photo"]["bytes"]
    assert {f["role"] for f in part["rss_mb"].values()} >= {"server", "worker"}
