"""`tsvk status` with nothing running, and with a pid file that no longer names our TorchServe."""

from __future__ import annotations

import json
import os

from tsvk_tools import cli
from tsvk_tools.engines.torchserve.server import PID_FILE


def test_nothing_running_says_so_in_one_line(tmp_path, capsys):
    assert cli.main(["status", "--run-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and out[0].startswith("no server started by `tsvk serve` is running") and "make serve" in out[0]


def test_nothing_running_as_json(tmp_path, capsys):
    assert cli.main(["status", "--run-dir", str(tmp_path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"running": False, "run_dir": str(tmp_path.resolve())}


def test_a_pid_file_naming_someone_elses_process_is_not_reported(tmp_path, capsys):
    """This very process is alive but is not the TorchServe the pid file recorded (another start time)."""
    (tmp_path / PID_FILE).write_text(f"{os.getpgid(0)}\n{tmp_path / 'config.properties'}\n12345.0\n")
    assert cli.main(["status", "--run-dir", str(tmp_path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["running"] is False
