"""`tsvk tune` / `make tune`: find the fastest config that meets the goals, by measuring on this machine.

    tsvk tune --models resnet152 --minutes 15
    tsvk tune --models resnet50,mobilenet_v3_large --p99-ms 2000 --memory-mb 6000

Writes configs/tuned.properties (serve it with `tsvk serve --config configs/tuned.properties`) and
benchmarks/results/tune-<models>-<time>.{json,md,png}.
"""

from __future__ import annotations

import argparse
import itertools
import platform
import shlex
import sys
import tempfile
import time
from datetime import datetime, timezone
from functools import partial
from pathlib import Path

from .. import defaults
from ..archive.archive_info import list_archives, read_archive_settings
from ..arguments import name_list, on_off, positive_int
from ..errors import UsageError
from ..images import SKIMAGE_PHOTOS, image_bytes
from ..config.memory_limits import cgroup_limit_mb, machine_memory_mb, memory_cap_mb
from ..config.serving_config import ServingRequest, plan_serving
from .measure import Bench, compare_with_rule, measure_candidate, prune_unpacked_archives, socket_path_problem
from .tune_outputs import result_document, write_results, write_tuned_config
from .search import Goal, Search
from .space import ModelLimits, Space

PHOTO_SIZE = (640, 480)  # as `tsvk bench`: a phone upload after a client-side resize
WRITE_RESERVE_S = 5.0  # kept back from the budget for the results and the config
MIN_WINDOW_S, MAX_WINDOW_S, WINDOWS_PER_BUDGET = 10.0, 60.0, 12


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {text}")
    return value


def register(commands) -> None:
    p = commands.add_parser("tune", help="measure workers x threads x batch x delay on a real TorchServe and write the best "
                                         f"into {defaults.TUNE_OUTPUT}")
    p.add_argument("--models", type=name_list, help="comma-separated models to tune together (default: every archive in the model store)")
    p.add_argument("--p99-ms", type=positive_float, help="latency goal: every model's p99 at or under this (default: none)")
    p.add_argument(
        "--min-img-s", type=positive_float, help="throughput floor per model; reported when no candidate reaches it (default: none)"
    )
    p.add_argument(
        "--memory-mb", type=positive_float, help="memory cap for TorchServe, MiB (default: the cgroup limit, else the machine's memory)"
    )
    p.add_argument(
        "--minutes",
        type=positive_float,
        default=defaults.TUNE_MINUTES,
        help=f"the whole search, server starts included, ends within this (default {defaults.TUNE_MINUTES:g})",
    )
    p.add_argument("--vcpus", type=positive_int, help="vCPUs to plan for (default: detected, as tsvk config)")
    p.add_argument(
        "--concurrency",
        type=positive_int,
        help="clients per model for every candidate (default: 2 x workers x batch "
        "of each candidate: one batch computing while the next fills)",
    )
    p.add_argument(
        "--auth",
        type=on_off,
        default=True,
        help="token authorization in the written config: on (default) or off (the tune itself always measures without it)",
    )
    p.add_argument(
        "--window-s",
        type=positive_float,
        help=f"seconds of load per candidate, in 3 windows (default: the budget / "
        f"{WINDOWS_PER_BUDGET}, {MIN_WINDOW_S:g} to {MAX_WINDOW_S:g}); each window of a comparison with the rule's plan "
        f"lasts half that, at least {MIN_WINDOW_S:g} s",
    )
    p.add_argument("--model-store", type=Path, default=Path(defaults.MODEL_STORE))
    p.add_argument(
        "--output", "-o", type=Path, default=Path(defaults.TUNE_OUTPUT), help=f"the tuned config (default {defaults.TUNE_OUTPUT})"
    )
    p.add_argument("--results-dir", type=Path, default=Path(defaults.TUNE_RESULTS_DIR))
    p.add_argument(
        "--work-dir",
        type=Path,
        help="candidates' configs and logs (default: a new directory in the system's temp dir; "
        "TorchServe's worker sockets need a short path)",
    )
    p.set_defaults(func=cmd_tune)


def cmd_tune(args: argparse.Namespace) -> int:
    started = time.monotonic()
    budget_s = args.minutes * 60
    request = ServingRequest(vcpus=args.vcpus, models=args.models, model_store=args.model_store, auth=args.auth)
    base = plan_serving(request)  # every problem with the models, the store and the vCPUs, before anything starts
    models = tuple(m.name for m in base.models)
    space = Space(base.vcpus, tuple(_limits(args.model_store, name) for name in models))
    cap, cap_source = memory_cap_mb(args.memory_mb, cgroup_limit_mb(), machine_memory_mb())
    goal = Goal(args.p99_ms, args.min_img_s, cap)
    window = args.window_s or min(MAX_WINDOW_S, max(MIN_WINDOW_S, budget_s / WINDOWS_PER_BUDGET))
    decision_window = max(window / 2, min(window, MIN_WINDOW_S))
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    work_dir = args.work_dir or Path(tempfile.mkdtemp(prefix=f"tsvk-tune-{stamp}-"))
    if (problem := socket_path_problem(work_dir)) is not None:
        raise UsageError(problem)
    bench = Bench(args.model_store.resolve(), base.vcpus, work_dir.resolve(), _photos(), window, args.concurrency, decision_window)
    print(
        f"tune: {', '.join(models)} on {base.vcpus} vCPUs; candidates' configs and logs in {work_dir}; "
        f"memory cap {cap:,.0f} MiB ({cap_source}); budget {budget_s:.0f} s, "
        f"{window:.0f} s of load per candidate; coarse pass: {len(space.coarse())} worker/thread splits, then hill-climbing; "
        f"a candidate replaces the rule's plan only if it wins in {bench.decision_pairs} alternating windows of {decision_window:.0f} s "
        "a side",
        flush=True,
    )
    search = Search(
        space,
        None,
        goal,
        budget_s,
        progress=partial(print, flush=True),
        reserve_s=WRITE_RESERVE_S,
        decision_window_s=decision_window,
        decision_pairs=bench.decision_pairs,
    )
    search.started = started
    search.measure = lambda candidate, rule, deadline: measure_candidate(bench, len(search.trials), candidate, rule, deadline)
    comparisons = itertools.count(1)  # each comparison's servers in their own directories, d01-rule, d01-contender, ...
    search.compare = lambda rule, contender, settled, deadline: compare_with_rule(
        bench, next(comparisons), rule, contender, settled, deadline
    )
    result = search.run()
    if args.work_dir is None:  # a folder of its own in the temp dir: leave its logs, not gigabytes of archive copies
        prune_unpacked_archives(bench.work_dir)
    context = _context(args, models, base.vcpus, goal, cap_source, budget_s, window) | {
        "decision_window_s": decision_window,
        "decision_pairs": bench.decision_pairs,
    }
    if result.chosen is not None:
        write_tuned_config(request, result, args.output)
    written = write_results(result_document(result, context), args.results_dir, f"tune-{'+'.join(models)}-{stamp}")
    _say(result, args.output, written)
    if result.chosen is None:
        raise UsageError(f"no candidate could be measured, so no config was written; see {written[1]} and {bench.work_dir}")
    return 0


def _limits(store: Path, name: str) -> ModelLimits:
    settings = read_archive_settings(list_archives(store)[name])
    return ModelLimits(
        name,
        settings.artifact.max_batch,
        min(settings.serving.batch_size, settings.artifact.max_batch),
        settings.serving.max_batch_delay_ms,
    )


def _photos() -> tuple[bytes, ...]:
    return tuple(image_bytes(f"skimage:{name}", size=PHOTO_SIZE) for name in SKIMAGE_PHOTOS)


def _context(args, models, vcpus, goal: Goal, cap_source: str, budget_s: float, window: float) -> dict:
    return {
        "command": "tsvk tune " + shlex.join(sys.argv[2:] if sys.argv[1:2] == ["tune"] else []),
        "models": list(models),
        "vcpus": vcpus,
        "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
        "goal": {"p99_ms": goal.p99_ms, "min_img_s": goal.min_img_s, "memory_mb": goal.memory_mb},
        "memory_cap_source": cap_source,
        "budget_s": budget_s,
        "window_s": window,
        "output": str(args.output),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def _say(result, output: Path, written: list[Path]) -> None:
    print(f"tune: {len(result.trials)} candidates in {result.seconds:.0f} s; stopped: {result.stopped_because}")
    if result.chosen is not None:
        m = result.chosen.measurement
        figures = m.error or f"{m.img_s or 0:.1f} img/s, p99 {m.p99_ms or 0:,.0f} ms, peak RSS {m.peak_rss_mb or 0:,.0f} MiB"
        print(
            f"tune: chose candidate {result.chosen.number}: {result.chosen.candidate.describe()}: {figures}; "
            f"because {result.chosen_because}"
        )
        print(f"tune: wrote {output}; serve it with `tsvk serve --config {output}`")
    if result.chosen is not None and result.chosen.measurement.error:
        print(f"tune: WARNING: the config written was not measured ({result.chosen.measurement.error}); give the tune more time")
    elif not result.goal_met and result.chosen is not None:
        print("tune: WARNING: no candidate met every goal; the closest was written: " + "; ".join(result.problems))
    print("tune: results in " + ", ".join(str(p) for p in written))
