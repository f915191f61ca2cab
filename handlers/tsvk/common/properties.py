"""Java .properties text, written and read the way TorchServe's frontend reads it (java.util.Properties.load).

TorchServe loads config.properties from a byte stream: ISO-8859-1, a backslash starts an escape (`\\t`
is a TAB, `\\\\` one backslash, `\\uXXXX` any character, a backslash before anything else is dropped),
and a line ending in an odd number of backslashes continues on the next. A value written as plain text
(a regular expression, a Windows-style path, a name with non-Latin letters) would reach TorchServe
changed; `escape_value` writes it so that it arrives as written, and `read_properties` reads it back
the same way, so tsvk and TorchServe always see the same settings.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

_NAMED_ESCAPES = {"\t": "\\t", "\n": "\\n", "\r": "\\r", "\f": "\\f", "\\": "\\\\"}
_UNESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_ESCAPE = re.compile(r"\\(u[0-9A-Fa-f]{4}|.)", re.S)
_LINE_BREAK = re.compile(r"\r\n|\r|\n")  # Java's line terminators only (not \x85, \f, ... as str.splitlines)
_KEY_END = re.compile(r"(?<!\\)(?:\\\\)*[=: \t\f]")  # the first separator not escaped by an odd run of backslashes
# (Java's blanks are space, tab and form feed only: a str regex's \s would also take \xa0, \x85, ...)


def escape_value(value: str) -> str:
    """`value` as property text Java reads back unchanged: backslashes doubled, control and non-ASCII
    characters as escapes, a leading blank kept (Java skips unescaped blanks before a value)."""
    text = "".join(_escape_char(c) for c in value)
    return "\\" + text if text[:1] == " " else text


def _escape_char(char: str) -> str:
    if char in _NAMED_ESCAPES:
        return _NAMED_ESCAPES[char]
    if " " <= char <= "~":
        return char
    encoded = char.encode("utf-16-be")  # characters beyond U+FFFF: a surrogate pair, as Java stores them
    return "".join(f"\\u{int.from_bytes(encoded[i:i + 2], 'big'):04x}" for i in range(0, len(encoded), 2))


def unescape(text: str) -> str:
    """Java's reading of an escaped key or value (surrogate pairs joined back into one character)."""
    plain = _ESCAPE.sub(lambda m: _unescape_one(m.group(1)), text)
    return plain.encode("utf-16", "surrogatepass").decode("utf-16") if any("\ud800" <= c <= "\udfff" for c in plain) else plain


def _unescape_one(escape: str) -> str:
    if escape[0] == "u" and len(escape) == 5:
        return chr(int(escape[1:], 16))
    return _UNESCAPES.get(escape, escape)


def logical_lines(text: str) -> list[str]:
    """Lines as Java joins them: comments and blank lines dropped, a line ending in an odd number of
    backslashes continued by the next (whose leading blanks are skipped)."""
    return [line for _, line in numbered_logical_lines(text)]


def numbered_logical_lines(text: str) -> list[tuple[int, str]]:
    """(the 1-based line each logical line starts on, its text), joined as `logical_lines` joins them."""
    lines, pending, start = [], None, 0
    for number, raw in enumerate(_LINE_BREAK.split(text), start=1):
        line = raw.lstrip(" \t\f")
        if pending is None and (not line or line[0] in "#!"):
            continue
        if pending is None:
            start = number
        line = line if pending is None else pending + line
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2:
            pending = line[:-1]
            continue
        lines.append((start, line))
        pending = None
    if pending is not None:
        lines.append((start, pending))
    return lines


def parse_line(line: str) -> tuple[str, str]:
    """(key, value) of one logical line: the key ends at the first unescaped `=`, `:` or blank."""
    end = _KEY_END.search(line)
    if end is None:
        return unescape(line), ""
    key, rest = line[:end.end() - 1], line[end.end() - 1:]
    rest = rest.lstrip(" \t\f")
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(" \t\f")
    return unescape(key), unescape(rest)


def read_properties(path: Path) -> dict[str, str]:
    """Every key of a .properties file as Java reads it; {} (logged) when the file cannot be read."""
    try:
        text = read_text(path)
    except OSError as err:
        log.warning("cannot read TorchServe config %s: %s", path, err)
        return {}
    return dict(parse_line(line) for line in logical_lines(text))


@dataclass(frozen=True)
class PropertiesEntry:
    key: str
    value: str
    line: int  # the 1-based line the entry starts on


def read_properties_entries(path: Path) -> list[PropertiesEntry]:
    """Every entry of a .properties file as Java reads it, with the line it starts on (for messages that
    point at it); OSError when the file cannot be read."""
    return [PropertiesEntry(*parse_line(line), number) for number, line in numbered_logical_lines(read_text(path))]


def read_text(path: Path) -> str:
    """The file's text as Java's Properties.load(InputStream) decodes it: ISO-8859-1, byte for character."""
    return Path(path).read_bytes().decode("latin-1")
