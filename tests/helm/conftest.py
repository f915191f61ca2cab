"""Fixtures for the chart tests: a real helm binary, real rendering, real Kubernetes schemas.

Where helm or kubernetes-validate is missing the tests skip with the fix in the reason, except under
CI=true, where a missing tool is a failure: CI must run them (make helm-install-tools installs both).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.helm import (
    CHART,
    NAMESPACE,
    RELEASE,
    Rendered,
    find_helm,
    helm_args,
    missing_tool,
    parse_manifests,
    run_helm,
)


@pytest.fixture(scope="session")
def helm() -> Path:
    path = find_helm()
    if path is None:
        missing_tool("helm binary (HELM, .bin/helm or PATH)")
    return path


@pytest.fixture(scope="session")
def kubernetes_versions() -> tuple[str, ...]:
    """1.29, the oldest version the chart supports, and the newest one kubernetes-validate carries."""
    try:
        from kubernetes_validate import utils
    except ImportError:
        missing_tool("kubernetes-validate (Python package)")
    return ("1.29", utils.major_minor(utils.latest_version()))


@pytest.fixture(scope="session")
def render(helm):
    """render(values, files) -> Rendered; values go in as a values file on stdin, files with --set-file."""

    def _render(values: dict | None = None, files: dict[str, Path] | None = None) -> Rendered:
        args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE, *helm_args(values, files)]
        result = run_helm(helm, args, values)
        assert result.returncode == 0, f"helm template failed:\n{result.stderr}"
        documents = parse_manifests(result.stdout)
        return Rendered(documents, result.stdout)

    return _render


@pytest.fixture(scope="session")
def render_error(helm):
    """render_error(values, files) -> helm's error text; fails the test when rendering succeeds."""

    def _render_error(values: dict | None = None, files: dict[str, Path] | None = None) -> str:
        args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE, *helm_args(values, files)]
        result = run_helm(helm, args, values)
        assert result.returncode != 0, "helm template succeeded where the chart should have refused the values"
        return result.stderr

    return _render_error
