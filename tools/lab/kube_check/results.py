"""A check's record: one dated file per run (<stamp>-<kind>.json), and <kind>-latest.json, a link to the newest."""

from __future__ import annotations

import json
import time
from pathlib import Path

from ...fsutil import point_latest

LATEST = "kube-check-latest.json"


def write_results(report: dict, directory: Path, started: float, kind: str = "kube-check") -> Path:
    """<UTC stamp>-<kind>.json, written whole before the latest link moves to it."""
    directory.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(started))
    report = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)), **report}
    path = directory / f"{stamp}-{kind}.json"
    part = path.with_suffix(".json.part")
    part.write_text(json.dumps(report, indent=2) + "\n")
    part.replace(path)
    point_latest(directory / f"{kind}-latest.json", path)
    return path
