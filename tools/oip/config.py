"""What the front serves, read from the TorchServe config: models, their tensors, TorchServe's address, ports.

`tsvk config --protocol oip` writes the front's keys (`tsvk.oip.*`) into the same config.properties
TorchServe starts on; TorchServe ignores them. Each model's tensors come from its archive's settings
(crop size, top-k, number of labels), so model metadata says what the handler checks.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tsvk.common import ServedConfig, read_properties, task_kind
from tsvk.request import oip

from .. import defaults
from ..archive.archive_info import read_archive_settings
from ..archive.mar import ArchiveError, ModelArchive
from ..errors import UsageError
from ..tls import ServedTls, is_https, tls_of
from .connection_bounds import GrpcBounds, HttpBounds

KEY_PREFIX = "tsvk.oip."
ADDRESS_KEY = KEY_PREFIX + "address"
REST_PORT_KEY = KEY_PREFIX + "rest_port"
GRPC_PORT_KEY = KEY_PREFIX + "grpc_port"
MAX_IMAGES_KEY = KEY_PREFIX + "max_images"


@dataclass(frozen=True)
class ModelTensors:
    """One model as the front states it: its name, crop size, answer size, and TorchServe's timeout for it."""

    name: str
    crop: int
    k: int
    timeout_s: float

    def inputs(self) -> list[dict]:
        return [spec.metadata() for spec in oip.input_specs(self.crop)]

    def outputs(self) -> list[dict]:
        return [spec.metadata() for spec in oip.output_specs(self.k)]


@dataclass(frozen=True)
class FrontConfig:
    torchserve_url: str  # TorchServe's inference API, where every image goes
    address: str
    rest_port: int
    grpc_port: int
    max_images: int  # images (or pixel rows) in one request
    max_request_bytes: int  # the largest request body, as TorchServe's max_request_size
    models: tuple[ModelTensors, ...]
    tls: ServedTls | None = None  # the config's key and certificate (tools/tls.py); None: plain text

    @property
    def rest_tls(self) -> bool:
        """The front's REST is https where TorchServe's inference address is (the API it stands beside)."""
        return self.tls is not None and is_https(self.torchserve_url)
    http_bounds: HttpBounds = HttpBounds()  # slow and idle clients on the REST server (`tsvk.http.*`)
    grpc_bounds: GrpcBounds = GrpcBounds()  # and on the gRPC server (`tsvk.grpc.*`)


def is_oip_config(properties: dict[str, str]) -> bool:
    return REST_PORT_KEY in properties


def read_front_config(config_path: Path) -> FrontConfig:
    """The front's settings from a TorchServe config; a config without them is a UsageError saying how to get them."""
    properties = read_properties(Path(config_path))
    if not is_oip_config(properties):
        raise UsageError(f"{config_path} does not serve the Open Inference Protocol; write it with `tsvk config --protocol oip`")
    inference = properties.get("inference_address", defaults.INFERENCE_ADDRESS).replace("://0.0.0.0:", "://127.0.0.1:")
    return FrontConfig(
        torchserve_url=inference,
        address=properties.get(ADDRESS_KEY, defaults.OIP_ADDRESS),
        rest_port=int(properties[REST_PORT_KEY]),
        grpc_port=int(properties.get(GRPC_PORT_KEY, defaults.OIP_GRPC_PORT)),
        max_images=int(properties.get(MAX_IMAGES_KEY, defaults.OIP_MAX_IMAGES)),
        max_request_bytes=int(properties.get("max_request_size", defaults.MAX_REQUEST_MB * 2**20)),
        models=model_tensors(properties),
        tls=tls_of(properties),
        http_bounds=_bounds(HttpBounds, properties, config_path),
        grpc_bounds=_bounds(GrpcBounds, properties, config_path),
    )


def _bounds(kind, properties: dict[str, str], config_path: Path):
    """The config's bounds of `kind` (HttpBounds, GrpcBounds); a bad value is the config's UsageError, naming the key."""
    try:
        return kind.from_properties(properties)
    except ValueError as err:
        raise UsageError(f"{config_path}: {err}") from None


def model_tensors(properties: dict[str, str]) -> tuple[ModelTensors, ...]:
    """The tensors of each classifier the config names (the other tasks are served on /predictions only)."""
    served = ServedConfig.of(properties)
    models = []
    for model in served.models:
        archive = served.archive_of(model)
        tensors = tensors_of(model.name, archive, read_archive_settings(archive), float(model.response_timeout_s))
        if tensors is not None:
            models.append(tensors)
    return tuple(models)


def tensors_of(name: str, archive: Path, settings, timeout_s: float) -> ModelTensors | None:
    """A classifier's tensors; None for the other tasks (their boxes and label maps are not stated here: /predictions
    serves them)."""
    if not task_kind(settings.task).top_k:
        return None
    k = oip.answer_size(settings.runtime.topk, _label_count(archive, settings.labels_file))
    return ModelTensors(name, settings.preprocess.crop, k, timeout_s)


def _label_count(archive: Path, labels_file: str) -> int | None:
    """Classes the archive names (answers hold at most that many); None without a label file."""
    try:
        return ModelArchive(archive).label_count(labels_file)
    except ArchiveError:
        return None
