"""Verification: an exact fp32 reference, bounds by device and precision, and a report that names them."""

import pytest
import torch

from tsvk_tools.archive.backends import CompileTarget
from tsvk_tools.archive.verify import TOLERANCES, Tolerance, tolerance_for, verify_artifact

TARGET = CompileTarget(device="cpu", precision="fp32", max_batch=2, crop=8)


def _tf32_flags() -> tuple[bool, bool]:
    return torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32


def _recording(seen: dict, name: str):
    def logits(x):
        seen[name] = _tf32_flags()
        return x.flatten(1)[:, :10]
    return logits


def test_reference_runs_in_exact_fp32_and_the_artifact_as_it_will_be_served():
    """cuDNN allows TF32 by default: an fp32 reference must not, or it is not fp32."""
    seen, before = {}, _tf32_flags()
    report = verify_artifact(_recording(seen, "artifact"), _recording(seen, "eager"), TARGET)
    assert seen["eager"] == (False, False)
    assert seen["artifact"] == before and _tf32_flags() == before
    assert report.passed


def test_fp32_on_cuda_gets_bounds_of_its_own_and_says_why():
    cuda, cpu = tolerance_for("cuda", "fp32"), tolerance_for("cpu", "fp32")
    assert cuda.atol > cpu.atol and cuda.rtol > cpu.rtol and "TF32" in cuda.basis
    assert tolerance_for("cuda", "fp16") is TOLERANCES["fp16"] and tolerance_for("cpu", "bf16") is TOLERANCES["bf16"]


@pytest.mark.parametrize("given, expected", [(None, "fp32: exact fp32 on both sides"),
                                              (Tolerance(1.0, 0.0, 0.5), "as given (--tolerance atol,rtol,min_top1)")])
def test_every_report_names_the_bounds_it_used(given, expected):
    report = verify_artifact(_recording({}, "artifact"), _recording({}, "eager"), TARGET, given)
    assert report.tolerance == expected and report.to_dict()["tolerance"] == expected
    assert report.describe().endswith(f"tolerance {expected}")
