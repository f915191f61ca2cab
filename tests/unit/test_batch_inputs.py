"""`tsvk batch`'s inputs and run state: each input kind streamed in a stable order, the list read back by id,
a half-written last row cut off, the ids already done found again, and memory that does not grow with the
input's length."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.required import pinned
from tsvk_tools.batch.sources import input_kind, stream_inputs
from tsvk_tools.batch.state import DoneIds, InputList, RowFile, RunState, cut_partial_line, read_ids
from tsvk_tools.batch.tables import output_format, write_parquet
from tsvk_tools.errors import UsageError


def test_a_folder_is_walked_depth_first_in_name_order_photos_only(tmp_path):
    for name in ("b.jpg", "a.PNG", "sub/c.jpeg", "sub/deeper/d.webp", "notes.txt", "z/.hidden.gif", "IMG_0001.HEIC", "y.avif"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"x")
    found = [str(Path(p).relative_to(tmp_path)) for p in stream_inputs(tmp_path)]
    assert found == ["IMG_0001.HEIC", "a.PNG", "b.jpg", "sub/c.jpeg", "sub/deeper/d.webp", "y.avif", "z/.hidden.gif"]


def test_a_text_file_gives_each_line_relative_paths_from_its_folder_urls_as_they_are(tmp_path):
    listing = tmp_path / "lists" / "inputs.txt"
    listing.parent.mkdir()
    listing.write_text("# photos\ncat.jpg\n\n  /abs/dog.png  \nhttps://example.org/x.jpg\n")
    assert list(stream_inputs(listing)) == [str(listing.parent / "cat.jpg"), "/abs/dog.png", "https://example.org/x.jpg"]


def test_csv_and_parquet_tables_give_their_column_and_a_missing_column_names_the_ones_there(tmp_path):
    pyarrow = pinned("pyarrow", "make setup")
    import pyarrow.parquet as parquet

    (tmp_path / "t.csv").write_text('path,label\n/a.jpg,cat\n"/b,c.jpg",dog\n')
    assert list(stream_inputs(tmp_path / "t.csv")) == ["/a.jpg", "/b,c.jpg"]
    parquet.write_table(pyarrow.table({"url": ["/x.jpg", "/y.jpg"], "n": [1, 2]}), tmp_path / "t.parquet")
    assert list(stream_inputs(tmp_path / "t.parquet", column="url")) == ["/x.jpg", "/y.jpg"]
    with pytest.raises(UsageError, match=r"no column 'path'; its columns are url, n"):
        list(stream_inputs(tmp_path / "t.parquet"))
    assert input_kind(tmp_path / "t.csv") == "csv"
    with pytest.raises(UsageError, match="neither a folder nor a file"):
        input_kind(tmp_path / "missing")


LISTING_PEAK = """
import resource, sys
from pathlib import Path
from tsvk_tools.batch.sources import stream_inputs
from tsvk_tools.batch.state import DoneIds, RunState
state = RunState(Path(sys.argv[2]))
count = state.write_list(stream_inputs(Path(sys.argv[1])))
DoneIds(count)
print(count, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def listing_peak_kib(listing: Path, folder: Path) -> tuple[int, int]:
    """Inputs listed and the peak resident memory (KiB) of a process that only lists them."""
    done = subprocess.run([sys.executable, "-c", LISTING_PEAK, str(listing), str(folder)], capture_output=True, text=True,
                          check=True)
    count, peak = done.stdout.split()
    return int(count), int(peak)


def test_a_million_line_input_is_listed_in_the_memory_of_a_short_one_and_read_back_by_id(tmp_path):
    """Ten million lines is the promise; a million here (30 MB of text) list in the peak memory of fifty
    thousand, give or take 8 MiB (the bitmap of done ids is 125 kB): nothing holds the lines."""
    for lines in (50_000, 1_000_000):
        with open(tmp_path / f"{lines}.txt", "w") as listing:
            listing.writelines(f"/photos/batch/{i:09d}.jpg\n" for i in range(lines))
    short = listing_peak_kib(tmp_path / "50000.txt", tmp_path / "short.batch")
    long = listing_peak_kib(tmp_path / "1000000.txt", tmp_path / "long.batch")
    assert (short[0], long[0]) == (50_000, 1_000_000)
    assert long[1] - short[1] < 8 * 1024, f"listing 1M inputs peaked {long[1] - short[1]} KiB above listing 50k"
    state = RunState(tmp_path / "long.batch")
    assert state.count() == 1_000_000
    read = InputList(state)
    assert read.sources([0, 654_321, 999_999]) == [f"/photos/batch/{i:09d}.jpg" for i in (0, 654_321, 999_999)]
    read.close()


def test_done_ids_are_one_bit_each_and_missing_lists_the_rest_in_order():
    done = DoneIds(20)
    for i in (0, 3, 8, 9, 10, 11, 12, 13, 14, 15, 19):
        assert done.add(i)
    assert not done.add(3)
    assert list(done.missing()) == [1, 2, 4, 5, 6, 7, 16, 17, 18]
    assert done.done == 11 and 19 in done and 18 not in done


def test_a_half_written_last_row_is_cut_off_and_the_whole_rows_count_as_done(tmp_path):
    rows = tmp_path / "out.jsonl"
    rows.write_bytes(b'{"id": 2, "input": "a"}\n{"id": 0, "input": "b"}\n{"id": 1, "inp')
    cut_partial_line(rows)
    assert rows.read_bytes() == b'{"id": 2, "input": "a"}\n{"id": 0, "input": "b"}\n'
    done = DoneIds(3)
    RowFile(rows, done).close()
    assert list(done.missing()) == [1]
    (tmp_path / "none.jsonl").write_bytes(b'{"id": 1')
    cut_partial_line(tmp_path / "none.jsonl")
    assert (tmp_path / "none.jsonl").read_bytes() == b""


def test_a_foreign_or_duplicated_output_is_refused_not_resumed(tmp_path):
    foreign = tmp_path / "foreign.jsonl"
    foreign.write_text('{"name": "x"}\n')
    with pytest.raises(UsageError, match="not a batch row"):
        list(read_ids(foreign))
    twice = tmp_path / "twice.jsonl"
    twice.write_text('{"id": 1, "input": "a"}\n{"id": 1, "input": "a"}\n')
    with pytest.raises(UsageError, match="holds the row of input 1 twice"):
        RowFile(twice, DoneIds(2))


def test_parquet_output_holds_the_journal_rows_with_answers_as_json_text(tmp_path):
    pinned("pyarrow", "make setup")
    import pyarrow.parquet as parquet

    journal = tmp_path / "rows.jsonl"
    rows = [{"id": 1, "input": "/a.jpg", "status": 200, "code": None, "answer": {"cat": 0.75}},
            {"id": 0, "input": "/b.jpg", "status": 400, "code": "bad_image", "answer": {"code": 400, "error": "bad_image"}}]
    journal.write_text("".join(json.dumps(r) + "\n" for r in rows))
    write_parquet(journal, tmp_path / "out.parquet")
    table = parquet.read_table(tmp_path / "out.parquet").to_pylist()
    assert [{**r, "answer": json.loads(r["answer"])} for r in table] == rows
    assert output_format(tmp_path / "x.parquet") == "parquet"
    with pytest.raises(UsageError, match=r"must end in \.jsonl or \.parquet"):
        output_format(tmp_path / "x.csv")
