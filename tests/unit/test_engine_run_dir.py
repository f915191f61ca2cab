"""With token authorization on, the engine keeps its keys in the run directory, so it refuses one that another user
owns or that its group or others may write, saying why and what to do (tools/engines/kserve/tokens.py)."""

from __future__ import annotations

import os

import pytest

from tsvk_tools.engines.kserve.tokens import run_dir_problem


def test_a_run_directory_of_ones_own_readable_by_the_owner_only_is_accepted(tmp_path):
    tmp_path.chmod(0o700)
    assert run_dir_problem(tmp_path) is None


@pytest.mark.parametrize("mode", [0o770, 0o707, 0o777, 0o720])
def test_a_run_directory_others_may_write_is_refused_with_what_to_do(tmp_path, mode):
    tmp_path.chmod(mode)
    problem = run_dir_problem(tmp_path)
    assert problem is not None and f"{mode:o}" in problem and f"chmod 700 {tmp_path}" in problem and "--run-dir" in problem


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory to another user needs root")
def test_a_run_directory_of_another_user_is_refused(tmp_path):
    tmp_path.chmod(0o700)
    os.chown(tmp_path, os.geteuid() + 12345, -1)
    problem = run_dir_problem(tmp_path)
    assert problem is not None and f"uid {os.geteuid() + 12345}" in problem and "a --run-dir of your own" in problem
