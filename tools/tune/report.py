"""What a tune leaves behind: the tuned config, and every candidate's measurements (json, markdown, plot).

The config is the generator's (same format, same security defaults); only the numbers differ, and the
lines that carry them say which measurement chose them. The plot is the Pareto front of throughput
versus p99: the candidates no other candidate beats on both.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from ..fsutil import write_text_atomic
from ..serve.serving_config import ServingPlan, ServingRequest, plan_with_choices, write_plan
from .measure import choices_of
from .search import Goal, SearchResult, Trial, problems_of, violation


def tuned_notes(result: SearchResult) -> dict[str, str]:
    """Per model: `2 workers x 1 thread, batch 8, delay 20 ms: 7.6 img/s, p99 1,210 ms (candidate 7 of 14)`."""
    chosen = result.chosen
    together = len(chosen.candidate.models) > 1
    notes = {}
    for name, config in chosen.candidate.models:
        measured = chosen.measurement.per_model[name]
        notes[name] = (f"{config.describe()}: {measured['img_s']:.1f} img/s, p99 {measured['p99_ms']:,.0f} ms "
                       f"at {measured['concurrency']} clients (candidate {chosen.number} of {len(result.trials)}"
                       f"{', all models loaded together' if together else ''})")
    return notes


def write_tuned_config(request: ServingRequest, result: SearchResult, output: Path) -> ServingPlan:
    choices = choices_of(result.chosen.candidate, tuned_notes(result))
    return write_plan(plan_with_choices(request, choices, origin="tsvk tune"), output)


def pareto_front(trials: list[Trial]) -> list[Trial]:
    """Fully measured candidates that no other beats on both images/s (higher) and p99 (lower)."""
    points = [t for t in trials if t.measured and t.measurement.p99_ms is not None]

    def dominated(t: Trial) -> bool:
        m = t.measurement
        return any(o.measurement.img_s >= m.img_s and o.measurement.p99_ms <= m.p99_ms
                   and (o.measurement.img_s > m.img_s or o.measurement.p99_ms < m.p99_ms) for o in points)

    return sorted((t for t in points if not dominated(t)), key=lambda t: t.measurement.p99_ms)


def result_document(result: SearchResult, context: dict) -> dict:
    front = {t.number for t in pareto_front(result.trials)}
    return {
        **context,
        "seconds": result.seconds,
        "stopped_because": result.stopped_because,
        "memory_cap_mb": result.memory_cap_mb,
        "goal_met": result.goal_met,
        "problems": result.problems,
        "chosen": result.chosen.number if result.chosen else None,
        # every measurement of the chosen candidate together (search.py: mean img/s, worst p99, largest RSS)
        "chosen_measurement": asdict(result.chosen.measurement) if result.chosen else None,
        "pareto_front": sorted(front),
        "candidates": [_trial_row(t, front, context) for t in result.trials],
    }


def _trial_row(trial: Trial, front: set[int], context: dict) -> dict:
    goal = Goal(**context["goal"])
    row = {"number": trial.number, "phase": trial.phase, "config": {n: asdict(c) for n, c in trial.candidate.models},
           "describe": trial.candidate.describe(), "estimated_mb": trial.estimated_mb, "skipped": trial.skipped,
           "on_pareto_front": trial.number in front}
    if trial.measurement is not None:
        row["measurement"] = asdict(trial.measurement)
        if trial.measured:
            row["misses"] = problems_of(trial, goal)
            row["violation"] = round(violation(trial, goal), 4)
    return row


def write_results(document: dict, folder: Path, stem: str) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"{stem}.json", folder / f"{stem}.md"]
    write_text_atomic(paths[0], json.dumps(document, indent=2) + "\n")
    write_text_atomic(paths[1], markdown(document, f"{stem}.png"))
    chart = write_pareto_chart(document, folder / f"{stem}.png")
    return paths + ([chart] if chart else [])


def markdown(document: dict, chart_name: str) -> str:
    goal = document["goal"]
    lines = [f"# `tsvk tune`: {', '.join(document['models'])}", "",
             f"`{document['command']}`", "",
             f"{document['machine']}; {document['vcpus']} vCPUs; memory cap {document['memory_cap_mb']:,.0f} MiB "
             f"({document['memory_cap_source']}); budget {document['budget_s']:.0f} s, used {document['seconds']:.0f} s "
             f"({len(document['candidates'])} candidates; stopped: {document['stopped_because']}); load window "
             f"{document['window_s']:.0f} s per candidate.", "",
             f"Goals: p99 {_or_none(goal['p99_ms'], 'ms')}, floor {_or_none(goal['min_img_s'], 'img/s')} per model, "
             f"memory {_or_none(goal['memory_mb'], 'MiB')}.", ""]
    lines += _chosen_lines(document)
    lines += ["", "| # | phase | config | img/s | p50 ms | p99 ms | peak RSS MiB | CPU % | clients | note |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    lines += [_table_row(row, document["chosen"]) for row in document["candidates"]]
    lines += ["", "Pareto front (throughput vs p99): candidates " + ", ".join(f"#{n}" for n in document["pareto_front"]) + ".",
              "", f"![throughput vs p99]({chart_name})", ""]
    return "\n".join(lines)


def _chosen_lines(document: dict) -> list[str]:
    chosen = next((row for row in document["candidates"] if row["number"] == document["chosen"]), None)
    if chosen is None:
        return ["**No candidate could be measured**; no config was written."]
    m = document.get("chosen_measurement") or chosen["measurement"]
    times = sum(1 for row in document["candidates"] if row["describe"] == chosen["describe"] and row.get("misses") is not None)
    measured = f" (mean of {times} measurements)" if times > 1 else ""
    verdict = "meets every goal" if document["goal_met"] else "MISSES the goals: " + "; ".join(document["problems"])
    return [f"**Chosen: candidate {chosen['number']}**, {chosen['describe']}: {m['img_s']:.1f} img/s{measured}, p99 {m['p99_ms']:,.0f} ms, "
            f"peak RSS {m['peak_rss_mb']:,.0f} MiB; {verdict}. Written to `{document['output']}`."]


def _table_row(row: dict, chosen: int | None) -> str:
    m = row.get("measurement") or {}
    note = row["skipped"] or m.get("error", "")[:80] or (f"stopped early: {m['stopped_early']}" if m.get("stopped_early") else "")
    note = note or "; ".join(row.get("misses", []))
    if row["number"] == chosen:
        note = ("**chosen** " + note).strip()
    if row.get("on_pareto_front"):
        note = (note + " (Pareto front)").strip()
    clients = ", ".join(str(p.get("concurrency")) for p in (m.get("per_model") or {}).values())
    return (f"| {row['number']} | {row['phase']} | {row['describe']} | {_num(m.get('img_s'), 1)} | {_num(m.get('p50_ms'))} | "
            f"{_num(m.get('p99_ms'))} | {_num(m.get('peak_rss_mb'))} | {_num(m.get('mean_cpu_pct'))} | {clients} | {note.replace('|', '/')} |")


def _num(value, digits: int = 0) -> str:
    return "" if value is None else f"{value:,.{digits}f}"


def _or_none(value, unit: str) -> str:
    return "none" if value is None else f"{value:,g} {unit}"


def write_pareto_chart(document: dict, path: Path) -> Path | None:
    """Every measured candidate as a point (p99, img/s), the front joined by a line, the chosen one ringed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("tune: matplotlib is not installed, no chart (pip install matplotlib)")
        return None
    rows = [r for r in document["candidates"] if (r.get("measurement") or {}).get("p99_ms") and "misses" in r]
    if not rows:
        return None
    figure, axis = plt.subplots(figsize=(7, 4.2), dpi=80)
    axis.scatter([r["measurement"]["p99_ms"] for r in rows], [r["measurement"]["img_s"] for r in rows], color="tab:blue", s=18)
    for r in rows:
        axis.annotate(f"#{r['number']}", (r["measurement"]["p99_ms"], r["measurement"]["img_s"]), fontsize=7,
                      xytext=(3, 3), textcoords="offset points")
    front = [r for r in rows if r["on_pareto_front"]]
    axis.plot([r["measurement"]["p99_ms"] for r in front], [r["measurement"]["img_s"] for r in front], color="tab:green",
              drawstyle="steps-post", label="Pareto front")
    chosen = [r for r in rows if r["number"] == document["chosen"]]
    if chosen:
        axis.scatter([chosen[0]["measurement"]["p99_ms"]], [chosen[0]["measurement"]["img_s"]], s=140, facecolors="none",
                     edgecolors="tab:red", label=f"chosen (#{chosen[0]['number']})")
    if document["goal"]["p99_ms"]:
        axis.axvline(document["goal"]["p99_ms"], color="tab:red", linestyle=":", label="p99 goal")
    axis.set_xlabel("p99 latency, ms (lower is better)")
    axis.set_ylabel("images / s (higher is better)")
    axis.legend(fontsize=7)
    axis.set_title(f"tsvk tune: {', '.join(document['models'])}, {document['vcpus']} vCPUs", fontsize=9)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
    return path
