"""Run the chosen systems one after another on this machine and collect one result per system.

For each system (and each of its variants): build what it needs (not timed), start it under the
process-tree sampler, time until it is ready, warm it up, send the measured load, read its profile,
stop it, and check that none of its processes are left. A system that fails is recorded with its
error and the run goes on: one broken alternative must not cost the other measurements.
"""

from __future__ import annotations

import os
import time
import traceback
from datetime import datetime, timezone
from pathlib import Path

import psutil

from ... import progress
from ...measure.loadgen import TIME_BOUNDED_JOBS, run_closed_loop, summarize_records
from .options import FAST_SYSTEMS, BenchOptions, require_device, resolved_vcpus
from .orientation import check_photos
from .result_document import build_result
from ...measure.sampler import TreeSampler, leftover, window_stats
from ...measure.stats import combine_rounds, error_headline
from .systems import registry
from .systems.base import RunContext, System
from .systems.ceiling import model_cost
from .systems.process import THREAD_VARIABLES
from .tsmetrics import profile_difference

SETTLE_S = 2.0  # let the previous system's processes and page cache settle
LEFTOVER_GRACE_S = 10.0


def run_benchmark(options: BenchOptions, log=print) -> dict:
    """Measure every system in `options.systems`; returns the result document (see result_document.py)."""
    started = datetime.now(timezone.utc)
    removed = _drop_thread_variables()
    hidden = _hide_gpus_unless_asked(options.device)
    try:
        ctx, systems = prepare(options, started, log)
        floor = measure_decode_floor(ctx, log)
        model = measure_model_cost(ctx, systems, log) if floor else None
        results = measure_rounds(systems, ctx, log)
    finally:
        _restore(hidden)
        os.environ.update(removed)
    sent = [photo.name for photo in ctx.photos] if options.as_sent else None
    return build_result(options, ctx.vcpus, results, started, datetime.now(timezone.utc), removed_env=removed, decode_floor=floor,
                        sent=sent, model_cost=model)


def measure_decode_floor(ctx: RunContext, log=print) -> list[dict] | None:
    """With photos as sent and a classifier: the least each photo costs to decode to the model's input, beside tsvk's
    own path (decode_floor.py); measured before any system starts, on one thread of this process."""
    if not ctx.options.as_sent or ctx.options.task != "classify":
        return None
    from . import decode_floor  # torch and torchvision: only for a run that measures it

    log("bench: the decode floor of each photo, in-process on one thread")
    with progress.step("decode floor", "each photo decoded to the model's input, the least and tsvk's way"):
        return decode_floor.for_run(ctx.options.model, ctx.photos, ctx.options.quick)


def measure_model_cost(ctx: RunContext, systems: list[System], log=print) -> dict | None:
    """Beside the floor, where the run serves the fast archive: its model's cost per image on one thread, so the report
    can say what the floor and the model allow (decode_floor.allowance)."""
    if not {system.name for system in systems} & set(FAST_SYSTEMS):
        return None
    log("bench: the fast archive's model alone, in-process on one thread")
    with progress.step("model cost", "the fast archive's model on one thread, at each batch size"):
        return model_cost(ctx)


def prepare(options: BenchOptions, started: datetime | None = None, log=print) -> tuple[RunContext, list[System]]:
    """Build the weights, archives and photos the chosen systems need (cached; never timed)."""
    require_device(options)
    started = started or datetime.now(timezone.utc)
    run_dir = Path(options.cache_dir).resolve() / "runs" / started.strftime("%Y%m%dT%H%M%SZ")
    ctx = RunContext(options, resolved_vcpus(options), run_dir)
    systems = []
    for system in (registry()[name] for name in options.systems):
        reason = system.unavailable(ctx)
        if reason:
            log(f"bench: {system.name} left out: {reason}")
        else:
            systems.append(system)
    log(f"bench: {options.model} on {options.device}, {len(systems)} system(s), {ctx.vcpus} vCPUs; "
        "preparing weights, archives and photos")
    with progress.step("prepare photos", "decoding the benchmark photos"):
        ctx.photos
    for system in systems:
        with progress.step(f"prepare {system.name}", "its weights and archives (built once, then cached)"):
            system.prepare(ctx)
    return ctx, systems


def _hide_gpus_unless_asked(device: str) -> str | None:
    """A CPU run stays on the CPU on a GPU machine too: stock TorchServe would otherwise take the GPUs.
    Returns the caller's CUDA_VISIBLE_DEVICES (None when unset) for `_restore`."""
    before = os.environ.get("CUDA_VISIBLE_DEVICES")
    if device == "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    return before


def _restore(cuda_visible_devices: str | None) -> None:
    if cuda_visible_devices is None:
        os.environ.pop("CUDA_VISIBLE_DEVICES", None)
    else:
        os.environ["CUDA_VISIBLE_DEVICES"] = cuda_visible_devices


def _drop_thread_variables() -> dict[str, str]:
    """Thread settings inherited from the caller would tune the 'defaults' systems behind our back."""
    return {name: os.environ.pop(name) for name in THREAD_VARIABLES if name in os.environ}


def round_order(systems: list[System], number: int) -> list[System]:
    """The systems in the order round `number` (from 1) runs them: as given in odd rounds, reversed in even ones."""
    return list(systems) if number % 2 else list(reversed(systems))


def measure_rounds(systems: list[System], ctx: RunContext, log=print) -> dict:
    """Every system once per round, rounds alternating and each round in the other order from the last (A B C,
    C B A, A B C, ...): a burst of other work on the machine lands on one round of several systems, not on every
    round of one, and no system always runs right after another's stop. The first round runs every variant of a
    tuned system; later rounds repeat its fastest. Each system's result holds all its rounds
    (stats.combine_rounds: medians, min-max)."""
    rounds: dict[str, list[dict]] = {system.name: [] for system in systems}
    for number in range(1, ctx.options.rounds + 1):
        for system in round_order(systems, number):
            log(f"bench: round {number}/{ctx.options.rounds}: {system.name}")
            chosen = None if number == 1 else [rounds[system.name][0].get("variant", {})]
            rounds[system.name].append(measure_system(system, ctx, log, chosen))
            time.sleep(SETTLE_S)
    return {name: with_orientation(combine_rounds(measured), measured) for name, measured in rounds.items()}


def with_orientation(combined: dict, rounds: list[dict]) -> dict:
    """The sideways photos' answers (asked in the first round only) kept whichever round is the typical one."""
    asked = next((r["orientation"] for r in rounds if r.get("orientation") is not None), None)
    combined.pop("orientation", None)
    return {**combined, "orientation": asked} if asked is not None else combined


def measure_system(system: System, ctx: RunContext, log=print, variants_to_run: list[dict] | None = None) -> dict:
    """The best variant's measurements, with every variant's kept when there are several."""
    variants = []
    for number, variant in enumerate(_variants_to_try(system, ctx) if variants_to_run is None else variants_to_run):
        log(f"bench: {system.name} {_describe(variant)}".rstrip())
        measured = measure_variant(system, ctx, variant, check_answers=variants_to_run is None and number == 0)
        log(f"bench:   -> {_brief(measured)}")
        variants.append(measured)
    working = [v for v in variants if v.get("throughput_ips")]
    best = max(working, key=lambda v: v["throughput_ips"]) if working else variants[0]
    result = {"label": system.label, "description": system.description, **best}
    asked = next((v["orientation"] for v in variants if "orientation" in v), None)
    if asked is not None:  # asked of the first variant only: every variant runs the same code on the photos
        result["orientation"] = asked
    if len(variants) > 1:
        result["variants"] = variants
    return result


def _variants_to_try(system: System, ctx: RunContext) -> list[dict]:
    """A hand-tuned system's variants, at most `max_variants` of them (the quick run tries the first alone)."""
    variants = system.variants(ctx)
    return variants[: ctx.options.max_variants] if ctx.options.max_variants else variants


WHOLE_RUN = (None, None)  # window_stats over every sample: peaks of the whole life, no per-image CPU


def measure_variant(system: System, ctx: RunContext, variant: dict, check_answers: bool = False) -> dict:
    """One variant's round; with `check_answers` and photos as sent, also how it answers the sideways photos."""
    sampler = TreeSampler()
    check_answers = check_answers and ctx.options.as_sent
    try:
        with sampler:
            began = time.monotonic()
            measured, window = (_self_timed(system, ctx, variant) if system.self_timed
                                else _served(system, ctx, variant, began, check_answers))
    except Exception as err:  # noqa: BLE001 - record it, stop nothing else, go on with the next system
        measured, window = {"error": f"{type(err).__name__}: {err}"[:2000], "traceback": traceback.format_exc()[-4000:]}, WHOLE_RUN
    measured.update(window_stats(sampler.samples, *window))
    if window == WHOLE_RUN:
        measured["mean_cpu_pct_by_process"] = {}  # no span its rate counts: a CPU per image would count its start-up in
    measured["peak_rss_mb"] = window_stats(sampler.samples)["peak_rss_mb"]  # whole life: start-up peaks count too
    measured["processes_seen"] = len(sampler.seen_pids)
    measured["leftover_processes"] = _reap(list(sampler.seen.values()))
    measured["variant"] = variant
    measured["loadavg"] = [round(load, 2) for load in os.getloadavg()]  # the machine is shared: what else ran beside it
    return measured


def _self_timed(system: System, ctx: RunContext, variant: dict) -> tuple[dict, tuple]:
    """The system's own measurement, and the span its rate counts (its `load_window`; WHOLE_RUN where it gives none)."""
    with progress.step(f"measure {system.name}", "its own timed run"):
        measured = system.run(ctx, variant)
    window = measured.pop("load_window", None)
    return measured, (tuple(window) if window else WHOLE_RUN)


def _served(system: System, ctx: RunContext, variant: dict, began: float, check_answers: bool = False) -> tuple[dict, tuple]:
    options = ctx.options
    images = [photo.data for photo in ctx.photos]
    with progress.step(f"start {system.name}", "the server to answer"):
        deployment = system.start(ctx, variant)
    ready_s = time.monotonic() - began
    try:
        with progress.step(f"warm up {system.name}", f"{options.warmup_requests} requests"):
            warm = system.warm_up(deployment, images, options)
        require_an_answer(warm)
        before = deployment.profile() if deployment.profile else None
        load_start = time.monotonic()
        total, until = round_load(options, load_start)
        with progress.step(f"measure {system.name}", f"{options.round_seconds:g} s of load" if until else
                           f"{options.jobs} requests from {options.concurrency} clients"):
            records = run_closed_loop(deployment.target, images, total, options.concurrency, until=until)
        load_end = time.monotonic()
        after = deployment.profile() if deployment.profile else None
        asked = _ask_sideways(system, deployment, ctx) if check_answers else None
    finally:
        deployment.stop()
    measured = {**summarize_records(records), "ready_s": round(ready_s, 2), "concurrency": options.concurrency,
                "warmup_requests": len(warm), "warmup_errors": sum(1 for r in warm if not r.ok), "details": deployment.details}
    if after is not None:
        measured["profile"] = profile_difference(before or {}, after)
        measured["details"]["workers_after_load"] = after.get("workers", [])
    if asked is not None:
        measured["orientation"] = asked
    return measured, (load_start, load_end)


def _ask_sideways(system: System, deployment, ctx: RunContext) -> list[dict]:
    """After the measured load (so it costs the measurement nothing): each sideways photo sent, upright and as stored."""
    with progress.step(f"ask {system.name}", "the sideways photos, upright and as stored"):
        return check_photos(deployment.target, ctx.photos)


def require_an_answer(warm: list) -> None:
    """A system that answered none of its warm-up requests fails here (with the first error) instead of spending
    a round's load on errors: a compile backend that cannot compile fails every request, not the start."""
    if warm and not any(record.ok for record in warm):
        first = " ".join(warm[0].error.split())  # an error body's JSON over several lines, on one
        raise RuntimeError(f"none of {len(warm)} warm-up requests was answered; the first: {warm[0].status} {first}")


def round_load(options, start: float) -> tuple[int, float | None]:
    """Requests and deadline of one round's load: `round_seconds` of as many requests as the system answers,
    or exactly `jobs` requests when round_seconds is 0."""
    if options.round_seconds:
        return TIME_BOUNDED_JOBS, start + options.round_seconds
    return options.jobs, None


def _reap(processes: list[psutil.Process]) -> list[int]:
    """Wait for the system's processes to go; kill and report any that stay. psutil refuses to signal a
    pid that now belongs to another process, so only the processes the sampler saw are ever killed."""
    deadline = time.monotonic() + LEFTOVER_GRACE_S
    while (alive := leftover(processes)) and time.monotonic() < deadline:
        time.sleep(0.2)
    for process in alive:
        try:
            process.kill()
        except psutil.Error:
            pass
    return [process.pid for process in alive]


def _describe(variant: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in variant.items())


def _brief(measured: dict) -> str:
    if "error" in measured:
        return f"FAILED: {error_headline(measured['error'])}"
    latency = measured.get("latency_ms") or {}
    return (f"{measured.get('throughput_ips')} img/s, p50 {latency.get('p50')} ms, p99 {latency.get('p99')} ms, "
            f"ready {measured.get('ready_s')} s, errors {measured.get('errors')}/{measured.get('requests')}")
