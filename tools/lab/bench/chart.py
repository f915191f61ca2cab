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
    colors = [_color(n) for n in names]
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 0.5 * len(names) + 2), dpi=80)
    rates = [systems[n]["throughput_ips"] for n in names]
    left.bar_label(left.barh(labels, rates, color=colors, xerr=error_bars(systems, names, "throughput_ips"), capsize=3),
                   fmt="%.1f", fontsize=7, padding=6)
    left.set_xlabel("images / s (higher is better)\nmedian of the rounds, bars: min-max", fontsize=8)
    p99 = [(systems[n].get("latency_ms") or {}).get("p99") or 0 for n in names]
    right.bar_label(right.barh(labels, p99, color=colors, xerr=error_bars(systems, names, "p99"), capsize=3),
                    fmt="%.0f", fontsize=7, padding=6)
    right.set_xlabel("p99 latency, ms (lower is better)\nmedian of the rounds, bars: min-max", fontsize=8)
    right.set_yticklabels([])
    for axis in (left, right):
        axis.invert_yaxis()
        axis.tick_params(labelsize=7)
    figure.suptitle(chart_title(result), fontsize=9)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
    return path


OURS = ("ours", "ours_tuned", "ours_fast")


def _color(name: str) -> str:
    if name in OURS:
        return "tab:green"
    return "tab:gray" if name.startswith("ceiling") else "tab:blue"


def error_bars(systems: dict, names: list[str], field: str) -> list[list[float]]:
    """matplotlib's xerr: distances from each median down to the rounds' min and up to their max (0 without a spread)."""
    lows, highs = [], []
    for name in names:
        system = systems[name]
        value = system["throughput_ips"] if field == "throughput_ips" else (system.get("latency_ms") or {}).get(field) or 0
        spread = (system.get("spread") or {}).get(field) or [value, value]
        lows.append(max(0.0, value - spread[0]))
        highs.append(max(0.0, spread[1] - value))
    return [lows, highs]


def chart_title(result: dict) -> str:
    """Model, where it ran, the load, and the host, date and commit the numbers come from."""
    options, machine = result["options"], result["machine"]
    where = "GPU" if options.get("device") == "cuda" else f"{machine['vcpus']} vCPUs"
    commit = str((result.get("git") or {}).get("commit"))[:10]
    return (f"{options['model']}, {where}, concurrency {options['concurrency']}, {options.get('rounds', 1)} round(s)\n"
            f"host {machine.get('host', '?')} ({machine.get('cpu', '?')}), {result['created'][:16]}, commit {commit}")
