"""An archive's own service loaded in a worker process, whichever engine started the worker: the archive's directory
first on the import path, the way TorchServe puts it there, so `tsvk` is the archive's copy (checked), and the handler
module the manifest names is imported and must define a tsvk handler class.

Nothing of tsvk's is imported here at module level: the archive's copy must be the one imported, once its directory
is on the path.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import sys
from pathlib import Path
from typing import Any

from ...archive_package import HEAP_MODULES, SERVICE_MODULES, first_module
from .metrics import RecordingMetrics


class _Context:
    """The few fields of TorchServe's context an archive's `VisionService.from_context` reads: for archives built
    before the service had an engine-neutral `load`."""

    def __init__(self, args: argparse.Namespace, yaml_config: dict, metrics: RecordingMetrics):
        self.system_properties = {"model_dir": str(args.model_dir), "gpu_id": args.gpu_id, "batch_size": args.batch_size}
        self.model_yaml_config = yaml_config
        self.model_name = args.model_name
        self.metrics = metrics


def load_service(args: argparse.Namespace, metrics: RecordingMetrics) -> Any:
    """The archive's own service, loaded through its own package (and its handler module, checked to be tsvk's),
    recording its per-batch metrics into `metrics`. `args` is what a worker is started with: model_dir (the archive
    unpacked), handler, settings (its model-config.yaml), model_name, gpu_id, config and batch_size."""
    sys.path.insert(0, str(args.model_dir))
    import yaml  # TorchServe reads model-config.yaml with PyYAML too

    tsvk = importlib.import_module("tsvk")
    if not Path(tsvk.__file__).resolve().is_relative_to(args.model_dir.resolve()):
        raise RuntimeError(f"tsvk was imported from {tsvk.__file__}, not from the archive")
    _check_handler(args.handler)
    service_module = first_module(SERVICE_MODULES)
    yaml_config = yaml.safe_load((args.model_dir / args.settings).read_text()) or {}
    if hasattr(service_module, "ServiceSpec"):
        served = {"served_properties": args.served_properties} if _takes_served_properties(service_module.ServiceSpec) else {}
        spec = service_module.ServiceSpec(args.model_dir, yaml_config, args.model_name, args.gpu_id, args.config, args.batch_size,
                                            metrics=metrics, **served)
        service = service_module.VisionService.load(spec)
    else:
        service = service_module.VisionService.from_context(_Context(args, yaml_config, metrics))
    _freeze_startup_objects()
    return service


def _takes_served_properties(spec_type: type) -> bool:
    """Whether the archive's service takes the config as the server read it (archives built before read the file)."""
    return "served_properties" in {f.name for f in dataclasses.fields(spec_type)}


def _check_handler(handler_file: str) -> None:
    """The manifest's handler module must define a subclass of the archive's tsvk handler."""
    base = importlib.import_module("tsvk.handler").TorchServeHandler
    module = importlib.import_module(Path(handler_file).stem)
    if not any(isinstance(v, type) and issubclass(v, base) and v is not base for v in vars(module).values()):
        raise RuntimeError(f"handler {handler_file} defines no tsvk handler class")


def _freeze_startup_objects() -> None:
    heap = first_module(HEAP_MODULES)
    if hasattr(heap, "freeze_startup_objects"):
        heap.freeze_startup_objects()
