"""The documentation builds with `mkdocs build --strict`, and a broken link would fail it; the README stays short."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README_MAX_LINES = 150
FIRST_COMMAND_BY_LINE = 40  # the quickstart's first command on the first screen


def build(root: Path, site: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(root / "mkdocs.yml"),
                           "--site-dir", str(site)], cwd=root, capture_output=True, text=True, timeout=300)


def test_the_docs_build_in_strict_mode(tmp_path):
    done = build(ROOT, tmp_path / "site")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "site" / "commands.html").is_file()


@pytest.fixture
def copy(tmp_path) -> Path:
    """The docs, mkdocs.yml and the link hook, with the files the pages link to, in a scratch checkout."""
    root = tmp_path / "checkout"
    for part in ("docs", "scripts", "benchmarks", "k8s", "tests/data"):
        shutil.copytree(ROOT / part, root / part, ignore=shutil.ignore_patterns("*.json", "__pycache__", "charts"))
    shutil.copy(ROOT / "mkdocs.yml", root)
    return root


def test_the_scratch_copy_builds_as_it_is(copy, tmp_path):
    """The control for the tests below: only what they break makes the build fail."""
    done = build(copy, tmp_path / "site")
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("link", ["[gone](no-such-page.md)", "[gone](tasks.md#no-such-heading)", "[gone](../no/such/file.md)"],
                         ids=["page", "anchor", "file in the checkout"])
def test_a_broken_link_fails_the_build(copy, tmp_path, link):
    page = copy / "docs" / "operations.md"
    page.write_text(page.read_text() + f"\n{link}\n")
    assert build(copy, tmp_path / "site").returncode != 0


def test_a_page_left_out_of_the_site_fails_the_build(copy, tmp_path):
    (copy / "docs" / "orphan.md").write_text("# Not in the nav\n")
    assert build(copy, tmp_path / "site").returncode != 0


def test_the_readme_fits_on_a_few_screens():
    lines = len((ROOT / "README.md").read_text().splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; move detail into docs/"


def test_the_readme_shows_its_first_command_on_the_first_screen():
    lines = (ROOT / "README.md").read_text().splitlines()
    fence = next(i for i, line in enumerate(lines) if line.startswith("```"))
    first = next(i for i, line in enumerate(lines[fence + 1:], fence + 2) if line.strip())
    assert first <= FIRST_COMMAND_BY_LINE and lines[first - 1].startswith("make "), \
        f"README.md's first command is at line {first} ({lines[first - 1]!r}); the quickstart comes first"
