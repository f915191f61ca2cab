"""The suite's own layout: pytest imports each test file by its base name (the test folders are not packages), so two
files of one name in two folders stop the whole run at collection ("import file mismatch") before a test runs."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_no_two_test_files_share_a_name():
    names = Counter(path.name for path in TESTS.rglob("test_*.py"))
    assert not [name for name, count in names.items() if count > 1], {n: c for n, c in names.items() if c > 1}
