"""The chart's PID 1 (`python -m tsvk_tools.engines.container`) starts without the build, bench and robustness
commands' packages: the serving image carries the run time and the server only, not hypothesis."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import sys
sys.modules["hypothesis"] = None  # as in the image: importing it fails
from tsvk_tools.engines import container
try:
    container.main(["--help"])
except SystemExit as stop:
    assert stop.code == 0, stop.code
"""


def test_the_container_entrypoint_needs_no_test_packages():
    result = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "--drain-timeout" in result.stdout


def test_the_cli_s_help_needs_no_lab_package_and_a_lab_command_names_its_extra():
    """`tsvk --help` lists the lab's commands by name only; `tsvk robustness` without Hypothesis is one line naming
    the extra that installs it, not a traceback."""
    probe = PROBE.replace("from tsvk_tools.engines import container", "from tsvk_tools import cli as container")
    probe += ("\nassert not [m for m in sys.modules if m.startswith('tsvk_tools.lab')], 'tsvk --help imported the lab'"
              "\nprint(container.main(['robustness']))\n")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "robustness" in result.stdout and result.stdout.strip().endswith("2")
    assert result.stderr.strip().splitlines() == [
        "tsvk robustness: error: the lab (bench, robustness, soak, gpu-check) needs tsvk's lab extra (hypothesis is not "
        "installed): pip install 'tsvk[lab]'"]
