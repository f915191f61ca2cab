"""The result document: systems, ratios measured in the same run, goals met or missed, and why.

`build_result` assembles it; `write_outputs` writes <timestamp>[-tag].json/.md/.png and points the links
latest[-tag].* at them. The ratios are plain quotients of throughputs measured minutes apart on one machine.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
from dataclasses import asdict
from datetime import datetime
from pathlib import Path

from tsvk.common import task_kind
from tsvk.model import cpu_flags

from ...fsutil import point_latest
from .chart import write_chart
from .compute import compute_use, fp32_peak, gflop_per_image
from .diagnosis import explain
from .markdown import render_markdown
from .options import PEER_SYSTEMS, BenchOptions
from .rows import FAST_VS_BEST_PEER_GOAL, FP32_VS_TORCHSERVE_BEST_GOAL, best_peer, throughput
from ...measure.stats import ranges_overlap, ratio

SCHEMA_VERSION = 1
RATIO_SYSTEMS = {
    "ours_vs_decentralized": "decentralized",
    "ours_vs_torchserve_default": "torchserve_default",
    "ours_vs_torchserve_tuned": "torchserve_tuned",
    "ours_vs_compute_ceiling": "ceiling",
    "ours_vs_flask_gunicorn": "flask_gunicorn",
    "ours_vs_litserve": "litserve",
}
FAST_RATIOS = {  # the fastest verified CPU artifact (ours_fast) against the fp32 rows of the same run
    "fast_vs_ours": ("ours_fast", "ours"),
    "fast_vs_torchserve_tuned": ("ours_fast", "torchserve_tuned"),
    "fast_vs_compute_ceiling": ("ours_fast", "ceiling"),
    "fast_vs_fast_ceiling": ("ours_fast", "ceiling_fast"),
    "fast_ceiling_vs_ceiling": ("ceiling_fast", "ceiling"),
}
OIP_SYSTEMS = ("ours_oip_rest", "ours_oip_grpc")  # ours asked through the Open Inference Protocol front
OIP_MIN_THROUGHPUT = 0.95  # the protocol may cost at most 5% of /predictions' throughput...
OIP_MAX_P99 = 1.05  # ...and add at most 5% to its p99
TUNED_MIN_THROUGHPUT = 0.97  # the tuned config serves at least this share of the generated one's throughput...
TUNED_MAX_P99 = 1.0  # ...with a p99 no worse (lower, or not told apart by the rounds' p99 ranges)
TUNED_P99_RATIO = "p99_ours_tuned_vs_ours"
PEER_RATIOS = {  # ours against the peers at their best, on the same artifact where they can serve it
    "ours_vs_torchserve_best": ("ours", "torchserve_best"),
    "fast_vs_torchserve_best": ("ours_fast", "torchserve_best"),
    "fast_vs_triton": ("ours_fast", "triton"),
    "fast_vs_litserve_fast": ("ours_fast", "litserve_fast"),
    "fast_vs_pipeline_fast_ceiling": ("ours_fast", "ceiling_pipeline_fast"),
}
BATCH_RATIOS = {  # tsvk batch (offline) against its pipeline ceiling, serving the same archive, and itself on Ray
    "batch_vs_pipeline_ceiling": ("batch", "ceiling_pipeline"),
    "batch_vs_ours": ("batch", "ours"),
    "batch_ray_vs_batch": ("batch_ray", "batch"),
    "batch_fast_vs_pipeline_fast_ceiling": ("batch_fast", "ceiling_pipeline_fast"),
    "batch_fast_vs_ours_fast": ("batch_fast", "ours_fast"),
    "batch_ray_fast_vs_batch_fast": ("batch_ray_fast", "batch_fast"),
}
ENGINE_RATIOS = {  # tsvk's own engine against TorchServe on the same archive, and its protocols against its /predictions
    "kserve_vs_ours": ("ours_kserve", "ours"),
    "kserve_fast_vs_ours_fast": ("ours_kserve_fast", "ours_fast"),
    "ours_kserve_oip_rest_vs_ours_kserve": ("ours_kserve_oip_rest", "ours_kserve"),
    "ours_kserve_oip_grpc_vs_ours_kserve": ("ours_kserve_oip_grpc", "ours_kserve"),
}
GOALS = (  # (ratio key, minimum, wording)
    ("ours_vs_decentralized", 5.0, "ours >= 5x decentralized"),
    ("ours_vs_torchserve_default", 1.5, "ours >= 1.5x stock TorchServe defaults"),
    ("ours_vs_torchserve_tuned", 1.2, "ours >= 1.2x best hand-tuned stock TorchServe"),
    ("ours_vs_compute_ceiling", 0.9, "ours >= 0.9x the in-process compute ceiling"),
    ("fast_vs_ours", 1.12, "ours with the fastest CPU artifact >= 1.12x ours fp32"),
    ("fast_vs_torchserve_tuned", 1.25, "ours with the fastest CPU artifact >= 1.25x best hand-tuned stock TorchServe"),
    (
        "fast_vs_best_peer",
        FAST_VS_BEST_PEER_GOAL,
        f"ours_fast >= {FAST_VS_BEST_PEER_GOAL:g}x the best of {', '.join(PEER_SYSTEMS)}",
    ),
    ("ours_vs_torchserve_best", FP32_VS_TORCHSERVE_BEST_GOAL, f"ours (fp32) >= {FP32_VS_TORCHSERVE_BEST_GOAL:g}x torchserve_best"),
    ("fast_vs_pipeline_fast_ceiling", 0.9, "ours_fast >= 0.9x its in-process pipeline ceiling (decode + preprocess + model)"),
    ("batch_vs_pipeline_ceiling", 0.95, "tsvk batch >= 0.95x the in-process pipeline ceiling (fp32)"),
    ("batch_vs_ours", 1.2, "tsvk batch >= 1.2x serving the same archive through TorchServe (fp32)"),
    ("batch_ray_vs_batch", 0.85, "tsvk batch on Ray (one machine) >= 0.85x local (fp32)"),
    ("batch_fast_vs_pipeline_fast_ceiling", 0.95, "tsvk batch >= 0.95x the in-process pipeline ceiling (fastest CPU artifact)"),
    ("batch_fast_vs_ours_fast", 1.2, "tsvk batch >= 1.2x serving the same archive through TorchServe (fastest CPU artifact)"),
    ("batch_ray_fast_vs_batch_fast", 0.85, "tsvk batch on Ray (one machine) >= 0.85x local (fastest CPU artifact)"),
    ("kserve_fast_vs_ours_fast", 1.05, "the kserve engine >= 1.05x TorchServe on the same archive (fastest CPU artifact)"),
    (
        "kserve_fast_vs_best_peer",
        FAST_VS_BEST_PEER_GOAL,
        f"the kserve engine (fastest CPU artifact) >= {FAST_VS_BEST_PEER_GOAL:g}x the best of {', '.join(PEER_SYSTEMS)}",
    ),
    ("ours_kserve_oip_rest_vs_ours_kserve", OIP_MIN_THROUGHPUT, "the kserve engine's OIP REST within 5% of its /predictions"),
    ("ours_kserve_oip_grpc_vs_ours_kserve", OIP_MIN_THROUGHPUT, "the kserve engine's OIP gRPC within 5% of its /predictions"),
)


def build_result(
    options: BenchOptions, vcpus: int, systems: dict, started: datetime, finished: datetime, removed_env: dict | None = None,
    decode_floor: list[dict] | None = None, sent: list[str] | None = None, model_cost: dict | None = None,
) -> dict:
    ratios = compute_ratios(systems)
    compute = compute_inputs(options.model, vcpus, options.task)
    extra = {"decode_floor": decode_floor} if decode_floor is not None else {}
    if model_cost is not None:
        extra["model_cost"] = model_cost
    return {
        "schema_version": SCHEMA_VERSION,
        "created": started.isoformat(timespec="seconds"),
        "duration_s": round((finished - started).total_seconds(), 1),
        "command": options.command,
        "options": _options_dict(options),
        "machine": machine_info(vcpus, options.device),
        "software": software_versions(),
        "git": git_state(),
        "removed_environment": removed_env or {},
        "systems": systems,
        "ratios": ratios,
        "goals": evaluate_goals(systems, ratios, options.task),
        "compute": {**compute, "systems": compute_use(systems, compute["gflop_per_image"], compute["fp32_peak"])},
        "diagnosis": diagnose(systems, vcpus),
        **photo_set(options, sent),
        **extra,
    }


def photo_set(options: BenchOptions, sent: list[str] | None = None) -> dict:
    """With photos as sent: what each photo is, each size and format's share of the requests, and the photos of the set
    that could not be made (`sent`: the names of the photos sent; None: the whole set)."""
    if not options.as_sent:
        return {}
    from . import sent_photos  # Pillow and NumPy: only for a run that made the photos

    chosen = sent_photos.photos_of(options.photos)
    missing = sent_photos.left_out(sent, chosen) if sent is not None else ()
    photos = tuple(photo for photo in chosen if photo not in missing)
    return {"photo_set": {"name": options.photos, "photos": [photo.describe() for photo in photos],
                          "proportions": sent_photos.proportions(photos), "left_out": [photo.describe() for photo in missing]}}


def compute_inputs(model: str, vcpus: int, task: str = "classify") -> dict:
    """The model's GFLOP per image and the machine's fp32 peak (compute.py says how each is found); a detector's
    or segmenter's work depends on each photo's size, so only a classifier's is counted."""
    try:
        work = gflop_per_image(model) if task_kind(task).crops else None
    except (ValueError, KeyError):  # not a torchvision builder: nothing to count
        work = None
    return {"gflop_per_image": work, "fp32_peak": fp32_peak(vcpus)}


def _options_dict(options: BenchOptions) -> dict:
    raw = asdict(options)
    raw["task"] = options.task
    raw.update(
        output_dir=str(options.output_dir),
        cache_dir=str(options.cache_dir),
        tuned_config=str(options.tuned_config),
        images=list(options.images),
        systems=list(options.systems),
        image_size=list(options.image_size),
        warmup=options.warmup_requests,
        warmup_seconds=options.warmup_load_seconds,
    )
    return raw


def compute_ratios(systems: dict) -> dict:
    """ours / other for each other system present; None where either side is missing or failed."""
    ours = throughput(systems, "ours")
    ratios = {key: ratio(ours, throughput(systems, other)) for key, other in RATIO_SYSTEMS.items()}
    ratios["ours_vs_pipeline_ceiling"] = ratio(ours, pipeline_ceiling(systems.get("ceiling")))
    ratios["p99_ours_vs_torchserve_tuned"] = ratio(_p99(systems, "ours"), _p99(systems, "torchserve_tuned"))
    ratios.update({key: ratio(throughput(systems, a), throughput(systems, b)) for key, (a, b) in FAST_RATIOS.items()})
    ratios["p99_fast_vs_torchserve_tuned"] = ratio(_p99(systems, "ours_fast"), _p99(systems, "torchserve_tuned"))
    ratios["ours_tuned_vs_ours"] = ratio(throughput(systems, "ours_tuned"), ours)
    ratios["p99_ours_tuned_vs_ours"] = ratio(_p99(systems, "ours_tuned"), _p99(systems, "ours"))
    ratios.update({key: ratio(throughput(systems, a), throughput(systems, b)) for key, (a, b) in PEER_RATIOS.items()})
    ratios.update({key: ratio(throughput(systems, a), throughput(systems, b)) for key, (a, b) in BATCH_RATIOS.items()})
    ratios.update({key: ratio(throughput(systems, a), throughput(systems, b)) for key, (a, b) in ENGINE_RATIOS.items()})
    peer = best_peer(systems)
    for key, fast in (("fast_vs_best_peer", "ours_fast"), ("kserve_fast_vs_best_peer", "ours_kserve_fast")):
        ratios[key] = ratio(throughput(systems, fast), throughput(systems, peer)) if peer else None
        ratios[f"p99_{key}"] = ratio(_p99(systems, fast), _p99(systems, peer)) if peer else None
    for protocol in OIP_SYSTEMS:  # the protocol's cost: the same server asked through the front, vs /predictions
        ratios[f"{protocol}_vs_ours"] = ratio(throughput(systems, protocol), ours)
        ratios[f"p99_{protocol}_vs_ours"] = ratio(_p99(systems, protocol), _p99(systems, "ours"))
    return ratios


def ratio_pair(key: str, systems: dict) -> tuple[str, str | None] | None:
    """The two systems a ratio divides (the best peer resolved for this run), or None for derived ratios."""
    key = key.removeprefix("p99_")
    if key == "fast_vs_best_peer":
        return "ours_fast", best_peer(systems)
    if key == "kserve_fast_vs_best_peer":
        return "ours_kserve_fast", best_peer(systems)
    pairs = {
        **{k: ("ours", v) for k, v in RATIO_SYSTEMS.items()},
        **FAST_RATIOS,
        **PEER_RATIOS,
        **BATCH_RATIOS,
        **ENGINE_RATIOS,
        "ours_tuned_vs_ours": ("ours_tuned", "ours"),
    }
    return pairs.get(key)


def overlap_of(key: str, systems: dict) -> bool | None:
    """Whether the two systems' per-round ranges (throughput, or p99 for a p99 ratio) overlap: then these
    rounds do not tell them apart. None where a side has no spread (one round, an older result, a failure)."""
    pair = ratio_pair(key, systems)
    if not pair or not pair[1]:
        return None
    field = "p99" if key.startswith("p99_") else "throughput_ips"
    a, b = ((systems.get(name) or {}).get("spread") or {} for name in pair)
    return ranges_overlap(a.get(field), b.get(field))


def pipeline_ceiling(ceiling: dict | None) -> float | None:
    """Images/s if one process did decode+preprocess and inference back to back on the same cores."""
    details = (ceiling or {}).get("details") or {}
    model, prep = (ceiling or {}).get("throughput_ips"), details.get("preprocess_images_per_s")
    if not model or not prep:
        return None
    return round(1 / (1 / model + 1 / prep), 2)


def _p99(systems: dict, name: str) -> float | None:
    return ((systems.get(name) or {}).get("latency_ms") or {}).get("p99")


# A detector or segmenter is served fast through its OpenVINO artifact (eager fp32 runs the same heads as
# stock), so the task goal is judged on ours with the fastest verified CPU artifact.
TASK_GOALS = (
    (
        "fast_vs_torchserve_tuned",
        2.0,
        "ours (fastest CPU artifact) >= 2x hand-tuned stock TorchServe with its own detection / segmentation handler",
    ),
)


def evaluate_goals(systems: dict, ratios: dict, task: str = "classify") -> list[dict]:
    chosen = GOALS if task_kind(task).top_k else TASK_GOALS
    goals = [
        {
            "goal": text,
            "ratio": key,
            "target": minimum,
            "measured": ratios.get(key),
            "met": None if ratios.get(key) is None else ratios[key] >= minimum,
        }
        for key, minimum, text in chosen
    ]
    if task_kind(task).top_k:
        for fast, key in (("ours_fast", "p99_fast_vs_best_peer"), ("ours_kserve_fast", "p99_kserve_fast_vs_best_peer")):
            tail = ratios.get(key)
            goals.append(
                {
                    "goal": f"{fast} p99 no worse than the best peer's",
                    "ratio": key,
                    "target": 1.0,
                    "measured": tail,
                    "met": None if tail is None else tail <= 1.0,
                }
            )
    p99 = ratios.get("p99_ours_vs_torchserve_tuned")
    goals.append(
        {
            "goal": "ours p99 no worse than hand-tuned stock TorchServe",
            "ratio": "p99_ours_vs_torchserve_tuned",
            "target": 1.0,
            "measured": p99,
            "met": None if p99 is None else p99 <= 1.0,
        }
    )
    if "ours_tuned" in systems:
        goals += _tuned_goals(ratios)
    for goal in goals:
        goal["ranges_overlap"] = overlap_of(goal["ratio"], systems)
        if goal["ratio"] == TUNED_P99_RATIO and goal["met"] is False and goal["ranges_overlap"]:
            goal["met"] = True  # "no worse": the rounds do not tell the tuned p99 from the generated one's
    for protocol in OIP_SYSTEMS:
        if protocol not in systems:
            continue
        speed, tail = ratios.get(f"{protocol}_vs_ours"), ratios.get(f"p99_{protocol}_vs_ours")
        goals.append(
            {
                "goal": f"{protocol} throughput within 5% of ours (/predictions)",
                "ratio": f"{protocol}_vs_ours",
                "target": OIP_MIN_THROUGHPUT,
                "measured": speed,
                "met": None if speed is None else speed >= OIP_MIN_THROUGHPUT,
            }
        )
        goals.append(
            {
                "goal": f"{protocol} p99 within 5% of ours (/predictions)",
                "ratio": f"p99_{protocol}_vs_ours",
                "target": OIP_MAX_P99,
                "measured": tail,
                "met": None if tail is None else tail <= OIP_MAX_P99,
            }
        )
    return goals


def _tuned_goals(ratios: dict) -> list[dict]:
    """A tune must never serve worse than the rule it set out to beat."""
    speed, tail = ratios.get("ours_tuned_vs_ours"), ratios.get("p99_ours_tuned_vs_ours")
    return [
        {
            "goal": f"ours_tuned >= {TUNED_MIN_THROUGHPUT:g}x ours (the tuned config against the generated one)",
            "ratio": "ours_tuned_vs_ours",
            "target": TUNED_MIN_THROUGHPUT,
            "measured": speed,
            "met": None if speed is None else speed >= TUNED_MIN_THROUGHPUT,
        },
        {
            "goal": "ours_tuned p99 no worse than ours (lower, or within the spread of the rounds)",
            "ratio": TUNED_P99_RATIO,
            "target": TUNED_MAX_P99,
            "measured": tail,
            "met": None if tail is None else tail <= TUNED_MAX_P99,
        },
    ]


def diagnose(systems: dict, vcpus: int | None = None) -> list[str]:
    """Where ours spends its time, in numbers, from TorchServe's counters and our handler's metrics."""
    return explain(systems, vcpus)


def write_json_and_markdown(result: dict, markdown: str, output_dir: Path, stamp: datetime, name: str) -> Path:
    """A narrower benchmark's `<UTC time>-<name>.json` and `.md` in `output_dir`, the report also printed; returns
    their common stem."""
    output_dir.mkdir(parents=True, exist_ok=True)
    base = output_dir / f"{stamp.strftime('%Y%m%dT%H%M%SZ')}-{name}"
    base.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    base.with_suffix(".md").write_text(markdown)
    print(markdown)
    print(f"wrote {base}.json and .md")
    return base


# The CPU flags that decide which artifact is fastest (int8 needs VNNI, bf16 AVX-512 BF16 or AMX): every result names
# those its CPU has, since a ratio measured on one of these CPUs says little about another.
REPORTED_CPU_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_int8", "amx_bf16")


def machine_info(vcpus: int, device: str = "cpu") -> dict:
    import psutil

    present = cpu_flags()
    info = {
        "vcpus": vcpus,
        "cpu": _cpu_model(),
        "cpu_flags": [flag for flag in REPORTED_CPU_FLAGS if flag in present],
        "host": platform.node(),
        "loadavg_end": list(os.getloadavg()),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "device": device,
    }
    if device == "cuda":
        info["gpus"] = gpu_names()
    return info


def gpu_names() -> list[str]:
    """The visible CUDA devices by name (the GPU mode only; the CPU mode hides them from every system)."""
    import torch

    return [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def software_versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for package in ("torch", "torchvision", "torchserve", "torch-model-archiver", "litserve", "flask", "gunicorn"):
        try:
            found[package] = version(package)
        except PackageNotFoundError:
            found[package] = None
    found["java"] = _java_version()
    return found


def _java_version() -> str | None:
    try:
        done = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = (done.stderr or done.stdout).splitlines()
    return lines[0].strip() if lines else None


def git_state() -> dict:
    """Commit and whether the tree had changes: read-only git queries."""

    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], capture_output=True, text=True, timeout=20).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            return ""

    return {"commit": git("rev-parse", "HEAD") or None, "dirty": bool(git("status", "--porcelain"))}


def refresh(result: dict) -> dict:
    """Recompute ratios, goals and diagnosis from a result's measurements (after a report change)."""
    ratios = compute_ratios(result["systems"])
    task = result.get("options", {}).get("task", "classify")
    compute = result.get("compute") or compute_inputs(result["options"]["model"], result["machine"]["vcpus"], task)
    compute = {**compute, "systems": compute_use(result["systems"], compute["gflop_per_image"], compute["fp32_peak"])}
    return {
        **result,
        "ratios": ratios,
        "goals": evaluate_goals(result["systems"], ratios, task),
        "compute": compute,
        "diagnosis": diagnose(result["systems"], result["machine"]["vcpus"]),
    }


def result_stem(result: dict, tag: str) -> str:
    stamp = datetime.fromisoformat(result["created"]).strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}-{tag}" if tag else stamp


def write_outputs(result: dict, output_dir: Path, tag: str = "") -> dict[str, Path]:
    """<stem>.json/.md/.png, and latest[-tag].* linked to them; the chart is skipped without matplotlib."""
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    stem = result_stem(result, tag)
    chart = write_chart(result, output_dir / f"{stem}.png")
    (output_dir / f"{stem}.json").write_text(json.dumps(result, indent=1) + "\n")
    (output_dir / f"{stem}.md").write_text(render_markdown(result, chart.name if chart else None))
    written = {"json": output_dir / f"{stem}.json", "md": output_dir / f"{stem}.md", **({"png": chart} if chart else {})}
    latest = f"latest-{tag}" if tag else "latest"
    (output_dir / f"{latest}.png").unlink(missing_ok=True)  # an older run's chart is not this run's
    for suffix, path in written.items():
        point_latest(output_dir / f"{latest}.{suffix}", path)
    return written
