"""The rendered pod, run for real without a cluster: TorchServe under a read-only root filesystem.

The Deployment's command, environment and volume mounts are taken from `helm template` and replayed
with bubblewrap: the root is read-only, the ConfigMap and the model store are read-only binds, and
only the chart's emptyDirs are writable, as in the pod. Then the startup probe's exec command, the
readiness path and the `helm test` pod's script must all succeed against it. This is what shows
that readOnlyRootFilesystem is feasible with the chart's emptyDirs, and that the probes and the
test hook talk to TorchServe the way they must.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from tests.support.helm import REPO

from tsvk_tools.ports import free_ports

pytestmark = [pytest.mark.helm, pytest.mark.integration]

FIXTURES = REPO / "tests" / "fixtures"
START_TIMEOUT_S = 240


def tsvk(*args: str) -> None:
    result = subprocess.run([sys.executable, "-m", "tsvk_tools.cli", *args], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.fixture(scope="module")
def tools_for_the_sandbox():
    for tool, why in (("bwrap", "bubblewrap (apt-get install bubblewrap)"), ("java", "Java 17"), ("curl", "curl")):
        if shutil.which(tool) is None:
            pytest.skip(f"{why} is needed to run the rendered pod here")
    if not (FIXTURES / "tiny_model.py").exists():
        pytest.skip("tests/fixtures/tiny_model.py (the tiny test model) is missing")
    probe = subprocess.run(["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "true"], capture_output=True, check=False)
    if probe.returncode != 0:
        pytest.skip(f"bubblewrap cannot create a sandbox here: {probe.stderr.decode().strip()}")


@pytest.fixture(scope="module")
def tiny_store(tools_for_the_sandbox, tmp_path_factory) -> Path:
    store = tmp_path_factory.mktemp("store")
    tsvk("archive", "--model", "tiny", "--backend", "eager", "--model-file", str(FIXTURES / "tiny_model.py"),
         "--model-factory", "TinyNet", "--resize", "40", "--crop", "32", "--labels", str(FIXTURES / "tiny_labels.txt"),
         "--weights", "none", "--max-batch", "2", "--topk", "2", "--model-store", str(store))
    return store


@pytest.fixture(scope="module")
def rendered_pod(render, tiny_store, tmp_path_factory):
    inference, management, metrics, grpc_inference, grpc_management = free_ports(5)
    config = tmp_path_factory.mktemp("config") / "config.properties"
    tsvk("config", "--vcpus", "2", "--workers", "1", "--gpus", "0", "--batch", "2", "--models", "tiny",
         "--model-store", "/home/model-server/model-store", "--auth", "off", "--no-archive-check",
         "--inference-address", f"http://0.0.0.0:{inference}", "--management-address", f"http://127.0.0.1:{management}",
         "--metrics-address", f"http://127.0.0.1:{metrics}", "--grpc-inference-port", str(grpc_inference),
         "--grpc-management-port", str(grpc_management), "--output", str(config))
    rendered = render({"torchserve": {"batchSize": 2, "configProperties": config.read_text()}})
    return rendered, inference


class Sandbox:
    """bubblewrap arguments that mount what the pod mounts, and nothing else writable."""

    def __init__(self, work: Path):
        self.work = work
        self.binds: list[tuple[str, Path, bool]] = []

    def mount(self, path: str, source: Path, writable: bool) -> None:
        self.binds.append((path, source, writable))

    def args(self, env: dict[str, str], workdir: str) -> list[str]:
        args = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-pid", "--die-with-parent"]
        shadowed: list[Path] = []
        for path, _, _ in self.binds:
            anchor = Path(path)
            while not anchor.exists():
                anchor = anchor.parent
            if anchor != Path(path) and anchor not in shadowed:
                args += self._shadow(anchor)
                shadowed.append(anchor)
        for path, source, writable in self.binds:
            args += ["--bind" if writable else "--ro-bind", str(source), path]
        # the venv stands in for the image's Python; keep it visible when a pod mount (an emptyDir
        # on /tmp, say) would hide it because the checkout lives there
        args += ["--ro-bind", sys.prefix, sys.prefix]
        for anchor in shadowed:
            args += ["--remount-ro", str(anchor)]
        for name, value in env.items():
            args += ["--setenv", name, value]
        return args + ["--chdir", workdir, "--"]

    @staticmethod
    def _shadow(anchor: Path) -> list[str]:
        """A tmpfs over anchor holding read-only binds of its entries, so new mount points can be made there."""
        args = ["--tmpfs", str(anchor)]
        for entry in sorted(anchor.iterdir()):
            if entry.is_symlink():
                args += ["--symlink", os.readlink(entry), str(entry)]
            elif entry.exists():
                args += ["--ro-bind", str(entry), str(entry)]
        return args


def sandbox_for(rendered, store: Path, work: Path) -> tuple[list[str], list[str]]:
    """(bwrap prefix, container command) for the TorchServe container of the rendered Deployment."""
    spec = rendered.pod_spec()
    container = rendered.server()
    volumes = {volume["name"]: volume for volume in spec["volumes"]}
    sandbox = Sandbox(work)
    for mount in container["volumeMounts"]:
        volume = volumes[mount["name"]]
        if "configMap" in volume:
            source = work / mount["name"]
            source.mkdir()
            for key, text in rendered.one("ConfigMap", volume["configMap"]["name"])["data"].items():
                (source / key).write_text(text)
        elif "emptyDir" in volume:
            source = work / mount["name"]
            source.mkdir()
        else:
            assert "persistentVolumeClaim" in volume, volume
            source = store
        writable = "emptyDir" in volume and not mount.get("readOnly", False)
        sandbox.mount(mount["mountPath"], source, writable)
    env = {item["name"]: item["value"] for item in container["env"]}
    env["PATH"] = f"{Path(sys.executable).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}"
    if os.environ.get("JAVA_HOME"):
        env["JAVA_HOME"] = os.environ["JAVA_HOME"]
    return sandbox.args(env, "/home/model-server"), container["command"] + container["args"]


@pytest.fixture(scope="module")
def running_pod(rendered_pod, tiny_store, tmp_path_factory):
    rendered, inference_port = rendered_pod
    work = tmp_path_factory.mktemp("pod")
    prefix, command = sandbox_for(rendered, tiny_store, work)
    log = (work / "torchserve.log").open("w")
    process = subprocess.Popen([*prefix, *command], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    startup = rendered.server()["startupProbe"]["exec"]["command"]
    deadline = time.monotonic() + START_TIMEOUT_S
    probe = None
    try:
        while time.monotonic() < deadline and process.poll() is None:
            probe = subprocess.run([*prefix, *startup], capture_output=True, text=True, check=False)
            if probe.returncode == 0:
                break
            time.sleep(2)
        log.flush()
        assert probe is not None and probe.returncode == 0, (
            f"the startup probe never passed: {probe and probe.stderr}\n{(work / 'torchserve.log').read_text()[-3000:]}"
        )
        yield rendered, inference_port, work, prefix
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        log.close()


def test_readiness_path_answers_healthy(running_pod):
    rendered, port, _, _ = running_pod
    probe = rendered.server()["readinessProbe"]["httpGet"]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{probe['path']}", timeout=10) as response:
        assert response.status == 200
        assert b"Healthy" in response.read()


def test_helm_test_pod_script_passes(running_pod):
    rendered, port, _, _ = running_pod
    container = rendered.one("Pod", "test-prediction")["spec"]["containers"][0]
    env = {item["name"]: item["value"] for item in container["env"]}
    env["BASE_URL"] = f"http://127.0.0.1:{port}"  # the Service name, resolved the way the cluster would
    result = subprocess.run(container["command"], env={**os.environ, **env}, capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert '"status": "Healthy"' in result.stdout
    assert result.stdout.count("{") >= 2, "a JSON prediction follows the ping"


def test_only_the_empty_dirs_were_written(running_pod):
    _, _, work, prefix = running_pod
    probe = subprocess.run([*prefix, "sh", "-c", "touch /home/model-server/x || touch /usr/x || exit 0; exit 1"],
                           capture_output=True, text=True, check=False)
    assert probe.returncode == 0, "the sandbox root must be read-only"
    assert any((work / "logs").iterdir()), "TorchServe's logs go to the logs emptyDir"
    assert (work / "java-tmp" / "models").is_dir(), "archives are unpacked into TorchServe's TEMP emptyDir"
