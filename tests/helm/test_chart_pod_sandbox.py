"""The rendered pod, run for real without a cluster: TorchServe under a read-only root filesystem.

The Deployment's command, environment and volume mounts are taken from `helm template` and replayed
with bubblewrap: the root is read-only, the ConfigMap and the model store are read-only binds, and
only the chart's emptyDirs are writable, as in the pod. Then the startup probe's exec command, the
readiness path and the `helm test` pod's script must all succeed against it. This is what shows
that readOnlyRootFilesystem is feasible with the chart's emptyDirs, and that the probes and the
test hook talk to TorchServe the way they must.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from tests.support.helm import REPO, front_target, install_front

from tsvk_tools.config.ports import free_ports

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
        # and the checkout, which the venv's editable install of tsvk_tools points into (the image's /opt/tsvk)
        args += ["--ro-bind", str(REPO), str(REPO)]
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


def sandbox_for(rendered, store: Path, work: Path, container: dict | None = None,
                image: dict[str, Path] | None = None) -> tuple[list[str], list[str]]:
    """(bwrap prefix, container command) for one container of the rendered Deployment (TorchServe's by
    default); `image` binds folders the image would hold (path in the image -> folder here), read-only."""
    spec = rendered.pod_spec()
    container = container or rendered.server()
    volumes = {volume["name"]: volume for volume in spec["volumes"]}
    sandbox = Sandbox(work)
    for path, source in (image or {}).items():
        sandbox.mount(path, source, writable=False)
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


@contextlib.contextmanager
def started(prefix: list[str], command: list[str], log_path: Path):
    """One container's process in its sandbox, in a session of its own; always stopped, by its pid."""
    with log_path.open("w") as log:
        process = subprocess.Popen([*prefix, *command], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            yield process
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()


def wait_for_startup_probe(rendered, prefix: list[str], process, log_path: Path) -> None:
    startup = rendered.server()["startupProbe"]["exec"]["command"]
    deadline = time.monotonic() + START_TIMEOUT_S
    probe = None
    while time.monotonic() < deadline and process.poll() is None:
        probe = subprocess.run([*prefix, *startup], capture_output=True, text=True, check=False)
        if probe.returncode == 0:
            return
        time.sleep(2)
    pytest.fail(f"the startup probe never passed: {probe and probe.stderr}\n{log_path.read_text()[-3000:]}")


@pytest.fixture(scope="module")
def running_pod(rendered_pod, tiny_store, tmp_path_factory):
    rendered, inference_port = rendered_pod
    work = tmp_path_factory.mktemp("pod")
    prefix, command = sandbox_for(rendered, tiny_store, work)
    with started(prefix, command, work / "torchserve.log") as process:
        wait_for_startup_probe(rendered, prefix, process, work / "torchserve.log")
        yield rendered, inference_port, work, prefix


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


# protocol=oip: the front's container beside TorchServe's, each in its own sandbox, sharing the
# network as containers of one pod do. The front runs from the folder the image recipe installs.

@pytest.fixture(scope="module")
def running_oip_pod(render, tiny_store, tmp_path_factory):
    if importlib.util.find_spec("kserve") is None:  # found, not imported: tritonclient below cannot share a process with it
        pytest.skip("kserve is not installed here (make setup installs it)")
    inference, management, metrics, grpc_inference, grpc_management, rest, grpc = free_ports(7)
    config = tmp_path_factory.mktemp("oip-config") / "config.properties"
    tsvk("config", "--vcpus", "2", "--workers", "1", "--gpus", "0", "--batch", "2", "--models", "tiny",
         "--model-store", "/home/model-server/model-store", "--auth", "off", "--no-archive-check",
         "--inference-address", f"http://0.0.0.0:{inference}", "--management-address", f"http://127.0.0.1:{management}",
         "--metrics-address", f"http://127.0.0.1:{metrics}", "--grpc-inference-port", str(grpc_inference),
         "--grpc-management-port", str(grpc_management), "--protocol", "oip", "--oip-address", "0.0.0.0",
         "--oip-rest-port", str(rest), "--oip-grpc-port", str(grpc), "--output", str(config))
    rendered = render({"protocol": "oip", "torchserve": {"batchSize": 2, "configProperties": config.read_text()}})
    front = rendered.container("oip-front")
    installed = install_front(tmp_path_factory.mktemp("image") / "opt", tmp_path_factory.mktemp("image-build"))
    server_work, front_work = tmp_path_factory.mktemp("oip-pod-torchserve"), tmp_path_factory.mktemp("oip-pod-front")
    server_prefix, server_command = sandbox_for(rendered, tiny_store, server_work)
    front_prefix, front_command = sandbox_for(rendered, tiny_store, front_work, front, image={front_target(): installed})
    with started(server_prefix, server_command, server_work / "torchserve.log") as server, \
            started(front_prefix, front_command, front_work / "front.log") as front_process:
        wait_for_startup_probe(rendered, server_prefix, server, server_work / "torchserve.log")
        yield rendered, {"inference": inference, "rest": rest, "grpc": grpc}, front_process, front_work, front_prefix


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as err:
        return err.code
    except OSError:
        return 0


def test_front_readiness_probe_passes_once_torchserve_is_ready(running_oip_pod):
    rendered, ports, front_process, front_work, _ = running_oip_pod
    probe = rendered.container("oip-front")["readinessProbe"]["httpGet"]
    url = f"http://127.0.0.1:{ports['rest']}{probe['path']}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and front_process.poll() is None and _status(url) != 200:
        time.sleep(1)
    assert _status(url) == 200, f"{url} never said ready:\n{(front_work / 'front.log').read_text()[-3000:]}"


def test_helm_test_pod_script_passes_over_both_protocols(running_oip_pod):
    rendered, ports, *_ = running_oip_pod
    test_front_readiness_probe_passes_once_torchserve_is_ready(running_oip_pod)
    container = rendered.one("Pod", "test-prediction")["spec"]["containers"][0]
    env = {item["name"]: item["value"] for item in container["env"]}
    env["BASE_URL"] = f"http://127.0.0.1:{ports['inference']}"
    env["OIP_URL"] = f"http://127.0.0.1:{ports['rest']}"
    result = subprocess.run(container["command"], env={**os.environ, **env}, capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert '"outputs"' in result.stdout and '"labels"' in result.stdout, result.stdout


def test_grpc_port_answers_a_standard_client(running_oip_pod):
    import numpy as np
    from tests.support.oip_clients import TritonGRPC

    _, ports, *_ = running_oip_pod
    test_front_readiness_probe_passes_once_torchserve_is_ready(running_oip_pod)
    client = TritonGRPC("", f"127.0.0.1:{ports['grpc']}")
    assert client.ready()
    image = (REPO / "k8s" / "tsvk" / "files" / "test-image.jpg").read_bytes()
    probabilities, labels = client.infer("tiny", "images", "BYTES", np.array([image], dtype=np.object_), {})
    assert probabilities.shape == labels.shape == (1, 2)


def test_front_runs_the_code_the_image_installs(running_oip_pod):
    """In the front's sandbox the project comes from the image's folder, not from this checkout."""
    rendered, *_, prefix = running_oip_pod
    front = rendered.container("oip-front")
    probe = "import tsvk_tools.oip.server as s, tsvk; print(s.__file__, tsvk.__file__)"
    where = subprocess.run([*prefix, *front["command"][:1], "-c", probe], capture_output=True, text=True, check=False)
    assert where.returncode == 0, where.stderr
    assert all(path.startswith(front_target() + "/") for path in where.stdout.split()), where.stdout
