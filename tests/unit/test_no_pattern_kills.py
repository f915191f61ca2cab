"""No script of the project signals processes by name pattern: that reaches servers it did not start
(another user's TorchServe, a running benchmark). Processes are stopped by the pid or process group
that was started, checked to still be that process (tools/processes.py)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PATTERN_KILLS = re.compile(r"\b(pkill|killall)\b")
# tests/ speaks of these commands to forbid them; docs may explain why they are not used.
CHECKED_SUFFIXES = {".sh", ".py", ".mk", ".yaml", ".tpl", ""}


def _tracked_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    return [ROOT / name for name in listed if not name.startswith(("tests/", "docs/")) and not name.endswith(".md")]


def test_no_tracked_script_kills_by_pattern():
    offenders = []
    for path in _tracked_files():
        if path.suffix not in CHECKED_SUFFIXES or not path.is_file():
            continue
        text = path.read_text(errors="replace")
        offenders += [f"{path.relative_to(ROOT)}:{n}" for n, line in enumerate(text.splitlines(), 1) if PATTERN_KILLS.search(line)]
    assert offenders == []
