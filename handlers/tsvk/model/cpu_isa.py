"""Whether an AOTInductor CPU package can run on this machine's CPU, asked before it is loaded.

Inductor compiles a CPU package's kernels for the widest vector instructions of the machine that builds it
(torch 2.14, torch/_inductor/cpu_vec_isa.py `pick_vec_isa`: AVX-512 with VNNI on a recent AMD EPYC or Xeon,
AVX2 elsewhere) and keeps no slower copy. torch/_inductor/codecache.py `get_device_information` writes what
it compiled for into the package's metadata (`AOTI_CPU_ISA`, e.g. "AVX512 AVX512_VNNI", and `AOTI_MACHINE`).
Served on a CPU without those instructions (an archive built on an AVX-512 machine, a Kubernetes node with
AVX2 only), the first forward ends the worker with SIGILL and TorchServe restarts it into the same crash:
asked here, it is a load error that says which instructions are missing and what to build instead.
"""

from __future__ import annotations

import json
import platform
import zipfile
from pathlib import Path

X86_MACHINES = ("x86_64", "AMD64")
# What to build instead, said by the worker's load error and by `tsvk doctor`.
REMEDY = ("build it on a CPU like this one, or for any x86-64 CPU with AVX2 (tsvk archive --cpu-isa avx2), or with "
          "--backend openvino, whose model picks its kernels on the CPU it runs on")


def recorded_target(package: zipfile.ZipFile) -> dict[str, str]:
    """What torch recorded at compile time about the machine it compiled for: the `*_metadata.json` members it
    writes beside each compiled library (they agree), read from the zip without loading any library, so that
    `tsvk doctor` can ask it of a package inside a .mar. Empty for a package that records nothing."""
    for name in package.namelist():
        if name.endswith("_metadata.json") and "/aotinductor/" in name:
            metadata = json.loads(package.read(name))
            if isinstance(metadata, dict) and "AOTI_CPU_ISA" in metadata:
                return {key: str(value) for key, value in metadata.items()}
    return {}


def package_target(path: Path) -> dict[str, str]:
    """The recorded target of the AOTInductor package file at `path`."""
    with zipfile.ZipFile(path) as package:
        return recorded_target(package)


def host_instructions() -> set[str]:
    """The vector instruction sets of this CPU in the words of AOTI_CPU_ISA (lower case), empty off x86: torch's
    own check (torch/_inductor/cpu_vec_isa.py `x86_isa_checker`, which reads cpuinfo and compiles nothing)."""
    from torch._inductor.cpu_vec_isa import x86_isa_checker

    return set(x86_isa_checker())


def missing_instructions(recorded_isa: str, host: set[str]) -> list[str]:
    """The words of a package's AOTI_CPU_ISA this CPU lacks ('' or INVALID_VEC_ISA: compiled without vectors)."""
    words = [word.lower() for word in recorded_isa.split()]
    return [word for word in words if word != "invalid_vec_isa" and word not in host]


def cpu_mismatch(target: dict[str, str], host: set[str], machine: str) -> str | None:
    """Why a CPU package with this metadata cannot run here, or None when it can."""
    built_for = target.get("AOTI_MACHINE", "")
    if built_for and built_for != machine:
        return f"it was compiled for {built_for} and this machine is {machine}"
    missing = missing_instructions(target.get("AOTI_CPU_ISA", ""), host)
    if missing and machine in X86_MACHINES:
        have = " ".join(sorted(host)).upper() or "none of them"
        return (f"it was compiled for the CPU instructions {target['AOTI_CPU_ISA']} and this CPU lacks "
                f"{' '.join(missing).upper()} (it has {have}); running it would end the worker with SIGILL")
    return None


def mismatch_here(target: dict[str, str]) -> str | None:
    """Why a CPU package with this recorded target cannot run on this machine, or None when it can."""
    return cpu_mismatch(target, host_instructions(), platform.machine())


def check_package_runs_here(path: Path) -> str | None:
    """Why the AOTInductor CPU package at `path` cannot run on this machine, or None when it can."""
    return mismatch_here(package_target(path))
