"""Resolve what the user named into an eager model, its task, its preprocessing and its labels.

The task comes from torchvision itself: a builder listed under `torchvision.models.detection` detects,
one under `torchvision.models.segmentation` segments, the others classify; a model file says it with
`--task`. Preprocessing and labels come from the weights' own metadata (ResNet-50's V2 weights resize
to 232, not 256; segmentation weights to 520) or, for detectors, from the model's own transform (the
R-CNNs' 800/1333, SSDlite's fixed 320x320): nothing is hard-coded. Metadata needs no download, so it
is used even when the weights themselves are random. A torchvision model fine-tuned to N classes keeps
its builder's name: its checkpoint's head (or the labels file) says N, and the model is built for N.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tsvk.common import ModelSource, PreprocessSettings, TASKS
from tsvk.tasks import served_form, torchvision_model

from .. import defaults
from ..errors import UsageError, WeightsUnavailable
from .task_builds import TASK_BUILDS, task_build

WEIGHTS_DEFAULT = "DEFAULT"
WEIGHTS_NONE = "none"


@dataclass(frozen=True)
class CustomModel:
    """A user's own model: code file, factory, and the preprocessing it was trained with."""

    file: Path
    factory: str
    resize: int | None = None
    crop: int | None = None
    mean: tuple[float, float, float] | None = None
    std: tuple[float, float, float] | None = None
    labels: Path | None = None
    task: str = defaults.TASK


@dataclass
class ResolvedModel:
    name: str
    model: Any  # torch.nn.Module in eval mode
    source: ModelSource
    preprocess: PreprocessSettings
    labels: list[str]
    weights: dict[str, Any] = field(default_factory=dict)  # provenance: source, random flag
    task: str = defaults.TASK


def torchvision_builders() -> dict[str, str]:
    """Every torchvision builder tsvk serves, with its task, from torchvision's own module lists."""
    import torchvision.models as tvm

    return {name: task.kind.name for task in TASK_BUILDS.values()
            for name in tvm.list_models(module=importlib.import_module(task.torchvision_models))}


def resolve_model(name: str, weights: str = WEIGHTS_DEFAULT, custom: CustomModel | None = None, task: str | None = None,
                  labels: Path | None = None) -> ResolvedModel:
    """Build the eager model (in its served form) with its weights; every failure is a UsageError that says what to do.

    `task` is what the user asked for with --task: required to agree with a torchvision builder's own.
    `labels` names a torchvision builder's classes (a model file's own come in `custom`)."""
    if custom is not None:
        return _resolve_custom(name, weights, custom)
    return _resolve_torchvision(name, weights, task, labels)


def _resolve_torchvision(builder: str, weights: str, asked_task: str | None = None, labels_file: Path | None = None) -> ResolvedModel:
    """A torchvision builder's model; a fine-tuned checkpoint's head, or a labels file, sizes its classes."""
    import torchvision.models as tvm

    builders = torchvision_builders()
    if builder not in builders:
        close = difflib.get_close_matches(builder, sorted(builders), n=3, cutoff=0.6)
        hint = f"; did you mean {', '.join(close)}?" if close else f"; choose one of: {', '.join(sorted(builders))}"
        raise UsageError(f"unknown torchvision model {builder!r} (classification, detection or segmentation){hint}")
    task = builders[builder]
    if asked_task and asked_task != task:
        raise UsageError(f"--task {asked_task} does not fit {builder}, a torchvision {task} model; leave --task out "
                         "for torchvision models (it is read from torchvision), or use --model-file for your own")
    meta_weights = tvm.get_model_weights(builder).DEFAULT
    pretrained = list(meta_weights.meta["categories"])
    model = torchvision_model(task, builder, num_classes=len(pretrained))
    state = None if weights in (WEIGHTS_DEFAULT, WEIGHTS_NONE) else read_state_dict(model, Path(weights))
    labels = _class_labels(builder, weights, head_size(model, state, len(pretrained)), pretrained, labels_file)
    if len(labels) != len(pretrained):
        model = torchvision_model(task, builder, num_classes=len(labels))
    provenance = _load_weights(model, builder, weights, meta_weights, state)
    return ResolvedModel(
        name=builder,
        model=model.eval(),
        source=ModelSource(kind="torchvision", builder=builder),
        preprocess=task_build(task).preprocess(model, meta_weights),
        labels=labels,
        weights=provenance,
        task=task,
    )


def head_size(model, state: dict | None, classes: int) -> int:
    """How many classes a checkpoint's head answers: the first tensor whose outputs differ from `model`'s
    (built for `classes`) in its first dimension alone, as a torchvision model fine-tuned to N classes
    differs (resnet's fc, a detector's cls_score, a segmenter's last conv); `classes` where none differs."""
    if state is None:
        return classes
    for key, expected in model.state_dict().items():
        given = state.get(key)
        if (given is not None and expected.dim() > 0 and expected.shape[0] == classes and given.dim() == expected.dim()
                and given.shape[0] != classes and given.shape[1:] == expected.shape[1:]):
            return int(given.shape[0])
    return classes


def _class_labels(builder: str, weights: str, head: int, pretrained: list[str], labels_file: Path | None) -> list[str]:
    """The served class names: the labels file's, else the pretrained categories, else (a checkpoint with a
    head of its own size and no labels file) the class indices, as TorchServe answers without a label file."""
    if labels_file is None:
        if head == len(pretrained):
            return pretrained
        print(f"--weights {weights} answers {head} classes and no --labels names them: answers name each class by its "
              f"index (0..{head - 1}); give --labels with {head} lines to name them", file=sys.stderr)
        return [str(index) for index in range(head)]
    labels = read_labels(labels_file)
    if weights == WEIGHTS_NONE or len(labels) == head:
        return labels
    if weights == WEIGHTS_DEFAULT:
        raise UsageError(
            f"--labels {labels_file} names {len(labels)} classes, but {builder}'s pretrained weights answer {head}: for {builder} "
            f"fine-tuned to {len(labels)} classes give its checkpoint, --weights path/to/ft.pth (saved with "
            f"torch.save(model.state_dict(), path)); to rename the pretrained classes, give {head} labels")
    raise UsageError(f"--labels {labels_file} names {len(labels)} classes, but the head of --weights {weights} answers {head}: "
                     f"give one label per output of the head, in its order ({head} lines)")


def _load_weights(model, builder: str, weights: str, meta_weights, state: dict | None) -> dict[str, Any]:
    if weights == WEIGHTS_NONE:
        return _random_weights()
    if weights == WEIGHTS_DEFAULT:
        return _download_default(model, builder, meta_weights)
    load_state(model, state, Path(weights))
    return {"source": str(weights), "random": False}


def _download_default(model, builder: str, meta_weights) -> dict[str, Any]:
    try:
        state = meta_weights.get_state_dict(progress=False, check_hash=True)
    except Exception as err:  # noqa: BLE001 - URLError, SSL errors, hash mismatch: all mean "not available here"
        raise WeightsUnavailable(
            f"cannot download the pretrained weights {meta_weights} for {builder} ({type(err).__name__}: {err}). "
            f"Alternatives: --weights path/to/state_dict.pth (a local checkpoint, e.g. one saved with "
            f"torch.save(model.state_dict(), path) where the network works), or --weights none (random "
            f"initialisation: the service runs, its predictions are meaningless)"
        ) from err
    model.load_state_dict(without_unused_aux(model, state))
    return {"source": str(meta_weights), "random": False}


def without_unused_aux(model, state: dict) -> dict:
    """Segmentation checkpoints carry an auxiliary head used only in training; the served model has none."""
    if hasattr(model, "aux_classifier") and getattr(model, "aux_classifier") is None:
        return {key: value for key, value in state.items() if not key.startswith("aux_classifier.")}
    return state


def _random_weights() -> dict[str, Any]:
    print("=" * 78, file=sys.stderr)
    print("--weights none: RANDOM INITIALISATION. This archive's predictions are meaningless;", file=sys.stderr)
    print("it is for testing the serving path only. Recorded in the archive's metadata.", file=sys.stderr)
    print("=" * 78, file=sys.stderr)
    return {"source": "none", "random": True}


def load_state_dict_file(model, path: Path) -> None:
    """Load a local state_dict (or a checkpoint dict holding one); key mismatches are named."""
    load_state(model, read_state_dict(model, path), path)


def read_state_dict(model, path: Path) -> dict:
    """The state_dict in a local file (or in a checkpoint dict holding one), as `model` names its tensors."""
    import torch

    if not path.is_file():
        raise UsageError(f"--weights file {path} does not exist; give a state_dict .pth path, DEFAULT or none")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:
        raise UsageError(f"cannot read --weights file {path} as a torch state_dict (save it with "
                         f"torch.save(model.state_dict(), path)): {err}") from err
    return without_unused_aux(model, _unwrap_checkpoint(state))


def load_state(model, state: dict, path: Path) -> None:
    """`state` into `model`; a mismatch names the keys and shapes, and what to check."""
    fix = ("--model must name the architecture the weights were trained with (e.g. --model resnet18 for a "
           "fine-tuned torchvision resnet18), or give your own model's code with --model-file and --model-factory")
    missing, unexpected = _key_mismatch(model.state_dict(), state)
    if missing or unexpected:
        raise UsageError(
            f"--weights file {path} does not fit the model: missing keys {_abbrev(missing)}, unexpected keys "
            f"{_abbrev(unexpected)}; {fix}")
    try:
        model.load_state_dict(state)
    except RuntimeError as err:  # same keys, different shapes
        raise UsageError(f"--weights file {path} does not fit the model: {err}; {fix}") from err


def _unwrap_checkpoint(state: Any) -> dict:
    if isinstance(state, dict):
        for key in ("state_dict", "model", "model_state_dict"):
            if isinstance(state.get(key), dict):
                state = state[key]
                break
        if state and all(k.startswith("module.") for k in state):  # saved from DataParallel/DDP
            state = {k[len("module."):]: v for k, v in state.items()}
        return state
    raise UsageError(f"--weights must hold a state_dict (a dict of tensors), got {type(state).__name__}")


def _key_mismatch(expected: dict, given: dict) -> tuple[list[str], list[str]]:
    return sorted(set(expected) - set(given)), sorted(set(given) - set(expected))


def _abbrev(keys: list[str], limit: int = 6) -> str:
    shown = ", ".join(keys[:limit]) or "none"
    return f"[{shown}{', ...' if len(keys) > limit else ''}] ({len(keys)})"


def _resolve_custom(name: str, weights: str, custom: CustomModel) -> ResolvedModel:
    if custom.task not in TASKS:
        raise UsageError(f"--task must be one of {', '.join(TASKS)}, got {custom.task!r}")
    model = build_from_file(custom.file, custom.factory)
    try:
        model = served_form(custom.task, model)
    except TypeError as err:
        raise UsageError(f"--task {custom.task}: {err}") from None
    if weights == WEIGHTS_DEFAULT:
        raise UsageError("a custom model has no DEFAULT weights: give --weights path/to/state_dict.pth or --weights none")
    provenance = _random_weights() if weights == WEIGHTS_NONE else None
    if provenance is None:
        load_state_dict_file(model, Path(weights))
        provenance = {"source": str(weights), "random": False}
    preprocess = task_build(custom.task).custom_preprocess(custom, model)
    return ResolvedModel(
        name=name,
        model=model.eval(),
        source=ModelSource(kind="file", file=custom.file.name, factory=custom.factory),
        preprocess=preprocess,
        labels=read_labels(custom.labels) if custom.labels else [],
        weights=provenance,
        task=custom.task,
    )


def build_from_file(file: Path, factory: str):
    """Import `file` and call `factory` (a class or zero-argument function) to get an nn.Module."""
    import torch

    if not file.is_file() or file.suffix != ".py":
        raise UsageError(f"--model-file {file} must be an existing .py file")
    spec = importlib.util.spec_from_file_location(f"tsvk_user_model_{file.stem}", file)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as err:
        raise UsageError(f"--model-file {file} failed to import: {type(err).__name__}: {err}") from err
    if not factory or not hasattr(module, factory):
        found = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_"))
        raise UsageError(f"--model-factory {factory!r} is not defined in {file}; callables there: {', '.join(found) or 'none'}")
    build_model = getattr(module, factory)
    if not callable(build_model):
        raise UsageError(f"--model-factory {factory} in {file} must be a class or zero-argument function, got {type(build_model).__name__}")
    try:
        model = build_model()
    except Exception as err:
        raise UsageError(f"--model-factory {factory}() failed: {type(err).__name__}: {err} (it must take no arguments)") from err
    if not isinstance(model, torch.nn.Module):
        raise UsageError(f"--model-factory {factory}() must return a torch.nn.Module, got {type(model).__name__}")
    return model


def read_labels(path: Path) -> list[str]:
    """TorchServe's index_to_name.json ({"0": "tench"} or {"0": ["n01440764", "tench"]}) or one label per line."""
    if not path.is_file():
        raise UsageError(f"--labels file {path} does not exist")
    text = path.read_text()
    if path.suffix == ".json":
        try:
            mapping = json.loads(text)
            return [_label_text(mapping[str(i)]) for i in range(len(mapping))]
        except (ValueError, KeyError, TypeError) as err:
            raise UsageError(f"--labels {path} must map \"0\"..\"N-1\" to names (TorchServe index_to_name.json): {err}") from err
    labels = [line.strip() for line in text.splitlines() if line.strip()]
    if not labels:
        raise UsageError(f"--labels file {path} is empty")
    return labels


def _label_text(value: Any) -> str:
    return value[-1] if isinstance(value, list) else str(value)
