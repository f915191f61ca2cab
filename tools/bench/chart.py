"""A small PNG: throughput per system, and p99 latency beside it (matplotlib, Agg, no display)."""

from __future__ import annotations

from pathlib import Path


def write_chart(result: dict, path: Path) -> Path | None:
    """The chart, or None (with a note) when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("bench: matplotlib is not installed, no chart (pip install matplotlib)")
        return None
    names = [n for n, s in result["systems"].items() if s.get("throughput_ips")]
    if not names:
        return None
    systems = result["systems"]
    labels = [systems[n]["label"].replace(" (", "\n(").replace(", ", ",\n", 1) for n in names]
    colors = ["tab:green" if n in ("ours", "ours_tuned") else ("tab:gray" if n == "ceiling" else "tab:blue") for n in names]
    figure, (left, right) = plt.subplots(1, 2, figsize=(9, 3.6), dpi=80)
    left.bar_label(left.barh(labels, [systems[n]["throughput_ips"] for n in names], color=colors), fmt="%.1f", fontsize=7)
    left.set_xlabel("images / s (higher is better)")
    p99 = [(systems[n].get("latency_ms") or {}).get("p99") or 0 for n in names]
    right.bar_label(right.barh(labels, p99, color=colors), fmt="%.0f", fontsize=7)
    right.set_xscale("log")  # one process per job is seconds; servers are tens to hundreds of ms
    right.set_xlabel("p99 latency, ms, log scale (lower is better)")
    right.set_yticklabels([])
    for axis in (left, right):
        axis.invert_yaxis()
        axis.tick_params(labelsize=7)
    options = result["options"]
    where = "GPU" if options.get("device") == "cuda" else f"{result['machine']['vcpus']} vCPUs"
    figure.suptitle(f"{options['model']}, {where}, concurrency {options['concurrency']}", fontsize=9)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
    return path
