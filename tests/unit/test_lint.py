"""The linter pyproject.toml configures (ruff: pycodestyle, pyflakes, 140 columns) finds nothing in the tree.

Unused and undefined names, imports below code and overlong lines fail here, in `make test`, naming each place."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_tree_is_clean_under_the_configured_linter():
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise", "."], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"ruff check (pyproject.toml's [tool.ruff]) found:\n{done.stdout}{done.stderr}"


def test_the_linter_reads_the_projects_configuration():
    """A check that could pass by linting nothing: the configuration is the one in pyproject.toml, over Python files."""
    shown = subprocess.run([sys.executable, "-m", "ruff", "check", "--show-settings", "tools/cli.py"], cwd=ROOT,
                           capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert str(ROOT / "pyproject.toml") in shown.stdout and "linter.line_length = 140" in shown.stdout
