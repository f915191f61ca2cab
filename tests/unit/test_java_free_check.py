"""scripts/java-free-check.py: how it tells Java is there, and what it leaves behind.

`make java-free-check` itself needs a container engine, a Debian base and an hour (its committed result,
benchmarks/results/java-free-latest.json, says when it last passed); here its probe is run by the real bash on
made-up machines, and its result files are written as a run writes them.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("java_free_check", ROOT / "scripts" / "java-free-check.py")
check = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = check  # dataclasses look their module up by name
spec.loader.exec_module(check)


def _fake(bin_dir: Path, name: str, body: str) -> None:
    (bin_dir / name).write_text(f"#!{shutil.which('bash')}\n{body}\n")
    (bin_dir / name).chmod(0o755)


def _probe(tmp_path: Path, java: str | None, dpkg_lines: str = "") -> check.NoJava:
    """NO_JAVA_PROBE run by bash on a made-up machine: PATH holds a fake dpkg-query, a java when given, and an `ls`
    that finds no /usr/lib/jvm (this machine may have one)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("awk", "grep", "tr"):
        (bin_dir / tool).symlink_to(shutil.which(tool))
    _fake(bin_dir, "dpkg-query", f"printf '{dpkg_lines}'")
    _fake(bin_dir, "ls", "exit 2")
    if java is not None:
        _fake(bin_dir, "java", f"echo '{java}' >&2")
    done = subprocess.run([shutil.which("bash"), "-c", check.NO_JAVA_PROBE], env={"PATH": str(bin_dir)}, capture_output=True,
                          text=True, timeout=30)
    return check.parse_no_java("here", check.Step("probe", "", 0.0, done.returncode, done.stdout.splitlines()))


def test_a_machine_without_java_passes_and_says_what_java_answered(tmp_path):
    found = _probe(tmp_path, None, "ii  python3\\nii  make\\n")
    assert found.ok
    assert found.java_on_path == "none" and found.java_version_exit == 127 and found.java_packages == []
    assert any("java" in line and "not found" in line for line in found.java_version)


@pytest.mark.parametrize("java, packages, why", [
    ("openjdk version \"17.0.17\"", "ii  make\\n", "a java on PATH"),
    (None, "ii  openjdk-17-jre-headless\\nii  make\\n", "a JRE package installed"),
], ids=["on-path", "package"])
def test_java_on_path_or_in_dpkg_fails(tmp_path, java, packages, why):
    found = _probe(tmp_path, java, packages)
    assert not found.ok, why


def test_a_package_only_known_to_dpkg_is_not_counted(tmp_path):
    """Removed packages keep a line in dpkg's database ("rc"): only installed ones ("ii") count."""
    assert _probe(tmp_path, None, "rc  openjdk-17-jre-headless\\n").ok


def test_results_are_written_whole_and_the_latest_links_move(tmp_path):
    report = check.Report(started="2026-11-29 12:00 UTC", revision="abc1234", base={"name": "b", "id": "1", "size_gb": 0.1},
                          host={"cpu": "c", "vcpus": 2, "container_engine": "podman"})
    report.steps.append(check.Step("make demo ENGINE=kserve", "make demo ENGINE=kserve", 1.0, 0, ["ok"]))
    first = check.write_results(report, tmp_path, "20261129T120000Z", ["scripts/java-free-check.py"])
    report.fail("the engine did not answer")
    check.write_results(report, tmp_path, "20261129T130000Z", ["scripts/java-free-check.py"])
    assert first.read_text().startswith("# Java-free check") and "every check passed" in first.read_text()
    latest = json.loads((tmp_path / "java-free-latest.json").read_text())
    assert latest["passed"] is False and latest["failures"] == ["the engine did not answer"]
    assert (tmp_path / "java-free-latest.md").resolve().name == "java-free-20261129T130000Z.md"
    assert not list(tmp_path.glob("*.part"))


def test_make_passes_the_base_the_ca_and_both_images():
    done = subprocess.run(["make", "--no-print-directory", "-n", "java-free-check", "BASE=localhost/base", "BUILD_CA=/ca.pem"],
                          cwd=ROOT, capture_output=True, text=True, check=True)
    line = next(line for line in done.stdout.replace("\\\n", " ").splitlines() if "scripts/java-free-check.py" in line)
    assert "--base localhost/base" in line and "--ca /ca.pem" in line
    assert "--image tsvk/torchserve:0.12.0-cpu-kserve" in line and "--torchserve-image tsvk/torchserve:0.12.0-cpu" in line


def test_the_page_puts_the_two_images_side_by_side_and_says_when_one_was_not_built():
    image = {"kserve": {"name": "tsvk/torchserve:0.12.0-cpu-kserve", "size_gb": 4.75, "size_bytes": 4_746_142_093},
             "torchserve": None, "run": {"status": 200}}
    lines = check.image_markdown(image)
    assert "| `tsvk/torchserve:0.12.0-cpu-kserve` (no Java, no TorchServe) | 4.75 GB (4,746,142,093 bytes) |" in lines
    assert "| TorchServe's image (TorchServe, Java 17) | not built here |" in lines
    assert '- run: `{"status": 200}`' in lines
    assert check.image_markdown({}) == []
