"""Check a compiled artifact against the eager fp32 model before it is allowed into an archive."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from .backends import CompileTarget
from .errors import UsageError


@dataclass(frozen=True)
class Tolerance:
    atol: float  # allowed |artifact - eager| on the logits ...
    rtol: float  # ... plus this fraction of the largest eager logit
    min_top1: float  # fraction of samples whose top-1 class must agree


TOLERANCES = {
    "fp32": Tolerance(atol=1e-3, rtol=1e-3, min_top1=1.0),
    "fp16": Tolerance(atol=5e-2, rtol=5e-2, min_top1=0.8),
    "bf16": Tolerance(atol=1e-1, rtol=1e-1, min_top1=0.7),
}


@dataclass(frozen=True)
class VerificationReport:
    batch_sizes: tuple[int, ...]
    max_abs_diff: float
    allowed_abs_diff: float
    top1_agreement: float
    min_top1: float
    passed: bool

    def to_dict(self) -> dict:
        return {**asdict(self), "batch_sizes": list(self.batch_sizes)}

    def describe(self) -> str:
        verdict = "PASS" if self.passed else "FAIL"
        return (f"verification {verdict}: batches {list(self.batch_sizes)}, max |diff| {self.max_abs_diff:.3g} "
                f"(allowed {self.allowed_abs_diff:.3g}), top-1 agreement {self.top1_agreement:.0%} (needed {self.min_top1:.0%})")


def verify_artifact(compiled, eager_fp32, target: CompileTarget, tolerance: Tolerance | None = None) -> VerificationReport:
    """Run both at batch 1 and max_batch on the same deterministic inputs and compare the logits."""
    import torch

    tolerance = tolerance or TOLERANCES[target.precision]
    batches = tuple(sorted({1, target.max_batch}))
    worst, largest, agree, total = 0.0, 0.0, 0, 0
    with torch.no_grad():
        for seed, batch in enumerate(batches):
            x = target.example(batch, seed=seed)
            reference = eager_fp32(x.float()).float()
            got = compiled(x).float()
            if got.shape != reference.shape:
                raise UsageError(f"compiled model returned shape {tuple(got.shape)} at batch {batch}; eager returned {tuple(reference.shape)}")
            worst = max(worst, (got - reference).abs().max().item())
            largest = max(largest, reference.abs().max().item())
            agree += (got.argmax(1) == reference.argmax(1)).sum().item()
            total += batch
    allowed = tolerance.atol + tolerance.rtol * largest
    top1 = agree / total
    return VerificationReport(batches, worst, allowed, top1, tolerance.min_top1, worst <= allowed and top1 >= tolerance.min_top1)
