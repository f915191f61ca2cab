"""`python -m tsvk_tools.lab.kube_check.kserve_runtime` (make kserve-runtime-check): k8s/kserve's ServingRuntime container run
by podman as KServe would run it, on storage laid out as KServe's TorchServe runtime reads it.

No KServe runs here, so this plays the part of its controller and storage initializer at the narrowest seam: a pod
holding the runtime's `kserve-container` exactly as k8s/kserve/servingruntime.yaml writes it (command, arguments,
environment, ports, probe, security context, resources, volumes), the local image by digest in place of its
`image:`, and at /mnt/models (read-only, where KServe's storage initializer puts the storageUri's files)
`config/config.properties`, written by the `tsvk config` command of k8s/README.md's migration steps, and
`model-store/<model>.mar`. Then from outside: the readiness probe, /predictions, a bad image, the Open Inference
Protocol's REST, no metrics address, the user and read-only root, and a SIGTERM that ends the container cleanly.
Writes benchmarks/results/<UTC stamp>-kserve-runtime.json.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import yaml

from ...errors import UsageError
from ...images import image_bytes
from . import checks, pod as podlib
from .__main__ import machine
from .chart import REPO
from .probes import wait_ready
from .results import write_results

RUNTIME = REPO / "k8s" / "kserve" / "servingruntime.yaml"
README = REPO / "k8s" / "README.md"
SECTION = "## From KServe's TorchServe runtime"
STORAGE = "/mnt/models"  # KServe's storage initializer's target, mounted read-only into kserve-container
POD = f"{podlib.POD_PREFIX}kserve-runtime"
MODELS_VOLUME = f"{POD}-models"


def migration_config_command(readme: Path = README) -> list[str]:
    """The README's `tsvk config` command (its arguments) that writes the cluster's config: the one in the migration
    section whose model store is under /mnt/models."""
    text = readme.read_text()
    section = text[text.index(SECTION):]
    section = section[:section.index("\n## ", 1)]
    lines = [line.strip() for line in section.replace("\\\n", " ").splitlines()
             if line.strip().startswith("tsvk config ") and f"{STORAGE}/" in line]
    if len(lines) != 1:
        raise UsageError(f"{readme}: expected one `tsvk config ... {STORAGE}/...` line in {SECTION!r}, found {len(lines)}")
    return shlex.split(lines[0])[2:]


def runtime_pod(runtime: dict, image: str) -> dict:
    """The pod KServe would make for an InferenceService on this runtime, less what KServe adds around it."""
    (container,) = json.loads(json.dumps(runtime["spec"]["containers"]))
    container["image"] = image
    container.setdefault("volumeMounts", []).append({"name": "kserve-provision-location", "mountPath": STORAGE, "readOnly": True})
    volumes = runtime["spec"].get("volumes", []) + [
        {"name": "kserve-provision-location", "persistentVolumeClaim": {"claimName": MODELS_VOLUME}}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": POD},
            "spec": {"containers": [container], "volumes": volumes, "restartPolicy": "Never"}}


def storage_volume(config: Path, archive: Path) -> None:
    """The storageUri's layout in a podman volume: config/config.properties and model-store/<archive>."""
    podlib.remove_volume(MODELS_VOLUME)
    podlib.podman("volume", "create", MODELS_VOLUME)
    root = Path(json.loads(podlib.podman("volume", "inspect", MODELS_VOLUME).stdout)[0]["Mountpoint"])
    for folder, file in (("config", config), ("model-store", archive)):
        (root / folder).mkdir(mode=0o755, exist_ok=True)
        target = root / folder / ("config.properties" if folder == "config" else file.name)
        target.write_bytes(file.read_bytes())
        target.chmod(0o644)


def with_value(argv: list[str], flag: str, value: str) -> list[str]:
    """argv with `flag`'s value replaced (or the pair appended)."""
    if flag not in argv:
        return [*argv, flag, value]
    at = argv.index(flag)
    return [*argv[:at + 1], value, *argv[at + 2:]]


def write_migration_config(model: str, output: Path) -> dict[str, str]:
    """The README's `tsvk config` command run as written, for `model` and into `output`; its properties."""
    argv = with_value(with_value(migration_config_command(), "--models", model), "--output", str(output))
    result = subprocess.run([sys.executable, "-m", "tsvk_tools.cli", "config", *argv], cwd=REPO, capture_output=True, text=True)
    if result.returncode != 0:
        raise UsageError(f"the README's tsvk config failed: {result.stderr.strip()[-600:]}")
    pairs = (line.partition("=") for line in output.read_text().splitlines() if "=" in line and not line.startswith("#"))
    return {key.strip(): value.strip() for key, _, value in pairs}


def ask(pod: podlib.Pod, address: str, container: dict, properties: dict, model: str, photo: bytes) -> list[checks.Check]:
    port = checks.port_of(properties, "inference_address")
    found = [checks.predictions(address, port, model, photo), checks.bad_image(address, port, model),
             checks.oip_infer(address, port, 0, model, photo, grpc=False),
             checks.metrics(pod, address, properties, container["name"])]
    spec = {"securityContext": {}, "containers": [container]}
    return found + checks.user_and_root_filesystem(pod, spec, container["name"])


def run(args: argparse.Namespace) -> dict:
    if not podlib.image_exists(args.image):
        raise UsageError(f"no local image {args.image}: build it with `make image` (k8s/README.md)")
    archive = REPO / "model_store" / f"{args.model}.mar"
    if not archive.is_file():
        raise UsageError(f"{archive} not found: build it with `make archive MODEL={args.model}` (WEIGHTS=none offline)")
    digest = podlib.image_digest(args.image)
    build = args.build_dir / "kserve-runtime"
    build.mkdir(parents=True, exist_ok=True)
    properties = write_migration_config(args.model, build / "config.properties")
    storage_volume(build / "config.properties", archive)
    runtime = yaml.safe_load(RUNTIME.read_text())
    manifest = runtime_pod(runtime, f"{args.image.rsplit(':', 1)[0]}@{digest}" if digest else args.image)
    (build / "pod.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False))
    created = time.monotonic()
    pod = podlib.play(build / "pod.yaml", POD)
    container = manifest["spec"]["containers"][0]
    report: dict = {"image": args.image, "digest": digest, "model": args.model, "runtime": str(RUNTIME.relative_to(REPO)),
                    "config_command": "tsvk config " + shlex.join(migration_config_command())}
    try:
        address = pod.ip()
        probes = wait_ready(pod, address, [container], created)
        report["probes"] = [asdict(p) for p in probes]
        ready = bool(probes) and all(p.ok for p in probes)
        report["cold_start_s"] = round(time.monotonic() - created, 1) if ready else None
        found = [checks.Check("the readiness probe goes green", ready, probes[-1].detail if probes else "no probe")]
        if ready:
            found += ask(pod, address, container, properties, args.model, image_bytes(args.photo))
            exit_s = pod.stop(30)
            state = pod.state(container["name"])
            said = pod.logs(container["name"], lines=3)
            found.append(checks.Check("SIGTERM ends the container cleanly", state.get("ExitCode") == 0 and exit_s < 35,
                                      f"exit {state.get('ExitCode')} after {exit_s:.1f} s: {said[-200:]}"))
        else:
            report["logs"] = pod.logs(container["name"], lines=60)
        report["checks"] = [c.to_json() for c in found]
    finally:
        pod.remove()
        podlib.remove_volume(MODELS_VOLUME)
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tsvk_tools.lab.kube_check.kserve_runtime", description=__doc__)
    parser.add_argument("--image", default="tsvk/torchserve:0.12.0-cpu-kserve",
                        help="the local image to run (make image ENGINE=kserve: the image without Java)")
    parser.add_argument("--model", default="resnet50", help="model_store/<model>.mar is the archive served")
    parser.add_argument("--photo", default="skimage:chelsea", help="the photo sent (a JPEG file or skimage:<name>)")
    parser.add_argument("--build-dir", type=Path, default=REPO / "build" / "kube")
    parser.add_argument("--results-dir", type=Path, default=REPO / "benchmarks" / "results")
    args = parser.parse_args(argv)
    started = time.time()
    try:
        report = run(args)
    except UsageError as err:
        print(f"kserve-runtime-check: {err}", file=sys.stderr)
        return 2
    report["passed"] = bool(report["checks"]) and all(c["ok"] for c in report["checks"])
    report.update({"machine": machine(), "command": "make kserve-runtime-check", "wall_s": round(time.time() - started, 1)})
    for check in report["checks"]:
        print(f"[kserve-runtime] {'PASS' if check['ok'] else 'FAIL'} {check['name']}: {check['detail'][:160]}")
    path = write_results(report, args.results_dir, started, "kserve-runtime")
    print(f"[kserve-runtime] {'PASSED' if report['passed'] else 'FAILED'}; wrote {path}")
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
