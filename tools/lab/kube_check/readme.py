"""The README's deploy block: the commands a user runs to deploy, read from the README itself.

`make deploy-check` runs exactly these (the registry named by REGISTRY= replaced with the one it starts, and
the cluster step, helm-deploy, played with podman instead), and tests/unit/test_readme_deploy.py checks them
against the Makefile, so the block cannot drift from what was run.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

README = Path(__file__).resolve().parents[3] / "README.md"
SECTION = "## The deploy path"
CLUSTER_TARGET = "helm-deploy"  # the step that needs a cluster


def deploy_block(readme: Path = README) -> list[str]:
    """The first ```bash block of the README's deploy section, one command per line, comments dropped."""
    text = readme.read_text()
    start = text.find(SECTION)
    if start < 0:
        raise ValueError(f"{readme} has no '{SECTION}' section")
    match = re.search(r"```bash\n(.*?)```", text[start:], re.DOTALL)
    if match is None:
        raise ValueError(f"{readme}: '{SECTION}' has no ```bash block")
    commands = []
    for line in match.group(1).splitlines():
        words = shlex.split(line, comments=True)
        if words:
            commands.append(shlex.join(words))
    return commands


def make_target(command: str) -> str | None:
    """The target of a `make TARGET VAR=...` command; None for anything else."""
    words = shlex.split(command)
    if words[:1] != ["make"]:
        return None
    targets = [w for w in words[1:] if "=" not in w and not w.startswith("-")]
    return targets[0] if len(targets) == 1 else None


def make_variables(command: str) -> dict[str, str]:
    return dict(word.split("=", 1) for word in shlex.split(command)[1:] if "=" in word)


def with_registry(command: str, registry: str) -> str:
    """The command with its REGISTRY=... set to `registry` (the one the check runs), nothing else changed."""
    words = shlex.split(command)
    return shlex.join([f"REGISTRY={registry}" if w.startswith("REGISTRY=") else w for w in words])
