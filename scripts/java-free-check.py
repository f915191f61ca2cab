#!/usr/bin/env python3
"""`make java-free-check`: the README's Java-free path, run where no JDK was ever installed.

The bare machine: a fresh container of BASE (Debian bookworm, whose python3 is 3.11) gets git, make, python3 and
python3-venv from apt and nothing else, clones this checkout's HEAD, and runs what a user runs:

    make demo ENGINE=kserve
    make config MODELS=<the demo's model>; make serve ENGINE=kserve; make predict MODEL=<it>; make status; make stop

No `java` may be on PATH and no Java package in dpkg's list before the first command, while the engine serves, and
after the last; `scripts/system-deps.sh --torchserve --check` must still name Java, the one thing only TorchServe needs.

The serving image without Java (`make image ENGINE=kserve`), when --image names it: its size beside the TorchServe
image's (when that is built here too), no Java in it, and the engine started in it as the chart starts it
(k8s/tsvk/templates/deployment.yaml: PID 1, read-only root, UID 10000) on the archive the bare machine's demo
built, answering the demo's photo.

Writes benchmarks/results/java-free-<UTC stamp>.json and .md, and moves java-free-latest.json and .md to them;
the full output of every command goes to build/java-free/<stamp>.log. Exits 1 when a check failed. Runs with the
system's python3 alone: it needs no venv on this machine, only docker or podman.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHECKOUT = "/root/tsvk"  # where the bare machine's clone lives
SOURCE = "/src"  # this checkout, mounted read-only, cloned from
CA_IN_CONTAINER = "/etc/tsvk-build-ca.pem"  # beside the image's own files: nothing the container installs overwrites it
BARE_PACKAGES = ("git", "make", "python3", "python3-venv")
# Anything that would be a JDK or JRE in dpkg's list of installed packages.
JAVA_PACKAGE_WORDS = ("openjdk", "jdk", "jre", "java")
TAIL_LINES = 25
STEP_TIMEOUT_S = 3 * 3600  # `make demo` on a fresh machine downloads torch and compiles the model: long, but bounded
SERVE_READY_S = 600
DRAIN_S = 30  # the chart's drainTimeoutSeconds
# The chart's layout in the image (k8s/tsvk/templates/deployment.yaml).
IMAGE_STORE = "/home/model-server/model-store"
IMAGE_RUN_DIR = "/home/model-server/run"
IMAGE_CONFIG = "/etc/tsvk/config.properties"
IMAGE_PORT = 8080
IMAGE_ENV = {"PYTHONPATH": "/opt/tsvk", "TS_CONFIG_FILE": IMAGE_CONFIG, "TMPDIR": "/tmp", "XDG_CACHE_HOME": "/tmp/cache",
             "TORCHINDUCTOR_CACHE_DIR": "/tmp/torchinductor", "TRITON_CACHE_DIR": "/tmp/triton"}
# What `java -version`, dpkg and PATH say; a shell function, so every check asks the same way.
NO_JAVA_PROBE = (
    'echo "java on PATH: $(command -v java || echo none)"; '
    'echo "java -version:"; java -version 2>&1; echo "exit $?"; '
    f"echo \"java packages: $(dpkg-query -W -f='${{db:Status-Abbrev}} ${{Package}}\\n' | awk '$1 == \"ii\" {{print $2}}' "
    f"| grep -E -i '{'|'.join(JAVA_PACKAGE_WORDS)}' | tr '\\n' ' ' || true)\"; "
    'echo "/usr/lib/jvm: $(ls /usr/lib/jvm 2>/dev/null | tr \'\\n\' \' \' || true)"'
)


@dataclass
class Step:
    """One command as run: what, how long, its exit status and the end of its output."""

    name: str
    command: str
    seconds: float
    exit: int
    tail: list[str]

    @property
    def ok(self) -> bool:
        return self.exit == 0


@dataclass
class NoJava:
    """Where and when Java was looked for, and what was found (nothing, when it passes)."""

    where: str
    java_on_path: str
    java_version: list[str]
    java_version_exit: int
    java_packages: list[str]
    jvm_dir: list[str]

    @property
    def ok(self) -> bool:
        return self.java_on_path == "none" and self.java_version_exit != 0 and not self.java_packages and not self.jvm_dir


@dataclass
class Report:
    """Everything the result files say; `failures` empty means every check passed."""

    started: str
    revision: str
    base: dict
    host: dict
    steps: list[Step] = field(default_factory=list)
    no_java: list[NoJava] = field(default_factory=list)
    facts: dict = field(default_factory=dict)
    image: dict = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)

    def fail(self, why: str) -> None:
        print(f"[java-free-check] FAILED: {why}", flush=True)
        self.failures.append(why)


class CheckFailed(Exception):
    """A step whose failure leaves nothing sensible to run after it."""


class Container:
    """A long-lived container that each step runs a command in, all of it logged."""

    def __init__(self, engine: str, name: str, log: Path):
        self.engine, self.name, self.log = engine, name, log

    def start(self, image: str, mounts: list[str], env: dict[str, str]) -> None:
        # --init: a real machine's PID 1 reaps what the make targets' servers leave; `sleep` would not.
        volumes = [word for mount in mounts for word in ("--volume", mount)]
        variables = [word for key, value in env.items() for word in ("--env", f"{key}={value}")]
        run([self.engine, "run", "--detach", "--init", "--name", self.name, *volumes, *variables, image, "sleep", "infinity"])

    def sh(self, name: str, command: str, timeout: float = STEP_TIMEOUT_S) -> Step:
        """Run `command` in bash inside the container; the step, with the end of its output."""
        print(f"[java-free-check] {name}: {command}", flush=True)
        started = time.monotonic()
        with self.log.open("a") as log:  # written as it runs: `tail -f` the log to follow a long step
            log.write(f"\n===== {name}: {command}\n")
            log.flush()
            begins = log.tell()
            done = subprocess.run([self.engine, "exec", self.name, "bash", "-c", command], stdout=log, stderr=subprocess.STDOUT,
                                  timeout=timeout, check=False)
        with self.log.open() as log:
            log.seek(begins)
            output = log.read().splitlines()
        step = Step(name, command, round(time.monotonic() - started, 1), done.returncode, output[-TAIL_LINES:])
        print(f"[java-free-check]   exit {step.exit} after {step.seconds} s", flush=True)
        return step

    def copy_out(self, path: str, target: Path) -> None:
        run([self.engine, "cp", f"{self.name}:{path}", str(target)])

    def remove(self) -> None:
        subprocess.run([self.engine, "rm", "--force", self.name], capture_output=True, check=False)


def run(argv: list[str], timeout: float = 600) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise CheckFailed(f"{shlex.join(argv)} exited {done.returncode}: {done.stderr.strip()[-500:]}")
    return done.stdout


def utc_stamp() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def revision() -> str:
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.strip()
    return f"{head} (uncommitted changes are not in the clone)" if dirty else head


def host_facts(engine: str) -> dict:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    version = run([engine, "--version"]).strip()
    return {"cpu": cpu, "vcpus": os.cpu_count(), "container_engine": version, "kernel": platform.release()}


def image_facts(engine: str, image: str) -> dict:
    """An image's id, the commit it was built from (when labelled) and its size in bytes, as the engine reports them."""
    found = json.loads(run([engine, "image", "inspect", image]))[0]
    labels = found.get("Labels") or (found.get("Config") or {}).get("Labels") or {}
    return {"name": image, "id": found["Id"][:12], "revision": labels.get("org.opencontainers.image.revision"),
            "size_bytes": found["Size"], "size_gb": round(found["Size"] / 1e9, 2)}


def parse_no_java(where: str, step: Step) -> NoJava:
    """NO_JAVA_PROBE's lines: `key: value` for PATH, dpkg and /usr/lib/jvm; `java -version`'s output up to `exit N`."""
    said = {key: value for key, _, value in (line.partition(": ") for line in step.tail)}
    lines = step.tail[step.tail.index("java -version:") + 1:] if "java -version:" in step.tail else ["exit 0"]
    ended = next((i for i, line in enumerate(lines) if line.startswith("exit ")), len(lines) - 1)
    return NoJava(where, said.get("java on PATH", "?"), lines[:ended], int(lines[ended].split()[-1]),
                  said.get("java packages", "").split(), said.get("/usr/lib/jvm", "").split())


def check_no_java(container: Container, report: Report, where: str) -> None:
    found = parse_no_java(where, container.sh(f"no Java ({where})", NO_JAVA_PROBE, timeout=60))
    report.no_java.append(found)
    if not found.ok:
        report.fail(f"Java found {where}: {found}")


def step(container: Container, report: Report, name: str, command: str, required: bool = True) -> Step:
    done = container.sh(name, command)
    report.steps.append(done)
    if not done.ok:
        report.fail(f"{name}: `{command}` exited {done.exit}")
        if required:
            raise CheckFailed(name)
    return done


def in_checkout(command: str) -> str:
    return f"cd {CHECKOUT} && {command}"


def bare_machine(container: Container, report: Report, keep: Path) -> str:
    """Part 1; returns the name of the model the demo archived (kept in `keep` with the demo's photo)."""
    step(container, report, "install git, make, python3, python3-venv",
         f"apt-get update -qq && apt-get install -y -qq --no-install-recommends {' '.join(BARE_PACKAGES)} >/dev/null "
         "&& python3 --version && git --version && make --version | head -1")
    check_no_java(container, report, "before the first make")
    step(container, report, "clone the checkout", f"git -c safe.directory='*' clone --quiet {SOURCE} {CHECKOUT} "
         f"&& git -C {CHECKOUT} log -1 --format='%h %s'")
    demo = step(container, report, "make demo ENGINE=kserve", in_checkout("make demo ENGINE=kserve"))
    report.facts["demo_answer"] = last_json(demo.tail)
    check_no_java(container, report, "after make demo")
    model = demo_model(container, report)
    step(container, report, "make config", in_checkout(f"make config MODELS={model}"))
    step(container, report, "make serve ENGINE=kserve", in_checkout("make serve ENGINE=kserve"))
    try:
        check_no_java(container, report, "while the engine serves")
        report.facts["serving_processes"] = serving_processes(container)
        predicted = step(container, report, "make predict", in_checkout(f"make predict MODEL={model}"), required=False)
        report.facts["answer"] = last_json(predicted.tail)
        report.facts["status"] = step(container, report, "make status", in_checkout("make status"), required=False).tail
    finally:
        step(container, report, "make stop", in_checkout("make stop"), required=False)
    check_no_java(container, report, "after make stop")
    java_only_for_torchserve(container, report)
    report.facts["venv_mb"] = int(container.sh("venv size", in_checkout("du -sm .venv | cut -f1")).tail[-1])
    keep_for_the_image(container, model, keep)
    return model


def last_json(lines: list[str]) -> object:
    """The JSON object a command printed last (`tsvk predict` and the demo print the top-5 that way); None if none."""
    for start in range(len(lines) - 1, -1, -1):
        if lines[start].startswith("{"):
            try:
                return json.loads("\n".join(lines[start:]).split("\n}", 1)[0] + "\n}")
            except json.JSONDecodeError:
                continue
    return None


def demo_model(container: Container, report: Report) -> str:
    names = container.sh("the demo's archive", in_checkout("ls model_store/*.mar")).tail
    if len(names) != 1:
        report.fail(f"the demo left {len(names)} archives in model_store/, not one: {names}")
        raise CheckFailed("demo archive")
    report.facts["model"] = Path(names[0]).stem
    return report.facts["model"]


def serving_processes(container: Container) -> list[str]:
    """The programs running while the engine serves (the first words of each command line): no java among them."""
    listing = container.sh("processes while serving", "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done "
                           "| awk 'NF {print $1, $2, $3, $4}' | sort | uniq -c | sort -rn", timeout=60)
    return [line.strip() for line in listing.tail]


def java_only_for_torchserve(container: Container, report: Report) -> None:
    """What `make setup` installs is complete without Java; what TorchServe's targets add is Java."""
    building = container.sh("system-deps.sh --check", in_checkout("scripts/system-deps.sh --check"), timeout=60)
    torchserve = container.sh("system-deps.sh --torchserve --check", in_checkout("scripts/system-deps.sh --torchserve --check"),
                              timeout=60)
    report.facts["system_deps"] = {"building (make setup)": building.tail or ["nothing missing"],
                                   "--torchserve": torchserve.tail}
    if not building.ok:
        report.fail(f"`make setup` left building packages missing: {building.tail}")
    if torchserve.ok or "openjdk" not in " ".join(torchserve.tail):
        report.fail(f"scripts/system-deps.sh --torchserve --check does not name Java as missing: {torchserve.tail}")


def keep_for_the_image(container: Container, model: str, keep: Path) -> None:
    """The demo's archive and photo (scikit-image's chelsea, as JPEG) for the serving image to answer."""
    (keep / "store").mkdir(parents=True, exist_ok=True)
    container.copy_out(f"{CHECKOUT}/model_store/{model}.mar", keep / "store" / f"{model}.mar")
    container.sh("the demo's photo as JPEG", in_checkout(".venv/bin/python -c \"from skimage import data; from PIL import Image; "
                                                         "Image.fromarray(data.chelsea()).save('/root/chelsea.jpg', quality=90)\""))
    container.copy_out("/root/chelsea.jpg", keep / "chelsea.jpg")


def serving_image(engine: str, image: str, torchserve_image: str | None, keep: Path, model: str, report: Report, log: Path) -> None:
    """Part 2: the image's size, no Java in it, and the engine started in it as the chart starts it, answering a photo."""
    report.image["kserve"] = image_facts(engine, image)
    report.image["torchserve"] = present_image(engine, torchserve_image)
    if report.image["torchserve"]:
        report.image["kserve_over_torchserve"] = round(report.image["kserve"]["size_bytes"] / report.image["torchserve"]["size_bytes"], 3)
    look_inside(Container(engine, f"tsvk-java-free-image-{os.getpid()}", log), image, report)
    (keep / "config.properties").write_text(image_config(engine, image, model))
    report.image["run"] = run_engine_in_image(engine, image, keep, model, log)
    if report.image["run"].get("status") != 200:
        report.fail(f"the engine in {image} did not answer the photo: {report.image['run']}")


def look_inside(inside: Container, image: str, report: Report) -> None:
    """No Java and no TorchServe in the image; and where its size goes, from the report its build wrote."""
    try:
        inside.start(image, [], {})
        found = parse_no_java("in the serving image", inside.sh("no Java (in the serving image)", NO_JAVA_PROBE, timeout=60))
        report.no_java.append(found)
        if not found.ok:
            report.fail(f"Java found in {image}: {found}")
        torchserve = inside.sh("TorchServe absent", "python -c 'import ts' 2>&1 | tail -1; command -v torchserve || echo no torchserve",
                               timeout=60)
        report.image["torchserve_in_image"] = torchserve.tail
        if "no torchserve" not in torchserve.tail:
            report.fail(f"TorchServe is installed in {image}: {torchserve.tail}")
        # PyPI's torch brings its CUDA libraries: most of what is left.
        report.image["site_packages"] = inside.sh(
            "the image's own report", "grep -E 'CUDA libraries|site-packages MB after' /usr/share/tsvk/image-report.txt | tail -2",
            timeout=60).tail
    finally:
        inside.remove()


def present_image(engine: str, image: str | None) -> dict | None:
    if not image or subprocess.run([engine, "image", "exists", image], capture_output=True, check=False).returncode != 0:
        return None
    return image_facts(engine, image)


def image_config(engine: str, image: str, model: str) -> str:
    """The chart's config for one pod serving `model`, written by the image's own `tsvk config`."""
    words = ["python", "-m", "tsvk_tools.cli", "config", "--models", model, "--vcpus", "2", "--workers", "1", "--model-store",
             IMAGE_STORE, "--auth", "off", "--inference-address", f"http://0.0.0.0:{IMAGE_PORT}", "--no-archive-check",
             "--output", "/tmp/config.properties"]
    return run([engine, "run", "--rm", "--env", "PYTHONPATH=/opt/tsvk", image, "sh", "-c",
                f"{shlex.join(words)} >/dev/null && cat /tmp/config.properties"])


def run_engine_in_image(engine: str, image: str, keep: Path, model: str, log: Path) -> dict:
    """Started as the chart's kserve container is; the seconds until /ping answers, one photo's answer, the drain."""
    name, port, keep = f"tsvk-java-free-serve-{os.getpid()}", free_port(), keep.resolve()  # a volume's source must be absolute
    env = [word for key, value in IMAGE_ENV.items() for word in ("--env", f"{key}={value}")]
    argv = [engine, "run", "--detach", "--name", name, "--read-only", "--user", "10000:10000", "--tmpfs", "/tmp:rw,mode=1777",
            "--tmpfs", f"{IMAGE_RUN_DIR}:rw,mode=1777", "--volume", f"{keep / 'store'}:{IMAGE_STORE}:ro",
            "--volume", f"{keep / 'config.properties'}:{IMAGE_CONFIG}:ro", "--publish", f"127.0.0.1:{port}:{IMAGE_PORT}", *env,
            image, "python", "-m", "tsvk_tools.engines.container", "--config", IMAGE_CONFIG, "--run-dir", IMAGE_RUN_DIR,
            "--drain-timeout", str(DRAIN_S), "--engine", "kserve"]
    started = time.monotonic()
    run(argv)
    try:
        result = {"command": shlex.join(argv[argv.index(image):]), "ready": wait_ready(port)}
        result["seconds_to_ready"] = round(time.monotonic() - started, 1)
        if result["ready"]:
            result.update(ask(port, model, keep / "chelsea.jpg"))
        stopping = time.monotonic()
        run([engine, "stop", "--time", str(DRAIN_S + 10), name], timeout=DRAIN_S + 60)
        result["stop_s"] = round(time.monotonic() - stopping, 1)
        result["exit"] = int(run([engine, "inspect", "--format", "{{.State.ExitCode}}", name]).strip())
        return result
    finally:
        with log.open("a") as out:
            out.write(f"\n===== {name} logs\n" + subprocess.run([engine, "logs", name], capture_output=True, text=True,
                                                                  check=False).stdout)
        subprocess.run([engine, "rm", "--force", name], capture_output=True, check=False)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_ready(port: int) -> bool:
    deadline = time.monotonic() + SERVE_READY_S
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/ping", timeout=5) as answer:
                if answer.status == 200:
                    return True
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(1)
    return False


def ask(port: int, model: str, photo: Path) -> dict:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/predictions/{model}", data=photo.read_bytes(), method="POST",
                                     headers={"Content-Type": "application/octet-stream"})
    try:
        with urllib.request.urlopen(request, timeout=120) as answer:
            return {"status": answer.status, "answer": json.loads(answer.read())}
    except urllib.error.HTTPError as err:
        return {"status": err.code, "answer": err.read().decode(errors="replace")[:500]}


def write_atomically(path: Path, text: str) -> None:
    partial = path.with_name(path.name + ".part")
    partial.write_text(text)
    os.replace(partial, path)


def link_latest(target: Path, link: Path) -> None:
    partial = link.with_name(link.name + ".part")
    partial.unlink(missing_ok=True)
    partial.symlink_to(target.name)
    os.replace(partial, link)


def markdown(report: Report, commands: list[str]) -> str:
    """The result as a page: verdict, where it ran, each command with its time, the Java checks, what answered."""
    verdict = "every check passed" if not report.failures else f"**{len(report.failures)} check(s) failed**"
    lines = [f"# Java-free check, {report.started}", "", f"Revision {report.revision}: {verdict}.", "",
             f"Machine: {report.host['cpu']}, {report.host['vcpus']} vCPUs, {report.host['container_engine']}. "
             f"Bare machine: a fresh container of `{report.base['name']}` (image {report.base['id']}, "
             f"{report.base['size_gb']} GB), with only `{' '.join(BARE_PACKAGES)}` installed (apt, no recommends).", "",
             "Run as: `" + " ".join(commands) + "`", "", "| step | command | exit | seconds |", "| --- | --- | --- | --- |"]
    lines += [f"| {s.name} | `{s.command}` | {s.exit} | {s.seconds} |" for s in report.steps]
    lines += ["", "## Java looked for", "", "| where | `java` on PATH | `java -version` | Java packages (dpkg) | /usr/lib/jvm |",
              "| --- | --- | --- | --- | --- |"]
    lines += [f"| {j.where} | {j.java_on_path} | exit {j.java_version_exit}: {' '.join(j.java_version)} | "
              f"{' '.join(j.java_packages) or 'none'} | {' '.join(j.jvm_dir) or 'absent'} |" for j in report.no_java]
    lines += ["", "## What answered", ""] + [f"- {key}: `{json.dumps(value)}`" for key, value in report.facts.items()]
    lines += image_markdown(report.image)
    if report.failures:
        lines += ["", "## Failures", ""] + [f"- {why}" for why in report.failures]
    return "\n".join(lines) + "\n"


def image_markdown(image: dict) -> list[str]:
    """The serving images' sizes side by side, then the rest of what was found in and asked of the one without Java."""
    if not image:
        return []
    lines = ["", "## The serving image without Java", "", "| image | size (podman image inspect) |", "| --- | --- |"]
    for engine, what in (("kserve", "no Java, no TorchServe"), ("torchserve", "TorchServe, Java 17")):
        found = image.get(engine)
        lines.append(f"| `{found['name']}` ({what}) | {found['size_gb']} GB ({found['size_bytes']:,} bytes) |" if found
                     else f"| TorchServe's image ({what}) | not built here |")
    rest = {key: value for key, value in image.items() if key not in ("kserve", "torchserve")}
    return lines + [""] + [f"- {key}: `{json.dumps(value)}`" for key, value in rest.items()]


def write_results(report: Report, out: Path, stamp: str, commands: list[str]) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    record = {**asdict(report), "passed": not report.failures, "commands": commands}
    json_path, md_path = out / f"java-free-{stamp}.json", out / f"java-free-{stamp}.md"
    write_atomically(json_path, json.dumps(record, indent=2) + "\n")
    write_atomically(md_path, markdown(report, commands))
    link_latest(json_path, out / "java-free-latest.json")
    link_latest(md_path, out / "java-free-latest.md")
    return md_path


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="scripts/java-free-check.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", default="podman", help="the container engine: podman or docker (default podman)")
    parser.add_argument("--base", required=True, help="a Debian bookworm image, e.g. debian:bookworm-slim")
    parser.add_argument("--ca", type=Path, help="a CA bundle pip must trust (a TLS-intercepting proxy), mounted read-only")
    parser.add_argument("--image", help="the serving image without Java to measure and run (make image ENGINE=kserve)")
    parser.add_argument("--torchserve-image", help="the TorchServe image to compare sizes with, when it is built here")
    parser.add_argument("--output-dir", type=Path, default=ROOT / "benchmarks" / "results")
    return parser.parse_args(argv)


def container_settings(args: argparse.Namespace) -> tuple[list[str], dict[str, str]]:
    """The checkout, read-only; pip trusting --ca when given; no pip cache (the container is thrown away)."""
    mounts, env = [f"{ROOT}:{SOURCE}:ro"], {"DEBIAN_FRONTEND": "noninteractive", "PIP_NO_CACHE_DIR": "1"}
    if args.ca:
        mounts.append(f"{args.ca.resolve()}:{CA_IN_CONTAINER}:ro")
        env.update({"PIP_CERT": CA_IN_CONTAINER, "REQUESTS_CA_BUNDLE": CA_IN_CONTAINER, "SSL_CERT_FILE": CA_IN_CONTAINER})
    return mounts, env


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    stamp = utc_stamp()
    work = ROOT / "build" / "java-free"
    work.mkdir(parents=True, exist_ok=True)
    log = work / f"{stamp}.log"
    report = Report(started=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), revision=revision(),
                    base=image_facts(args.engine, args.base), host=host_facts(args.engine))
    commands = ["scripts/java-free-check.py", *(argv if argv is not None else sys.argv[1:])]
    container = Container(args.engine, f"tsvk-java-free-{stamp.lower()}", log)
    model = None
    try:
        container.start(args.base, *container_settings(args))
        model = bare_machine(container, report, work / stamp)
        if args.image:
            serving_image(args.engine, args.image, args.torchserve_image, work / stamp, model, report, log)
    except (CheckFailed, subprocess.TimeoutExpired) as err:
        if not report.failures:
            report.fail(str(err))
    finally:
        container.remove()
    print(f"[java-free-check] wrote {write_results(report, args.output_dir, stamp, commands)} (full output: {log})")
    return 0 if not report.failures else 1


if __name__ == "__main__":
    sys.exit(main())
