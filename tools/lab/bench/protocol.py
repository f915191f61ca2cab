"""The Open Inference Protocol's REST against /predictions on tsvk's engine, with hey as the client.

Usage: tsvk bench protocol --archive model_store/resnet50.mar --rounds 6 --seconds 25 --concurrency 32
One engine (`tsvk serve --engine kserve`) serves the archive; each round sends hey's closed-loop load for the same
seconds to /predictions (the photo's bytes) and then to /v2/models/<model>/infer (the photo as base64 text in the
protocol's JSON), so drift in the machine's load hits both. hey is a compiled Go client: what it costs is small and
the same for both, so the ratio is the engine's. Each round also reads the CPU the engine's server and its workers
spent per answer. Writes benchmarks/results/<time>-protocol.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import psutil

from ... import defaults
from ...archive.build import BuildRequest
from ...archive.models import WEIGHTS_NONE
from ...archive.pack import build_archive
from ...arguments import positive_int
from ...engines.kserve.engine_process import start_engine
from ...errors import UsageError
from ...images import jpeg_bytes, photo_array
from ...measure.sampler import cpu_seconds
from ...config.ports import serving_on_free_ports
from ...config.serving_config import write_config
from .result_document import machine_info, write_json_and_markdown
from .systems.oip import rest_body

PATHS = ("predictions", "oip_rest")  # the ratio is the second's answers per second over the first's
_ANSWERED = re.compile(r"^\s*\[(\d{3})\]\s+(\d+) responses", re.MULTILINE)


def answers_by_status(hey_output: str) -> dict[int, int]:
    """hey's status code distribution: {status: responses}."""
    return {int(status): int(count) for status, count in _ANSWERED.findall(hey_output)}


def _engine_cpu(server: psutil.Process) -> tuple[float, float]:
    """CPU seconds so far of the engine's server process and of its workers (every descendant)."""
    return cpu_seconds(server) or 0.0, sum(cpu_seconds(child) or 0.0 for child in server.children(recursive=True))


def hey_round(url: str, content_type: str, body: Path, seconds: int, concurrency: int, server: psutil.Process) -> dict:
    """One closed-loop load of `seconds`: answers per second and the engine's CPU per answer."""
    before, started = _engine_cpu(server), time.monotonic()
    done = subprocess.run(["hey", "-z", f"{seconds}s", "-c", str(concurrency), "-m", "POST", "-T", content_type, "-D", str(body), url],
                          capture_output=True, text=True, check=True)
    wall, after = time.monotonic() - started, _engine_cpu(server)
    statuses = answers_by_status(done.stdout)
    answered = statuses.get(200, 0)
    per_answer = 1000 / max(answered, 1)
    return {"answers_per_s": round(answered / wall, 3), "answered": answered,
            "other_statuses": {s: n for s, n in statuses.items() if s != 200},
            "server_cpu_ms": round((after[0] - before[0]) * per_answer, 2),
            "workers_cpu_ms": round((after[1] - before[1]) * per_answer, 1)}


def summarize(rounds: list[dict]) -> dict:
    """Per path the median answers per second with its range and the median CPU per answer; the ratio per round."""
    summary = {}
    for path in PATHS:
        rates = [r[path]["answers_per_s"] for r in rounds]
        summary[path] = {"answers_per_s": statistics.median(rates), "min": min(rates), "max": max(rates),
                         "server_cpu_ms": statistics.median(r[path]["server_cpu_ms"] for r in rounds),
                         "workers_cpu_ms": statistics.median(r[path]["workers_cpu_ms"] for r in rounds)}
    ratios = [r[PATHS[1]]["answers_per_s"] / r[PATHS[0]]["answers_per_s"] for r in rounds]
    summary["ratio_per_round"] = [round(x, 3) for x in ratios]
    summary["ratio"] = round(statistics.median(ratios), 3)
    return summary


def render(result: dict) -> str:
    s = result["summary"]
    lines = [f"# OIP REST vs /predictions on tsvk's engine ({result['finished']})", "",
             f"`{result['command']}`: {result['archive']}, {result['rounds']} rounds of {result['seconds']} s per path at "
             f"concurrency {result['concurrency']}, client hey. Machine: {result['machine'].get('cpu', '?')}, "
             f"{result['machine'].get('vcpus', '?')} vCPUs.", "",
             "| path | answers/s, median (min-max) | server CPU-ms per answer | workers CPU-ms per answer |", "|---|---|---|---|"]
    for path in PATHS:
        p = s[path]
        lines.append(f"| {path} | {p['answers_per_s']:.2f} ({p['min']:.2f}-{p['max']:.2f}) | {p['server_cpu_ms']:.2f} | "
                     f"{p['workers_cpu_ms']:.1f} |")
    lines += ["", f"**{PATHS[1]} / {PATHS[0]}: {s['ratio']:.3f}** (median; per round {', '.join(map(str, s['ratio_per_round']))})", ""]
    return "\n".join(lines)


def run_rounds(archive: Path, rounds: int, seconds: int, concurrency: int, workdir: Path) -> list[dict]:
    """Serve `archive` on the engine and alternate the two paths, `rounds` times."""
    store = workdir / "store"
    store.mkdir()
    shutil.copy(archive, store / archive.name)
    model = archive.stem
    photo = jpeg_bytes(photo_array("chelsea"), size=(640, 480))
    bodies = {"predictions": workdir / "photo.jpg", "oip_rest": workdir / "body.json"}
    bodies["predictions"].write_bytes(photo)
    bodies["oip_rest"].write_bytes(rest_body(photo))
    request = serving_on_free_ports(model_store=store, models=(model,), auth=False)
    write_config(request, workdir / "config.properties")
    run = start_engine(workdir / "config.properties", workdir / "run")
    try:
        run.wait_ready([model], timeout=defaults.READY_TIMEOUT_S)
        base = run.url("inference")
        targets = {"predictions": (f"{base}/predictions/{model}", "image/jpeg"),
                   "oip_rest": (f"{base}/v2/models/{model}/infer", "application/json")}
        server = psutil.Process(run.pid)
        for path, (url, content_type) in targets.items():  # first calls: both paths warm before the first round
            hey_round(url, content_type, bodies[path], 2, 4, server)
        results = []
        for index in range(rounds):
            paths = {path: hey_round(*targets[path], bodies[path], seconds, concurrency, server) for path in PATHS}
            results.append({"round": index, **paths})
            print(json.dumps(results[-1]), flush=True)
        return results
    finally:
        run.stop(drain_timeout=5)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tsvk bench protocol", description=__doc__.splitlines()[0])
    parser.add_argument("--archive", type=Path, help="the archive served (default: --model built with random weights)")
    parser.add_argument("--model", default=defaults.MODEL, help=f"without --archive: a torchvision classifier (default {defaults.MODEL})")
    parser.add_argument("--rounds", type=positive_int, default=6)
    parser.add_argument("--seconds", type=positive_int, default=25, help="hey's load per path per round (default 25)")
    parser.add_argument("--concurrency", type=positive_int, default=32, help="requests in flight (default 32)")
    parser.add_argument("--output-dir", type=Path, default=Path("benchmarks/results"))
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.archive is not None and not args.archive.is_file():
        raise UsageError(f"--archive {args.archive}: no such file")
    if shutil.which("hey") is None:
        raise UsageError("hey is not installed: `apt-get install hey` (make test installs it)")
    with tempfile.TemporaryDirectory(prefix="tsvk-protocol-") as tmp:
        archive = args.archive or build_archive(BuildRequest(model=args.model, weights=WEIGHTS_NONE), Path(tmp) / "built")[0]
        rounds = run_rounds(archive.resolve(), args.rounds, args.seconds, args.concurrency, Path(tmp))
    stamp = datetime.now(timezone.utc)
    result = {"archive": str(archive), "rounds": args.rounds, "seconds": args.seconds, "concurrency": args.concurrency,
              "command": "tsvk bench protocol " + " ".join(argv if argv is not None else sys.argv[1:]),
              "finished": stamp.strftime("%Y-%m-%d %H:%M UTC"), "machine": machine_info(os.cpu_count() or 0),
              "rounds_raw": rounds, "summary": summarize(rounds)}
    write_json_and_markdown(result, render(result), args.output_dir, stamp, "protocol")
    return 0


if __name__ == "__main__":
    sys.exit(main())
