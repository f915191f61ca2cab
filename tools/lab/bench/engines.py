"""The two engines side by side on one archive: cold start (process start to the first answer) and the whole
server's memory (every process of it), for the same workers.

Usage: tsvk bench engines --model resnet18 --workers 2 --rounds 3
Each round starts TorchServe and then tsvk's engine (`tsvk serve --engine kserve`) on the same generated config
(other ports), in alternating order, so drift in the machine's load hits both. Cold start runs from the moment the
server process is started until a photo sent to /predictions every 50 ms is first answered 200. Memory is the sum of
the proportional set size (PSS: shared pages split between the processes that map them) of every process in the
server's process group, read after warm-up requests. Each round also times a fresh interpreter importing what the
kserve engine's fork server preloads, with and without torchvision: the floor under the engine's cold start.
Writes benchmarks/results/<time>-engines.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from datetime import datetime, timezone
from pathlib import Path

import psutil

from ... import defaults
from ...archive.pack import build_archive
from ...archive.build import BuildRequest
from ...archive.models import WEIGHTS_NONE
from ...engines.registry import engine_names, engine_named
from ...engines.kserve.forkserver import PRELOAD
from ...images import jpeg_bytes, photo_array
from ...config.ports import serving_on_free_ports
from ...config.serving_config import write_config
from .result_document import machine_info, write_json_and_markdown

ENGINES = engine_names()
POLL_S = 0.05
WARM_REQUESTS = 20
IMPORTS = "imports"  # the rounds' rows that time the imports, beside the engines' rows
WITHOUT_TORCHVISION = tuple(name for name in PRELOAD if name.split(".")[0] != "torchvision")
IMPORT_FIGURES = {"import_preload_s": PRELOAD, "import_without_torchvision_s": WITHOUT_TORCHVISION}


def measure(engine: str, store: Path, model: str, workers: int, workdir: Path) -> dict:
    """One start of one engine: seconds to the first answer, and the group's memory once warm."""
    request = serving_on_free_ports(workers=workers, model_store=store, auth=False, vcpus=workers)
    config = workdir / "config.properties"
    write_config(request, config)
    photo = jpeg_bytes(photo_array("chelsea"), size=(640, 480))
    url = f"{request.inference_address}/predictions/{model}"
    started = time.monotonic()
    run = engine_named(engine).start(config, workdir / "run")
    try:
        cold_start_s = _first_answer(url, photo, started, run)
        for _ in range(WARM_REQUESTS):
            _post(url, photo)
        time.sleep(1.0)
        memory = group_memory_mib(run.pid)
    finally:
        run.stop(drain_timeout=5)
    return {"engine": engine, "cold_start_s": round(cold_start_s, 2), **memory}


def import_seconds(modules: tuple[str, ...]) -> float:
    """Seconds from starting a fresh interpreter to the end of its imports of `modules` (what any process that
    needs them pays before its first line of work; the interpreter's exit, seconds with torch loaded, not counted)."""
    started = time.time()
    probe = f"import {', '.join(modules)}; import time; print(time.time())"
    done = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True)
    return round(float(done.stdout.split()[-1]) - started, 2)


def import_floor() -> dict:
    """Each figure of IMPORT_FIGURES, timed once."""
    return {key: import_seconds(modules) for key, modules in IMPORT_FIGURES.items()}


def _first_answer(url: str, photo: bytes, started: float, run, timeout: float = defaults.READY_TIMEOUT_S) -> float:
    while time.monotonic() - started < timeout:
        if not run.alive():
            raise RuntimeError(f"the server exited during start-up; see {run.run_dir / 'logs'}")
        if _post(url, photo) == 200:
            return time.monotonic() - started
        time.sleep(POLL_S)
    raise RuntimeError(f"no answer from {url} within {timeout} s")


def _post(url: str, body: bytes) -> int:
    request = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": "application/octet-stream"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            response.read()
            return response.status
    except urllib.error.HTTPError as err:
        return err.code
    except (urllib.error.URLError, OSError):
        return 0


def group_memory_mib(pgid: int) -> dict:
    """PSS and RSS of every process in process group `pgid` (the server, its workers, TorchServe's Java)."""
    pss = rss = 0
    processes = 0
    for process in psutil.process_iter(["pid"]):
        try:
            if os.getpgid(process.pid) != pgid:
                continue
            full = process.memory_full_info()
        except (OSError, psutil.Error):
            continue
        pss, rss, processes = pss + full.pss, rss + full.rss, processes + 1
    return {"pss_mib": round(pss / 2**20, 1), "rss_mib": round(rss / 2**20, 1), "processes": processes}


def summarize(rounds: list[dict]) -> dict:
    """Median and range of each figure per engine, and kserve / torchserve of the medians."""
    summary = {}
    for engine in ENGINES:
        mine = [r for r in rounds if r["engine"] == engine]
        summary[engine] = {key: {"median": statistics.median(r[key] for r in mine), "min": min(r[key] for r in mine),
                                 "max": max(r[key] for r in mine)} for key in ("cold_start_s", "pss_mib", "rss_mib")}
        summary[engine]["processes"] = mine[0]["processes"]
    floors = [r for r in rounds if r["engine"] == IMPORTS]
    if floors:
        summary[IMPORTS] = {key: statistics.median(r[key] for r in floors) for key in IMPORT_FIGURES}
    summary["ratios"] = {key: round(summary["kserve"][key]["median"] / summary["torchserve"][key]["median"], 2)
                         for key in ("cold_start_s", "pss_mib", "rss_mib")}
    return summary


def render(result: dict) -> str:
    s, m = result["summary"], result["machine"]
    lines = [
        f"# Engines side by side: {result['model']}, {result['workers']} worker(s), {result['rounds']} rounds",
        "",
        f"`{result['command']}`, {result['finished']}; {m['cpu']}, {m['vcpus']} vCPUs visible, load average at the end "
        f"{', '.join(f'{x:.1f}' for x in m['loadavg_end'])}" + (" (the machine was shared with other work)" if result["shared"] else ""),
        "",
        "| engine | cold start s, median (min-max) | whole server PSS MiB, median (min-max) | RSS MiB, median | processes |",
        "|---|---|---|---|---|",
    ]
    for engine in ENGINES:
        e = s[engine]
        lines.append(
            f"| {engine} | {e['cold_start_s']['median']:.2f} ({e['cold_start_s']['min']:.2f}-{e['cold_start_s']['max']:.2f}) | "
            f"{e['pss_mib']['median']:,.0f} ({e['pss_mib']['min']:,.0f}-{e['pss_mib']['max']:,.0f}) | {e['rss_mib']['median']:,.0f} | "
            f"{e['processes']} |"
        )
    r = s["ratios"]
    lines += [
        "",
        f"kserve / torchserve: cold start **{r['cold_start_s']:.2f}x**, memory (PSS) **{r['pss_mib']:.2f}x**, RSS {r['rss_mib']:.2f}x",
        "",
        "Cold start: from starting the server process to the first 200 answer of /predictions (polled every 50 ms). "
        "Memory: the sum over every process of the server's process group (TorchServe: its Java frontend and "
        "Python workers; kserve: the server and its workers), after 20 warm-up requests.",
        "",
        "| round | engine | cold start s | PSS MiB | RSS MiB |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['round']} | {r['engine']} | {r['cold_start_s']:.2f} | {r['pss_mib']:,.0f} | {r['rss_mib']:,.0f} |"
        for r in result["rounds_raw"] if r["engine"] in ENGINES
    ]
    if IMPORTS in s:
        i = s[IMPORTS]
        lines += [
            "",
            f"The floor under the kserve engine's cold start, median of the rounds: a fresh interpreter importing what its fork "
            f"server preloads ({', '.join(PRELOAD)}) takes {i['import_preload_s']:.2f} s, without torchvision "
            f"{i['import_without_torchvision_s']:.2f} s; half of TorchServe's cold start is "
            f"{s['torchserve']['cold_start_s']['median'] / 2:.2f} s.",
        ]
    return "\n".join(lines) + "\n"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tsvk bench engines", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model", default="resnet18", help="a torchvision classification builder, archived with random weights (default resnet18)"
    )
    parser.add_argument("--backend", default="eager", help="the archive's backend (default eager: it builds in seconds)")
    parser.add_argument("--workers", type=int, default=2, help="workers of the model on both engines (default 2)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--shared", action="store_true", help="say in the results that the machine was shared")
    parser.add_argument("--output-dir", type=Path, default=Path("benchmarks/results"))
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    rounds: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="tsvk-engines-") as tmp:
        store = Path(tmp) / "store"
        build_archive(BuildRequest(model=args.model, backend=args.backend, weights=WEIGHTS_NONE), store)
        for index in range(args.rounds):
            for engine in ENGINES if index % 2 == 0 else reversed(ENGINES):
                workdir = Path(tmp) / f"r{index}-{engine}"
                workdir.mkdir()
                rounds.append({"round": index, **measure(engine, store, args.model, args.workers, workdir)})
                print(json.dumps(rounds[-1]), flush=True)
            rounds.append({"round": index, "engine": IMPORTS, **import_floor()})
    stamp = datetime.now(timezone.utc)
    result = {
        "model": args.model,
        "backend": args.backend,
        "workers": args.workers,
        "rounds": args.rounds,
        "shared": args.shared,
        "command": "tsvk bench engines " + " ".join(argv if argv is not None else sys.argv[1:]),
        "finished": stamp.strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine_info(os.cpu_count() or 0),
        "rounds_raw": rounds,
        "summary": summarize(rounds),
    }
    write_json_and_markdown(result, render(result), args.output_dir, stamp, "engines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
