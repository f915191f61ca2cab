"""Rewrite torchserve.configProperties in k8s/tsvk/values.yaml with a freshly generated config.

    python k8s/sync_default_config.py build/helm/config.properties

Only that block scalar changes; comments and the rest of values.yaml stay as they are. `make
helm-sync-default` generates the config for the chart's default values and runs this.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

VALUES = Path(__file__).parent / "tsvk" / "values.yaml"
BLOCK_START = re.compile(r"^(?P<indent> *)configProperties: \|\n", re.MULTILINE)


def replace_block(values_text: str, config_text: str) -> str:
    match = BLOCK_START.search(values_text)
    if match is None:
        raise ValueError(f"no 'configProperties: |' block in {VALUES}")
    body_indent = match.group("indent") + "  "
    lines = values_text[match.end():].splitlines(keepends=True)
    taken = 0
    for line in lines:  # the block runs while lines are blank or indented deeper than its key
        if line.strip() and not line.startswith(body_indent):
            break
        taken += 1
    while taken and not lines[taken - 1].strip():  # trailing blank lines belong to what follows
        taken -= 1
    body = "".join(body_indent + line if line.strip() else "\n" for line in config_text.splitlines(keepends=True))
    return values_text[: match.end()] + body + "".join(lines[taken:])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", type=Path, help="a config.properties written by `tsvk config`")
    args = parser.parse_args(argv)
    config = args.config.read_text()
    if not config.endswith("\n"):
        config += "\n"
    VALUES.write_text(replace_block(VALUES.read_text(), config))
    print(f"{VALUES}: torchserve.configProperties now holds {args.config}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
