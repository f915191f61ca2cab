"""helm lint --strict, and a values schema that describes every value the chart ships."""

from __future__ import annotations

import json

import pytest
import yaml
from tests.support.helm_scenarios import SCENARIOS
from tests.support.helm import CHART, run_helm

pytestmark = pytest.mark.helm


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_helm_lint_strict_passes(helm, name):
    args = ["lint", "--strict", str(CHART), "--namespace", "ml"]
    values = SCENARIOS[name]
    result = run_helm(helm, args + (["--values", "-"] if values else []), values)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 chart(s) failed" in result.stdout
    assert "[WARNING]" not in result.stdout and "[ERROR]" not in result.stdout


def test_chart_is_api_v2_with_the_scaffold_files():
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2"
    assert chart["appVersion"] == "0.12.0"
    for path in ("templates/_helpers.tpl", "templates/NOTES.txt", "templates/tests", "values.schema.json", ".helmignore"):
        assert (CHART / path).exists(), path


def test_every_helper_defined_is_used():
    helpers = (CHART / "templates" / "_helpers.tpl").read_text()
    defined = {line.split('"')[1] for line in helpers.splitlines() if line.startswith('{{- define "')}
    templates = "\n".join(p.read_text() for p in (CHART / "templates").rglob("*") if p.is_file())
    for name in defined:
        assert templates.count(f'"{name}"') > 1, f"helper {name} is defined but never included"


def _leaves(values, path=()):
    if isinstance(values, dict) and values:
        for key, value in values.items():
            yield from _leaves(value, path + (key,))
    else:
        yield path


def _schema_at(schema, path):
    node = schema
    for key in path:
        assert node.get("type") == "object", f"{'.'.join(path)}: {key} sits under a non-object schema"
        properties = node.get("properties", {})
        if key in properties:
            node = properties[key]
        elif isinstance(node.get("additionalProperties"), dict):
            return node  # a free-form map (labels, nodeSelector): described as a whole
        else:
            raise AssertionError(f"{'.'.join(path)} is in values.yaml but not in values.schema.json")
    return node


def test_schema_describes_every_value():
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    schema = json.loads((CHART / "values.schema.json").read_text())
    for path in _leaves(values):
        node = schema
        for depth in range(1, len(path) + 1):
            node = _schema_at(schema, path[:depth])
            assert node.get("description"), f"{'.'.join(path[:depth])} has no description in values.schema.json"
            if "properties" not in node:
                break


def test_schema_has_no_key_missing_from_values():
    """The reverse direction: a key described but absent from values.yaml is a default nobody sees."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    schema = json.loads((CHART / "values.schema.json").read_text())

    def walk(node, value, path):
        for key, sub in node.get("properties", {}).items():
            if key == "global":
                continue
            assert key in value, f"{'.'.join(path + (key,))} is in the schema but not in values.yaml"
            if sub.get("type") == "object" and "properties" in sub:
                walk(sub, value[key], path + (key,))

    walk(schema, values, ())


def test_values_keys_are_camel_case():
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    free_form = {"nodeSelector", "labels", "annotations", "podAnnotations", "podLabels", "resources", "requests", "limits"}

    def walk(node, parent=""):
        if isinstance(node, dict) and parent not in free_form:
            for key, value in node.items():
                assert key[0].islower() and "_" not in key and "-" not in key, f"{key} is not camelCase"
                walk(value, key)

    walk(values)


def test_chart_refuses_kubernetes_older_than_the_validated_1_29(helm):
    old = run_helm(helm, ["template", "demo", str(CHART), "--kube-version", "1.28.0"])
    assert old.returncode != 0 and "kubeVersion" in old.stderr
    assert run_helm(helm, ["template", "demo", str(CHART), "--kube-version", "1.29.0"]).returncode == 0
