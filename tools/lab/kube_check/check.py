"""`make kube-check`: the chart's own pods, run with podman and asked from outside, per rendered variant.

For each variant (default values, protocol=oip, the download init container) the chart is rendered by
the real helm, its pod started with `podman kube play`, its probes run until green, and then asked
what a client and an operator would ask; then `helm test`'s pod runs against it. On the default
variant it also measures throughput through the pod against the same engine started on this machine as
`make serve` starts it, and stops the pod under load (pod_drain.py). With engine kserve every variant sets the
chart's engine value, and the baseline is `make serve ENGINE=kserve`.
"""

from __future__ import annotations

import functools
import http.server
import json
import subprocess
import sys
import threading
import time
from dataclasses import asdict
from pathlib import Path

import yaml

from ... import defaults
from ...engines.registry import engine_named
from ...errors import UsageError
from ...config.ports import free_ports
from . import checks, pod as podlib
from .chart import REPO, Rendered, Variant
from .probes import wait_ready

TEST_POD_TIMEOUT_S = 300


def variants(download_url: str, download_cidr: str, download_port: int, model: str, sha256: str,
             engine: str = "torchserve") -> dict[str, Variant]:
    """The three ways kube-check renders the chart, each on `engine`."""
    chosen = {"engine": engine}
    download = {**chosen,
        "modelStore": {"source": "download",
                       "download": {"archives": [{"name": model, "url": download_url, "sha256": sha256}]}},
        "networkPolicy": {"downloadTo": [{"ipBlock": {"cidr": download_cidr}}], "downloadPorts": [download_port]},
    }
    served = {"HELM_MODELS": model}
    return {
        "default": Variant("default", make_vars=served, values=chosen),
        "oip": Variant("oip", make_vars={**served, "HELM_PROTOCOL": "oip"}, values=chosen),
        "download": Variant("download", make_vars=served, values=download),
    }


def local_repository(image: str) -> tuple[str, str]:
    """(repository, tag) of a local image as podman stores it: a name without a registry is localhost/<name>."""
    name, _, tag = image.rpartition(":")
    first = name.split("/")[0]
    has_registry = "/" in name and ("." in first or ":" in first or first == "localhost")
    return (name if has_registry else f"localhost/{name}"), tag


def image_values(image: str, digest: str) -> list[str]:
    """--set flags naming the local image by repository, tag and digest (what a user pins)."""
    repository, tag = local_repository(image)
    flags = ["--set", f"image.repository={repository}", "--set", f"image.tag={tag}"]
    return flags + (["--set", f"image.digest={digest}"] if digest else [])


def serve_directory(directory: Path, address: str) -> tuple[http.server.ThreadingHTTPServer, int]:
    """A plain HTTP server for the download variant's archives, on an address of this machine."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(directory))
    server = http.server.ThreadingHTTPServer((address, 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, server.server_address[1]


def podman_gateway() -> str:
    network = json.loads(podlib.podman("network", "inspect", "podman").stdout)[0]
    return network["subnets"][0]["gateway"]


def model_volume(rendered: Rendered, archive: Path) -> str | None:
    """For a PVC-backed model store: a podman volume of the claim's name holding the archive."""
    for volume in rendered.pod_spec["volumes"]:
        claim = volume.get("persistentVolumeClaim")
        if volume["name"] == "model-store" and claim:
            podlib.make_volume(claim["claimName"], [archive])
            return claim["claimName"]
    return None


def run_test_pod(rendered: Rendered, address: str, build_dir: Path) -> checks.Check:
    """`helm test`'s pod, its URLs pointed at the pod's address (no Service resolves without a cluster)."""
    test = json.loads(json.dumps(rendered.test_pod))
    ports = {"BASE_URL": rendered.config_properties()["inference_address"]}
    for container in test["spec"]["containers"]:
        for env in container.get("env", []):
            if env["name"] == "BASE_URL":
                env["value"] = f"http://{address}:{checks.port_of(ports, 'BASE_URL')}"
            if env["name"] == "OIP_URL":
                env["value"] = f"http://{address}:{oip_rest_port(rendered)}"
    manifest = build_dir / rendered.variant.name / "test-pod.yaml"
    manifest.write_text(yaml.safe_dump(test, sort_keys=False))
    name = test["metadata"]["name"]
    pod = podlib.play(manifest, name)
    container = test["spec"]["containers"][0]["name"]
    try:
        deadline = time.monotonic() + TEST_POD_TIMEOUT_S
        while pod.state(container)["Status"] != "exited" and time.monotonic() < deadline:
            time.sleep(1)
        state = pod.state(container)
        logs = pod.logs(container)
        return checks.Check("helm test's pod passes (the tsvk image)", state.get("ExitCode") == 0 and state["Status"] == "exited",
                            f"exit {state.get('ExitCode')}: {logs[-300:]}")
    finally:
        pod.remove()


def oip_rest_port(rendered: Rendered) -> int:
    """Where the pod serves the Open Inference Protocol's REST: the front's port, or the kserve engine's inference port."""
    properties = rendered.config_properties()
    if engine_named(rendered.server_name).serves_protocol_itself:
        return checks.port_of(properties, "inference_address")
    return int(properties["tsvk.oip.rest_port"])


def start_host_baseline(archive: Path, build_dir: Path, model: str, engine: str = defaults.ENGINE):
    """The engine on this machine as `make serve` runs it, with the chart's sizing, on free localhost ports."""
    run_dir = build_dir / "host"
    inference, management, metrics, grpc, grpc_management = free_ports(5)
    config = run_dir / "config.properties"
    run_dir.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "tsvk_tools.cli", "config", "--vcpus", "2", "--workers", "1", "--batch", "8",
               "--models", model, "--model-store", str(archive.parent.resolve()), "--auth", "off",
               "--inference-address", f"http://127.0.0.1:{inference}", "--management-address", f"http://127.0.0.1:{management}",
               "--metrics-address", f"http://127.0.0.1:{metrics}", "--grpc-inference-port", str(grpc),
               "--grpc-management-port", str(grpc_management), "--output", str(config)]
    subprocess.run(command, cwd=REPO, check=True, capture_output=True)
    run = engine_named(engine).start(config, run_dir)
    try:
        run.wait_ready(timeout=600)
    except UsageError:
        run.stop()
        raise
    return run, f"http://127.0.0.1:{inference}/predictions/{model}"


def check_variant(rendered: Rendered, archive: Path, photo: bytes, model: str, build_dir: Path, bench) -> dict:
    """Play the variant's pod, wait for its probes, ask it from outside; `bench(pod, url, rendered)` may add more."""
    manifest = build_dir / rendered.variant.name / "server.yaml"
    manifest.write_text(rendered.server_manifest())
    volume = model_volume(rendered, archive)
    created = time.monotonic()
    pod = podlib.play(manifest, rendered.deployment["metadata"]["name"])
    result: dict = {"pod": pod.name}
    try:
        address = pod.ip()
        probes = wait_ready(pod, address, rendered.pod_spec["containers"], created)
        result["probes"] = [asdict(p) for p in probes]
        ready = all(p.ok for p in probes)
        result["cold_start_s"] = round(time.monotonic() - created, 1) if ready else None
        if not ready:
            result["logs"] = {name: pod.logs(name) for name in pod.containers}
            result["checks"] = [checks.Check("startup and readiness probes go green", False, probes[-1].detail).to_json()]
            return result
        result["checks"] = [c.to_json() for c in ask_pod(pod, address, rendered, photo, model, build_dir)]
        result.update(bench(pod, address, rendered) or {})
        return result
    finally:
        pod.remove()
        if volume:
            podlib.remove_volume(volume)
        for configmap in rendered.of_kind("ConfigMap"):  # podman keeps each ConfigMap as a volume of its name
            podlib.remove_volume(configmap["metadata"]["name"])


def ask_pod(pod, address: str, rendered: Rendered, photo: bytes, model: str, build_dir: Path) -> list[checks.Check]:
    properties = rendered.config_properties()
    inference = checks.port_of(properties, "inference_address")
    found = [checks.Check("startup and readiness probes go green", True, "every container's probes"),
             checks.predictions(address, inference, model, photo),
             checks.bad_image(address, inference, model)]
    if "tsvk.oip.rest_port" in properties:
        rest, grpc = oip_rest_port(rendered), int(properties["tsvk.oip.grpc_port"])
        found += [checks.oip_infer(address, rest, grpc, model, photo, grpc=False),
                  checks.oip_infer(address, rest, grpc, model, photo, grpc=True)]
    server = rendered.server_name
    found.append(checks.metrics(pod, address, properties, server))  # either engine: TorchServe's metric names
    found.append(checks.management_closed(address, properties))
    for container in rendered.pod_spec["containers"]:
        found += checks.user_and_root_filesystem(pod, rendered.pod_spec, container["name"])
    found.append(run_test_pod(rendered, address, build_dir))
    return found
