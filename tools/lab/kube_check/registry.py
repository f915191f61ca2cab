"""A real image registry on this machine: Debian's docker-registry (the CNCF distribution), on 127.0.0.1 only.

Debian's packaged config asks for an htpasswd file that does not exist, so the registry gets a config of
its own: the address, a storage folder, and deletes allowed. podman must be told the registry speaks plain
HTTP (`insecure = true` for it in /etc/containers/registries.conf.d/); check_podman_trusts() says so.
"""

from __future__ import annotations

import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from ...errors import UsageError

REGISTRY_BINARY = "docker-registry"
START_TIMEOUT_S = 30
REGISTRIES_D = Path("/etc/containers/registries.conf.d")


def config_text(address: str, storage: Path) -> str:
    return (f"version: 0.1\nlog:\n  level: info\nstorage:\n  filesystem:\n    rootdirectory: {storage}\n"
            f"  delete:\n    enabled: true\nhttp:\n  addr: {address}\n")


def answers(address: str) -> bool:
    try:
        with urllib.request.urlopen(f"http://{address}/v2/", timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def check_podman_trusts(address: str) -> None:
    """podman pushes and pulls over HTTPS unless a registries.conf drop-in marks the registry insecure."""
    texts = [p.read_text() for p in REGISTRIES_D.glob("*.conf")] if REGISTRIES_D.is_dir() else []
    if not any(f'location = "{address}"' in t and "insecure = true" in t for t in texts):
        raise UsageError(f"podman does not know {address} speaks plain HTTP: write {REGISTRIES_D}/50-local-registry.conf "
                         f"with [[registry]] location = \"{address}\" insecure = true")


class LocalRegistry:
    """docker-registry serving `storage` on `address`, started and stopped by this process only."""

    def __init__(self, address: str, work: Path):
        self.address, self.work = address, work
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        if answers(self.address):
            raise UsageError(f"something already answers on {self.address}: stop it, or it would be this check's registry")
        self.work.mkdir(parents=True, exist_ok=True)
        config = self.work / "config.yml"
        config.write_text(config_text(self.address, (self.work / "storage").resolve()))
        log = (self.work / "registry.log").open("w")
        try:
            self.process = subprocess.Popen([REGISTRY_BINARY, "serve", str(config)], stdout=log, stderr=subprocess.STDOUT)
        except FileNotFoundError:
            raise UsageError("the deploy check needs Debian's registry: apt-get install -y docker-registry") from None
        deadline = time.monotonic() + START_TIMEOUT_S
        while not answers(self.address):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise UsageError(f"docker-registry did not answer on {self.address}: see {self.work / 'registry.log'}")
            time.sleep(0.2)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
