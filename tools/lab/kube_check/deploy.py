"""`make deploy-check`: the README's deploy block run as a user runs it, then its manifests run as a node would.

1. A real registry on this machine (Debian's docker-registry on 127.0.0.1:5000, registry.py).
2. The README's deploy block (readme.py), each command as written, its REGISTRY= pointed at that registry;
   its cluster step (helm-deploy) is step 4 instead, since no Kubernetes control plane runs here.
3. The images the block built and pushed removed from local storage.
4. The Deployment and ConfigMap the block rendered (build/helm/manifests.yaml) played with `podman kube play`
   in a container store of their own (a node that has pulled nothing): the image comes from the registry
   by the digest the chart names; its probes must go green and /predictions must answer a real photo.
5. The same pod with the serving image alone (no archives inside): its server must stop at once with a
   line naming the missing archive, not wait out the startup probe.

Writes benchmarks/results/<UTC stamp>-deploy-check.json and points deploy-check-latest.json at it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml

from ...errors import UsageError
from ...images import image_bytes
from . import checks, pod as podlib
from .chart import REPO, Rendered, Variant
from .probes import wait_ready
from .readme import CLUSTER_TARGET, deploy_block, make_target, make_variables, with_registry
from .registry import LocalRegistry, check_podman_trusts
from .results import write_results

HELM_BUILD = REPO / "build" / "helm"  # where the README's commands write (helm.mk's default)
MISSING_EXIT_TIMEOUT_S = 120
MAKE_ENV_DROPPED = ("MAKEFLAGS", "MAKELEVEL", "MFLAGS", "MAKEOVERRIDES")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tsvk_tools.lab.kube_check.deploy", description=__doc__.split("\n\n")[0])
    parser.add_argument("--registry", default="127.0.0.1:5000", help="where the registry listens (host:port)")
    parser.add_argument("--path", default="tsvk", help="the path under the registry: REGISTRY=<registry>/<path>")
    parser.add_argument("--model", default="resnet152", help="the model the photo is sent to (the quickstart's)")
    parser.add_argument("--photo", default="skimage:chelsea", help="a JPEG file or skimage:<name>")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                        help="set for the README's commands: this machine's needs (DOCKER, BASE, BUILD_CA)")
    parser.add_argument("--build-dir", type=Path, default=REPO / "build" / "deploy-check")
    parser.add_argument("--results-dir", type=Path, default=REPO / "benchmarks" / "results")
    args = parser.parse_args(argv)
    bad = [e for e in args.env if not re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", e)]
    if bad:
        parser.error(f"--env takes NAME=VALUE, got {', '.join(bad)}")
    return args


def block_environment(extra: list[str]) -> dict[str, str]:
    """The user's shell: no variables of a make that started this check, plus this machine's needs."""
    env = {k: v for k, v in os.environ.items() if k not in MAKE_ENV_DROPPED}
    env.update(e.split("=", 1) for e in extra)
    return env


def run_block(commands: list[str], registry: str, env: dict[str, str]) -> list[dict]:
    """Each command of the README's block in a shell, as written but for REGISTRY=; stops at the first failure."""
    ran = []
    for command in commands:
        if make_target(command) == CLUSTER_TARGET:
            ran.append({"command": command, "ran": False, "instead": "podman kube play of build/helm/manifests.yaml (step 4)"})
            continue
        actual = with_registry(command, registry)
        print(f"[deploy-check] $ {actual}", flush=True)
        started = time.monotonic()
        result = subprocess.run(["bash", "-c", actual], cwd=REPO, env=env)
        ran.append({"command": command, "ran": actual, "exit": result.returncode, "seconds": round(time.monotonic() - started, 1)})
        if result.returncode != 0:
            raise UsageError(f"the README's `{actual}` failed ({result.returncode})")
    return ran


def remove_local_images(refs: list[str]) -> dict[str, bool]:
    """podman rmi each reference (the image holding the archives first: it is built on the other); whether it is gone."""
    for ref in refs:
        podlib.podman("rmi", ref, check=False)
    return {ref: not podlib.image_exists(ref) for ref in refs}


def node_store(build_dir: Path) -> list[str]:
    """A podman store of its own, empty: what a node that never pulled these images has."""
    root, runroot = build_dir / "node-storage", Path("/run") / f"tsvk-deploy-check-{os.getpid()}"
    shutil.rmtree(root, ignore_errors=True)
    return ["--root", str(root), "--runroot", str(runroot)]


def ours(documents: list[dict], suffix: str, image: str | None = None) -> Rendered:
    """The rendered Deployment and ConfigMap with podman names kube-check may remove (and another image)."""
    documents = json.loads(json.dumps(documents))
    rename = {}
    for document in documents:
        if document.get("kind") in ("Deployment", "ConfigMap"):
            new = f"{podlib.POD_PREFIX}{suffix}"
            rename[document["metadata"]["name"]] = new
            document["metadata"]["name"] = new
    for document in documents:
        if document.get("kind") != "Deployment":
            continue
        spec = document["spec"]["template"]["spec"]
        for volume in spec.get("volumes", []):
            if "configMap" in volume:
                volume["configMap"]["name"] = rename.get(volume["configMap"]["name"], volume["configMap"]["name"])
        for container in spec["containers"] + spec.get("initContainers", []):
            container["image"] = image or container["image"]
    return Rendered(Variant(suffix), documents)


def play(rendered: Rendered, build_dir: Path) -> tuple[podlib.Pod, float, str]:
    manifest = build_dir / f"{rendered.variant.name}.yaml"
    manifest.write_text(rendered.server_manifest())
    started = time.monotonic()
    output = podlib.podman("kube", "play", "--network", "podman", str(manifest), timeout=1800)
    (found,) = podlib.pods_of(rendered.deployment["metadata"]["name"])
    return found, started, (output.stdout + output.stderr)


def serve_check(rendered: Rendered, build_dir: Path, model: str, photo: bytes) -> dict:
    """Step 4: pulled from the registry, probes green, a real photo answered."""
    pulled_at = time.monotonic()
    pod, started, output = play(rendered, build_dir)
    result = {"image": rendered.pod_spec["containers"][0]["image"], "pull_and_start_s": round(time.monotonic() - pulled_at, 1),
              "pulled": [line for line in output.splitlines() if "pull" in line.lower() or "Copying" in line][:40]}
    try:
        address = pod.ip()
        probes = wait_ready(pod, address, rendered.pod_spec["containers"], started)
        result["probes"] = [p.__dict__ for p in probes]
        ready = all(p.ok for p in probes)
        result["cold_start_s"] = round(time.monotonic() - started, 1) if ready else None
        if not ready:
            result["logs"] = pod.logs("torchserve")
            result["checks"] = [checks.Check("startup and readiness probes go green", False, probes[-1].detail).to_json()]
            return result
        port = checks.port_of(rendered.config_properties(), "inference_address")
        status, body = checks.post(f"http://{address}:{port}/predictions/{model}", photo)
        result["answer"] = json.loads(body) if status == 200 else body[:300].decode(errors="replace")
        result["checks"] = [checks.Check("startup and readiness probes go green", True, "every container's probes").to_json(),
                            checks.predictions(address, port, model, photo).to_json()]
        return result
    finally:
        pod.remove()
        podlib.remove_volume(rendered.of_kind("ConfigMap")[0]["metadata"]["name"])


def missing_archive_check(rendered: Rendered, build_dir: Path, model: str) -> dict:
    """Step 5: the serving image without archives; the server must stop at once naming the archive, before TorchServe.
    podman restarts it (the pod's restartPolicy is Always) as the kubelet would, so its first words are what count."""
    pod, started, _ = play(rendered, build_dir)
    try:
        deadline = time.monotonic() + MISSING_EXIT_TIMEOUT_S
        logs = pod.logs("torchserve")
        while "archive missing" not in logs and time.monotonic() < deadline:
            time.sleep(0.5)
            logs = pod.logs("torchserve")
        seconds = round(time.monotonic() - started, 1)
        time.sleep(2)  # let it exit (and be restarted) at least once more
        inspected = pod.inspect("torchserve")
        state, restarts = inspected["State"], inspected.get("RestartCount", 0)
        line = next((text for text in logs.splitlines() if "archive missing" in text), "")
        stopped = state["Status"] in ("exited", "stopped") and state.get("ExitCode") == 1 or restarts > 0
        ok = f"{model}.mar" in line and stopped and "TorchServe started" not in logs
        return {"image": rendered.pod_spec["containers"][0]["image"], "line_after_s": seconds, "state": state["Status"],
                "exit_code": state.get("ExitCode"), "restarts": restarts, "line": line,
                "checks": [checks.Check("a pod without its archive stops at once, naming it", ok,
                                        f"after {seconds} s: {line or logs[-300:]} ({state['Status']}, exit {state.get('ExitCode')}, "
                                        f"{restarts} restarts)").to_json()]}
    finally:
        pod.remove()
        podlib.remove_volume(rendered.of_kind("ConfigMap")[0]["metadata"]["name"])


def carried_checks(commands: list[str], rendered: Rendered, pushed: dict) -> list[dict]:
    """What the block asked for is what was rendered: its VCPUS, the archives in model_store, the pushed image by digest."""
    asked = {}
    for command in commands:
        if make_target(command) == "helm-config":
            asked = make_variables(command)
    server = rendered.container("torchserve")
    properties = rendered.config_properties()
    vcpus = asked.get("VCPUS") or asked.get("HELM_VCPUS")
    found = []
    if vcpus:
        limit = str(server["resources"]["limits"]["cpu"])
        threads = sum(int(v.split(",")[0]) for k, v in properties.items() if k.startswith("tsvk.threads."))
        found.append(checks.Check(f"helm-config's VCPUS={vcpus} reached the pod", limit == vcpus and threads == int(vcpus),
                                  f"CPU limit {limit}, intra-op threads {threads}"))
    served = sorted(p.name for p in (REPO / "model_store").glob("*.mar"))
    loaded = sorted(properties.get("load_models", "").split(","))
    found.append(checks.Check("with no MODELS, the archives in model_store/ are served", loaded == served == sorted(pushed["archives"]),
                              f"load_models {loaded}, model_store {served}, pushed {sorted(pushed['archives'])}"))
    image, policy = server["image"], server["imagePullPolicy"]
    found.append(checks.Check("the pod runs the pushed image holding the archives, by digest", image.endswith(f"@{pushed['digest']}")
                              and policy == "IfNotPresent", f"{image} ({policy})"))
    return [c.to_json() for c in found]


def restore(serving: str, local_tag: str) -> None:
    """Give the user back the serving image under its local name, from the registry."""
    podlib.PODMAN_OPTIONS.clear()
    podlib.podman("pull", serving, timeout=1800)
    podlib.podman("tag", serving, local_tag)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.time()
    registry_ref = f"{args.registry}/{args.path}"
    check_podman_trusts(args.registry)
    commands = deploy_block()
    report: dict = {"readme_block": commands, "registry": registry_ref, "env": args.env, "model": args.model,
                    "photo": args.photo, "machine": {"cpu": platform_cpu(), "vcpus": os.cpu_count(),
                                                     "podman": podlib.podman("--version").stdout.strip()}}
    registry = LocalRegistry(args.registry, args.build_dir / "registry")
    registry.start()
    registry_log = args.build_dir / "registry" / "registry.log"
    local_tag = next((e.split("=", 1)[1] for e in args.env if e.startswith("IMAGE=")), "localhost/tsvk/torchserve:0.12.0-cpu")
    try:
        report["ran"] = run_block(commands, registry_ref, block_environment(args.env))
        pushed = json.loads((HELM_BUILD / "pushed.json").read_text())
        report["pushed"] = pushed
        models_ref = f"{pushed['repository']}:{pushed['tag']}"
        serving_ref = f"{pushed['repository']}:{pushed['serving']['tag']}"
        report["removed_locally"] = remove_local_images([models_ref, serving_ref, local_tag])
        log_offset = registry_log.stat().st_size
        documents = [d for d in yaml.safe_load_all((HELM_BUILD / "manifests.yaml").read_text()) if d]
        rendered = Rendered(Variant("deploy"), documents)
        report["rendered_image"] = rendered.pod_spec["containers"][0]["image"]
        report["carried"] = carried_checks(commands, rendered, pushed)
        podlib.PODMAN_OPTIONS[:] = node_store(args.build_dir)
        photo = image_bytes(args.photo)
        report["served"] = serve_check(ours(documents, "deploy"), args.build_dir, args.model, photo)
        bare = f"{pushed['repository']}:{pushed['serving']['tag']}@{pushed['serving']['digest']}"
        report["without_archive"] = missing_archive_check(ours(documents, "deploy-bare", bare), args.build_dir, args.model)
        report["registry_served_after_removal"] = pulls_in_log(registry_log, log_offset)
    finally:
        node = list(podlib.PODMAN_OPTIONS)
        if node:  # only this check's own store: its images, then its folders
            podlib.podman("rmi", "--all", "--force", check=False, timeout=600)
            podlib.PODMAN_OPTIONS.clear()
            shutil.rmtree(node[1], ignore_errors=True)
            shutil.rmtree(node[3], ignore_errors=True)
        try:
            if "pushed" in report:
                restore(f"{report['pushed']['repository']}:{report['pushed']['serving']['tag']}", local_tag)
        finally:
            registry.stop()
    every = report["carried"] + report["served"]["checks"] + report["without_archive"]["checks"]
    report["removed_ok"] = all(report["removed_locally"].values())
    report["passed"] = all(c["ok"] for c in every) and report["removed_ok"]
    path = write_results(report, args.results_dir, started, kind="deploy-check")
    for check in every:
        print(f"[deploy-check] {'PASS' if check['ok'] else 'FAIL'} {check['name']}: {check['detail'][:200]}")
    print(f"[deploy-check] {'passed' if report['passed'] else 'FAILED'}; {path}")
    return 0 if report["passed"] else 1


def pulls_in_log(log: Path, offset: int) -> dict[str, int]:
    """What the registry served from `offset` of its access log on: manifest and blob GETs."""
    with log.open() as handle:
        handle.seek(offset)
        text = handle.read()
    return {"manifest_gets": len(re.findall(r'"GET /v2/[^ ]+/manifests/', text)),
            "blob_gets": len(re.findall(r'"GET /v2/[^ ]+/blobs/', text))}


def platform_cpu() -> str:
    return next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                 if line.startswith("model name")), "unknown")


if __name__ == "__main__":
    try:
        sys.exit(main())
    except UsageError as err:
        print(f"deploy-check: {err}", file=sys.stderr)
        sys.exit(1)
