"""Reading a run's rows: one system's throughput, and which peer did best. Shared by the report and its
diagnosis, which the report renders (so neither can import the other for them)."""

from __future__ import annotations

from .options import PEER_SYSTEMS


def throughput(systems: dict, name: str) -> float | None:
    return (systems.get(name) or {}).get("throughput_ips")


def best_peer(systems: dict) -> str | None:
    """The peer row with the highest median throughput in this run; None when none answered."""
    working = [name for name in PEER_SYSTEMS if throughput(systems, name)]
    return max(working, key=lambda name: throughput(systems, name)) if working else None
