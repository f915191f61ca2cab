"""podman, as `tsvk kube-check` drives it: play a rendered pod, find its address, look inside, stop it.

`podman kube play` runs a Deployment's pod template with its ConfigMap volumes, security context and
init containers. Every pod and volume kube-check makes is named with POD_PREFIX, and only those are
ever stopped or removed.
"""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from ...errors import UsageError

PODMAN = "podman"
# Global options of every podman command here; the deploy check points them at a store of its own
# (--root/--runroot), as a node with nothing pulled yet.
PODMAN_OPTIONS: list[str] = []
POD_PREFIX = "tsvk-kube-"
# podman takes its bridge (and the gateway address the download variant's archives are served on)
# down with the last container on it: this one holds it up while kube-check runs.
BRIDGE_KEEPER = f"{POD_PREFIX}bridge"


def podman(*args: str, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess:
    """One podman command; a failure says which and what podman answered."""
    try:
        result = subprocess.run([PODMAN, *PODMAN_OPTIONS, *args], capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise UsageError("kube-check needs podman: apt-get install -y podman runc catatonit (k8s/README.md)") from None
    if check and result.returncode != 0:
        raise UsageError(f"podman {' '.join(args[:3])} failed ({result.returncode}): {result.stderr.strip()[-800:]}")
    return result


def _ours(name: str) -> str:
    if not name.startswith(POD_PREFIX):
        raise UsageError(f"kube-check only touches pods and volumes named {POD_PREFIX}*, not {name!r}")
    return name


@dataclass(frozen=True)
class Pod:
    """A pod `podman kube play` started: its name and its containers by their names in the spec."""

    name: str
    containers: dict[str, str]  # spec name -> podman container name

    def ip(self) -> str:
        infra = json.loads(podman("pod", "inspect", self.name).stdout)
        infra_id = (infra[0] if isinstance(infra, list) else infra)["InfraContainerID"]
        networks = json.loads(podman("inspect", infra_id).stdout)[0]["NetworkSettings"]["Networks"]
        addresses = [n["IPAddress"] for n in networks.values() if n.get("IPAddress")]
        if not addresses:
            raise UsageError(f"pod {self.name} has no IP address on a podman network")
        return addresses[0]

    def exec(self, container: str, argv: list[str], timeout: float = 30) -> subprocess.CompletedProcess:
        return podman("exec", self.containers[container], *argv, timeout=timeout, check=False)

    def inspect(self, container: str) -> dict:
        return json.loads(podman("inspect", self.containers[container]).stdout)[0]

    def state(self, container: str) -> dict:
        return self.inspect(container)["State"]

    def logs(self, container: str, lines: int = 40) -> str:
        result = podman("logs", "--tail", str(lines), self.containers[container], check=False)
        return (result.stdout + result.stderr).strip()

    def stop(self, timeout_s: int) -> float:
        """SIGTERM every container of the spec (SIGKILL after timeout_s), as the kubelet does; seconds until all
        exited. Only then the pod itself: `podman pod stop` stops the infra container at once too, which takes
        the pod's network away while the containers are still draining (their answers never reach a client),
        whereas the kubelet stops the sandbox after the containers."""
        started = time.monotonic()
        podman("stop", "--time", str(timeout_s), *self.containers.values(), timeout=timeout_s + 60)
        exited = time.monotonic() - started
        podman("pod", "stop", "--time", "0", self.name, timeout=60)
        return exited

    def remove(self) -> None:
        podman("pod", "rm", "--force", _ours(self.name), check=False, timeout=120)


def play(manifest: Path, workload: str) -> Pod:
    """Run the manifest's pod (a Deployment or a Pod named `workload`, with its ConfigMaps), replacing an
    earlier one of ours; podman names a Deployment's pod <name>-pod-0 and a container <pod>-<name>."""
    for pod in pods_of(_ours(workload)):
        pod.remove()
    try:
        podman("kube", "play", "--network", "podman", str(manifest), timeout=300)
    except UsageError:
        for pod in pods_of(workload):
            pod.remove()
        raise
    found = pods_of(workload)
    if len(found) != 1:
        raise UsageError(f"podman kube play {manifest} started {len(found)} pods named {workload}*, expected 1")
    return found[0]


def pods_of(workload: str) -> list[Pod]:
    """The pods podman runs for this workload (itself, or <workload>-pod-N)."""
    listed = json.loads(podman("pod", "ps", "--format", "json").stdout or "[]")
    found = []
    for entry in listed:
        name = entry["Name"]
        if name == workload or name.startswith(f"{workload}-pod-"):
            inspected = json.loads(podman("pod", "inspect", name).stdout)
            inspected = inspected[0] if isinstance(inspected, list) else inspected
            containers = {c["Name"].removeprefix(f"{name}-"): c["Name"] for c in inspected.get("Containers", [])
                          if c["Name"].startswith(f"{name}-")}
            found.append(Pod(name, containers))
    return found


def make_volume(name: str, files: list[Path]) -> None:
    """A named volume (what a PersistentVolumeClaim of that name binds to) holding copies of `files`."""
    podman("volume", "rm", "--force", _ours(name), check=False)
    podman("volume", "create", name)
    mountpoint = Path(json.loads(podman("volume", "inspect", name).stdout)[0]["Mountpoint"])
    for file in files:
        target = mountpoint / file.name
        target.write_bytes(file.read_bytes())
        target.chmod(0o644)


def remove_volume(name: str) -> None:
    podman("volume", "rm", "--force", _ours(name), check=False)


def image_digest(image: str) -> str:
    """The local image's digest (sha256:...), what image.digest pins."""
    return podman("image", "inspect", "--format", "{{.Digest}}", image).stdout.strip()


def image_exists(image: str) -> bool:
    return podman("image", "exists", image, check=False).returncode == 0


def keep_bridge_up(image: str) -> None:
    podman("rm", "--force", BRIDGE_KEEPER, check=False)
    podman("run", "--detach", "--name", BRIDGE_KEEPER, "--network", "podman", "--read-only", image, "sleep", "infinity")


def let_bridge_down() -> None:
    podman("rm", "--force", "--time", "0", BRIDGE_KEEPER, check=False)
