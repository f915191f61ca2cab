"""The result as Markdown: one table row per system, then ratios, goals and the diagnosis."""

from __future__ import annotations

COLUMNS = ("System", "Throughput (img/s)", "p50 (ms)", "p95 (ms)", "p99 (ms)", "Peak CPU (%)", "Peak RSS (MiB)",
           "Ready (s)", "Requests (errors)")


def _cell(value, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


def system_row(name: str, system: dict) -> str:
    if "error" in system and not system.get("throughput_ips"):
        return f"| {system.get('label', name)} | failed: {system['error'].splitlines()[0][:80]} |" + " |" * (len(COLUMNS) - 2)
    latency = system.get("latency_ms") or {}
    cells = [
        system.get("label", name) + _variant_note(system),
        _cell(system.get("throughput_ips"), 2),
        _cell(latency.get("p50"), 0), _cell(latency.get("p95"), 0), _cell(latency.get("p99"), 0),
        _cell(system.get("peak_cpu_pct"), 0), _cell(system.get("peak_rss_mb"), 0), _cell(system.get("ready_s"), 1),
        f"{system.get('requests', '-')} ({system.get('errors', '-')})",
    ]
    return "| " + " | ".join(cells) + " |"


def _variant_note(system: dict) -> str:
    variant = system.get("variant") or {}
    if "workers" in variant:
        return f" (best: {variant['workers']} worker(s) x {variant['threads']} thread(s))"
    plan = (system.get("details") or {}).get("plan")
    if plan:
        precision = f" {plan['precision']}" if plan.get("precision", "fp32") != "fp32" else ""
        return f" ({plan['workers']} worker(s) x {plan['threads']} thread(s), batch {plan['batch']}, {plan['backend']}{precision})"
    return ""


def render_markdown(result: dict, chart_name: str | None = None) -> str:
    options, machine = result["options"], result["machine"]
    lines = [
        f"# Benchmark: {options['model']}{_device_title(options)}, {options['jobs']} jobs, concurrency {options['concurrency']}",
        "",
        f"{result['created']} on {machine['vcpus']} vCPUs ({machine['cpu']}, {machine['memory_gib']} GiB){_gpus(machine)}, "
        f"torch {result['software'].get('torch')}, TorchServe {result['software'].get('torchserve')}; "
        f"git {str(result['git'].get('commit'))[:10]}{' (dirty)' if result['git'].get('dirty') else ''}.",
        "",
        f"Command: `{result['command']}`",
        "",
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
        *(system_row(name, system) for name, system in result["systems"].items()),
        "",
        "Throughput counts answered images over the measured span; latency is per request (per job for the decentralized "
        "run, per batch call for the ceiling); CPU is summed over the system's processes (100 = one vCPU), peak during "
        "the measured load; RSS is summed over all its processes, peak over its whole life; Ready is start to serving.",
        "",
        "## Ratios (same run)",
        "",
        "| Ratio | Value |",
        "|---|---|",
        *(f"| {key} | {_cell(value, 2)} |" for key, value in result["ratios"].items()),
        "",
        "## Goals",
        "",
        "| Goal | Target | Measured | Met |",
        "|---|---|---|---|",
        *(f"| {g['goal']} | {g['target']} | {_cell(g['measured'], 2)} | {_met(g['met'])} |" for g in result["goals"]),
    ]
    lines += _compute_lines(result.get("compute") or {}, result["systems"])
    if result.get("diagnosis"):
        lines += ["", "## Where the time goes", "", *(f"- {line}" for line in result["diagnosis"])]
    top1 = _top1_lines(result["systems"])
    if top1:
        lines += ["", "## Top-1 per photo (same random weights everywhere)", "", *top1]
    if chart_name:
        lines += ["", f"![throughput and p99 latency]({chart_name})"]
    return "\n".join(lines) + "\n"


def _device_title(options: dict) -> str:
    """' on the GPU (tensorrt fp16)' for the GPU mode; nothing for CPU runs (older results have no device)."""
    if options.get("device", "cpu") != "cuda":
        return ""
    note = f"; {options['backend_note']}" if options.get("backend_note") else ""
    return f" on the GPU ({options['backend']} {options['precision']}{note})"


def _gpus(machine: dict) -> str:
    return f", GPU: {', '.join(machine['gpus'])}" if machine.get("gpus") else ""


def _met(met) -> str:
    return "n/a" if met is None else ("yes" if met else "**no**")


def _top1_lines(systems: dict) -> list[str]:
    return [f"- {name}: " + ", ".join(f"photo {i}: {label}" for i, label in system["top1"].items())
            for name, system in systems.items() if system.get("top1")]


def _compute_lines(compute: dict, systems: dict) -> list[str]:
    """GFLOP/s achieved per system against the machine's fp32 peak (tools/bench/compute.py)."""
    if not compute.get("systems"):
        return []
    peak = compute.get("fp32_peak") or {}
    lines = ["", "## Compute use", "",
             f"{compute['gflop_per_image']} GFLOP per image; fp32 peak {_cell(peak.get('gflops'), 1)} GFLOP/s "
             f"({peak.get('formula', 'clock unknown')}). An int8 artifact does the same operations, so its share can pass 100%.",
             "", "| System | GFLOP/s | Share of fp32 peak |", "|---|---|---|"]
    for name, row in compute["systems"].items():
        share = "-" if row["of_fp32_peak"] is None else f"{100 * row['of_fp32_peak']:.0f}%"
        lines.append(f"| {systems.get(name, {}).get('label', name)} | {_cell(row['gflops'], 1)} | {share} |")
    return lines
