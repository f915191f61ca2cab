"""Every package the product imports is one its install declares: a plain `pip install tsvk` brings what the
product imports at once, and each optional import belongs to the extra its command's message names.

The product is tools/ but the lab, and handlers/ (the run-time package); the lab's own packages are the lab extra's.
"""

from __future__ import annotations

import ast
import configparser
import sys
from importlib.metadata import packages_distributions
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = (ROOT / "tools", ROOT / "handlers")
LAB = ROOT / "tools" / "lab"
OWN = {"tsvk", "tsvk_tools", "tests"}
# the modules a command imports only when asked for what needs them, and the extra that installs each
OPTIONAL = {"ts": "torchserve", "ray": "ray", "pyarrow": "parquet", "openvino": "openvino", "nncf": "openvino",
            "torchao": "int8", "torch_tensorrt": "gpu", "matplotlib": "tune"}
NOT_INSTALLED_HERE = {"torch_tensorrt": "torch-tensorrt"}  # the GPU extra's: its distribution by name


def _imported_modules() -> dict[str, str]:
    """Each third-party top-level module the product imports -> one file that imports it."""
    found = {}
    for root in PRODUCT:
        for path in root.rglob("*.py"):
            if path.is_relative_to(LAB):
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                    [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else []
                for top in {name.split(".")[0] for name in names} - OWN - set(sys.stdlib_module_names):
                    found.setdefault(top, str(path.relative_to(ROOT)))
    return found


def _declared() -> dict[str, set[str]]:
    """setup.cfg's requirements by distribution name: "" for install_requires, else the extra's name."""
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    groups = {"": config["options"]["install_requires"], **dict(config["options.extras_require"])}
    return {group: {Requirement(line).name.lower().replace("_", "-") for line in text.split("\n") if line.strip()}
            for group, text in groups.items()}


def _distribution(module: str) -> str:
    names = packages_distributions().get(module) or [NOT_INSTALLED_HERE[module]]
    return names[0].lower().replace("_", "-")


def test_every_product_import_is_declared_where_its_command_looks_for_it():
    declared = _declared()
    wrong = {module: f"{_distribution(module)} (imported by {where}) is not in {OPTIONAL.get(module) or 'install_requires'}"
             for module, where in _imported_modules().items() if _distribution(module) not in declared[OPTIONAL.get(module, "")]}
    assert wrong == {}


def test_no_optional_module_is_left_in_the_plain_install():
    """An extra's package in install_requires would make every user install it (torchserve would bring Java's engine)."""
    in_plain = {_distribution(module) for module in OPTIONAL} & _declared()[""]
    assert in_plain == set()
