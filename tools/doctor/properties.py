"""A TorchServe config.properties read the way Java's Properties.load reads it, with line numbers.

Hand-written configs use what the handler's small reader (tsvk/threads.py) does not need: values
continued over lines with a trailing backslash (TorchServe's own examples write `models=` that way),
`:` or a space between key and value, and escapes. A finding names the line a key starts on.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


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
    props = Properties(Path(path))
    for number, logical in _logical_lines(Path(path).read_text(errors="replace").splitlines()):
        key, value = _split(logical)
        props.values[key] = value
        props.lines[key] = number
    return props


def _logical_lines(raw: list[str]):
    """(first line number, text) of each entry: comments and blanks dropped, continuations joined."""
    number, pending = 0, None
    for index, line in enumerate(raw, start=1):
        text = line.lstrip() if pending is not None else line.lstrip()
        if pending is None:
            if not text or text[0] in "#!":
                continue
            number, pending = index, ""
        continued = (len(text) - len(text.rstrip("\\"))) % 2 == 1
        pending += text[:-1] if continued else text
        if not continued:
            yield number, pending
            pending = None
    if pending:
        yield number, pending


def _split(logical: str) -> tuple[str, str]:
    match = re.match(r"((?:\\.|[^=:\s\\])*)\s*[=:]?\s*(.*)", logical, flags=re.DOTALL)
    key, value = match.group(1), match.group(2)
    return _unescape(key), _unescape(value)


def _unescape(text: str) -> str:
    def replace(match: re.Match) -> str:
        escaped = match.group(1)
        if escaped.startswith("u") and len(escaped) == 5:
            return chr(int(escaped[1:], 16))
        return _ESCAPES.get(escaped, escaped)

    return re.sub(r"\\(u[0-9a-fA-F]{4}|.)", replace, text)
