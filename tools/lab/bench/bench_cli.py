"""`tsvk bench` / `make bench`: measure every way of serving the model on this machine, in one run.

    tsvk bench --quick             # a smoke run on a small model
    tsvk bench                     # the full run (resnet152)
    tsvk bench --central-figure    # the central figure: stock defaults vs ours, concurrency 32
    tsvk bench --tuned-vs-generated --model resnet18   # what `tsvk tune` wrote vs the generated config
    tsvk bench --gpu               # the same table with every system on the GPU
    tsvk bench --photos as-sent    # photos as phones send them: 12-48 MP, sideways with an EXIF orientation

`tsvk bench preprocess`, `tsvk bench compile` and `tsvk bench pinning` run the narrower benchmarks
(BENCHMARKS below), each with its own options (`tsvk bench <name> --help`).
"""

from __future__ import annotations

import argparse
import importlib
import shlex
import signal
import sys
from pathlib import Path


from ... import defaults
from ... import progress
from ...archive.backends import get_backend
from ...archive.precision import AUTO, BUILD_PRECISIONS, choose_precision
from ...errors import UsageError
from ...images import SKIMAGE_PHOTOS
from .options import (BACKENDS, CENTRAL_FIGURE_SYSTEMS, DEFAULT_PHOTOS, FULL, GPU, PHOTO_SETS, QUICK, ROUND_SECONDS, ROUNDS, SYSTEMS,
                      TUNED_VS_GENERATED_SYSTEMS, WARMUP_SECONDS, gpu_backend, with_preset)
from .result_document import refresh, write_outputs
from .markdown import render_markdown

CENTRAL_FIGURE_CONCURRENCY = 32
# `tsvk bench <name>`: the narrower benchmarks, each a module of this package with build_parser() and main().
BENCHMARKS = {
    "preprocess": ("preprocess", "preprocessing images/s of each backend vs TorchServe's PIL path"),
    "compile": ("compiled", "`tsvk archive` time per backend and compiled vs eager img/s"),
    "pinning": ("pinning", "serving with and without core pinning, alternating rounds"),
    "accuracy": ("accuracy", "top-1/top-5 of every backend and precision through a real server (EfficientNet-Lite0), "
                             "and with --as-sent on the same photos at a phone's size"),
    "engines": ("engines", "TorchServe and tsvk's kserve engine on one archive: cold start and the whole server's memory"),
    "protocol": ("protocol", "tsvk's engine answering the Open Inference Protocol's REST vs /predictions, with hey"),
}


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {value}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds >= 0, got {text!r}") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds >= 0, got {value}")
    return value


def _names(text: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    unknown = [n for n in names if n not in SYSTEMS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"must be comma-separated names from {', '.join(SYSTEMS)}; got {text!r}")
    return names


def _photo_set(text: str) -> str:
    if text not in PHOTO_SETS:
        raise argparse.ArgumentTypeError(f"must be one of {', '.join(PHOTO_SETS)}; got {text!r}")
    return text


def build_parser() -> argparse.ArgumentParser:
    others = "; ".join(f"tsvk bench {name}: {what}" for name, (_, what) in BENCHMARKS.items())
    p = argparse.ArgumentParser(prog="tsvk bench", description="Benchmark every way of serving one image classifier on this machine.",
                                epilog=f"Narrower benchmarks, each with its own --help: {others}.")
    progress.add_quiet_argument(p)
    p.add_argument("--quick", action="store_true",
                   help=f"a smoke run (about {QUICK.minutes} min on 2 cores once its archives are built): every system on "
                        f"{QUICK.model}, {QUICK.rounds} round of {QUICK.round_seconds:g} s after {QUICK.warmup_seconds:g} s of "
                        "warm-up load, a hand-tuned system at its first variant only; it shows each part works, and its "
                        "figures are not for comparison")
    p.add_argument("--model", help=f"torchvision classification model (default {FULL.model}; --quick: {QUICK.model})")
    p.add_argument(
        "--jobs",
        type=_positive,
        help=f"measured requests per served system and round with --round-seconds 0 (default {FULL.jobs}; --quick: {QUICK.jobs})",
    )
    p.add_argument(
        "--rounds",
        type=_positive,
        help=f"alternating rounds per system (default {ROUNDS}; --quick: {QUICK.rounds}); the report gives medians with min-max",
    )
    p.add_argument(
        "--round-seconds",
        type=_seconds,
        help=f"seconds of load per system and round (default {ROUND_SECONDS:g}; "
        f"--quick: {QUICK.round_seconds:g}; 0: --jobs requests per round)",
    )
    p.add_argument("--concurrency", type=_positive, help=f"closed-loop clients (default {FULL.concurrency})")
    p.add_argument(
        "--decentralized-jobs",
        type=_positive,
        help="jobs for the process-per-job system (default: "
        f"{FULL.decentralized_jobs}; --quick: {QUICK.decentralized_jobs}; never more than --jobs)",
    )
    p.add_argument("--image", help=f"comma-separated photos: skimage:{'|'.join(SKIMAGE_PHOTOS)} or JPEG files (default: all of them)")
    p.add_argument("--photos", type=_photo_set, default=DEFAULT_PHOTOS,
                   help=f"the photos sent: {', '.join(PHOTO_SETS)} ({DEFAULT_PHOTOS}: --image's photos as 640x480 JPEGs; "
                   "as-sent: 12, 24 and 48 MP JPEGs stored sideways with an EXIF orientation, a 12 MP HEIC stored so too, a "
                   "4K PNG and a 12 MP WebP, each sideways one also asked upright and as stored; as-sent-no-heic: the same "
                   "without the HEIC, which Pillow-only peers cannot read; results tagged with the set's name)")
    p.add_argument("--systems", type=_names, help=f"comma-separated subset of {','.join(SYSTEMS)} (default: all)")
    p.add_argument(
        "--central-figure",
        action="store_true",
        help=f"the central figure: only torchserve_default and ours at concurrency {CENTRAL_FIGURE_CONCURRENCY}",
    )
    p.add_argument(
        "--tuned-vs-generated",
        action="store_true",
        help="only ours with the generated config and ours with the "
        "tuned one (--tuned-config), in alternating rounds; results tagged tuned-<model>",
    )
    p.add_argument(
        "--gpu",
        action="store_true",
        help=f"every system on the GPU (CUDA): ours with TensorRT fp16 (AOTInductor "
        f"fp16 where torch_tensorrt is missing) and GPU preprocessing; {GPU.jobs} jobs at concurrency {GPU.concurrency}",
    )
    p.add_argument("--backend", choices=BACKENDS, help="our archive's backend (default aoti; --gpu: tensorrt where it imports)")
    p.add_argument("--precision", choices=BUILD_PRECISIONS, help="our archive's precision (default fp32; --gpu: fp16; auto: "
                   "what `tsvk archive` chooses on this machine)")
    p.add_argument(
        "--fast-backend", choices=BACKENDS, help=f"the ours_fast and ceiling_fast rows' backend (default {defaults.FAST_BACKEND})"
    )
    p.add_argument("--fast-precision", choices=BUILD_PRECISIONS, help=f"their precision (default {defaults.FAST_PRECISION}; "
                   "auto as for --precision)")
    p.add_argument("--ours-workers", type=_positive, help="override the workers `tsvk config` plans for ours (default: its plan)")
    p.add_argument(
        "--tuned-config",
        type=Path,
        help="the config whose tuned numbers the ours_tuned system serves (default "
        f"{defaults.TUNE_OUTPUT}; left out of the run when it has no entry for the model)",
    )
    p.add_argument("--vcpus", type=_positive, help="vCPUs to plan for (default: detected)")
    p.add_argument(
        "--warmup", type=int, help="unmeasured requests before each served system's load (default 2 x min(concurrency, 2 x batch))"
    )
    p.add_argument(
        "--warmup-seconds",
        type=_seconds,
        help="seconds of unmeasured full load after those, before each round's "
        f"measured load (default {WARMUP_SECONDS:g} with --round-seconds above 0, else 0)",
    )
    p.add_argument("--ceiling-seconds", type=float, help="seconds per batch size in the ceiling probe")
    p.add_argument("--output-dir", type=Path, default=Path("benchmarks/results"))
    p.add_argument("--cache-dir", type=Path, default=Path(defaults.BENCH_CACHE_DIR), help="weights, archives and run logs")
    p.add_argument(
        "--tag",
        help="results/<timestamp>-<tag>.* and latest-<tag>.* (default: none; 'quick' with --quick, 'central' with --central-figure)",
    )
    p.add_argument(
        "--render",
        type=Path,
        metavar="RESULT_JSON",
        help="measure nothing: rewrite RESULT_JSON's report (ratios, goals, Markdown, chart) from its measurements",
    )
    p.add_argument("--prepare-only", action="store_true", help="build the weights, archives and photos the systems need, measure nothing")
    return p


def options_from_args(args: argparse.Namespace, argv: list[str]):
    systems, concurrency, tag = args.systems, args.concurrency, args.tag
    if args.central_figure:
        systems = systems or CENTRAL_FIGURE_SYSTEMS
        concurrency = concurrency or CENTRAL_FIGURE_CONCURRENCY
        tag = tag if tag is not None else "central"
    preset = QUICK if args.quick else GPU if args.gpu else FULL
    if args.tuned_vs_generated:
        systems = systems or TUNED_VS_GENERATED_SYSTEMS
        tag = tag if tag is not None else f"tuned-{args.model or preset.model}"
    if tag is None:  # latest.* is the preset's model: another model's run gets its own latest-<model>.*
        other_model = args.model if args.model and args.model != preset.model else ""
        photos = args.photos if args.photos != DEFAULT_PHOTOS else ""
        tag = "-".join(name for name, on in ((other_model, other_model), (photos, photos), ("gpu", args.gpu), ("quick", args.quick)) if on)
    images = tuple(i.strip() for i in args.image.split(",") if i.strip()) if args.image else None
    return with_preset(
        preset,
        **_gpu_overrides(args),
        model=args.model,
        jobs=args.jobs,
        concurrency=concurrency,
        rounds=args.rounds,
        round_seconds=args.round_seconds,
        decentralized_jobs=args.decentralized_jobs,
        images=images,
        photos=args.photos,
        systems=systems,
        vcpus=args.vcpus,
        ours_workers=args.ours_workers,
        tuned_config=args.tuned_config,
        fast_backend=args.fast_backend,
        fast_precision=_resolved(args.fast_precision, args.fast_backend or defaults.FAST_BACKEND, "cpu", args.model),
        warmup=args.warmup,
        warmup_seconds=args.warmup_seconds,
        ceiling_seconds=args.ceiling_seconds,
        output_dir=args.output_dir,
        cache_dir=args.cache_dir,
        tag=tag or "",
        quick=args.quick,
        command=("tsvk bench " + shlex.join(argv)).strip(),
    )


def _gpu_overrides(args: argparse.Namespace) -> dict:
    """What --gpu changes: device, precision and (unless named) the backend, with the reason for it."""
    if not args.gpu:
        return {"backend": args.backend, "precision": _resolved(args.precision, args.backend or defaults.BACKEND, "cpu", args.model)}
    if args.backend:
        backend, note = args.backend, "as asked"
    else:
        backend, note = gpu_backend()
    precision = _resolved(args.precision, backend, "cuda", args.model)
    return {"device": "cuda", "backend": backend, "backend_note": note, "precision": precision or "fp16"}


def _resolved(precision: str | None, backend: str, device: str, model: str) -> str | None:
    """--precision auto as `tsvk archive` resolves it on this machine (said once), so each row names what it ran."""
    if precision != AUTO:
        return precision
    from ...archive.build import BuildRequest, requested_task  # torch: only once a build is asked for

    choice = choose_precision(AUTO, get_backend(backend), device, requested_task(BuildRequest(model=model)))
    print(f"bench: {model} {backend}: {choice.describe()}")
    return choice.chosen


def render_existing(path: Path, tag: str) -> int:
    """Rewrite <stem>.md/.png (and latest[-tag].*) of an existing result, recomputing what is derived."""
    import json

    if not path.is_file():
        print(f"tsvk bench: error: {path} does not exist", file=sys.stderr)
        return 2
    result = refresh(json.loads(path.read_text()))
    written = write_outputs(result, path.parent, tag or result["options"].get("tag", ""))
    print("wrote " + ", ".join(str(p) for p in written.values()))
    return 0


def _interrupt_on_sigterm() -> None:
    """`kill <pid>` then unwinds like Ctrl+C, so every started server is stopped on the way out."""

    def handler(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, handler)


def benchmark_module(name: str):
    """The module of the narrower benchmark `tsvk bench <name>`."""
    return importlib.import_module(f"{__package__}.{BENCHMARKS[name][0]}")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] and argv[0] in BENCHMARKS:
        progress.configure(f"bench {argv[0]}", quiet=False)  # their builds show progress on a terminal
        return benchmark_module(argv[0]).main(argv[1:])
    args = build_parser().parse_args(argv)
    progress.configure("bench", args.quiet)
    if args.render:
        return render_existing(args.render, args.tag or "")
    from .harness import prepare, run_benchmark  # torch: only once a benchmark runs, not for the parser

    try:
        options = options_from_args(args, argv)
        if args.prepare_only:
            prepare(options)
            return 0
        _interrupt_on_sigterm()
        result = run_benchmark(options)
        written = write_outputs(result, options.output_dir, options.tag)
    except UsageError as err:
        print(f"tsvk bench: error: {err}", file=sys.stderr)
        return 2
    print(render_markdown(result))
    print("wrote " + ", ".join(str(p) for p in written.values()))
    failed = [name for name, system in result["systems"].items() if "error" in system]
    if failed:
        print(f"tsvk bench: {len(failed)} system(s) failed: {', '.join(failed)} (see their 'error' in the JSON)", file=sys.stderr)
    return 1 if failed else 0


def register(commands) -> None:
    """`tsvk bench`: every word after it goes to the benchmark's own parser (`build_parser`, or a narrower
    benchmark's), so its options and help are the same as `python -m tsvk_tools.lab.bench.bench_cli`'s."""
    p = commands.add_parser(
        "bench",
        add_help=False,
        prefix_chars=_NO_OPTIONS,
        help="benchmark every way of serving the model, side by side, and the preprocessing, "
        "compile and pinning benchmarks (`tsvk bench --help`)",
    )
    p.add_argument("bench_argv", nargs=argparse.REMAINDER)
    p.set_defaults(func=cmd_bench)


_NO_OPTIONS = "\x00"  # a prefix no argument starts with: argparse then hands every word on, `--help` included


def cmd_bench(args: argparse.Namespace) -> int:
    return main(args.bench_argv)


if __name__ == "__main__":
    sys.exit(main())
