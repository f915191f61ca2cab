"""Where a batch run's inputs come from: a folder of photos, a text file of paths or URLs (one a line), or a
Parquet / CSV table with a column of them. Each kind is read as a stream, one input at a time, so an input
of ten million lines is never held in memory.

Relative paths in a text file or a table are taken from that file's folder, so a run resumed from another
working directory reads the same photos.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path
from typing import Iterator

from ..errors import UsageError
from ..extras import missing_extra

KINDS = ("folder", "text", "csv", "parquet")
TABLE_SUFFIXES = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet"}
# What a folder walk takes (a phone's HEIC and AVIF too); other files are left
PHOTO_SUFFIXES = (".jpg", ".jpeg", ".png", ".gif", ".bmp", ".webp", ".heic", ".heif", ".avif")
DEFAULT_COLUMN = "path"
URL_SCHEMES = ("http://", "https://", "file://")


def input_kind(path: Path) -> str:
    """folder, csv, parquet or text (any other file), or UsageError when the input is not there."""
    if path.is_dir():
        return "folder"
    if not path.is_file():
        raise UsageError(f"--input {path} is neither a folder nor a file; give a folder of photos, a text file of paths "
                         "or URLs (one a line), or a Parquet/CSV table with a column of them")
    return TABLE_SUFFIXES.get(path.suffix.lower(), "text")


def stream_inputs(path: Path, column: str = DEFAULT_COLUMN) -> Iterator[str]:
    """Every input of `path` in a stable order, each a path (absolute, or as written with a scheme) or a URL."""
    kind = input_kind(path)
    if kind == "folder":
        return _walk(path)
    base = str(path.resolve().parent)
    raw = {"text": _lines, "csv": _csv_column, "parquet": _parquet_column}[kind](path, column)
    return (_located(value, base) for value in raw)


def _located(value: str, base: str) -> str:
    """A URL or an absolute path as it is; a relative one from the input file's folder (os.path: millions of them)."""
    if value.startswith("/") or value.startswith(URL_SCHEMES):
        return value
    return os.path.join(base, os.path.expanduser(value) if value.startswith("~") else value)


def _walk(folder: Path) -> Iterator[str]:
    """The photos under `folder`, depth first, each folder's entries in name order (one folder's listing at a time)."""
    entries = sorted(os.scandir(folder), key=lambda entry: entry.name)
    for entry in entries:
        if entry.is_dir(follow_symlinks=False):
            yield from _walk(Path(entry.path))
        elif entry.name.lower().endswith(PHOTO_SUFFIXES):
            yield str(Path(entry.path).resolve())


def _lines(path: Path, column: str) -> Iterator[str]:
    """Each non-blank line, stripped; '#' starts a comment line."""
    with open(path, encoding="utf-8", errors="surrogateescape") as lines:
        for line in lines:
            text = line.strip()
            if text and not text.startswith("#"):
                yield text


def _csv_column(path: Path, column: str) -> Iterator[str]:
    with open(path, newline="", encoding="utf-8") as table:
        reader = csv.DictReader(table)
        _check_column(path, column, reader.fieldnames or [])
        for row in reader:
            value = (row.get(column) or "").strip()
            if value:
                yield value


def _parquet_column(path: Path, column: str) -> Iterator[str]:
    """The column in record batches of a few thousand rows: one batch in memory at a time."""
    parquet = _pyarrow_parquet()
    table = parquet.ParquetFile(path)
    _check_column(path, column, table.schema_arrow.names)
    for batch in table.iter_batches(batch_size=4096, columns=[column]):
        for value in batch.column(0).to_pylist():
            if value:
                yield str(value).strip()


def _check_column(path: Path, column: str, names: list[str]) -> None:
    if column not in names:
        raise UsageError(f"{path} has no column {column!r}; its columns are {', '.join(names) or 'none'} "
                         "(name the one holding paths or URLs with --column)")


def _pyarrow_parquet():
    try:
        import pyarrow.parquet as parquet
    except ImportError as err:
        raise missing_extra("Parquet input (pyarrow)", "parquet", err) from None
    return parquet
