"""Whether this CPU multiplies bf16 in hardware, so that a bf16 archive runs at the speed it was built for.

oneDNN, which runs an AOTInductor, torch.export or TorchScript model's convolutions and matmuls on the CPU,
has bf16 kernels for AMX tiles (Intel Xeon 4th generation and later) and for the AVX-512 BF16 dot product
(VDPBF16PS: Intel Cooper Lake, AMD EPYC Zen 4 and later). Any other CPU converts every bf16 operand to fp32
and back: a bf16 archive then runs slower than the fp32 one would. The flags are read from the kernel's
/proc/cpuinfo by name, without torch, so that `tsvk config` and `tsvk doctor` can ask before anything loads.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

CPUINFO = Path("/proc/cpuinfo")
# The kernel's names for the instructions that multiply bf16 in hardware, the best first.
BF16_NATIVE_FLAGS = ("amx_bf16", "avx512_bf16")
BF16_REMEDY = ("rebuild it in fp32 (tsvk archive --precision fp32; make archive PRECISION=fp32), or serve it on CPUs "
               "with AMX or AVX-512 BF16 (Intel Xeon 4th generation or later, AMD EPYC Zen 4 or later)")


def cpu_flags(cpuinfo: Path = CPUINFO) -> frozenset[str]:
    """The first CPU's feature flags (x86 `flags`, Arm `Features`); empty where /proc/cpuinfo cannot be read."""
    try:
        text = Path(cpuinfo).read_text(errors="replace")
    except OSError:
        return frozenset()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


def native_bf16_flags(flags: Iterable[str]) -> tuple[str, ...]:
    """Which of the bf16-multiplying instructions the CPU with these flags has (empty: it would emulate bf16)."""
    present = set(flags)
    return tuple(flag for flag in BF16_NATIVE_FLAGS if flag in present)


def emulated_bf16(precision: str, device: str, flags: Iterable[str]) -> str | None:
    """Why an artifact of this precision and device would run slowly on the CPU with these flags, or None."""
    if precision != "bf16" or device != "cpu" or native_bf16_flags(flags):
        return None
    return (f"a bf16 model on a CPU without {' or '.join(flag.upper() for flag in BF16_NATIVE_FLAGS)}: every bf16 "
            f"multiplication is emulated in fp32, slower than an fp32 archive")
