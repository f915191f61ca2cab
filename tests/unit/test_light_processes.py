"""The processes that never run a model import no torch: the kserve engine's server, its fork server before it
preloads, the OIP front, the drain helper, and `tsvk` until a command runs a model (`tsvk --help`, `tsvk status`, `tsvk stop`).
torch and torchvision cost seconds of CPU and hundreds of MiB per process; in the engine's server they ran beside
the fork server's own imports and made the engine's cold start and memory worse than TorchServe's. Each check
runs in a fresh interpreter, so what this test process has already imported cannot hide an import.
"""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

HEAVY = ("torch", "torchvision")
LIGHT_MODULES = (
    "tsvk_tools.engines.kserve.server",
    "tsvk_tools.engines.kserve.worker",
    "tsvk_tools.engines.kserve.engine_process",
    "tsvk_tools.oip.server",
    "tsvk_tools.engines.torchserve.drain",
    "tsvk_tools.engines.shared.drain",
    "tsvk.worker.deadline",
    "tsvk.worker.stopping",
    "tsvk.worker.threads",
    "tsvk.model",
    "tsvk.tasks",
)


def heavy_imports_of(module: str, heavy: tuple[str, ...] = HEAVY) -> list[str]:
    probe = f"import importlib, sys; importlib.import_module({module!r}); print(','.join(m for m in {heavy!r} if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return [name for name in done.stdout.strip().split(",") if name]


@pytest.mark.parametrize("module", LIGHT_MODULES)
def test_module_imports_no_torch(module):
    assert heavy_imports_of(module) == []


def test_the_engine_s_entry_point_starts_the_fork_server_before_importing_the_server():
    """The fork server's imports are a cold start's longest part: the entry point imports nothing of the server's
    (KServe's SDK, aiohttp, the front) before starting it, so those imports run beside the fork server's."""
    server_side = ("kserve", "aiohttp", "tsvk_tools.engines.kserve.server", "tsvk_tools.oip.server", *HEAVY)
    assert heavy_imports_of("tsvk_tools.engines.kserve.launch", server_side) == []
    assert {"aiohttp", "tsvk_tools.oip.server"} <= set(heavy_imports_of("tsvk_tools.engines.kserve.server", server_side))


def test_the_engine_s_worker_module_imports_no_tsvk_before_the_archive_s():
    """A worker loads the archive's own tsvk (worker.py checks where it came from): the worker module, and the engine's
    modules it imports, must import none from the checkout first (tools.defaults does, so they must not import it)."""
    assert heavy_imports_of("tsvk_tools.engines.kserve.worker", ("tsvk", "tsvk.common", "tsvk_tools.defaults")) == []


def test_the_probe_sees_a_heavy_import():
    assert heavy_imports_of("tsvk.worker.service") == list(HEAVY)


def test_the_worker_room_still_gives_the_service():
    import tsvk.worker
    from tsvk.worker.service import VisionService

    assert tsvk.worker.VisionService is VisionService
    with pytest.raises(AttributeError, match="no attribute 'NoSuchName'"):
        tsvk.worker.NoSuchName  # noqa: B018 - the attribute access is the test


def test_every_command_parses_without_torch_the_lab_s_included():
    """`tsvk --help`, `tsvk status` and the lab's commands build every parser: torch is imported by a command that
    runs a model, once it runs."""
    probe = ("import sys; from tsvk_tools import cli; parser = cli.build_parser(); "
             "[parser.parse_args(argv) for argv in (['status'], ['bench'], ['robustness'], ['soak'], ['gpu-check'])]; "
             f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ""


def test_a_product_command_gets_the_product_s_parser_and_a_lab_command_the_whole_one():
    from tsvk_tools import cli

    def commands(parser):
        return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices

    assert "robustness" not in commands(cli.parser_for(["status"])) and "robustness" not in cli.parser_for(["status"]).format_usage()
    assert cli.parser_for(["robustness"]).parse_args(["robustness"]).command == "robustness"
    assert "robustness" not in commands(cli.parser_for(["--help"])), "tsvk --help names the lab's commands without loading them"
    assert "robustness" in cli.parser_for(["--help"]).format_help()


def test_the_lazy_rooms_still_give_their_names():
    import tsvk.model
    import tsvk.tasks
    from tsvk.model.loading import load_model
    from tsvk.tasks.registry import task_class

    assert tsvk.model.load_model is load_model and tsvk.tasks.task_class is task_class
    assert tsvk.tasks.task_class("classify").name == "classify"
