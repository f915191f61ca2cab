"""Output formats: JSON lines (one row a line, appended as rows come) and Parquet (written once at the end from
the run's journal of JSON lines, since a Parquet file cannot be appended to; renamed into place whole)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..errors import UsageError
from ..extras import missing_extra

OUTPUT_FORMATS = {".jsonl": "jsonl", ".parquet": "parquet"}
PARQUET_ROWS_PER_GROUP = 8192


def output_format(path: Path) -> str:
    fmt = OUTPUT_FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise UsageError(f"--output {path}: must end in {' or '.join(OUTPUT_FORMATS)}")
    return fmt


def write_parquet(journal: Path, output: Path) -> None:
    """The journal's rows as a Parquet table (id, input, status, code, answer as JSON text), a group at a time."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as parquet
    except ImportError as err:
        raise missing_extra("Parquet output (pyarrow)", "parquet", err) from None
    schema = pa.schema([("id", pa.int64()), ("input", pa.string()), ("status", pa.int32()), ("code", pa.string()),
                        ("answer", pa.string())])
    partial = output.with_name(output.name + ".tmp")
    with parquet.ParquetWriter(partial, schema) as writer, open(journal, "rb") as rows:
        group: list[dict] = []
        for line in rows:
            row = json.loads(line)
            group.append({**row, "answer": json.dumps(row["answer"])})
            if len(group) == PARQUET_ROWS_PER_GROUP:
                writer.write_table(pa.Table.from_pylist(group, schema))
                group = []
        if group:
            writer.write_table(pa.Table.from_pylist(group, schema))
    os.replace(partial, output)
