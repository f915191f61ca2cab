"""An archive packed before tsvk had rooms (tsvk/service.py, no tsvk/worker/) gets its own service, also where the
checkout is installed in editable mode, whose finder would hand it the checkout's `tsvk.worker` instead."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

PROBE = """
import sys
sys.path.insert(0, {archive!r})
import tsvk
from tsvk_tools.archive_package import HEAP_MODULES, SERVICE_MODULES, first_module
service, heap = first_module(SERVICE_MODULES), first_module(HEAP_MODULES)
print(service.__name__, service.VisionService, heap.__name__, 'tsvk.worker' in sys.modules)
"""


def _old_archive(folder: Path) -> Path:
    package = folder / "tsvk"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "service.py").write_text("VisionService = 'the archive service'\n")
    (package / "heap.py").write_text("def freeze_startup_objects():\n    pass\n")
    return folder


def test_an_archive_without_rooms_gets_its_own_service_and_heap(tmp_path):
    archive = _old_archive(tmp_path / "archive")
    done = subprocess.run([sys.executable, "-c", PROBE.format(archive=str(archive))], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["tsvk.service", "the", "archive", "service", "tsvk.heap", "False"]


def test_an_archive_with_rooms_gets_its_worker_room(tmp_path):
    archive = tmp_path / "archive"
    (archive / "tsvk" / "worker").mkdir(parents=True)
    (archive / "tsvk" / "__init__.py").write_text("")
    (archive / "tsvk" / "worker" / "__init__.py").write_text("VisionService = 'the room'\n")
    probe = PROBE.format(archive=str(archive)).replace("first_module(HEAP_MODULES)", "None").replace("heap.__name__", "'-'")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["tsvk.worker", "the", "room", "-", "True"]
