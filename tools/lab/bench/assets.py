"""What every system shares, built once and cached: one set of weights, two archives, the photos.

All systems load the same state_dict (random weights with a fixed seed: no pretrained weights can be
downloaded here), so their answers are comparable. Our archive is rebuilt only when the weights, the
handler code, the compile backends or torch change (an AOTInductor compile of ResNet-152 takes minutes).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tsvk.common import ServingDefaults, TASK_KINDS as TASKS, task_kind
from tsvk import tasks  # its names import torch on first use, not with this module

from ...archive.pack import build_archive, handler_sources
from ...archive.build import BuildRequest
from ...errors import UsageError
from ...fsutil import atomic_path, scratch_dir
from ...images import image_bytes, image_name
from ...archive.models import WEIGHTS_NONE, torchvision_builders
from .apps.eager import load_eager_model
from . import sent_photos
from .options import BenchOptions

WEIGHTS_SEED = 0
STOCK_HANDLER = "image_classifier"  # TorchServe's built-in handler
STOCK_TASK_HANDLERS = {"detect": "object_detector", "segment": "image_segmenter"}  # its built-in handlers for the others
STOCK_MODEL_FILE = '''"""{builder} as a TorchServe model file: one class, built without arguments (TorchServe's eager path)."""
import torch
import torchvision


class TorchvisionModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.model = torchvision.models.get_model("{builder}", weights=None, {backbone}num_classes={classes})

    def forward(self, images):
        return self.model(images)
'''
STOCK_CROP = 224  # TorchServe's image_classifier hard-codes Resize(256) + CenterCrop(224)


@dataclass(frozen=True)
class Photo:
    name: str
    data: bytes  # what is sent: a JPEG, or (photos as sent) a HEIC, PNG or WebP
    file: Path  # the same bytes on disk, for one-process-per-job runs
    kind: str = ""  # what the photo is (photos as sent: size, format, scan, orientation)
    upright: Path | None = None  # a sideways photo's pixels turned upright, no EXIF (orientation.py)
    stored: Path | None = None  # a sideways photo's stored pixels without its EXIF (and a HEIC's rotation)


def model_dir(options: BenchOptions) -> Path:
    return Path(options.cache_dir).resolve() / options.model


def shared_weights(options: BenchOptions) -> Path:
    """A seeded random state_dict for the model, written once."""
    import torch

    path = model_dir(options) / "weights.pt"
    if path.is_file():
        return path
    _check_torchvision_model(options.model)
    torch.manual_seed(WEIGHTS_SEED)
    model = tasks.torchvision_model(options.task, options.model, num_classes=len(labels_for(options.model)))
    with atomic_path(path) as tmp:
        torch.save(model.state_dict(), tmp)
    return path


def _check_torchvision_model(name: str) -> None:
    if name not in torchvision_builders():
        raise UsageError(f"--model must be a torchvision classification, detection or segmentation model (resnet18, "
                         f"fasterrcnn_mobilenet_v3_large_320_fpn, deeplabv3_mobilenet_v3_large, ...), got {name!r}")


def labels_for(model: str) -> list[str]:
    import torchvision.models as tvm

    return list(tvm.get_model_weights(model).DEFAULT.meta["categories"])


def file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def sources_digest() -> str:
    """The handler, its run-time package and the compile backends: what ends up in our archive."""
    handler, package = handler_sources()
    backends = Path(__file__).resolve().parents[2] / "archive" / "backends"
    handlers = [handler.parent / kind.handler_file for kind in TASKS.values()]
    files = [*handlers, *sorted(package.rglob("*.py")), *sorted(backends.rglob("*.py"))]
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()


def _torch_version() -> str:
    import torch

    return str(torch.__version__)


def ours_archive(options: BenchOptions, weights: Path) -> Path:
    """Our .mar (tsvk archive), cached by what goes into it."""
    key = hashlib.sha256(f"{file_digest(weights)}|{sources_digest()}|{_torch_version()}|{options.batch}".encode()).hexdigest()[:12]
    prefix = f"ours-{options.backend}-{options.device}-{options.precision}-mb{options.max_batch}-"
    store = model_dir(options) / f"{prefix}{key}"
    target = store / f"{options.model}.mar"
    if target.is_file():
        return target
    _remove_stale(model_dir(options), prefix)
    print(f"bench: building our {options.backend} {options.device} {options.precision} archive of {options.model} "
          f"(cached in {store})", flush=True)
    _build_ours(options, weights, store)
    return target


def _build_ours(options: BenchOptions, weights: Path, store: Path) -> None:
    import torch

    request = ours_build_request(options, weights)
    if request.weights == WEIGHTS_NONE:
        torch.manual_seed(WEIGHTS_SEED)  # the builder draws the same random weights as shared_weights did
    build_archive(request, store, force=True)


def ours_build_request(options: BenchOptions, weights: Path):
    """`tsvk archive` for this run: its backend, device and precision, verified against eager as always.

    int8 and detectors are built from `--weights none` reseeded (`_build_ours`, the same weights): a weights
    file counts as trained weights, whose int8 build needs labelled photos to verify accuracy against and
    whose detector boxes must match eager's; these weights are random, score every box alike to about six
    digits, and which of those near-ties a detector keeps turns on float rounding."""
    return BuildRequest(
        model=options.model, backend=options.backend, device=options.device, precision=options.precision,
        max_batch=options.max_batch,
        weights=WEIGHTS_NONE if options.precision == "int8" or options.task == "detect" else str(weights),
        serving=ServingDefaults(batch_size=options.batch),
    )


def _remove_stale(parent: Path, prefix: str) -> None:
    """Older builds of the same kind: an AOTInductor ResNet-152 archive is a quarter of a GiB."""
    if parent.is_dir():
        for old in parent.glob(f"{prefix}*"):
            shutil.rmtree(old, ignore_errors=True)


def stock_archive(options: BenchOptions, weights: Path) -> Path:
    """What a TorchServe user builds by the book: a traced TorchScript model + the built-in image_classifier."""
    key = hashlib.sha256(f"{file_digest(weights)}|{_torch_version()}".encode()).hexdigest()[:12]
    store = model_dir(options) / f"stock-{key}"
    target = store / f"{options.model}.mar"
    if target.is_file():
        return target
    _remove_stale(model_dir(options), "stock-")
    with scratch_dir(model_dir(options), ".stock-build-") as work:
        labels = work / "index_to_name.json"
        labels.write_text(json.dumps({str(i): name for i, name in enumerate(labels_for(options.model))}))
        if task_kind(options.task).top_k:  # TorchServe's built-in image_classifier answers it
            _archive_stock(options.model, _trace_eager(options.model, weights, work / "model.pt"), labels, work / "export")
        else:
            _archive_stock_task(options, weights, labels, work)
        store.mkdir(parents=True, exist_ok=True)
        shutil.move(str(work / "export" / f"{options.model}.mar"), target)
    return target


def _trace_eager(model_name: str, weights: Path, output: Path) -> Path:
    import warnings

    import torch

    model = load_eager_model(model_name, weights)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # torch.jit is deprecated in 2.14; the stock path still uses it
        traced = torch.jit.trace(model, torch.randn(2, 3, STOCK_CROP, STOCK_CROP))
        torch.jit.save(traced, str(output))
    return output


def _archive_stock(name: str, serialized: Path, labels: Path, export: Path) -> None:
    export.mkdir(parents=True)
    command = [
        sys.executable, "-m", "model_archiver.model_packaging", "--model-name", name, "--version", "1.0",
        "--serialized-file", str(serialized), "--handler", STOCK_HANDLER, "--extra-files", str(labels),
        "--export-path", str(export),
    ]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise UsageError(f"torch-model-archiver failed for the stock archive: {done.stderr.strip() or done.stdout.strip()}")


def _archive_stock_task(options: BenchOptions, weights: Path, labels: Path, work: Path) -> None:
    """TorchServe's own recipe for a detector or segmenter: a model file and a state_dict, its built-in handler."""
    _archive_eager(options, weights, labels, work, STOCK_TASK_HANDLERS[options.task])


def _archive_eager(options: BenchOptions, weights: Path, labels: Path, work: Path, handler: str,
                   model_config: Path | None = None) -> None:
    """A model file and a state_dict with a built-in handler (TorchServe's eager path), and its model-config.yaml."""
    import torch

    model_file = work / "model.py"
    backbone = "weights_backbone=None, " if task_kind(options.task).backbone_weights else ""  # a classifier's builder takes none
    model_file.write_text(STOCK_MODEL_FILE.format(builder=options.model, classes=len(labels_for(options.model)), backbone=backbone))
    state = {f"model.{key}": value for key, value in torch.load(weights, weights_only=True).items()}
    torch.save(state, work / "model.pth")
    export = work / "export"
    export.mkdir(parents=True)
    command = [
        sys.executable, "-m", "model_archiver.model_packaging", "--model-name", options.model, "--version", "1.0",
        "--model-file", str(model_file), "--serialized-file", str(work / "model.pth"),
        "--handler", handler, "--extra-files", str(labels), "--export-path", str(export),
        *(["--config-file", str(model_config)] if model_config else []),
    ]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise UsageError(f"torch-model-archiver failed for the stock archive: {done.stderr.strip() or done.stdout.strip()}")


def pt2_model_config(backend: str) -> str:
    """model-config.yaml asking TorchServe's base handler to torch.compile the model with `backend`, as
    pytorch/serve 0.12 documents it (examples/pt2; ts/torch_handler/base_handler.py reads `pt2.compile`)."""
    return f"pt2:\n  compile:\n    enable: true\n    backend: {backend}\n"


def pt2_archive(options: BenchOptions, weights: Path, backend: str, handler: Path | None = None) -> Path:
    """The stock image_classifier (or a user's own `handler` file) on the eager model with TorchServe's documented
    `pt2` compile for `backend`."""
    handled = f"|{file_digest(handler)}" if handler else ""
    key = hashlib.sha256(f"{file_digest(weights)}|{_torch_version()}|{backend}{handled}".encode()).hexdigest()[:12]
    prefix = f"pt2-{handler.stem if handler else 'stock'}-{backend}-"  # not "stock-": stock_archive clears those
    store = model_dir(options) / f"{prefix}{key}"
    target = store / f"{options.model}.mar"
    if target.is_file():
        return target
    _remove_stale(model_dir(options), prefix)
    with scratch_dir(model_dir(options), ".pt2-build-") as work:
        labels = work / "index_to_name.json"
        labels.write_text(json.dumps({str(i): name for i, name in enumerate(labels_for(options.model))}))
        config = work / "model-config.yaml"
        config.write_text(pt2_model_config(backend))
        _archive_eager(options, weights, labels, work, str(handler) if handler else STOCK_HANDLER, config)
        store.mkdir(parents=True, exist_ok=True)
        shutil.move(str(work / "export" / f"{options.model}.mar"), target)
    return target


def photos(options: BenchOptions) -> list[Photo]:
    """The photos every system is sent: the real photographs of `images` as JPEG bytes (and files), `skimage:<name>`
    resized to the benchmark size; or, as phones send them, the as-sent set (sent_photos.py)."""
    if options.as_sent:
        return [Photo(sent.photo.name, sent.file.read_bytes(), sent.file, sent.photo.describe(), sent.upright, sent.stored)
                for sent in sent_photos.build_set(Path(options.cache_dir).resolve(), sent_photos.photos_of(options.photos))]
    folder = Path(options.cache_dir).resolve() / "images"
    folder.mkdir(parents=True, exist_ok=True)
    found = []
    for index, spec in enumerate(options.images):
        name, data = image_name(spec), image_bytes(spec, size=options.image_size)
        file = folder / f"{index}-{name}.jpg"
        file.write_bytes(data)
        found.append(Photo(name, data, file))
    return found
