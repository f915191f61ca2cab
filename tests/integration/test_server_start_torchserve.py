"""Starting a TorchServe of our own with a real TorchServe: its keys are never readable by other users,
a key shown on hey's command line is dead after the burst, and a port taken since it was chosen is said
as such."""

from __future__ import annotations

import io
import os
import socket
import stat
from pathlib import Path

import psutil
import pytest
import requests
from PIL import Image

from tests.support.torchserve import running_torchserve, archive_tiny
from tsvk_tools.errors import PortTaken
from tsvk_tools.keys import KEY_FILE, current_key, is_key_refusal
from tsvk_tools.config.ports import serving_on_free_ports
from tsvk_tools.lab.robustness.client import Target
from tsvk_tools.lab.robustness.hey import burst
from tsvk_tools.engines.torchserve.server import start_torchserve
from tsvk_tools.config.serving_config import write_config

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    store = tmp_path_factory.mktemp("store")
    archive_tiny(store, "TinyNet")
    return store


@pytest.fixture(scope="module")
def run(store, tmp_path_factory):
    request = serving_on_free_ports(models=("tiny",), model_store=store, vcpus=1, workers=1, batch=1, auth=True)
    with running_torchserve(request, tmp_path_factory.mktemp("served")) as run:
        yield run


def _photo() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (64, 48), (200, 30, 30)).save(out, "JPEG")
    return out.getvalue()


def _umask(pid: int) -> int:
    line = next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("Umask:"))
    return int(line.split()[1], 8)


def test_the_run_dir_is_owner_only_and_every_torchserve_process_has_umask_077(run):
    assert stat.S_IMODE(run.run_dir.stat().st_mode) == 0o700
    assert stat.S_IMODE((run.run_dir / KEY_FILE).stat().st_mode) == 0o600
    group = [p.pid for p in psutil.process_iter() if os.getpgid(p.pid) == run.pid] if run.alive() else []
    assert len(group) >= 3  # the launcher, the Java frontend and the worker
    assert {_umask(pid) for pid in group} == {0o077}


def test_the_key_hey_had_on_its_command_line_is_dead_after_the_burst(run):
    shown = current_key(run.run_dir)
    answers = burst(Target(f"{run.url('inference')}/predictions/tiny", run.run_dir), _photo(), 4)
    assert [a.status for a in answers] == [200] * 4
    assert current_key(run.run_dir) not in (None, shown)
    old = requests.post(f"{run.url('inference')}/predictions/tiny", data=_photo(), headers={"Authorization": f"Bearer {shown}"}, timeout=60)
    assert is_key_refusal(old.status_code, old.content)


def test_a_port_taken_after_it_was_chosen_is_said_to_be_taken(store, tmp_path):
    request = serving_on_free_ports(models=("tiny",), model_store=store, vcpus=1, workers=1, auth=False)
    write_config(request, tmp_path / "config.properties")
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", int(request.inference_address.rsplit(":", 1)[1])))
        squatter.listen()
        started = start_torchserve(tmp_path / "config.properties", tmp_path / "run")
        try:
            with pytest.raises(PortTaken, match=f"could not bind {request.inference_address} .*Address already in use"):
                started.wait_ready(timeout=120)
        finally:
            started.stop()
