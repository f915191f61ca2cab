"""What the drain tests of both engines (test_drain.py, test_engine_drain.py) stop under load: a model that takes
40 ms a batch, served by one single-threaded worker at batch 4, loaded at 70% of its measured capacity."""

from __future__ import annotations

import io
from pathlib import Path

from PIL import Image

from tests.support.torchserve import archive_tiny
from tsvk_tools.config.ports import serving_on_free_ports
from tsvk_tools.config.serving_config import write_config

DRAIN_TIMEOUT_S = 10
LOAD_SHARE = 0.7


def slow_tiny_store(folder: Path) -> Path:
    """A model store holding tiny.mar, whose model takes 40 ms a batch: requests queue up."""
    archive_tiny(folder, "SlowTinyNet")
    return folder


def one_worker_config(store: Path, path: Path) -> Path:
    """The generated config for tiny: one worker, batch 4, 20 ms delay, auth off, on free ports."""
    write_config(serving_on_free_ports(models=("tiny",), model_store=store, vcpus=1, workers=1, batch=4,
                                       max_batch_delay_ms=20, auth=False), path)
    return path


def small_photo() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (64, 48), (30, 200, 30)).save(out, "JPEG")
    return out.getvalue()
