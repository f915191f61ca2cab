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


def test_the_full_cli_would_have_needed_them():
    """What the entrypoint avoids: the whole CLI registers `tsvk robustness`, which imports hypothesis."""
    probe = PROBE.replace("from tsvk_tools.engines import container", "from tsvk_tools import cli as container")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert result.returncode != 0 and "hypothesis" in result.stderr
