"""`tsvk compile` and `tsvk archive`: a model compiled and verified against eager, and packed into a .mar."""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

from tsvk.common import DEVICES, ServingDefaults, TASKS

from .. import defaults
from ..arguments import fraction, non_negative_int, positive_int, request_from, triple
from .backends import BACKENDS
from .backends.aoti import CPU_ISA_SIMDLEN
from .precision import BUILD_PRECISIONS
from ..errors import UsageError
from ..fsutil import scratch_dir
from .verify import Tolerance


def tolerance(text: str) -> Tolerance:
    """--tolerance atol,rtol,min_top1: how close the compiled model's outputs must stay to eager's."""
    try:
        atol, rtol, top1 = (float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be atol,rtol,min_top1 (e.g. 1e-3,1e-3,1.0), got {text!r}") from None
    return Tolerance(atol, rtol, top1)


def register(commands) -> None:
    _register_compile(commands)
    _register_archive(commands)


def build_modules():
    """tools/archive/pack.py, build.py and models.py, which import torch: imported once a build is asked for, so that
    `tsvk --help` and the serving commands start without torch."""
    from . import pack as archive, build, models  # torch: only once a build is asked for

    return archive, build, models


def _add_build_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=defaults.MODEL, help="a torchvision classification, detection or segmentation builder "
                   f"(resnet152, fasterrcnn_mobilenet_v3_large_320_fpn, deeplabv3_mobilenet_v3_large, ...) or, with "
                   f"--model-file, your archive name (default {defaults.MODEL})")
    p.add_argument("--task", choices=TASKS, help="what your --model-file model does (default classify); torchvision builders "
                   "name their own")
    p.add_argument("--score-threshold", type=fraction, default=defaults.SCORE_THRESHOLD,
                   help=f"detection: answers keep boxes scoring at least this; requests may ask for another with the "
                   f"score_threshold option (default {defaults.SCORE_THRESHOLD})")
    p.add_argument("--max-detections", type=positive_int, default=defaults.MAX_DETECTIONS,
                   help=f"detection: at most this many boxes per image; requests may ask for another with the max_detections option "
                   f"(default {defaults.MAX_DETECTIONS})")
    p.add_argument("--backend", choices=list(BACKENDS), help=f"compile backend (default {defaults.BACKEND}; detection models "
                   f"{defaults.DETECT_BACKEND})")
    p.add_argument("--device", default=defaults.DEVICE, choices=DEVICES)
    p.add_argument("--cpu-isa", default=defaults.CPU_ISA, choices=list(CPU_ISA_SIMDLEN),
                   help="--backend aoti --device cpu: the CPU instructions its kernels use; the archive then runs only on CPUs "
                   "that have them: native (this CPU's widest, e.g. AVX-512) or avx2 (any x86-64 CPU with AVX2, for "
                   f"machines other than this one; default {defaults.CPU_ISA})")
    p.add_argument("--precision", default=defaults.BUILD_PRECISION, choices=BUILD_PRECISIONS,
                   help="auto: bf16 where this machine's CPU multiplies bf16 in hardware (AMX or AVX-512 BF16) and the backend "
                   "and task build it, else fp32 (the choice and why are printed and packed in the archive; a bf16 build "
                   "that fails verification gives way to fp32); int8 needs --calibration photos "
                   f"(default {defaults.BUILD_PRECISION})")
    p.add_argument("--max-batch", type=positive_int, default=defaults.MAX_BATCH,
                   help=f"largest batch the artifact accepts (dynamic 1..N; default {defaults.MAX_BATCH})")
    p.add_argument("--weights", default=defaults.WEIGHTS, help="DEFAULT (torchvision pretrained), none (random), or a state_dict path "
                   "(a torchvision builder fine-tuned to N classes: its head says N)")
    p.add_argument("--model-file", type=Path, help="your model's .py file")
    p.add_argument("--model-factory", help="class or zero-argument function in --model-file that builds the model")
    p.add_argument("--resize", type=positive_int, help="custom model: shorter side before the crop")
    p.add_argument("--crop", type=positive_int, help="custom model: square center crop")
    p.add_argument("--mean", type=triple, help="custom model: normalisation mean r,g,b")
    p.add_argument("--std", type=triple, help="custom model: normalisation std r,g,b")
    p.add_argument("--labels", type=Path, help="class names, index_to_name.json or one label per line: your own model's, or a "
                   "torchvision builder's fine-tuned head's (as many as its outputs)")
    p.add_argument("--tolerance", type=tolerance, help="verification tolerance atol,rtol,min_top1 (default by precision; "
                   "int8: only min_top1, the top-1 agreement with fp32 needed on held-out photos: it decides where the "
                   f"photos carry no labels (default {defaults.INT8_MIN_TOP1_AGREEMENT}) and, given, with labels too)")
    p.add_argument(
        "--max-accuracy-drop",
        type=fraction,
        help="with labelled photos (int8's held-out --calibration photos, bf16's --accuracy-photos): how much "
        "top-1 and top-5 accuracy may each fall against eager fp32, as a fraction "
        f"(default int8 {defaults.INT8_MAX_ACCURACY_DROP}: one point; bf16 {defaults.BF16_MAX_ACCURACY_DROP}); "
        "accuracy decides, agreement is reported",
    )
    p.add_argument(
        "--calibration",
        type=Path,
        help="--precision int8: a directory of real photos (a few hundred); "
        f"{defaults.CALIBRATION_SHARE:.0%}% calibrate, the rest verify accuracy",
    )
    p.add_argument(
        "--accuracy-photos",
        type=Path,
        help="--precision bf16 (or auto choosing it): a directory of labelled photos (wnids.txt and <wnid>_ names); "
        "the bf16 classifier's top-1 and top-5 on them are compared with eager fp32's (unlabelled: top-1 agreement)",
    )
    p.add_argument(
        "--batch",
        type=positive_int,
        help=f"suggested serving batch size, at most --max-batch (default: min({defaults.BATCH}, max batch); tsvk config decides)",
    )
    p.add_argument(
        "--max-batch-delay",
        type=non_negative_int,
        default=defaults.MAX_BATCH_DELAY_MS,
        dest="max_batch_delay_ms",
        help=f"suggested ms to wait for a batch to fill (default {defaults.MAX_BATCH_DELAY_MS})",
    )
    p.add_argument(
        "--workers",
        type=positive_int,
        help="suggested workers per model (default: tsvk config plans them: "
        "on the CPU, one single-threaded worker per vCPU, as many as memory holds)",
    )
    p.add_argument("--topk", type=positive_int, default=defaults.TOPK, help=f"classes in each answer (default {defaults.TOPK})")
    p.add_argument(
        "--exact-jpeg-decode",
        action="store_true",
        help="decode large JPEGs at full size instead of a reduced DCT scale (slower; see docs/handler.md)",
    )


def build_request(args: argparse.Namespace):
    _, build, models = build_modules()
    custom_only = [n for n in ("model_factory", "resize", "crop", "mean", "std") if getattr(args, n) is not None]
    if args.model_file is None and custom_only:
        raise UsageError(
            f"--{custom_only[0].replace('_', '-')} applies to your own model code only: add --model-file "
            "path/to/model.py (and --model-factory); a torchvision builder's preprocessing comes with its weights"
        )
    custom = None
    if args.model_file is not None:
        custom = request_from(
            models.CustomModel, args, file=args.model_file, factory=args.model_factory or "", task=args.task or defaults.TASK
        )
    if args.batch is not None and args.batch > args.max_batch:
        raise UsageError(
            f"--batch {args.batch} exceeds --max-batch {args.max_batch}: the artifact only accepts batches up to its max batch"
        )
    batch = args.batch or min(defaults.BATCH, args.max_batch)
    serving = ServingDefaults(batch_size=batch, max_batch_delay_ms=args.max_batch_delay_ms, workers=args.workers)
    return request_from(build.BuildRequest, args, custom=custom, serving=serving, jpeg_dct_scaling=not args.exact_jpeg_decode)


def _register_archive(commands) -> None:
    p = commands.add_parser("archive", help="compile, verify and pack a self-contained .mar")
    _add_build_arguments(p)
    p.add_argument("--model-store", type=Path, default=Path(defaults.MODEL_STORE))
    p.add_argument("--force", action="store_true", help="replace an existing archive")
    p.set_defaults(func=cmd_archive)


def cmd_archive(args: argparse.Namespace) -> int:
    archive, _, _ = build_modules()
    path, result = archive.build_archive(build_request(args), args.model_store, force=args.force)
    size_mb = path.stat().st_size / 2**20
    print(f"wrote {path} ({size_mb:.1f} MiB) in {result.seconds:.1f} s")
    if result.settings.provenance["weights"].get("random"):
        print("NOTE: random weights (--weights none): predictions from this archive are meaningless")
    return 0


def _register_compile(commands) -> None:
    p = commands.add_parser("compile", help="compile and verify a model without packing it")
    _add_build_arguments(p)
    p.add_argument("--output-dir", type=Path, default=Path("build"), help="writes <output-dir>/<model>/ (artifact + report.json)")
    p.set_defaults(func=cmd_compile)


def cmd_compile(args: argparse.Namespace) -> int:
    _, build, _ = build_modules()
    out = args.output_dir / args.model
    with scratch_dir(args.output_dir, f".{args.model}.compile-") as work:
        (work / "out").mkdir()
        result = build.build(build_request(args), work / "out")
        (work / "out" / "report.json").write_text(json.dumps(result.settings.to_dict(), indent=2))
        shutil.rmtree(out, ignore_errors=True)
        (work / "out").rename(out)  # same filesystem: the finished directory appears whole
    print(f"wrote {out}/{result.artifact.name} and report.json in {result.seconds:.1f} s")
    return 0
