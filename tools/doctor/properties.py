"""A TorchServe config.properties with the line each key starts on, for findings that point at it.

Read by the run time's reader (`tsvk.common.read_properties_entries`), which reads it as Java's
Properties.load(InputStream) does: ISO-8859-1, `\\uXXXX` escapes, values continued over lines with a
trailing backslash (TorchServe's own examples write `models=` that way), `:` or a space between key and value.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from tsvk.common import read_properties_entries


@dataclass
class Properties:
    path: Path
    values: dict[str, str] = field(default_factory=dict)
    lines: dict[str, int] = field(default_factory=dict)  # key -> the line it starts on (1-based)

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.values.get(key, default)

    def where(self, key: str) -> str:
        return f"{self.path.name}:{self.lines[key]}" if key in self.lines else f"{self.path.name} (not set)"


def read(path: Path) -> Properties:
    """Every key of the file (the last of a repeated key, as Java keeps it) and the line it starts on."""
    props = Properties(Path(path))
    for entry in read_properties_entries(path):
        props.values[entry.key] = entry.value
        props.lines[entry.key] = entry.line
    return props
