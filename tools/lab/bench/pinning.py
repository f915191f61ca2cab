"""Does core pinning (TorchServe's CPU launcher, one instance per worker) help? Measured, not assumed.

Usage: tsvk bench pinning --model resnet18 --workers 2 --rounds 2
Serves the same archive with the same generated config twice per round, pinning off and on,
alternating so drift in the machine's load hits both, and prints throughput and p99 side by side.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

from ... import defaults
from ...archive.pack import build_archive
from ...archive.build import BuildRequest
from ...images import SKIMAGE_PHOTOS, jpeg_bytes, photo_array
from ...archive.models import WEIGHTS_NONE
from ...config.ports import serving_on_free_ports
from ...engines.torchserve.server import start_torchserve
from ...config.serving_config import write_config
from ...measure.loadgen import HttpTarget, run_closed_loop, summarize_records


def serve_and_measure(store: Path, model: str, workers: int, pinning: bool, requests: int, concurrency: int, workdir: Path) -> dict:
    request = serving_on_free_ports(workers=workers, model_store=store, auth=False, core_pinning=pinning)
    config = workdir / "config.properties"
    plan = write_config(request, config)
    run = start_torchserve(config, workdir / "run")
    try:
        run.wait_ready(timeout=defaults.READY_TIMEOUT_S)
        photos = [jpeg_bytes(photo_array(name), size=(640, 480)) for name in SKIMAGE_PHOTOS]
        target = HttpTarget(url=f"{run.url('inference')}/predictions/{model}", make_body=lambda b: b)
        run_closed_loop(target, photos, total=max(4, concurrency), concurrency=concurrency)  # warm-up
        summary = summarize_records(run_closed_loop(target, photos, total=requests, concurrency=concurrency))
    finally:
        run.stop()
    summary["threads_per_worker"] = plan.models[0].intra_op_threads
    return summary


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tsvk bench pinning", description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=defaults.MODEL, help=f"a torchvision classification builder (default {defaults.MODEL})")
    parser.add_argument("--workers", type=int, default=2, help="workers of the model (default 2)")
    parser.add_argument("--requests", type=int, default=120)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    results: dict[bool, list[dict]] = {False: [], True: []}
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "store"
        build_archive(BuildRequest(model=args.model, weights=WEIGHTS_NONE), store)
        for round_index in range(args.rounds):
            for pinning in (False, True):
                workdir = Path(tmp) / f"r{round_index}-{'pinned' if pinning else 'free'}"
                workdir.mkdir()
                summary = serve_and_measure(store, args.model, args.workers, pinning, args.requests, args.concurrency, workdir)
                results[pinning].append(summary)
                print(f"round {round_index} pinning={'on ' if pinning else 'off'}: {summary['throughput_ips']} img/s, "
                      f"p99 {summary['latency_ms']['p99']} ms, errors {summary['errors']}", flush=True)
    free, pinned = (statistics.median(r["throughput_ips"] for r in results[p]) for p in (False, True))
    print(f"\n{args.model}, {args.workers} workers x {results[False][0]['threads_per_worker']} thread(s), concurrency {args.concurrency}: "
          f"median {free:.1f} img/s unpinned vs {pinned:.1f} img/s pinned -> pinned/unpinned = {pinned / free:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
