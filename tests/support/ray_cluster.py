"""A real Ray cluster of two nodes on this machine, started with `ray start` (a head and a second node joining
it), on ports of our own and in a temporary folder of our own, and always stopped: first through the two
`ray start --block` processes we started (each stops the daemons it started when it ends), then any process
whose command line names our folder, by its pid. Nothing else on the machine is signalled."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

from tests.support.processes import processes_naming
from tsvk_tools.batch.ray_engine import AGENT_WAIT_MS

RAY = str(Path(sys.executable).with_name("ray"))
HEAD_PORTS = {"--port": 19400, "--node-manager-port": 19401, "--object-manager-port": 19402, "--ray-client-server-port": 19403,
              "--dashboard-agent-listen-port": 19404, "--dashboard-agent-grpc-port": 19405, "--metrics-export-port": 19406,
              "--runtime-env-agent-port": 19407, "--min-worker-port": 19420, "--max-worker-port": 19449}
NODE_PORTS = {"--node-manager-port": 19411, "--object-manager-port": 19412, "--dashboard-agent-listen-port": 19414,
              "--dashboard-agent-grpc-port": 19415, "--metrics-export-port": 19416, "--runtime-env-agent-port": 19417,
              "--min-worker-port": 19450, "--max-worker-port": 19479}
START_TIMEOUT_S = 180


def node_address() -> str:
    """The address Ray itself gives this machine's node (its routable interface). A head started on 127.0.0.1
    still registers its node under that address, and a driver joining through 127.0.0.1 is then sent to a node
    it cannot match and refused; so the head, the second node and the driver all use Ray's own choice."""
    from ray._private.services import get_node_ip_address  # Ray's private helper, the one `ray start` uses

    return get_node_ip_address()


def _token_auth(folder: Path) -> dict[str, str]:
    """Ray's token authentication for this cluster alone: a token file of our own, readable by its owner only,
    named by the environment of every process that joins (a node bound to a routable address requires one)."""
    token = folder / "auth_token"
    token.write_text(secrets.token_hex(32))
    token.chmod(0o600)
    return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)}


def _flags(ports: dict[str, int]) -> list[str]:
    return [item for flag, port in ports.items() for item in (flag, str(port))]


def _wait_for_nodes(address: str, count: int, env: dict) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    probe = ("import ray, sys; ray.init(address=sys.argv[1], log_to_driver=False); "
             "print(sum(n['Alive'] for n in ray.nodes()))")
    while time.monotonic() < deadline:
        done = subprocess.run([sys.executable, "-c", probe, address], capture_output=True, text=True, env=env)
        if done.returncode == 0 and done.stdout.strip().splitlines()[-1:] == [str(count)]:
            return
        time.sleep(2)
    raise TimeoutError(f"the Ray cluster at {address} did not show {count} nodes in {START_TIMEOUT_S} s")


@contextlib.contextmanager
def two_node_cluster(cpus_per_node: int = 1) -> Iterator[tuple[str, dict]]:
    """The head's address (<node address>:19400) and the environment a driver needs to join it (the cluster's
    token), while a head and a second node, `cpus_per_node` CPUs each, run."""
    folder = tempfile.mkdtemp(prefix="tsvkray", dir="/tmp")  # short: Ray's unix sockets live under it
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_agent_register_timeout_ms": AGENT_WAIT_MS,
           **_token_auth(Path(folder))}
    node_ip = node_address()
    common = ["--block", "--num-cpus", str(cpus_per_node), "--node-ip-address", node_ip, "--disable-usage-stats"]
    started: list[subprocess.Popen] = []
    address = f"{node_ip}:{HEAD_PORTS['--port']}"
    logs = open(Path(folder) / "ray-start.log", "wb")
    try:
        started.append(subprocess.Popen([RAY, "start", "--head", "--include-dashboard", "false", "--temp-dir", folder,
                                         *common, *_flags(HEAD_PORTS)], env=env, stdout=logs, stderr=logs))
        _wait_for_nodes(address, 1, env)
        started.append(subprocess.Popen([RAY, "start", "--address", address, "--temp-dir", folder, *common,
                                         *_flags(NODE_PORTS)], env=env, stdout=logs, stderr=logs))
        _wait_for_nodes(address, 2, env)
        yield address, env
    finally:
        for process in reversed(started):
            process.send_signal(signal.SIGTERM)
        for process in started:
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        time.sleep(1)
        for pid in processes_naming(folder):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        logs.close()
        shutil.rmtree(folder, ignore_errors=True)
