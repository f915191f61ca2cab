"""Check a compiled artifact against the eager fp32 model before it is allowed into an archive.

The reference is the eager model in exact fp32 (TF32 off, whatever the process default); the artifact
runs as it will be served, with the process defaults. The tolerance depends on the device as well as
the precision: on CUDA an fp32 artifact may use TF32 (cuDNN convolutions allow it by default in torch,
and Torch-TensorRT builds with it unless told otherwise), so fp32 on CUDA gets bounds of its own, and
every report says which bounds it used and why.
"""

from __future__ import annotations

import contextlib
from dataclasses import asdict, dataclass
from typing import Iterator

from .backends import CompileTarget
from ..errors import UsageError


@dataclass(frozen=True)
class Tolerance:
    atol: float  # allowed |artifact - eager| on the logits ...
    rtol: float  # ... plus this fraction of the largest eager logit
    min_top1: float  # fraction of samples whose top-1 class must agree
    basis: str = "as given (--tolerance atol,rtol,min_top1)"  # why these bounds, for the report


TOLERANCES = {
    "fp32": Tolerance(atol=1e-3, rtol=1e-3, min_top1=1.0, basis="fp32: exact fp32 on both sides"),
    "fp16": Tolerance(atol=5e-2, rtol=5e-2, min_top1=0.8, basis="fp16: half-precision weights and activations"),
    "bf16": Tolerance(atol=1e-1, rtol=1e-1, min_top1=0.7, basis="bf16: 8-bit mantissas"),
}
# TF32 rounds convolution and matmul inputs to 10 mantissa bits (as fp16 does) but keeps fp32's range and
# accumulates in fp32: bounds between fp32's and fp16's, one near tie in nine samples may flip. Not yet
# measured on a GPU: `tsvk gpu-check` records what it sees.
CUDA_FP32 = Tolerance(atol=1e-2, rtol=1e-2, min_top1=0.85,
                      basis="fp32 on cuda: the artifact may use TF32 (cuDNN and Torch-TensorRT default); reference in exact fp32")


def tolerance_for(device: str, precision: str) -> Tolerance:
    """The default bounds for an artifact of `precision` running on `device`."""
    return CUDA_FP32 if (device, precision) == ("cuda", "fp32") else TOLERANCES[precision]


@contextlib.contextmanager
def exact_fp32() -> Iterator[None]:
    """TF32 off for cuDNN and cuBLAS inside the block, the previous settings restored after it."""
    import torch

    cudnn, matmul = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = False, False
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = cudnn, matmul


@dataclass(frozen=True)
class VerificationReport:
    batch_sizes: tuple[int, ...]
    max_abs_diff: float
    allowed_abs_diff: float
    top1_agreement: float
    min_top1: float
    passed: bool
    tolerance: str = ""  # which bounds were used and why

    def to_dict(self) -> dict:
        return {**asdict(self), "batch_sizes": list(self.batch_sizes)}

    def describe(self) -> str:
        verdict = "PASS" if self.passed else "FAIL"
        return (f"verification {verdict}: batches {list(self.batch_sizes)}, max |diff| {self.max_abs_diff:.3g} "
                f"(allowed {self.allowed_abs_diff:.3g}), top-1 agreement {self.top1_agreement:.0%} (needed {self.min_top1:.0%}); "
                f"tolerance {self.tolerance}")


def verify_artifact(compiled, eager_fp32, target: CompileTarget, tolerance: Tolerance | None = None) -> VerificationReport:
    """Run both at batch 1 and max_batch on the same deterministic inputs and compare the logits."""
    import torch

    tolerance = tolerance or tolerance_for(target.device, target.precision)
    batches = tuple(sorted({1, target.max_batch}))
    worst, largest, agree, total = 0.0, 0.0, 0, 0
    with torch.no_grad():
        for seed, batch in enumerate(batches):
            x = target.example(batch, seed=seed)
            with exact_fp32():
                reference = eager_fp32(x.float()).float()
            got = compiled(x).float()
            if got.shape != reference.shape:
                raise UsageError(
                    f"compiled model returned shape {tuple(got.shape)} at batch {batch}; eager returned {tuple(reference.shape)}"
                )
            worst = max(worst, (got - reference).abs().max().item())
            largest = max(largest, reference.abs().max().item())
            agree += (got.argmax(1) == reference.argmax(1)).sum().item()
            total += batch
    allowed = tolerance.atol + tolerance.rtol * largest
    top1 = agree / total
    return VerificationReport(
        batches, worst, allowed, top1, tolerance.min_top1, worst <= allowed and top1 >= tolerance.min_top1, tolerance.basis
    )
