"""What a tune leaves behind: the tuned config, and every candidate's measurements (json, markdown, plot).

The config is the generator's (same format, same security defaults); only the numbers differ, and the
lines that carry them say which measurement chose them. The report gives each candidate's windows
(median and min-max), marks the rule's plan, and shows every comparison with it window by window, with
the verdict; the plot shows the Pareto front of throughput versus p99 (the candidates no other beats on
both) with each candidate's spread over its windows, and beside it the alternating windows.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from ..extras import install_line
from ..fsutil import write_text_atomic
from ..config.plan import ServingPlan, ServingRequest
from ..config.rendering import write_plan
from ..config.serving_config import plan_with_choices
from .decide import spread
from .measure import choices_of
from .search import CUT_AT_DEADLINE, Goal, SearchResult, Trial, problems_of, violation


def tuned_notes(result: SearchResult) -> dict[str, str]:
    """Per model: `2 workers x 1 thread, batch 8, delay 20 ms: 7.6 img/s, p99 1,210 ms (candidate 7 of 14)`."""
    chosen = result.chosen
    together = len(chosen.candidate.models) > 1
    notes = {}
    kept = ", the rule's plan, kept" if result.rule_plan is not None and chosen.number == result.rule_plan.number else ""
    for name, config in chosen.candidate.models:
        measured = chosen.measurement.per_model.get(name)
        if measured is None:
            notes[name] = f"{config.describe()}: the rule's plan, {chosen.measurement.error}"
            continue
        notes[name] = (f"{config.describe()}: {measured['img_s'] or 0:.1f} img/s, p99 {measured['p99_ms'] or 0:,.0f} ms "
                       f"at {measured['concurrency']} clients (candidate {chosen.number} of {len(result.trials)}"
                       f"{', all models loaded together' if together else ''}{kept})")
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
        "chosen_because": result.chosen_because,
        "rule_plan": result.rule_plan.number if result.rule_plan else None,
        "decisions": [asdict(d) for d in result.decisions],
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
        row["windows_img_s"] = _spread_dict([w.img_s for w in trial.measurement.windows])
        row["windows_p99_ms"] = _spread_dict([w.p99_ms for w in trial.measurement.windows])
        if trial.measured:
            row["misses"] = problems_of(trial, goal)
            row["violation"] = round(violation(trial, goal), 4)
    return row


def _spread_dict(values: list) -> dict | None:
    found = spread(values)
    return None if found is None else {"median": round(found.median, 2), "min": round(found.low, 2), "max": round(found.high, 2),
                                       "windows": len([v for v in values if v is not None])}


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
             f"{document['window_s']:.0f} s per candidate{_decision_setup(document)}.", "",
             f"Goals: p99 {_or_none(goal['p99_ms'], 'ms')}, floor {_or_none(goal['min_img_s'], 'img/s')} per model, "
             f"memory {_or_none(goal['memory_mb'], 'MiB')}.", ""]
    lines += _chosen_lines(document)
    lines += ["", "Each candidate's load ran in windows, one after the other: img/s and p99 are the median of its windows "
              "(min-max in brackets); p50 is over the whole load.", "",
              "| # | phase | config | img/s | p50 ms | p99 ms | peak RSS MiB | CPU % | clients | note |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    lines += [_table_row(row, document["chosen"], document.get("rule_plan")) for row in document["candidates"]]
    lines += _decision_lines(document)
    lines += ["", "Pareto front (throughput vs p99): candidates " + ", ".join(f"#{n}" for n in document["pareto_front"]) + ".",
              "", f"![throughput vs p99]({chart_name})", ""]
    return "\n".join(lines)


def _decision_setup(document: dict) -> str:
    if not document.get("decision_pairs"):
        return ""
    return (f"; a candidate replaces the rule's plan only by winning in {document['decision_pairs']} alternating windows a side "
            f"of {document['decision_window_s']:.0f} s")


def _chosen_lines(document: dict) -> list[str]:
    chosen = next((row for row in document["candidates"] if row["number"] == document["chosen"]), None)
    if chosen is None:
        return ["**No candidate could be measured**; no config was written."]
    m = document.get("chosen_measurement") or chosen["measurement"]
    rule = " (the rule's plan, as `tsvk config` writes it)" if chosen["number"] == document.get("rule_plan") else ""
    if m.get("error"):
        return [f"**Chosen: candidate {chosen['number']}**{rule}, {chosen['describe']}: {m['error']}. Written to `{document['output']}`.",
                "", f"Why: {document.get('chosen_because')}."]
    verdict = "meets every goal" if document["goal_met"] else "MISSES the goals: " + "; ".join(document["problems"])
    return [
        f"**Chosen: candidate {chosen['number']}**{rule}, {chosen['describe']}: "
        f"{_spread_text(chosen.get('windows_img_s'), m.get('img_s'))} img/s, "
        f"p99 {_spread_text(chosen.get('windows_p99_ms'), m.get('p99_ms'), 0)} ms, peak RSS {_num(m.get('peak_rss_mb'))} MiB; {verdict}. "
        f"Written to `{document['output']}`.",
        "",
        f"Why: {document.get('chosen_because') or 'the best measured'}.",
    ]


def _decision_lines(document: dict) -> list[str]:
    """Each comparison with the rule's plan: both sides' windows in the order they ran, and the verdict."""
    lines = []
    for decision in document.get("decisions", []):
        compared, verdict = decision["comparison"], decision["verdict"]
        lines += ["", f"### Candidate {decision['contender']} against the rule's plan (candidate {decision['rule']})", ""]
        if compared and (compared["rule"] or compared["contender"]):
            clients = ", ".join(f"{n} {c}" for n, c in compared["clients"].items())
            lines += [
                f"Both served at once, loaded in turn ({' '.join(compared['order'])}) with the same clients ({clients}), "
                f"{compared['window_s']:.0f} s a window{_stopped_text(compared, document)}.",
                "",
                "| side | config | img/s per window | median (min-max) | p99 ms median (min-max) |",
                "|---|---|---|---|---|",
            ]
            for side, number in (("rule", decision["rule"]), ("contender", decision["contender"])):
                windows = compared[side]
                described = next((r["describe"] for r in document["candidates"] if r["number"] == number), "")
                label = "rule's plan" if side == "rule" else f"candidate {number}"
                per_window = ", ".join(f"{w['img_s']:.1f}" for w in windows)
                lines.append(
                    f"| {label} | {described} | {per_window} | "
                    f"{_spread_text(_spread_dict([w['img_s'] for w in windows]), None)} | "
                    f"{_spread_text(_spread_dict([w['p99_ms'] for w in windows]), None, 0)} |"
                )
            lines.append("")
        lines.append(
            f"Verdict: {'**the candidate replaces the rule**' if verdict['departs'] else 'the rule is kept'}: {verdict['reason']}."
        )
    return lines


def _stopped_text(compared: dict, document: dict) -> str:
    if not compared["stopped"]:
        return ""
    planned = 2 * (document.get("decision_pairs") or 0)
    if compared["stopped"] == CUT_AT_DEADLINE:
        return f"; cut at the deadline after {len(compared['order'])} of {planned} windows"
    return f"; stopped after {len(compared['order'])} of {planned} windows, once the candidate could no longer win"


def _spread_text(found: dict | None, fallback, digits: int = 1) -> str:
    if not found:
        return _num(fallback, digits)
    if found["windows"] == 1:
        return _num(found["median"], digits)
    return f"{found['median']:,.{digits}f} ({found['min']:,.{digits}f}-{found['max']:,.{digits}f})"


def _table_row(row: dict, chosen: int | None, rule_plan: int | None = None) -> str:
    m = row.get("measurement") or {}
    note = row["skipped"] or m.get("error", "")[:80] or (f"stopped early: {m['stopped_early']}" if m.get("stopped_early") else "")
    note = note or "; ".join(row.get("misses", []))
    if row["number"] == rule_plan:
        note = ("the rule's plan (`tsvk config`) " + note).strip()
    if row["number"] == chosen:
        note = ("**chosen** " + note).strip()
    if row.get("on_pareto_front"):
        note = (note + " (Pareto front)").strip()
    clients = ", ".join(str(p.get("concurrency")) for p in (m.get("per_model") or {}).values())
    return (
        f"| {row['number']} | {row['phase']} | {row['describe']} | {_spread_text(row.get('windows_img_s'), m.get('img_s'))} | "
        f"{_num(m.get('p50_ms'))} | {_spread_text(row.get('windows_p99_ms'), m.get('p99_ms'), 0)} | {_num(m.get('peak_rss_mb'))} | "
        f"{_num(m.get('mean_cpu_pct'))} | {clients} | {note.replace('|', '/')} |"
    )


def _num(value, digits: int = 0) -> str:
    return "" if value is None else f"{value:,.{digits}f}"


def _or_none(value, unit: str) -> str:
    return "none" if value is None else f"{value:,g} {unit}"


def write_pareto_chart(document: dict, path: Path) -> Path | None:
    """Left: every measured candidate at (p99, img/s) with its windows' min-max as bars, the front joined by a
    line, the rule's plan and the chosen one marked. Right, when a comparison ran: its windows in the order
    they ran, the rule's plan and the contender in two colours, so an overlap is plain to see."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"tune: matplotlib is not installed, no chart ({install_line('tune')})")
        return None
    rows = [r for r in document["candidates"] if (r.get("measurement") or {}).get("p99_ms") and "misses" in r]
    if not rows:
        return None
    compared = [d for d in document.get("decisions", []) if d["comparison"] and d["comparison"]["order"]]
    figure, axes = plt.subplots(1, 2 if compared else 1, figsize=(12 if compared else 7, 4.2), dpi=80, squeeze=False)
    _pareto_axis(axes[0][0], document, rows)
    if compared:
        _windows_axis(axes[0][1], compared)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
    return path


def _pareto_axis(axis, document: dict, rows: list[dict]) -> None:
    x = [r["measurement"]["p99_ms"] for r in rows]
    y = [r["measurement"]["img_s"] for r in rows]
    low = [max(0.0, v - (r.get("windows_img_s") or {}).get("min", v)) for v, r in zip(y, rows)]
    high = [max(0.0, (r.get("windows_img_s") or {}).get("max", v) - v) for v, r in zip(y, rows)]
    left = [max(0.0, v - (r.get("windows_p99_ms") or {}).get("min", v)) for v, r in zip(x, rows)]
    right = [max(0.0, (r.get("windows_p99_ms") or {}).get("max", v) - v) for v, r in zip(x, rows)]
    axis.errorbar(
        x,
        y,
        yerr=[low, high],
        xerr=[left, right],
        fmt="o",
        color="tab:blue",
        ms=4,
        elinewidth=1,
        capsize=2,
        label="candidate: whole load, bars: min-max of its windows",
    )
    for r in rows:
        axis.annotate(
            f"#{r['number']}",
            (r["measurement"]["p99_ms"], r["measurement"]["img_s"]),
            fontsize=7,
            xytext=(3, 3),
            textcoords="offset points",
        )
    front = [r for r in rows if r["on_pareto_front"]]
    axis.plot(
        [r["measurement"]["p99_ms"] for r in front],
        [r["measurement"]["img_s"] for r in front],
        color="tab:green",
        drawstyle="steps-post",
        label="Pareto front",
    )
    for number, style in (
        (document.get("rule_plan"), dict(marker="s", s=90, facecolors="none", edgecolors="tab:gray")),
        (document["chosen"], dict(marker="o", s=160, facecolors="none", edgecolors="tab:red")),
    ):
        marked = [r for r in rows if r["number"] == number]
        if marked:
            label = "rule's plan" if number == document.get("rule_plan") and style["marker"] == "s" else "chosen"
            axis.scatter([marked[0]["measurement"]["p99_ms"]], [marked[0]["measurement"]["img_s"]], label=f"{label} (#{number})", **style)
    if document["goal"]["p99_ms"]:
        axis.axvline(document["goal"]["p99_ms"], color="tab:red", linestyle=":", label="p99 goal")
    axis.set_xlabel("p99 latency, ms (lower is better)")
    axis.set_ylabel("images / s (higher is better)")
    axis.legend(fontsize=7)
    axis.set_title(f"tsvk tune: {', '.join(document['models'])}, {document['vcpus']} vCPUs", fontsize=9)


def _windows_axis(axis, decisions: list[dict]) -> None:
    """Each comparison's windows in the order they ran: the rule's plan grey squares, the contender red circles."""
    at = 0
    for decision in decisions:
        compared, seen = decision["comparison"], {"rule": 0, "contender": 0}
        for side in compared["order"]:
            window = compared[side][seen[side]]
            seen[side] += 1
            at += 1
            rule = side == "rule"
            axis.scatter(
                [at],
                [window["img_s"]],
                marker="s" if rule else "o",
                color="tab:gray" if rule else "tab:red",
                s=30,
                label=("rule's plan" if rule else "contender") if at <= 2 else None,
            )
        axis.annotate(
            f"#{decision['contender']}: {'replaces the rule' if decision['verdict']['departs'] else 'rule kept'}",
            (at, compared["contender"][-1]["img_s"] if compared["contender"] else compared["rule"][-1]["img_s"]),
            fontsize=7,
            xytext=(-40, 8),
            textcoords="offset points",
        )
        at += 1
    axis.set_xlabel("window, in the order measured")
    axis.set_ylabel("images / s")
    axis.legend(fontsize=7)
    axis.set_title("alternating windows against the rule's plan", fontsize=9)
