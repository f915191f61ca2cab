"""How much of the machine's arithmetic a served model uses: GFLOP/s achieved against the fp32 peak.

The model's work per image is counted by torch's own FlopCounterMode on the eager model (a multiply-add
counts two FLOPs); an int8 artifact does the same operations, so its GFLOP/s are comparable even though
its peak is higher than the fp32 one. The fp32 peak is vCPUs x clock x FLOPs per cycle per core, where
FLOPs per cycle = 2 (an FMA) x fp32 lanes x FMA issues per cycle: 2 x 8 x 2 = 32 for cores with two
256-bit FMA pipes (AVX2/FMA Intel and AMD Zen; AMD Zen 4 also runs AVX-512 as two 256-bit halves), 64
for Intel cores with two 512-bit FMA units, 8 for SSE-only cores. The clock is /proc/cpuinfo's current
"cpu MHz" (a VM reports its nominal clock; turbo is not counted).
"""

from __future__ import annotations

from pathlib import Path

CPUINFO = Path("/proc/cpuinfo")


def gflop_per_image(model_name: str, crop: int = 224) -> float:
    """GFLOP one forward pass of the torchvision model takes on one crop x crop image."""
    import torch
    import torchvision
    from torch.utils.flop_counter import FlopCounterMode

    model = torchvision.models.get_model(model_name, weights=None).eval()
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(torch.zeros(1, 3, crop, crop))
    return round(counter.get_total_flops() / 1e9, 3)


def cpu_facts(text: str | None = None) -> dict:
    """Vendor, flags and clock of the first CPU listed in /proc/cpuinfo."""
    text = CPUINFO.read_text() if text is None else text
    facts: dict = {"vendor": "", "flags": set(), "mhz": None}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if key == "vendor_id" and not facts["vendor"]:
            facts["vendor"] = value
        elif key == "flags" and not facts["flags"]:
            facts["flags"] = set(value.split())
        elif key == "cpu MHz" and facts["mhz"] is None:
            facts["mhz"] = float(value)
    return facts


def fp32_flops_per_cycle(vendor: str, flags: set[str]) -> int:
    if "avx512f" in flags and vendor == "GenuineIntel":
        return 64
    if "fma" in flags and "avx2" in flags:
        return 32
    return 8


def fp32_peak(vcpus: int, text: str | None = None) -> dict | None:
    """The machine's fp32 peak in GFLOP/s and how it was computed; None where the clock is unknown."""
    facts = cpu_facts(text)
    if not facts["mhz"]:
        return None
    per_cycle = fp32_flops_per_cycle(facts["vendor"], facts["flags"])
    gflops = vcpus * facts["mhz"] / 1e3 * per_cycle
    return {"gflops": round(gflops, 1), "formula": f"{vcpus} vCPUs x {facts['mhz'] / 1e3:.2f} GHz x {per_cycle} fp32 FLOP/cycle"}


def compute_use(systems: dict, gflop_image: float | None, peak: dict | None) -> dict:
    """Per system: GFLOP/s achieved (img/s x GFLOP per image) and its share of the fp32 peak."""
    if not gflop_image:
        return {}
    rows = {}
    for name, system in systems.items():
        rate = (system or {}).get("throughput_ips")
        if rate:
            achieved = rate * gflop_image
            rows[name] = {"gflops": round(achieved, 1), "of_fp32_peak": round(achieved / peak["gflops"], 3) if peak else None}
    return rows
