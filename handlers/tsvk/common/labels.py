"""Class index -> label, from TorchServe's index_to_name.json.

Both shapes TorchServe uses are read: {"0": "tench"} and {"0": ["n01440764", "tench"]} (the last
element is the name). Without the file, labels are the index strings, as TorchServe does.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

log = logging.getLogger(__name__)


def load_labels(path: Path) -> list[str] | None:
    """Labels by class index, or None when the archive carries no label file."""
    if not path.is_file():
        log.warning("no label file %s; answers will use class indices as labels", path.name)
        return None
    raw = json.loads(path.read_text())
    if not isinstance(raw, dict):
        raise ValueError(f"{path.name} must map class index to name, like {{\"0\": \"tench\"}}; got {type(raw).__name__}")
    return labels_from_mapping(raw)


def labels_from_mapping(raw: dict) -> list[str]:
    """A dense list; indices missing from the file keep their index string."""
    by_index = {int(key): _name(value) for key, value in raw.items()}
    size = max(by_index) + 1 if by_index else 0
    return [by_index.get(index, str(index)) for index in range(size)]


def label_for(labels: list[str] | None, index: int) -> str:
    if labels is not None and 0 <= index < len(labels):
        return labels[index]
    return str(index)


def _name(value) -> str:
    if isinstance(value, (list, tuple)) and value:
        return str(value[-1])
    return str(value)
