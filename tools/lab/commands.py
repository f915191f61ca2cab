"""The lab's `tsvk` commands: each module's register(commands), in the order `tsvk --help` lists them.

The CLI (tools/cli.py) adds these after the product's own when the lab is installed; it finds this module by
its name, so nothing of the product imports the lab.
"""

from __future__ import annotations

from .bench import bench_cli
from .gpu_check import gpu_check_cli
from .robustness import robustness_cli, soak

COMMAND_MODULES = (bench_cli, robustness_cli, soak, gpu_check_cli)
