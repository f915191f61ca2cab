"""tools/lab/bench/preprocess_drift.py: the per-stage comparison and the comparison with another revision's tensors."""

from __future__ import annotations

import pytest
import torch

from tsvk.common.settings import PreprocessSettings
from tsvk_tools.lab.bench import preprocess_drift

from tests.support.handler_fakes import encode, photo


def test_each_stage_is_compared_and_another_revisions_tensors_are_told_apart(tmp_path, capsys):
    for name in ("chelsea", "coffee"):
        (tmp_path / f"{name}.jpg").write_bytes(encode(photo(name), "JPEG", quality=92))
    (tmp_path / "large.jpg").write_bytes(encode(photo("astronaut", (1000, 1000)), "JPEG", quality=92))  # reduced DCT decode
    settings = PreprocessSettings(resize=224, crop=224, mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5))
    report, batch = preprocess_drift.measure(sorted(tmp_path.glob("*.jpg")), settings)
    assert batch.shape == (3, 3, 224, 224)
    assert report.stages["decode"].photos == 2 and report.stages["decode"].max_abs == 0  # same libjpeg-turbo pixels
    assert report.stages["normalize" + preprocess_drift.REDUCED].photos == 1
    assert report.stages["normalize"].max_abs <= 2 / (255 * 0.5) + 1e-6
    saved = tmp_path / "other.pt"
    torch.save({"names": ["chelsea.jpg", "coffee.jpg", "large.jpg"], "batch": batch + (torch.arange(3) == 1).view(3, 1, 1, 1)}, saved)
    assert preprocess_drift.against(["chelsea.jpg", "coffee.jpg", "large.jpg"], batch, saved).endswith("1 of 3 photos differ")
    with pytest.raises(SystemExit, match="other photos"):
        preprocess_drift.against(["a.jpg", "b.jpg", "c.jpg"], batch, saved)
