"""Every file an archive packs is one a worker imports: the run-time package carries nothing else.

`tsvk archive` packs the task's handler module and all of `handlers/tsvk` (tools/archive/pack.py). A
fresh Python, with only `handlers/` on its path as in a worker, imports each task's handler module
and the task class its service builds; every packed .py file must then be in `sys.modules`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tsvk.common.task_kinds import TASKS
from tsvk_tools.archive.pack import handler_sources

WORKER_IMPORTS = """
import importlib, json, sys
from tsvk.common.task_kinds import TASKS
from tsvk.tasks import task_class
for kind in TASKS.values():
    importlib.import_module(kind.handler_file.removesuffix(".py"))
    task_class(kind.name)
print(json.dumps(sorted(m.__file__ for m in list(sys.modules.values()) if getattr(m, "__file__", None))))
"""


def packed_files() -> set[Path]:
    """The .py files `tsvk archive` packs for any task: the run-time package and each task's handler module."""
    package = handler_sources()[1]
    handlers = {handler_sources(name)[0] for name in TASKS}
    return {p.resolve() for p in package.rglob("*.py")} | {h.resolve() for h in handlers}


def worker_imported_files() -> set[Path]:
    handlers = handler_sources()[1].parent
    done = subprocess.run([sys.executable, "-c", WORKER_IMPORTS], cwd=handlers, capture_output=True, text=True, check=True,
                          env={"PYTHONPATH": str(handlers), "PATH": "/usr/bin:/bin"})
    return {Path(f).resolve() for f in json.loads(done.stdout.splitlines()[-1])}


def test_every_packed_file_is_imported_by_a_worker():
    unused = sorted(str(p) for p in packed_files() - worker_imported_files())
    assert unused == [], f"packed into every .mar but imported by no worker: {unused}"
