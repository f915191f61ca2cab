"""Reading a run's rows: one system's throughput, and which peer did best. Shared by the report and its
diagnosis, which the report renders (so neither can import the other for them)."""

from __future__ import annotations

from .options import PEER_SYSTEMS

FAST_VS_BEST_PEER_GOAL = 1.3  # ours_fast's throughput over the best peer's
FP32_VS_TORCHSERVE_BEST_GOAL = 1.2  # ours (fp32) over torchserve_best's


def throughput(systems: dict, name: str) -> float | None:
    return (systems.get(name) or {}).get("throughput_ips")


def best_peer(systems: dict) -> str | None:
    """The peer row with the highest median throughput in this run; None when none answered."""
    working = [name for name in PEER_SYSTEMS if throughput(systems, name)]
    return max(working, key=lambda name: throughput(systems, name)) if working else None
