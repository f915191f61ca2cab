"""An archive made by `tsvk archive` (resnet18, torch.export, random weights) served by a real
TorchServe: the served top-5 equals torchvision's reference preprocessing + the packed model run
here, for real photographs sent concurrently so that they are batched.
"""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import pytest
import torch
from PIL import Image

from test_handler_torchserve import post_concurrently, serving

pytestmark = pytest.mark.integration

MODEL = "resnet18"
ROOT = Path(__file__).resolve().parents[2]


def build_with_tsvk_archive(work: Path, model_store: Path) -> Path:
    from tsvk_tools.archive import build_archive
    from tsvk_tools.build import BuildRequest

    path, _ = build_archive(BuildRequest(model=MODEL, backend="export", weights="none", max_batch=8), model_store)
    return path


def _photos() -> list[bytes]:
    import sys

    sys.path.insert(0, str(ROOT / "tests" / "unit"))
    from handler_fakes import encode, photo

    return [encode(photo(name), "JPEG", quality=92) for name in ("chelsea", "coffee", "astronaut", "rocket")]


def _expected_top5(mar: Path, payloads: list[bytes]) -> list[list[str]]:
    """The packed model on torchvision's reference transforms for the archive's own settings."""
    from torchvision.transforms import v2

    with zipfile.ZipFile(mar) as archive:
        settings = __import__("yaml").safe_load(archive.read("model-config.yaml"))["tsvk"]
        labels = json.loads(archive.read("index_to_name.json"))
        program = torch.export.load(io.BytesIO(archive.read(settings["artifact"]["file"])))
    pre = settings["preprocess"]
    reference = v2.Compose([
        v2.PILToTensor(), v2.Resize(pre["resize"], antialias=True), v2.CenterCrop(pre["crop"]),
        v2.ToDtype(torch.float32, scale=True), v2.Normalize(pre["mean"], pre["std"]),
    ])
    batch = torch.stack([reference(Image.open(io.BytesIO(p)).convert("RGB")) for p in payloads])
    with torch.inference_mode():
        indices = program.module()(batch).topk(5).indices.tolist()
    return [[labels[str(i)] for i in row] for row in indices]


def test_served_answers_match_the_reference_pipeline(tmp_path):
    payloads = _photos()
    with serving(tmp_path, model=MODEL, build=build_with_tsvk_archive) as (urls, _):
        responses = post_concurrently(f"{urls['inference']}/predictions/{MODEL}", payloads + [b"not an image"])
    assert [r.status_code for r in responses] == [200] * len(payloads) + [400]
    served = [list(r.json()) for r in responses[: len(payloads)]]
    assert served == _expected_top5(tmp_path / "model_store" / f"{MODEL}.mar", payloads)
