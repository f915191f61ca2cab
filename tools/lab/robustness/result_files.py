"""The robustness and soak results: JSON with the command, versions, machine and git revision, and a
Markdown page with every figure, written as <name>-<timestamp>.* with the links <name>-latest.* to the newest."""

from __future__ import annotations

import json
import os
import sys
from datetime import datetime, timezone
from pathlib import Path

from ..bench.result_document import git_state, machine_info, software_versions
from ...fsutil import point_latest

RESULTS_DIR = Path("benchmarks/results")


def envelope(kind: str, vcpus: int, parts: dict, started: datetime, git: dict | None = None) -> dict:
    """Everything a reader needs to trust or repeat the run, around the parts' figures (`git` as it was
    when the run began, for runs long enough that the checkout may change under them)."""
    checks = {f"{part}: {name}": ok for part, figures in parts.items() for name, ok in figures.get("checks", {}).items()}
    reasons = {f"{part}: {name}": why for part, figures in parts.items() for name, why in figures.get("reasons", {}).items()}
    return {
        "kind": kind,
        "created": started.isoformat(),
        "finished": datetime.now(timezone.utc).isoformat(),
        "command": " ".join(["tsvk", *sys.argv[1:]]) if sys.argv and sys.argv[0].endswith("tsvk") else " ".join(sys.argv),
        "machine": {**machine_info(vcpus), "cpu_affinity": sorted(os.sched_getaffinity(0))},
        "software": software_versions(),
        "git": git or git_state(),
        "passed": bool(checks) and all(checks.values()),
        "checks": checks,
        "reasons": reasons,
        "weaknesses": {f"{part}: {name}": why for part, figures in parts.items() for name, why in figures.get("weaknesses", {}).items()},
        "parts": parts,
    }


def write(result: dict, name: str, output_dir: Path = RESULTS_DIR, extra_md: str = "") -> dict[str, Path]:
    """<name>-<timestamp>.{json,md}, and <name>-latest.{json,md} linked to them."""
    output_dir.mkdir(parents=True, exist_ok=True)
    stem = f"{name}-{datetime.fromisoformat(result['created']).strftime('%Y%m%dT%H%M%SZ')}"
    written = {"json": output_dir / f"{stem}.json", "md": output_dir / f"{stem}.md"}
    written["json"].write_text(json.dumps(result, indent=1, default=str) + "\n")
    written["md"].write_text(render(result, name) + extra_md)
    for suffix, path in written.items():
        point_latest(output_dir / f"{name}-latest.{suffix}", path)
    return written


def _weaknesses(weaknesses: dict[str, str]) -> list[str]:
    """What the engine under test does not hold for a reason outside tsvk's code, listed apart from the checks."""
    if not weaknesses:
        return []
    return ["", "Not held by this engine, for a reason outside tsvk's code (not counted as checks):", "",
            *(f"- **{name}**: {why}" for name, why in weaknesses.items())]


def render(result: dict, title: str) -> str:
    lines = [
        f"# {title}: {'all checks passed' if result['passed'] else 'SOME CHECKS FAILED'}",
        "",
        f"`{result['command']}` at {result['created']} on {result['machine']['cpu']} "
        f"({result['machine']['vcpus']} vCPUs), git {str(result['git'].get('commit'))[:10]}"
        f"{' (dirty)' if result['git'].get('dirty') else ''}; TorchServe {result['software'].get('torchserve')}, "
        f"torch {result['software'].get('torch')}.",
        "",
        "| check | held | why |",
        "|---|---|---|",
    ]
    reasons = result.get("reasons", {})
    lines += [f"| {name} | {'yes' if ok else '**no**'} | {reasons.get(name, '')} |" for name, ok in result["checks"].items()]
    lines += _weaknesses(result.get("weaknesses", {}))
    for part, figures in result["parts"].items():
        lines += [
            "",
            f"## {part}",
            "",
            "```json",
            json.dumps({k: v for k, v in figures.items() if k not in ("checks", "reasons")}, indent=1, default=str),
            "```",
        ]
    return "\n".join(lines) + "\n"
