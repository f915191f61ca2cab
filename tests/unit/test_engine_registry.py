"""Engines are one type in one registry: a stand-in engine registered here runs through `tsvk serve`, `tsvk status`
and `tsvk stop` like the two real ones; docs/adding-an-engine.md names the files an engine adds, and every registered
engine has them; nothing outside the registry compares engine names."""

from __future__ import annotations

import ast
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import pytest

from tsvk_tools.cli import main as tsvk
from tsvk_tools.engines import registry
from tsvk_tools.engines.base import Engine, ServeOutcome, StopResult
from tsvk_tools.errors import UsageError
from tsvk_tools.config.ports import free_ports

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "adding-an-engine.md"
STAND_IN = "standin"
PID_FILE = "standin.pid"


@dataclass
class _StandInRun:
    """A run as the commands see one: a real process (Python's http.server on the config's inference port)."""

    run_dir: Path
    config: Path
    pid: int
    process: subprocess.Popen | None = field(default=None, repr=False)
    started_at: float | None = None
    engine: ClassVar[str] = STAND_IN

    def url(self, api: str) -> str:
        return self.config.read_text().split("inference_address=")[1].split()[0]

    def alive(self) -> bool:
        try:
            os.kill(self.pid, 0)
        except OSError:
            return False
        return True


class _StandInEngine(Engine):
    name = STAND_IN
    label = "a stand-in engine"
    running_label = "stand-in engine"
    needs_java = False
    keys_expire = False
    serves_protocol_itself = False
    management_api = False
    worker_marker = "no-such-worker"

    def start(self, config, run_dir, allocator="", env=None):
        run_dir.mkdir(parents=True, exist_ok=True)
        port = config.read_text().split("inference_address=")[1].split(":")[-1].strip()
        process = subprocess.Popen([sys.executable, "-m", "http.server", port, "--bind", "127.0.0.1"], cwd=run_dir,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        (run_dir / PID_FILE).write_text(f"{process.pid}\n{config}\n")
        return _StandInRun(run_dir, Path(config), process.pid, process, time.time())

    def find(self, run_dir):
        try:
            pid, config = (run_dir / PID_FILE).read_text().split()
        except OSError:
            return None
        run = _StandInRun(Path(run_dir), Path(config), int(pid))
        return run if run.alive() else None

    def serve(self, config, run_dir, allocator, timeout_s, oip):
        run = self.start(config, run_dir)
        return ServeOutcome((f"stand-in ready (pid {run.pid}) at {run.url('inference')}",))

    def start_in_container(self, config, run_dir, drain_timeout_s, front):
        return self.start(config, run_dir)

    def stop(self, run, drain_timeout_s):
        os.killpg(run.pid, signal.SIGTERM)
        (run.run_dir / PID_FILE).unlink()
        return StopResult(None, f"stopped the stand-in (pid {run.pid})")

    def status(self, run):
        return {"addresses": {"inference": run.url("inference")}, "models": self.models(run), "oip_front": None}

    def models(self, run):
        return []


@pytest.fixture
def stand_in():
    registry.register(_StandInEngine())
    yield
    registry.unregister(STAND_IN)


def test_a_registered_engine_runs_through_serve_status_and_stop(stand_in, tmp_path, capsys):
    (port,) = free_ports(1)
    config, run_dir = tmp_path / "config.properties", tmp_path / "run"
    config.write_text(f"inference_address=http://127.0.0.1:{port}\n")
    assert tsvk(["serve", "--engine", STAND_IN, "--config", str(config), "--run-dir", str(run_dir)]) == 0
    assert "stand-in ready" in capsys.readouterr().out
    assert tsvk(["status", "--run-dir", str(run_dir)]) == 0
    shown = capsys.readouterr().out
    assert "stand-in engine running" in shown and f"inference http://127.0.0.1:{port}" in shown
    pid = int((run_dir / PID_FILE).read_text().split()[0])
    assert tsvk(["stop", "--run-dir", str(run_dir)]) == 0
    assert f"stopped the stand-in (pid {pid})" in capsys.readouterr().out
    assert registry.find_serving(run_dir) is None


def test_an_unknown_engine_is_refused_with_the_registered_ones():
    with pytest.raises(UsageError, match="--engine must be one of torchserve, kserve, got 'ray'"):
        registry.engine_named("ray")


def _listed_files() -> list[str]:
    section = GUIDE.read_text().split("## The files a new engine adds")[1].split("And the lines it changes")[0]
    return re.findall(r"^- `([^`]+)`", section, flags=re.M)


@pytest.mark.parametrize("name", registry.engine_names())
def test_every_engine_has_the_files_the_guide_lists(name):
    files = _listed_files()
    assert files, "docs/adding-an-engine.md lists no files"
    for pattern in files:
        assert (ROOT / pattern.replace("<name>", name)).is_file(), pattern.replace("<name>", name)
    module = ast.parse((ROOT / "tools" / "engines" / name / "engine.py").read_text())
    names = [node.value.value for node in ast.walk(module) if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
             and any(isinstance(t, ast.Name) and t.id == "name" for t in node.targets)]
    assert names in ([name], []), names  # a literal name, where it is written as one, is the engine's own


def test_the_chart_offers_every_engine():
    schema = (ROOT / "k8s" / "tsvk" / "values.schema.json").read_text()
    enum = re.search(r'"engine": \{.*?"enum": \[(.*?)\]', schema, flags=re.S).group(1)
    assert set(re.findall(r'"(\w+)"', enum)) == set(registry.engine_names())


ENGINE_NAME_COMPARISON = re.compile(r"""(==|!=)\s*["'](kserve|torchserve)["']|["'](kserve|torchserve)["']\s*(==|!=)""")


def test_no_product_code_compares_engine_names():
    offenders = [f"{path.relative_to(ROOT)}:{number}" for path in sorted((ROOT / "tools").rglob("*.py"))
                 for number, line in enumerate(path.read_text().splitlines(), start=1) if ENGINE_NAME_COMPARISON.search(line)]
    assert offenders == []
