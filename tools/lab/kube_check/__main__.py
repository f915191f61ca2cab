"""`python -m tsvk_tools.lab.kube_check` (make kube-check): run the chart's pods with podman and record what they did.

Writes benchmarks/results/<UTC stamp>-kube-check.json and points kube-check-latest.json at it (with --engine kserve:
<UTC stamp>-kube-check-kserve.json and kube-check-kserve-latest.json).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import psutil

from ...archive.pack import handler_files_changed
from ...errors import UsageError
from ...processes import exit_on_sigterm
from ...images import image_bytes
from ... import defaults
from ...engines.registry import add_engine_argument, engine_named
from ...engines.torchserve.server import WORKER_MARKER, workers_below
from . import pod_drain as drain, load, pod as podlib
from .chart import REPO, render
from .check import check_variant, image_values, podman_gateway, serve_directory, start_host_baseline, variants
from .results import write_results

VARIANTS = ("default", "oip", "download")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tsvk_tools.lab.kube_check", description=__doc__)
    parser.add_argument("--image", default="tsvk/torchserve:0.12.0-cpu", help="the local image to run (make image)")
    parser.add_argument("--model", default="resnet50", help="the chart's model; model_store/<model>.mar must exist")
    add_engine_argument(parser, f"the chart's engine value, and the engine of the `make serve` baseline (default {defaults.ENGINE})")
    parser.add_argument("--photo", default="skimage:chelsea", help="the photo sent (a JPEG file or skimage:<name>)")
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated, of {', '.join(VARIANTS)}")
    parser.add_argument("--seconds", type=float, default=30, help="length of each throughput round")
    parser.add_argument("--rounds", type=int, default=2, help="throughput rounds, alternating pod and make serve")
    parser.add_argument("--concurrency", type=int, default=16, help="clients of the throughput rounds")
    parser.add_argument("--load", type=float, default=0.7, help="the drain's load, a fraction of the pod's throughput")
    parser.add_argument("--no-bench", action="store_true", help="skip throughput and the drain")
    parser.add_argument("--build-dir", type=Path, default=REPO / "build" / "kube")
    parser.add_argument("--results-dir", type=Path, default=REPO / "benchmarks" / "results")
    args = parser.parse_args(argv)
    unknown = set(args.variants.split(",")) - set(VARIANTS)
    if unknown:
        parser.error(f"--variants takes {', '.join(VARIANTS)}; got {', '.join(sorted(unknown))}")
    if not 0 < args.load < 1:
        parser.error(f"--load must be between 0 and 1, got {args.load}")
    return args


def machine() -> dict:
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor())
    return {"cpu": model, "vcpus": os.cpu_count(), "podman": podlib.podman("--version").stdout.strip()}


def worker_rss_mb(pid: int | None, marker: str = WORKER_MARKER) -> list[float]:
    """Resident memory of each TorchServe worker below process `pid`, in MB: the TorchServe this run started on the
    host, or the pod's container, whose processes this host sees too (read from here: a `podman exec` every
    sample would take CPU from the pod's side of the comparison)."""
    rss = []
    for worker in workers_below(pid, marker) if pid is not None else []:
        try:
            rss.append(round(worker.memory_info().rss / 2**20, 1))
        except psutil.Error:  # exited since it was listed
            continue
    return rss


def make_bench(args, host_url: str | None, photo: bytes, host_pid: int | None = None):
    """The default variant's extra: throughput through the pod vs `make serve`, then the drain."""
    def bench(pod, address, rendered):
        if host_url is None:
            return {}
        inference = rendered.config_properties()["inference_address"].rsplit(":", 1)[1]
        pod_url = f"http://{address}:{inference}/predictions/{args.model}"
        rounds, rss = {"pod": [], "make serve": []}, {"pod": [], "make serve": []}
        pod_pid = pod.state(rendered.server_name).get("Pid")
        marker = engine_named(args.engine).worker_marker
        sides = {"pod": (pod_url, lambda: worker_rss_mb(pod_pid, marker)),
                 "make serve": (host_url, lambda: worker_rss_mb(host_pid, marker))}
        for _ in range(args.rounds):
            for side, (url, workers_rss) in sides.items():
                measured, samples = load.throughput_with_memory(url, photo, args.seconds, args.concurrency, workers_rss)
                rounds[side].append(measured)
                rss[side] += samples
        medians = {k: statistics.median(r["throughput_ips"] or 0 for r in v) for k, v in rounds.items()}
        ratio = round(medians["pod"] / medians["make serve"], 3) if medians["make serve"] else None
        result = {"throughput": {"rounds": rounds, "median_ips": medians, "pod_vs_make_serve": ratio,
                                 "goal": 0.95, "seconds": args.seconds, "concurrency": args.concurrency},
                  "worker_rss_mb": worker_memory(rss)}
        result["drain"] = drain.measure(pod, rendered, pod_url, photo, rate=args.load * medians["pod"])
        return result
    return bench


def worker_memory(samples: dict[str, list[float]]) -> dict:
    """The workers' RSS under load, pod vs `make serve`: medians, ranges, and whether the pod's is no larger
    (its median within `make serve`'s own range or below)."""
    summary = {side: load.memory_summary(values) for side, values in samples.items()}
    pod, host = summary["pod"], summary["make serve"]
    if pod["samples"] and host["samples"]:
        summary["pod_vs_make_serve"] = round(pod["median"] / host["median"], 3)
        summary["pod_no_larger"] = pod["median"] <= host["max"]
    summary["sampled_every_s"] = load.RSS_SAMPLE_S
    return summary


def run(args) -> dict:
    if not podlib.image_exists(args.image):
        raise UsageError(f"no local image {args.image}: build it with `make image` (k8s/README.md)")
    archive = REPO / "model_store" / f"{args.model}.mar"
    if not archive.is_file():
        raise UsageError(f"{archive} not found: build it with `make archive MODEL={args.model}` (WEIGHTS=none offline)")
    photo = image_bytes(args.photo)
    digest = podlib.image_digest(args.image)
    gateway = podman_gateway()
    podlib.keep_bridge_up(args.image)
    server, port = serve_directory(archive.parent, gateway)
    sha256 = hashlib.sha256(archive.read_bytes()).hexdigest()
    chosen = variants(f"http://{gateway}:{port}/{archive.name}", f"{gateway}/32", port, args.model, sha256, args.engine)
    host = None if args.no_bench else start_host_baseline(archive, args.build_dir, args.model, args.engine)
    report = {"image": args.image, "digest": digest, "engine": args.engine, "model": args.model,
              "archive_handler_changed": stale_handler(archive),
              "variants": {}}
    try:
        for name in args.variants.split(","):
            rendered = render(chosen[name], args.build_dir, image_values(args.image, digest))
            bench = make_bench(args, host[1] if host and name == "default" else None, photo, host[0].pid if host else None)
            print(f"[kube-check] {name}: playing {rendered.deployment['metadata']['name']}", flush=True)
            report["variants"][name] = check_variant(rendered, archive, photo, args.model, args.build_dir, bench)
            print_variant(name, report["variants"][name])
    finally:
        server.shutdown()
        podlib.let_bridge_down()
        if host:
            host[0].stop()
    return report


def stale_handler(archive: Path) -> list[str]:
    """The handler files the archive bundles that differ from this checkout's, said out loud: the pod and `make serve`
    both serve the archive's copy, so the check measures the handler the archive was built with."""
    changed = handler_files_changed(archive)
    if changed:
        model = archive.stem
        print(f"[kube-check] NOTE: {archive} was built from another version of the handler ({', '.join(changed[:4])}"
              f"{', ...' if len(changed) > 4 else ''}); both sides serve that one. To check this checkout's handler: "
              f"make archive MODEL={model} FORCE=1 (WEIGHTS=none offline)", flush=True)
    return changed


def print_variant(name: str, result: dict) -> None:
    for check in result.get("checks", []):
        print(f"[kube-check] {name}: {'PASS' if check['ok'] else 'FAIL'} {check['name']}: {check['detail'][:160]}")
    if result.get("cold_start_s") is not None:
        print(f"[kube-check] {name}: cold start (pod created -> ready) {result['cold_start_s']} s")
    if "throughput" in result:
        t = result["throughput"]
        print(f"[kube-check] {name}: throughput pod {t['median_ips']['pod']} img/s, make serve "
              f"{t['median_ips']['make serve']} img/s: {t['pod_vs_make_serve']}x (goal >= {t['goal']})")
    if "worker_rss_mb" in result:
        m = result["worker_rss_mb"]
        print(f"[kube-check] {name}: workers' RSS under load (MB, median [range] of {m['pod']['samples']} and "
              f"{m['make serve']['samples']} samples): pod {m['pod'].get('median')} [{m['pod'].get('min')}-{m['pod'].get('max')}], "
              f"make serve {m['make serve'].get('median')} [{m['make serve'].get('min')}-{m['make serve'].get('max')}]: "
              f"{m.get('pod_vs_make_serve')}x, pod no larger: {m.get('pod_no_larger')}")
    if "drain" in result:
        d = result["drain"]
        print(f"[kube-check] {name}: stop under load {'PASS' if d['ok'] else 'FAIL'}: exit {d['exit_s']} s, "
              f"before SIGTERM {d['sent_before_sigterm']}, after {d['sent_after_sigterm']}")
        for problem in d["problems"]:
            print(f"[kube-check] {name}:   {problem}")


def passed(report: dict) -> bool:
    for result in report["variants"].values():
        if not result.get("checks") or not all(c["ok"] for c in result["checks"]):
            return False
        if "drain" in result and not result["drain"]["ok"]:
            return False
        if "throughput" in result and result["throughput"]["pod_vs_make_serve"] is None:
            return False  # a side answered nothing (say, `make serve` refused the archive): no comparison was made
    return True


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    exit_on_sigterm()  # a stop (make's, a CI's) still removes the pods and stops the host's server it started
    started = time.time()
    try:
        report = run(args)
    except UsageError as err:
        print(f"kube-check: {err}", file=sys.stderr)
        return 2
    command = "make kube-check" + ("" if args.engine == defaults.ENGINE else f" ENGINE={args.engine}")
    report.update({"machine": machine(), "command": command, "wall_s": round(time.time() - started, 1),
                   "passed": passed(report)})
    path = write_results(report, args.results_dir, started, "kube-check" if args.engine == defaults.ENGINE else f"kube-check-{args.engine}")
    print(f"[kube-check] {'PASSED' if report['passed'] else 'FAILED'}; wrote {path}")
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
