"""Finding the processes a test started, by a marker only they carry on their command line (a folder of the
test's own), so a test signals or counts nothing of anyone else's."""

from __future__ import annotations

import os
from pathlib import Path


def processes_naming(marker: str) -> list[int]:
    """Pids (this process's left out) whose command line holds `marker`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found
