"""What makes a batch run resumable: its folder beside the output, holding the list of inputs (each with its
id, its position in that list), the unpacked archive, and the arguments it was started with; and the output
itself, appended one row per input.

The list is written once, to a temporary name renamed into place, so a run killed while listing lists
again. Rows are appended as they come; a row is done when its whole line is in the file. A run started
again with the same arguments cuts off a line a kill left half-written, marks the ids already in the file
in a bitmap (one bit per input: 1.25 MB for ten million) and scores only the others, so every input ends
up in the output exactly once.
"""

from __future__ import annotations

import array
import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

from ..archive.mar import ArchiveError, ModelArchive
from ..errors import UsageError

STATE_SUFFIX = ".batch"  # results.jsonl -> results.jsonl.batch/
LIST_FILE = "inputs.jsonl"  # one JSON string per input; its line number is the input's id
OFFSETS_FILE = "inputs.offsets"  # int64 start of each line: any input read by id without reading the rest
META_FILE = "run.json"
ARCHIVE_DIR = "archive"
JOURNAL_FILE = "rows.jsonl"  # the rows, where the output is not itself appendable (Parquet)
ROW_ID = re.compile(rb'^\{"id": (\d+),')


@dataclass
class RunState:
    """The folder of one run and what it knows."""

    folder: Path

    @classmethod
    def beside(cls, output: Path) -> "RunState":
        return cls(output.with_name(output.name + STATE_SUFFIX))

    def path(self, name: str) -> Path:
        return self.folder / name

    def meta(self) -> dict | None:
        try:
            return json.loads(self.path(META_FILE).read_text())
        except (OSError, ValueError):
            return None

    def write_meta(self, meta: dict) -> None:
        _replace(self.path(META_FILE), json.dumps(meta, indent=1, sort_keys=True).encode())

    def count(self) -> int:
        return os.path.getsize(self.path(OFFSETS_FILE)) // 8

    def write_list(self, sources: Iterable[str]) -> int:
        """The inputs, one JSON string a line, and where each line starts; both renamed into place at the end."""
        self.folder.mkdir(parents=True, exist_ok=True)
        listing, offsets = self.path(LIST_FILE + ".tmp"), self.path(OFFSETS_FILE + ".tmp")
        count, position, starts = 0, 0, array.array("q")
        with open(listing, "wb") as lines, open(offsets, "wb") as index:
            for source in sources:
                line = (json.dumps(source) + "\n").encode()
                starts.append(position)
                lines.write(line)
                position, count = position + len(line), count + 1
                if len(starts) >= 65536:
                    starts.tofile(index)
                    starts = array.array("q")
            starts.tofile(index)
        os.replace(listing, self.path(LIST_FILE))
        os.replace(offsets, self.path(OFFSETS_FILE))
        return count

    def unpack_archive(self, archive: Path) -> Path:
        """The .mar unpacked once, within the bounds every reader of an archive keeps (tools/archive/mar.py), as
        TorchServe unpacks it for its workers."""
        target = self.path(ARCHIVE_DIR)
        if not target.is_dir():
            partial = self.path(ARCHIVE_DIR + ".tmp")
            shutil.rmtree(partial, ignore_errors=True)
            try:
                ModelArchive(archive).unpack(partial)
            except ArchiveError as err:
                raise UsageError(f"{archive} cannot be unpacked: {err}") from err
            os.replace(partial, target)
        return target

    def finish(self) -> None:
        """Keep only what says the run is complete: the list, the archive and the journal go."""
        for name in (LIST_FILE, OFFSETS_FILE, JOURNAL_FILE):
            self.path(name).unlink(missing_ok=True)
        shutil.rmtree(self.path(ARCHIVE_DIR), ignore_errors=True)


class InputList:
    """The listed inputs read by id: a seek to the line's offset, one line read."""

    def __init__(self, state: RunState):
        self.listing = open(state.path(LIST_FILE), "rb")
        self.offsets = open(state.path(OFFSETS_FILE), "rb")

    def source(self, input_id: int) -> str:
        self.offsets.seek(8 * input_id)
        (start,) = array.array("q", self.offsets.read(8))
        self.listing.seek(start)
        return json.loads(self.listing.readline())

    def sources(self, ids: Iterable[int]) -> list[str]:
        return [self.source(i) for i in ids]

    def close(self) -> None:
        self.listing.close()
        self.offsets.close()


class DoneIds:
    """One bit per input: set once its row is in the output."""

    def __init__(self, count: int):
        self.count = count
        self.bits = bytearray((count + 7) // 8)
        self.done = 0

    def add(self, input_id: int) -> bool:
        """Mark the id; False where it was already marked (its row is a duplicate)."""
        byte, bit = divmod(input_id, 8)
        if self.bits[byte] >> bit & 1:
            return False
        self.bits[byte] |= 1 << bit
        self.done += 1
        return True

    def __contains__(self, input_id: int) -> bool:
        byte, bit = divmod(input_id, 8)
        return bool(self.bits[byte] >> bit & 1)

    def missing(self) -> Iterator[int]:
        """The ids not done yet, in order, found a byte at a time."""
        for byte, value in enumerate(self.bits):
            if value != 0xFF:
                for input_id in range(8 * byte, min(8 * byte + 8, self.count)):
                    if not value >> (input_id - 8 * byte) & 1:
                        yield input_id


class RowFile:
    """The rows, appended one line each; opening it cuts off a line a kill left half-written and reads which
    ids are done."""

    def __init__(self, path: Path, done: DoneIds):
        self.path = path
        cut_partial_line(path)
        for input_id in read_ids(path):
            if not done.add(input_id):
                raise UsageError(f"{path} holds the row of input {input_id} twice: it was not written by this run; "
                                 "move it away to start over")
        self.handle = open(path, "ab")

    def write(self, lines: Iterable[str]) -> None:
        self.handle.write("".join(line + "\n" for line in lines).encode())

    def flush(self) -> None:
        self.handle.flush()

    def close(self) -> None:
        self.handle.close()


def cut_partial_line(path: Path) -> None:
    """Truncate `path` after its last newline (a whole row); nothing to do when it ends with one or is missing."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return
    with open(path, "rb+") as handle:
        end = size
        while end > 0:
            start = max(0, end - 65536)
            handle.seek(start)
            chunk = handle.read(end - start)
            newline = chunk.rfind(b"\n")
            if newline >= 0:
                end = start + newline + 1
                break
            end = start
        if end != size:
            handle.truncate(end)


def read_ids(path: Path) -> Iterator[int]:
    """The id of each row in the file, read from the start of each line."""
    if not path.exists():
        return
    with open(path, "rb") as rows:
        for line in rows:
            match = ROW_ID.match(line)
            if match is None:
                raise UsageError(f"{path} has a line that is not a batch row: {line[:80]!r}; move it away to start over")
            yield int(match.group(1))


def _replace(path: Path, data: bytes) -> None:
    partial = path.with_name(path.name + ".tmp")
    partial.write_bytes(data)
    os.replace(partial, path)
