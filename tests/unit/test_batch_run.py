"""`tsvk batch` end to end on this machine, with a real archive and real worker processes: one row per input,
bad inputs as error rows with the server's codes, every table kind in and out, and a run killed (SIGKILL) at
random moments and started again finishing with every input exactly once and the rows of an unbroken run."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.batch_inputs import BAD, GOOD, write_inputs
from tests.support.processes import processes_naming
from tests.support.required import pinned
from tests.support.torchserve import archive_tiny
from tsvk_tools.cli import main as tsvk

KILLS = 5


@pytest.fixture(scope="module")
def archive(tmp_path_factory) -> Path:
    return archive_tiny(tmp_path_factory.mktemp("store")) / "tiny.mar"


@pytest.fixture(scope="module")
def slow_archive(tmp_path_factory) -> Path:
    """The tiny model taking 40 ms a batch: a run lasts long enough to be killed in the middle."""
    return archive_tiny(tmp_path_factory.mktemp("slow_store"), "SlowTinyNet") / "tiny.mar"


def rows_of(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_every_input_gets_one_row_and_bad_inputs_get_the_servers_error_codes(archive, tmp_path):
    files = write_inputs(tmp_path / "photos")
    (tmp_path / "photos" / "big.jpg").write_bytes(b"\xff\xd8\xff" + b"\0" * (2 * 2**20))
    listing = tmp_path / "inputs.txt"
    listing.write_text("\n".join([*(f"photos/{n}" for n in sorted(files)), "photos/big.jpg", "photos/missing.jpg"]) + "\n")
    output = tmp_path / "rows.jsonl"
    assert tsvk(["batch", "--archive", str(archive), "--input", str(listing), "--output", str(output),
                 "--workers", "2", "--max-request-mb", "1", "--quiet"]) == 0
    rows = {Path(r["input"]).name: r for r in rows_of(output)}
    assert sorted(r["id"] for r in rows.values()) == list(range(len(files) + 2))
    for name in GOOD:
        row = rows[f"{name}.jpg"]
        assert row["status"] == 200 and row["code"] is None and len(row["answer"]) == 3  # the tiny model's 3 classes
    for name, code in BAD.items():
        assert rows[name]["code"] == code and rows[name]["answer"]["error"] == code and rows[name]["status"] in (400, 413)
    assert (rows["big.jpg"]["status"], rows["big.jpg"]["code"]) == (413, "request_too_large")
    assert (rows["missing.jpg"]["status"], rows["missing.jpg"]["code"]) == (400, "unreadable_input")
    assert "No such file" in rows["missing.jpg"]["answer"]["message"]


def test_a_finished_run_started_again_does_nothing_and_other_arguments_are_refused(archive, tmp_path, capsys):
    write_inputs(tmp_path / "photos")
    output = tmp_path / "rows.jsonl"
    args = ["batch", "--archive", str(archive), "--input", str(tmp_path / "photos"), "--output", str(output), "--workers", "1"]
    assert tsvk(args) == 0
    summary = capsys.readouterr().out
    assert "done: 8 of 8 inputs" in summary and "failed: 5 (bad_image 3, decode_too_costly 1, image_too_large 1)" in summary
    before = output.read_bytes()
    assert tsvk(args) == 0 and output.read_bytes() == before
    assert "already complete" in capsys.readouterr().out
    assert tsvk([*args, "--max-request-mb", "2"]) == 2
    assert "belongs to a run with other arguments" in capsys.readouterr().err


def test_csv_in_parquet_out_and_answer_options_reach_the_task(archive, tmp_path, capsys):
    pyarrow = pinned("pyarrow", "make setup")
    import pyarrow.parquet as parquet

    files = write_inputs(tmp_path / "photos")
    table = tmp_path / "photos.csv"
    table.write_text("name,file\n" + "".join(f"{n},photos/{n}\n" for n in sorted(files)))
    output = tmp_path / "rows.parquet"
    assert tsvk(["batch", "--archive", str(archive), "--input", str(table), "--column", "file", "--output", str(output),
                 "--workers", "1", "--quiet"]) == 0
    rows = parquet.read_table(output).to_pylist()
    assert sorted(r["id"] for r in rows) == list(range(len(files)))
    assert {Path(r["input"]).name for r in rows} == set(files)
    assert not (tmp_path / "rows.parquet.batch" / "rows.jsonl").exists()
    assert pyarrow is not None
    assert tsvk(["batch", "--archive", str(archive), "--input", str(table), "--output", str(tmp_path / "o.jsonl"),
                 "--option", "topk=2"]) == 2
    assert "must be NAME=VALUE with NAME one of none" in capsys.readouterr().err


def row_count(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


def kill_at_random(command: list[str], output: Path, chance: random.Random, mid_scoring: bool) -> bool:
    """Start the run and SIGKILL it: at a random moment of its first seconds (listing, unpacking, workers
    loading), or `mid_scoring`, a random number of rows after its first new row. False if it finished first."""
    run = subprocess.Popen([*command, str(output)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if mid_scoring:
        target = row_count(output) + chance.randint(1, 120)
        while run.poll() is None and row_count(output) < target:
            time.sleep(0.01)
        time.sleep(chance.uniform(0, 0.2))
    else:
        time.sleep(chance.uniform(0.1, 4.0))
    if run.poll() is not None:
        return False
    run.send_signal(signal.SIGKILL)
    run.wait()
    return True


def test_a_run_killed_at_random_moments_finishes_with_every_input_exactly_once(slow_archive, tmp_path):
    files = write_inputs(tmp_path / "photos")
    names = sorted(files)
    listing = tmp_path / "inputs.txt"
    listing.write_text("".join(f"photos/{names[i % len(names)]}\n" for i in range(400)))
    clean, resumed = tmp_path / "clean.jsonl", tmp_path / "resumed.jsonl"
    command = [sys.executable, "-m", "tsvk_tools.cli", "batch", "--archive", str(slow_archive), "--input", str(listing),
               "--workers", "2", "--batch", "4", "--quiet", "--output"]
    assert subprocess.run([*command, str(clean)], capture_output=True).returncode == 0
    chance = random.Random(43)
    kills = []
    for attempt in range(KILLS):
        before = row_count(resumed)
        if not kill_at_random(command, resumed, chance, mid_scoring=attempt % 2 == 1):
            break
        kills.append(row_count(resumed) - before)
        time.sleep(0.5)
        assert processes_naming(str(tmp_path / "resumed.jsonl.batch")) == [], "a worker outlived its killed run"
    assert sum(1 for grown in kills if grown > 0) >= 2, f"too few kills landed while rows were written: {kills}"
    assert subprocess.run([*command, str(resumed)], capture_output=True).returncode == 0
    ids = [row["id"] for row in rows_of(resumed)]
    assert sorted(ids) == list(range(400)), "an input is missing or written twice"
    by_id = lambda path: {row["id"]: row for row in rows_of(path)}  # noqa: E731
    assert by_id(resumed) == by_id(clean)
    assert os.path.getsize(resumed) == os.path.getsize(clean)
