"""`make chart-scan`: checkov, a policy scanner nobody here wrote, on every variant of the rendered chart.

Each variant is rendered with a namespace and an image digest, as a pinned release is deployed; the
scan passes when checkov reports no failed check on any of them. checkov is not a project dependency:
install it into a venv of its own (k8s/README.md, "How the chart is checked").
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from .chart import REPO

HELM = REPO / ".bin" / "helm"
CHART = REPO / "k8s" / "tsvk"
NAMESPACE = "tsvk"
EXAMPLE_DIGEST = "sha256:" + "0" * 64
ARCHIVE = {"name": "resnet50", "url": "https://models.example.com/resnet50.mar", "sha256": "0" * 64}
# name -> (make helm-config variables, helm arguments): the config each variant's pods need, and its values.
VARIANTS: dict[str, tuple[list[str], list[str]]] = {
    "default": ([], []),
    "oip": (["HELM_PROTOCOL=oip"], ["--set", "protocol=oip"]),
    "download": ([], ["--set", "modelStore.source=download",
                      "--set", f"modelStore.download.archives[0].name={ARCHIVE['name']}",
                      "--set", f"modelStore.download.archives[0].url={ARCHIVE['url']}",
                      "--set", f"modelStore.download.archives[0].sha256={ARCHIVE['sha256']}",
                      "--set", "networkPolicy.downloadTo[0].ipBlock.cidr=203.0.113.7/32"]),
    "gpu": (["HELM_GPUS=1"], ["--set", "gpu.enabled=true", "--set", "gpu.count=1"]),
}


def config(name: str, make_vars: list[str], out: Path) -> list[str]:
    """The config `make helm-config` writes for this variant's pods, as a --set-file argument."""
    build = out / name
    result = subprocess.run(["make", "--no-print-directory", "-s", "helm-config", f"HELM_BUILD={build}",
                             f"HELM_MODELS={ARCHIVE['name']}", *make_vars],
                            cwd=REPO, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"chart-scan: make helm-config {' '.join(make_vars)} failed: {result.stderr.strip()}")
    return ["--set-file", f"torchserve.configProperties={build / 'config.properties'}"]


def render(name: str, make_vars: list[str], extra: list[str], out: Path) -> Path:
    manifest = out / f"{name}.yaml"
    extra = extra + config(name, make_vars, out)
    args = [str(HELM), "template", "tsvk", str(CHART), "--namespace", NAMESPACE, "--set", f"image.digest={EXAMPLE_DIGEST}", *extra]
    result = subprocess.run(args, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"chart-scan: rendering {name} failed: {result.stderr.strip()}")
    manifest.write_text(result.stdout)
    return manifest


def scan(checkov: str, manifest: Path) -> dict:
    result = subprocess.run([checkov, "-f", str(manifest), "--framework", "kubernetes", "--output", "json", "--quiet",
                             "--skip-download"], capture_output=True, text=True)
    try:
        report = json.loads(result.stdout)
    except json.JSONDecodeError:
        raise SystemExit(f"chart-scan: checkov gave no JSON ({result.returncode}): {result.stderr.strip()[-500:]}") from None
    report = report[0] if isinstance(report, list) else report
    summary = report.get("summary", {})
    failed = [f"{c['check_id']} {c['resource']}" for c in report.get("results", {}).get("failed_checks", [])]
    return {"passed": summary.get("passed", 0), "failed": failed}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tsvk_tools.lab.kube_check.scan", description=__doc__)
    parser.add_argument("--checkov", default=str(REPO / ".checkov-venv" / "bin" / "checkov"))
    parser.add_argument("--out", type=Path, default=REPO / "build" / "chart-scan")
    args = parser.parse_args(argv)
    if not Path(args.checkov).exists():
        print(f"chart-scan: no checkov at {args.checkov}: python3 -m venv .checkov-venv && .checkov-venv/bin/pip install checkov",
              file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    failures = 0
    for name, (make_vars, extra) in VARIANTS.items():
        found = scan(args.checkov, render(name, make_vars, extra, args.out))
        failures += len(found["failed"])
        print(f"chart-scan {name}: {found['passed']} passed, {len(found['failed'])} failed")
        for failed in found["failed"]:
            print(f"  FAILED {failed}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
