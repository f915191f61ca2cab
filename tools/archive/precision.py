"""`--precision auto`: the precision a build gets when the user asks for none, and why.

A CPU that multiplies bf16 in hardware (AMX, AVX-512 BF16: `tsvk.model.cpu_precision`) runs a bf16 model
about twice (AVX-512 BF16) to four times (AMX) as fast as fp32, with no calibration photos and answers
verified against eager fp32; elsewhere bf16 would be emulated and slower. So auto is bf16 where the build
machine's CPU has those instructions and the backend and task can build it, fp32 otherwise. int8 stays a
choice the user makes: it needs calibration photos. What was chosen and why is printed and packed in the
archive (`tsvk.provenance.precision`), and a bf16 build that fails gives way to fp32 instead of failing.
"""

from __future__ import annotations

import platform
from dataclasses import asdict, dataclass, replace
from typing import Iterable

from tsvk.common import PRECISIONS
from tsvk.model import cpu_flags, native_bf16_flags

from .backends import Backend
from .task_builds import task_build

AUTO = "auto"
BUILD_PRECISIONS = (AUTO, *PRECISIONS)


@dataclass(frozen=True)
class PrecisionChoice:
    """The precision a build compiles in: what was asked, what it got, why, and the CPU flags that decided."""

    asked: str
    chosen: str
    why: str
    cpu_flags: tuple[str, ...] = ()  # the bf16 instructions found on the build machine's CPU
    fell_back: str = ""  # why a bf16 build gave way to fp32, when it did

    @property
    def may_fall_back(self) -> bool:
        """Only a precision the user did not ask for gives way; an explicit one fails as asked."""
        return self.asked == AUTO and self.chosen != "fp32" and not self.fell_back

    def falling_back(self, reason: str) -> PrecisionChoice:
        return replace(self, chosen="fp32", fell_back=reason)

    def describe(self) -> str:
        if self.asked != AUTO:
            return f"precision {self.chosen} (asked for)"
        text = f"precision {self.chosen} (auto: {self.why})"
        return text + (f"; the bf16 build failed, so fp32: {self.fell_back}" if self.fell_back else "")

    def to_dict(self) -> dict:
        return {**asdict(self), "cpu_flags": list(self.cpu_flags), "machine": platform.machine()}


def choose_precision(asked: str, backend: Backend, device: str, task: str, flags: Iterable[str] | None = None) -> PrecisionChoice:
    """`asked` as it is, or for auto: bf16 where this CPU, the backend and the task run it natively, else fp32."""
    if asked != AUTO:
        return PrecisionChoice(asked, asked, "asked for")
    native = native_bf16_flags(cpu_flags() if flags is None else flags)
    return PrecisionChoice(AUTO, *_auto(backend, device, task, native), cpu_flags=native)


def _auto(backend: Backend, device: str, task: str, native: tuple[str, ...]) -> tuple[str, str]:
    """(precision, why) for auto: the first reason against bf16, or the instructions that make it pay."""
    if device != "cpu":
        return "fp32", f"auto chooses bf16 on CPUs only; on {device} ask for --precision fp16 or bf16"
    if "bf16" not in backend.precisions.get(device, ()):
        return "fp32", f"--backend {backend.name} builds no bf16 on the CPU ({backend.bf16_note or 'not supported'})"
    why_not = task_build(task).no_bf16
    if why_not:  # on the CPU: the only device auto chooses bf16 on
        return "fp32", f"a {task} model is not built in bf16: {why_not}"
    if not native:
        return "fp32", "this CPU has neither AMX nor AVX-512 BF16, so bf16 would be emulated, slower than fp32"
    return "bf16", f"this CPU multiplies bf16 in hardware ({' and '.join(flag.upper() for flag in native)})"
