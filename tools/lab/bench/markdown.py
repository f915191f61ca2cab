"""The result as Markdown: the strongest peers first, then one table row per system, ratios, goals and the diagnosis."""

from __future__ import annotations

from .options import PEER_SYSTEMS
from .photo_report import photo_lines
from ...measure.stats import cpu_ms_per_image, error_headline, ranges_overlap, ratio

PEER_TABLE = ("ours_fast", "ours", *PEER_SYSTEMS, "ceiling_pipeline_fast")  # rows of the lead table, in this order

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
        return f"| {system.get('label', name)} | failed: {error_headline(system['error'])[:80]} |" + " |" * (len(COLUMNS) - 2)
    latency = system.get("latency_ms") or {}
    cells = [
        system.get("label", name) + _variant_note(system),
        _cell(system.get("throughput_ips"), 2),
        _cell(latency.get("p50"), 0), _cell(latency.get("p95"), 0), _cell(latency.get("p99"), 0),
        _cell(system.get("peak_cpu_pct"), 0), _cell(system.get("peak_rss_mb"), 0), _cell(system.get("ready_s"), 1),
        f"{system.get('requests', '-')} ({system.get('errors', '-')})",
    ]
    return "| " + " | ".join(cells) + " |"


def with_range(value, spread: list | None, digits: int) -> str:
    """'12.3 (11.9-12.8)': a median with the min-max of its rounds (the median alone without a spread)."""
    if value is None or not spread:
        return _cell(value, digits)
    return f"{_cell(value, digits)} ({_cell(spread[0], digits)}-{_cell(spread[1], digits)})"


def peer_lines(result: dict) -> list[str]:
    """The lead table: ours against the strongest peers on the same machine and run, medians (min-max of the rounds)."""
    systems = result["systems"]
    present = [name for name in PEER_TABLE if name in systems]
    if not any(name in systems for name in PEER_SYSTEMS):
        return []
    options = result["options"]
    warm = f", each after {options['warmup_seconds']:g} s of unmeasured load" if options.get("warmup_seconds") else ""
    lines = ["## Against the strongest peers", "",
             f"Medians of {options.get('rounds', 1)} alternating round(s) of {options.get('round_seconds', 0):g} s of load{warm} "
             "(min-max of the rounds in brackets); ours_fast / system is a ratio of medians; 'overlap' means the two "
             "systems' throughput ranges overlap, so these rounds do not tell them apart.", "",
             "| System | Throughput (img/s) | p99 (ms) | ours_fast / system | Ranges overlap with ours_fast |", "|---|---|---|---|---|"]
    for name in present:
        system = systems[name]
        if not system.get("throughput_ips"):
            error = error_headline(system.get("error"))[:100]
            lines.append(f"| {system.get('label', name)} | failed: {error} | - | - | - |")
            continue
        spread = system.get("spread") or {}
        versus = "-" if name == "ours_fast" else _cell(_ratio(systems, "ours_fast", name), 2)
        overlap = "-" if name == "ours_fast" else _yes_no(_overlap(systems, "ours_fast", name))
        lines.append(f"| {system.get('label', name)}{_variant_note(system)} | "
                     f"{with_range(system['throughput_ips'], spread.get('throughput_ips'), 2)} | "
                     f"{with_range((system.get('latency_ms') or {}).get('p99'), spread.get('p99'), 0)} | {versus} | {overlap} |")
    lines += [*_failed_variants(systems, present), ""]
    return lines


def _ratio(systems: dict, a: str, b: str) -> float | None:
    return ratio(systems[a].get("throughput_ips") if a in systems else None, systems[b].get("throughput_ips"))


def _overlap(systems: dict, a: str, b: str) -> bool | None:
    return ranges_overlap(((systems.get(a) or {}).get("spread") or {}).get("throughput_ips"),
                          ((systems.get(b) or {}).get("spread") or {}).get("throughput_ips"))


def _yes_no(value: bool | None) -> str:
    return "-" if value is None else ("overlap" if value else "no")


def _failed_variants(systems: dict, names: list[str]) -> list[str]:
    """Each variant that failed (a compile backend, an instance count), with its first error line."""
    lines = []
    for name in names:
        for variant in systems[name].get("variants") or []:
            if "error" in variant:
                described = ", ".join(f"{k} {v}" for k, v in (variant.get("variant") or {}).items())
                lines.append(f"- {name} ({described}) failed: {error_headline(variant['error'])[:300]}")
    return ["", *lines] if lines else []


def _variant_note(system: dict) -> str:
    variant = system.get("variant") or {}
    batch = f", batch {variant['batch']}" if "batch" in variant else ""
    if "backend" in variant:
        return f" (best: {variant['backend']}, {variant['workers']} worker(s) x {variant['threads']} thread(s){batch})"
    if "instances" in variant:
        return f" (best: {variant['instances']} instance(s) x {variant['threads']} thread(s){batch})"
    if "workers" in variant:
        return f" (best: {variant['workers']} worker(s) x {variant['threads']} thread(s){batch})"
    plan = (system.get("details") or {}).get("plan")
    if plan:
        precision = plan.get("precision", "fp32")  # always said: "openvino" alone is fp32 or int8
        return f" ({plan['workers']} worker(s) x {plan['threads']} thread(s), batch {plan['batch']}, {plan['backend']} {precision})"
    return ""


def render_markdown(result: dict, chart_name: str | None = None) -> str:
    options, machine = result["options"], result["machine"]
    lines = [
        f"# Benchmark: {options['model']}{_device_title(options)}, {options['jobs']} jobs, concurrency {options['concurrency']}",
        "",
        f"{result['created']} on {machine['vcpus']} vCPUs ({machine['cpu']}{_flags(machine)}, {machine['memory_gib']} GiB)"
        f"{_gpus(machine)}, "
        f"torch {result['software'].get('torch')}, TorchServe {result['software'].get('torchserve')}; "
        f"git {str(result['git'].get('commit'))[:10]}{' (dirty)' if result['git'].get('dirty') else ''}.",
        "",
        f"Command: `{result['command']}`",
        "",
        *_load_lines(result),
        *peer_lines(result),
        "## Every system", "",
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
        *(f"| {g['goal']} | {g['target']} | {_cell(g['measured'], 2)} | {_met(g['met'])}{_overlap_note(g)} |" for g in result["goals"]),
    ]
    lines += photo_lines(result)
    lines += _compute_lines(result.get("compute") or {}, result["systems"])
    lines += _cpu_by_process_lines(result["systems"])
    if result.get("diagnosis"):
        lines += ["", "## Where the time goes", "", *(f"- {line}" for line in result["diagnosis"])]
    top1 = _top1_lines(result["systems"])
    if top1:
        lines += ["", "## Top-1 per photo (same random weights everywhere)", "", *top1]
    if chart_name:
        lines += ["", f"![throughput and p99 latency]({chart_name})"]
    return "\n".join(lines) + "\n"


def _overlap_note(goal: dict) -> str:
    return " (ranges overlap)" if goal.get("ranges_overlap") else ""


def _load_lines(result: dict) -> list[str]:
    """The machine is shared with other work: the 1-minute load average seen after each round, min-max."""
    loads = [r["loadavg"][0] for s in result["systems"].values() for r in s.get("rounds") or [] if r.get("loadavg")]
    if not loads:
        return []
    return [f"Load average (1 min) after the rounds: {min(loads):.1f}-{max(loads):.1f} on {result['machine']['vcpus']} vCPUs "
            f"(host {result['machine'].get('host', '?')}); the machine was shared with other work while this ran, so "
            "compare rows of this run only.", ""]


def _device_title(options: dict) -> str:
    """' on the GPU (tensorrt fp16)' for the GPU mode; nothing for CPU runs (older results have no device)."""
    if options.get("device", "cpu") != "cuda":
        return ""
    note = f"; {options['backend_note']}" if options.get("backend_note") else ""
    return f" on the GPU ({options['backend']} {options['precision']}{note})"


def _gpus(machine: dict) -> str:
    return f", GPU: {', '.join(machine['gpus'])}" if machine.get("gpus") else ""


def _flags(machine: dict) -> str:
    """The CPU's flags that decide the fastest artifact (results written before they were recorded have none)."""
    return f" with {' '.join(machine['cpu_flags'])}" if machine.get("cpu_flags") else ""


def _met(met) -> str:
    return "n/a" if met is None else ("yes" if met else "**no**")


def _top1_lines(systems: dict) -> list[str]:
    return [f"- {name}: " + ", ".join(f"photo {i}: {label}" for i, label in system["top1"].items())
            for name, system in systems.items() if system.get("top1")]


def _cpu_by_process_lines(systems: dict) -> list[str]:
    """Each system's CPU per answered image split by the kind of process that spent it (the median round's)."""
    rows = [(system, costs) for system in systems.values() if (costs := cpu_ms_per_image(system))]
    if not rows:
        return []
    lines = ["", "## CPU per image, by process", "",
             "ms of CPU per answered image during the measured load (mean CPU % in brackets, 100 = one vCPU busy), from "
             "each process's CPU time sampled every 0.2 s; the load generator is the benchmark's own client threads.",
             "", "| System | Total (ms) | By process |", "|---|---|---|"]
    for system, costs in rows:
        shares = system.get("mean_cpu_pct_by_process") or {}
        split = ", ".join(f"{kind} {ms:.1f} ({shares[kind]:.0f}%)" for kind, ms in costs.items())
        lines.append(f"| {system.get('label', '?')} | {sum(costs.values()):.1f} | {split} |")
    return lines


def _compute_lines(compute: dict, systems: dict) -> list[str]:
    """GFLOP/s achieved per system against the machine's fp32 peak (tools/lab/bench/compute.py)."""
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
