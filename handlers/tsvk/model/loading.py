"""Load whatever model artifact the archive carries, on the device this worker should use.

One loader per `artifact.format` (aoti, export, tensorrt, torchscript, eager, openvino); each returns
a callable taking one NCHW batch of the artifact's input dtype. Device rules: `cuda:<gpu_id>` when
TorchServe gave this worker a GPU and CUDA works, else CPU; an artifact that needs CUDA fails the
load on a CPU-only worker with a message saying so; an AOTInductor package compiled for the CPU
stays on the CPU even on a GPU worker (it cannot run anywhere else), and so does an OpenVINO one.
Build-time verification (`tsvk_tools.archive.build`) and the compile benchmark load every artifact through
`load_model` too, so what is verified is what is served; `_LOADERS` is the one table of formats.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import logging
import tempfile
import zipfile
from pathlib import Path
from typing import Any, Callable

import torch

from ..common import features
from .cpu_isa import REMEDY, check_package_runs_here
from ..tasks.loaded_model import LoadedModel
from .openvino_detector import attach_openvino_backbone, quantize_box_head
from .openvino_ir import compile_for_cpu
from ..common.settings import ArtifactSettings
from ..common.task_kinds import task_kind
from ..tasks import served_form, task_class, torchvision_model

log = logging.getLogger(__name__)

PRECISION_DTYPES = {
    "fp32": torch.float32,
    "fp16": torch.float16,
    "bf16": torch.bfloat16,
    "int8": torch.float32,  # quantized inside the graph: the input stays fp32
}
CUDA_ONLY_FORMATS = ("tensorrt",)
CPU_ONLY_FORMATS = ("openvino",)
# TensorRT engines and AOTInductor's CUDA kernels run only on the compute capability they were built for.
ARCHITECTURE_BOUND_FORMATS = ("tensorrt", "aoti")
AOTI_MODEL_NAME = "model"  # the name aoti_compile_and_package gives the one model of a package


class ArtifactLoadError(RuntimeError):
    """The artifact cannot be loaded here; the message says what is missing and what would work."""


def worker_device(gpu_id: Any, cuda_available: bool | None = None) -> torch.device:
    """The device TorchServe assigned: cuda:<gpu_id> when there is one and CUDA works, else CPU."""
    cuda_available = features.has_cuda() if cuda_available is None else cuda_available
    if gpu_id is None or gpu_id == "" or not cuda_available:
        return torch.device("cpu")
    return torch.device("cuda", int(gpu_id))


def bind_worker_device(device: torch.device) -> None:
    """Make the worker's GPU the current CUDA device; call it before any CUDA work.

    TorchServe 0.12 tells a worker its `gpu_id` but does not set CUDA_VISIBLE_DEVICES for it, and
    every library here that is not handed a device uses the current one, which is GPU 0 until set:
    CV-CUDA allocates its outputs there while launching on the worker's `cuda:N` stream (cvcuda issue
    #212), Torch-TensorRT builds and deserializes engines there, and a plain "cuda" tensor lands there.
    """
    if device.type != "cuda":
        return
    count = torch.cuda.device_count()
    if device.index is not None and device.index >= count:
        raise ArtifactLoadError(
            f"TorchServe gave this worker gpu_id {device.index} but this process sees {count} CUDA device(s) "
            f"(ids 0..{count - 1}); set number_of_gpu to at most {count}, or check CUDA_VISIBLE_DEVICES"
        )
    torch.cuda.set_device(device)


def model_device(artifact: ArtifactSettings, worker: torch.device) -> tuple[torch.device, str]:
    """Where this artifact runs on this worker, plus a note for the log; fails for CUDA-only artifacts on CPU."""
    needs_cuda = artifact.device == "cuda" or artifact.format in CUDA_ONLY_FORMATS
    if needs_cuda and worker.type != "cuda":
        why = "a tensorrt artifact" if artifact.format in CUDA_ONLY_FORMATS else "compiled for cuda"
        raise ArtifactLoadError(
            f"{artifact.file} is {why} but this worker has no GPU (CUDA available: {features.has_cuda()}); "
            "run it on a GPU worker, or build the archive for the cpu (e.g. format aoti or export, device cpu)"
        )
    if artifact.format == "aoti" and artifact.device == "cpu" and worker.type == "cuda":
        return torch.device("cpu"), f"aoti package compiled for cpu runs on cpu although the worker has {worker}"
    if artifact.format in CPU_ONLY_FORMATS and worker.type == "cuda":
        return torch.device("cpu"), f"{artifact.format} artifacts run on cpu although the worker has {worker}"
    return worker, ""


def gpu_architecture(device: torch.device) -> tuple[str, str]:
    """(name, compute capability as "major.minor") of a CUDA device: what an archive built on it records."""
    major, minor = torch.cuda.get_device_capability(device)
    return torch.cuda.get_device_name(device), f"{major}.{minor}"


def check_gpu_architecture(artifact: ArtifactSettings, device: torch.device) -> None:
    """Refuse, before anything is loaded onto it, a GPU of another architecture than the archive was built on.

    Torch-TensorRT finds no compatible device for an engine built for another compute capability
    (`core/runtime/runtime.cpp` `find_compatible_devices` compares them) and AOTInductor's cubins have no
    kernel image for it: both fail deep inside the load with messages that name neither GPU."""
    if device.type != "cuda" or artifact.format not in ARCHITECTURE_BOUND_FORMATS or not artifact.compute_capability:
        return
    name, capability = gpu_architecture(device)
    if capability != artifact.compute_capability:
        raise ArtifactLoadError(
            f"{artifact.file} ({artifact.format}) was built on {artifact.gpu or 'a GPU'} (compute capability "
            f"{artifact.compute_capability}) and this worker's {device} is {name} (compute capability {capability}); "
            f"{artifact.format} artifacts run only on the architecture they were built for: rebuild the archive on this "
            f"GPU (make archive DEVICE=cuda ...), or serve it on a GPU of compute capability {artifact.compute_capability}"
        )


def load_model(
    artifact: ArtifactSettings, model_dir: Path, worker: torch.device, num_classes: int | None = None, task: str = "classify"
) -> LoadedModel:
    device, note = model_device(artifact, worker)
    check_gpu_architecture(artifact, device)
    path = Path(model_dir) / artifact.file
    if not path.is_file():
        raise ArtifactLoadError(f"artifact file {artifact.file!r} (artifact.file) is not in the archive at {model_dir}")
    loader = _LOADERS[artifact.format]
    dtype = PRECISION_DTYPES[artifact.precision]
    forward = loader(path, device, artifact=artifact, model_dir=Path(model_dir), num_classes=num_classes, dtype=dtype, task=task)
    return LoadedModel(forward, device, dtype, artifact.format, note)


def load_aoti(path: Path, device: torch.device, **_: Any) -> Callable:
    """The package's runner, fed contiguous batches only.

    AOTInductor compiles for the strides it was exported with and checks them only in debug builds
    (AOT_INDUCTOR_DEBUG_COMPILE, torch/_inductor/codegen/cpp_wrapper_cpu.py): a strided view would be
    read as if it were contiguous, wrong logits without an error. `.contiguous()` costs nothing when
    the batch already is."""
    if device.type == "cpu":
        refuse_foreign_cpu_package(path)
    index = device.index if device.type == "cuda" and device.index is not None else -1
    runner = open_aoti_package(str(path), index)
    return lambda batch: runner(batch.contiguous())


def refuse_foreign_cpu_package(path: Path) -> None:
    """An AOTInductor CPU package compiled for instructions this CPU lacks fails here, by name, instead of
    crashing the worker at its first batch (tsvk/model/cpu_isa.py)."""
    problem = check_package_runs_here(path)
    if problem:
        raise ArtifactLoadError(f"{path.name} (aoti, cpu) cannot run on this machine: {problem}. Rebuild the archive: {REMEDY}")


def open_aoti_package(path: str, device_index: int) -> Callable:
    """The package's model through torch's own package loader, the path `aoti_load_package` takes for a package
    without exported programs, minus one detour. `aoti_load_package` (torch 2.14, torch/export/pt2_archive/
    _package.py, `_load_aoti`) loads the package, then probes the CPU's vector ISAs by compiling test programs,
    only to warn when they differ from the build machine's. Without a C++ compiler (the serving image has
    none) the probe raises, `load_package` takes that for an outdated package and loads it again, and the
    first copy's library stays mapped: about 100 MB more per ResNet-50 worker, and a compile at every
    worker start where a compiler exists."""
    from torch._inductor.package import AOTICompiledModel

    return AOTICompiledModel(torch._C._aoti.AOTIModelPackageLoader(path, AOTI_MODEL_NAME, False, 1, device_index))


def load_export(path: Path, device: torch.device, **_: Any) -> Callable:
    return program_on(read_on_cpu(path, torch.export.load), device).module()


_PAYLOAD_CONFIGS = ("_weights_config.json", "_constants_config.json")  # torch/export/pt2_archive/constants.py


def read_on_cpu(path: Path, load: Callable[[str], Any]) -> Any:
    """`load(file)` (torch.export.load, or Torch-TensorRT's load over it) with every weight read into CPU memory.

    torch.export.load has no map_location: torch 2.14.1 `torch/export/pt2_archive/_package.py`
    `_build_file_map` moves each weight to the device recorded when it was saved, so an archive built on
    cuda:0 would make a worker on cuda:N create a context and a copy of every weight on GPU 0 before
    `program_on` moves them. Where a weight or constant is recorded on a CUDA device, the file is loaded
    from a copy whose payload configs say "cpu" instead (the bytes are the same); `program_on` then puts
    them on the worker's device. Example inputs are saved on the CPU by torch itself, and pickled
    constants (Torch-TensorRT's engines) rebuild themselves on the current device, the worker's.
    """
    if not zipfile.is_zipfile(path):
        return load(str(path))  # not a PT2 archive: the loader says what is wrong with it
    with zipfile.ZipFile(path) as archive:
        configs = {name: archive.read(name) for name in archive.namelist() if name.endswith(_PAYLOAD_CONFIGS)}
    mapped = {name: _config_on_cpu(raw) for name, raw in configs.items()}
    if all(mapped[name] == configs[name] for name in configs):
        return load(str(path))
    with tempfile.TemporaryDirectory(prefix="tsvk-load-") as scratch:
        copy = Path(scratch) / path.name
        _copy_archive(path, copy, mapped)
        return load(str(copy))


def _config_on_cpu(raw: bytes) -> bytes:
    config = json.loads(raw)
    changed = False
    for payload in config.get("config", {}).values():
        device = (payload.get("tensor_meta") or {}).get("device") or {}
        if device.get("type") == "cuda":
            payload["tensor_meta"]["device"], changed = {"type": "cpu", "index": None}, True
    return json.dumps(config).encode() if changed else raw


def _copy_archive(source: Path, target: Path, replaced: dict[str, bytes]) -> None:
    with zipfile.ZipFile(source) as old, zipfile.ZipFile(target, "w", zipfile.ZIP_STORED) as new:
        for info in old.infolist():
            new.writestr(info, replaced.get(info.filename) or old.read(info.filename))


def program_on(program: Any, device: torch.device) -> Any:
    """An ExportedProgram moved to `device` with torch.export's own pass.

    `.module().to(device)` moves the weights but not the devices export baked into the graph (a
    `torch.ones(..., device=x.device)` in forward keeps the device it was traced on);
    `torch.export.passes.move_to_device_pass` rewrites those too."""
    from torch.export.passes import move_to_device_pass

    return move_to_device_pass(program, device) if isinstance(program, torch.export.ExportedProgram) else program


def load_torchscript(path: Path, device: torch.device, **_: Any) -> Callable:
    """Import torchvision first: a scripted detector calls its operators (torchvision::nms, roi_align), which
    exist only once torchvision is imported, and a worker has not imported it yet."""
    import torchvision  # noqa: F401 - registers torchvision's TorchScript operators

    return torch.jit.load(str(path), map_location=device).eval()


def load_tensorrt(path: Path, device: torch.device, **_: Any) -> Callable:
    """Import torch_tensorrt first: it registers the TensorRT engine classes and ops the file refers to."""
    try:
        trt = features.optional_module("torch_tensorrt")
    except ImportError as err:
        raise ArtifactLoadError(f"artifact format 'tensorrt' needs torch_tensorrt: {err}") from None
    if path.suffix == ".ts":
        return torch.jit.load(str(path), map_location=device).eval()
    if path.suffix in (".ep", ".pt2"):
        loaded = program_on(read_on_cpu(path, trt.load), device)  # engines run on the current device (the worker's)
        return loaded.module() if hasattr(loaded, "module") else loaded
    raise ArtifactLoadError(f"tensorrt artifact {path.name!r} must end in .ep or .pt2 (ExportedProgram) or .ts (TorchScript)")


def load_openvino(
    path: Path, device: torch.device, *, artifact: ArtifactSettings, model_dir: Path, num_classes: int | None,
    task: str = "classify", **_: Any,
) -> Callable:
    """OpenVINO's CPU plugin with the worker's planned intra-op threads (apply_threads ran before this);
    a detector's artifact is its backbone, run under its eager heads (`tsvk.model.openvino_detector`)."""
    try:
        ov = features.optional_module("openvino")
    except ImportError as err:
        raise ArtifactLoadError(f"{path.name} is an OpenVINO artifact (format 'openvino') and this worker cannot import "
                                f"openvino; install it in the worker's Python: {err}") from None
    kind = task_kind(task)
    if not kind.openvino_backbone:
        return compile_for_cpu(ov, path, torch.get_num_threads())
    detector = build_eager_model(artifact, model_dir, num_classes, task)
    try:
        detector = task_class(task).on_cpu(attach_openvino_backbone(detector, ov, path, torch.get_num_threads()))
        if artifact.precision == "int8":
            quantize_box_head(detector)
        return detector
    except ValueError as err:
        raise ArtifactLoadError(str(err)) from None


def load_eager(
    path: Path, device: torch.device, *, artifact: ArtifactSettings, model_dir: Path,
    num_classes: int | None, dtype: torch.dtype, task: str = "classify", **_: Any,
) -> Callable:
    model = model_holding(read_state_dict(path), artifact, model_dir, num_classes, task)
    model = model.to(device=device, dtype=dtype).eval()
    return task_class(task).on_cpu(model) if device.type == "cpu" else model


def build_eager_model(artifact: ArtifactSettings, model_dir: Path, num_classes: int | None, task: str = "classify") -> torch.nn.Module:
    """The model's structure in its served form (a detector takes prepared images: tasks/detector_model.py)."""
    source = artifact.source
    if source.kind == "torchvision":
        return torchvision_model(task, source.builder, num_classes)
    return served_form(task, _import_factory(model_dir / source.file, source.factory)())


def model_holding(
    state: dict[str, torch.Tensor], artifact: ArtifactSettings, model_dir: Path, num_classes: int | None, task: str,
) -> torch.nn.Module:
    """The eager model with `state` as its tensors. It is built on the meta device first: the structure without
    allocating or randomly initialising weights that the state replaces at once (a cost that grows with the
    model, paid by every worker at every start), then the state's tensors take the places of the parameters
    and buffers. A model that leaves a tensor the state does not hold (a buffer its
    constructor computes and does not save), or whose constructor computes with tensors, is built as before."""
    try:
        with torch.device("meta"):
            model = build_eager_model(artifact, model_dir, num_classes, task)
        model.load_state_dict(state, assign=True)
        if not any(tensor.is_meta for tensor in (*model.parameters(), *model.buffers())):
            return model
    except (RuntimeError, NotImplementedError):  # the constructor computed with a tensor: meta tensors hold no values
        pass
    model = build_eager_model(artifact, model_dir, num_classes, task)
    model.load_state_dict(state)
    return model


def read_state_dict(path: Path) -> dict[str, torch.Tensor]:
    """The saved state's tensors, mapped from the file rather than read into each worker's heap: loading takes a
    fraction of the time (pages are brought in as the first forward touches them), and the workers serving one
    archive share the same page-cache pages for weights they never write (an eager CPU model uses them as they
    are). Only torch's zip format can be mapped: a file saved in its legacy format is read as before."""
    state = torch.load(str(path), map_location="cpu", weights_only=True, mmap=zipfile.is_zipfile(path))
    if isinstance(state, dict) and set(state) == {"state_dict"}:
        state = state["state_dict"]
    if not isinstance(state, dict):
        raise ArtifactLoadError(f"{path.name} must hold a state_dict (a dict of tensors), got {type(state).__name__}")
    return state


def _import_factory(file: Path, name: str) -> Callable[[], torch.nn.Module]:
    if not file.is_file():
        raise ArtifactLoadError(f"model code {file.name!r} (artifact.source.file) is not in the archive")
    spec = importlib.util.spec_from_file_location(f"tsvk_model_{file.stem}", file)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    factory = getattr(module, name, None)
    if factory is None or not callable(factory):
        found = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_"))
        raise ArtifactLoadError(
            f"artifact.source.factory {name!r} is not a class or function in {file.name}; found: {', '.join(found)}"
        )
    if not inspect.isclass(factory) and _required_args(factory):
        raise ArtifactLoadError(f"artifact.source.factory {name!r} must take no arguments")
    return factory


def _required_args(function: Callable) -> list[str]:
    params = inspect.signature(function).parameters.values()
    return [p.name for p in params if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


_LOADERS: dict[str, Callable[..., Callable]] = {
    "aoti": load_aoti,
    "export": load_export,
    "tensorrt": load_tensorrt,
    "torchscript": load_torchscript,
    "eager": load_eager,
    "openvino": load_openvino,
}
