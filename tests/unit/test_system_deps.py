"""scripts/system-deps.sh: the one list of system packages, and what a user without root is told.

`make setup` runs the script for the packages building and tsvk's own engine need, no Java; the targets that start
TorchServe add Java with --torchserve; `make test` and .ci/run run it with --test, adding Java and the tests' own, so
what CI needs is what the README's two commands install. Without root (and
without sudo) it must stop at once with the single line to run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest


@pytest.fixture
def bare_dir():
    """A directory any user can use (pytest's tmp_path is private to root when the tests run as root)."""
    with tempfile.TemporaryDirectory(prefix="tsvk-system-deps-") as name:
        path = Path(name)
        path.chmod(0o777)
        yield path


ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "system-deps.sh"
TOOLS = ("bash", "env", "id", "grep", "sed", "cat")  # what the script itself runs; nothing it checks for


def _bare_path(tmp_path: Path) -> Path:
    """A PATH holding only the shell tools the script uses: java, hey, bwrap, sudo and python3 look missing."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in TOOLS:
        (bin_dir / tool).symlink_to(shutil.which(tool))
    apt_get = bin_dir / "apt-get"  # present, as on Debian, and records any call
    apt_get.write_text(f'#!{shutil.which("bash")}\necho "$@" >> {tmp_path}/apt-get-calls\n')
    apt_get.chmod(0o755)
    return bin_dir


def _run(tmp_path: Path, *args: str, user: int | None = None) -> subprocess.CompletedProcess:
    env = {"PATH": str(_bare_path(tmp_path)), "SYSTEM_PYTHON": "python-that-is-not-there"}
    prefix = [shutil.which("setpriv"), f"--reuid={user}", f"--regid={user}", "--clear-groups"] if user is not None else []
    script = shutil.copy(SCRIPT, tmp_path / SCRIPT.name)  # readable by the other user wherever the checkout lives
    return subprocess.run([*prefix, shutil.which("bash"), str(script), *args], env=env, capture_output=True, text=True, timeout=30)


BUILDING = ("python3-venv", "g++", "python3-dev")
JAVA = ("openjdk-17-jre-headless",)
SERVING = BUILDING + JAVA
TESTS_ONLY = ("bubblewrap", "hey", "curl", "libjemalloc2", "prometheus", "iproute2")


def test_check_names_every_missing_package_and_installs_nothing(bare_dir):
    result = _run(bare_dir, "--check", "--test")
    assert result.returncode == 1
    assert not (bare_dir / "apt-get-calls").exists()
    for package in SERVING + ("bubblewrap", "hey", "curl", "prometheus", "iproute2"):  # jemalloc: ldconfig may see the host's
        assert package in result.stderr


def _missing(result: subprocess.CompletedProcess) -> list[str]:
    return result.stderr.split("system packages missing: ", 1)[1].split(" (install with", 1)[0].split()


@pytest.mark.parametrize("words, packages", [((), BUILDING), (("--torchserve",), SERVING)], ids=["setup", "torchserve"])
def test_building_asks_for_no_java_and_torchserve_for_java_but_no_test_package(bare_dir, words, packages):
    result = _run(bare_dir, "--check", *words)
    assert result.returncode == 1
    assert _missing(result) == list(packages)


def test_an_unknown_argument_is_refused_with_the_usage(bare_dir):
    result = _run(bare_dir, "--tests")
    assert result.returncode == 2 and "usage: scripts/system-deps.sh [--torchserve] [--test] [--check]" in result.stderr


ASKED = [((), BUILDING), (("--torchserve",), SERVING), (("--test",), SERVING + TESTS_ONLY),
         (("--torchserve", "--test"), SERVING + TESTS_ONLY)]


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="switches to the user nobody: needs root and setpriv")
@pytest.mark.parametrize("words, packages", ASKED, ids=["setup", "torchserve", "test", "both"])
def test_without_root_or_sudo_it_stops_at_once_with_the_apt_line(bare_dir, words, packages):
    started = time.monotonic()
    result = _run(bare_dir, *words, user=65534)  # nobody
    elapsed = time.monotonic() - started
    assert result.returncode == 1, result.stderr
    install_lines = [line.strip() for line in result.stderr.splitlines() if "apt-get install" in line]
    expected = [p for p in packages if p != "libjemalloc2" or "libjemalloc2" in result.stderr]  # ldconfig may see the host's
    assert install_lines == ["apt-get install -y " + " ".join(expected)]
    assert result.stderr.startswith("tsvk needs system packages")
    assert elapsed < 1.0, f"took {elapsed:.2f} s"
    assert not (bare_dir / "apt-get-calls").exists()


def test_make_setup_and_ci_use_the_one_list():
    makefile = (ROOT / "Makefile").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    assert "scripts/system-deps.sh --test" in ci, "CI installs the tests' packages too"
    for target in ("test", "test-unit"):
        recipe = makefile.split(f"\n{target}:", 1)[1].split("\n\n", 1)[0]
        assert "scripts/system-deps.sh --test" in recipe.splitlines()[1], f"make {target} installs the tests' packages before pytest"
    for package in ("openjdk-17-jre-headless", "bubblewrap", "libjemalloc2", "apt-get"):
        assert package not in ci, f".ci/run names {package} itself instead of leaving it to scripts/system-deps.sh"
    assert makefile.split("$(VENV)/.tsvk-setup:", 1)[1].split()[0] == "$(VENV)/.tsvk-python"  # setup builds the venv first
    venv_recipe = makefile.split("$(VENV)/.tsvk-python:", 1)[1].split("\n\n", 1)[0]
    assert venv_recipe.splitlines()[1].split() == ["@scripts/system-deps.sh"], "the building packages, alone, come before the venv"
    assert "java" not in makefile.split("$(VENV)/.tsvk-setup:", 1)[1].split("\n\n", 1)[0], "make setup checks no Java"
