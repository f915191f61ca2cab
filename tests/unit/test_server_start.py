"""What `start_torchserve` refuses before it starts anything."""

from __future__ import annotations

import pytest

from tsvk_tools.errors import UsageError
from tsvk_tools.engines.torchserve.server import start_torchserve

LINUX_SOCKET_PATH_MAX = 107  # bytes of a Unix socket's path (sun_path is 108 with its NUL)
WORKER_SOCKET = "/tmp/.ts.sock.9999"  # under the run dir: TorchServe's worker socket, its port counted up from 9000


def test_a_run_dir_too_deep_for_the_worker_sockets_is_refused_naming_the_path_and_the_limit(tmp_path):
    config = tmp_path / "config.properties"
    config.write_text("models={}\n")
    deep = tmp_path / ("d" * (LINUX_SOCKET_PATH_MAX - len(str(tmp_path)) - len(WORKER_SOCKET)))  # one byte too many
    with pytest.raises(UsageError, match=rf"{deep}/tmp/\.ts\.sock\.9999\) would be 108 bytes; Unix sockets allow at most 107"):
        start_torchserve(config, deep)
    assert not deep.exists()  # refused before anything was created


def test_a_run_dir_whose_sockets_just_fit_is_not_refused_for_its_length(tmp_path):
    config = tmp_path / "config.properties"
    fits = tmp_path / ("d" * (LINUX_SOCKET_PATH_MAX - len(str(tmp_path)) - len(WORKER_SOCKET) - 1))
    with pytest.raises(UsageError, match="not found"):  # refused for the missing config, not for the path
        start_torchserve(config, fits)


def test_a_launcher_that_cannot_run_java_says_why(tmp_path):
    """TorchServe's launcher reports a missing Java only on its console (stdout.log): the start-up error shows it."""
    config = tmp_path / "config.properties"
    config.write_text(f"inference_address=http://127.0.0.1:0\nmodel_store={tmp_path}\nmodels={{}}\n")
    started = start_torchserve(config, tmp_path / "run", env={"JAVA_HOME": str(tmp_path / "no-java-here")})
    try:
        with pytest.raises(
            UsageError, match=r"(?s)exited during start-up.*--- stdout\.log\njava not found, please make sure JAVA_HOME is set"
        ):
            started.wait_ready(models=[], timeout=60)
    finally:
        started.stop(drain_timeout=0)
