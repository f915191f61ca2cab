"""Checking a manifest against a CustomResourceDefinition's openAPIV3Schema the way an API server with strict field
validation does: the schema by `jsonschema`, and every field known to it."""

from __future__ import annotations

import gzip
import json
from pathlib import Path


def load_schema(path: Path) -> dict:
    """A schema stored as JSON, gzipped or not."""
    data = path.read_bytes()
    return json.loads(gzip.decompress(data) if path.suffix == ".gz" else data)


def unknown_fields(document, schema: dict, where: str = "") -> list[str]:
    """Fields the schema does not name, where it neither allows extra ones nor preserves unknown fields."""
    if isinstance(document, list):
        return [f for i, item in enumerate(document) for f in unknown_fields(item, schema.get("items", {}), f"{where}[{i}]")]
    if not isinstance(document, dict) or schema.get("x-kubernetes-preserve-unknown-fields"):
        return []
    known = schema.get("properties", {})
    extra = schema.get("additionalProperties")
    found = []
    for key, value in document.items():
        if key in known:
            found += unknown_fields(value, known[key], f"{where}.{key}")
        elif isinstance(extra, dict):
            found += unknown_fields(value, extra, f"{where}.{key}")
        elif not extra and known:
            found.append(f"{where}.{key}")
    return found
