"""Each task's preprocessing, as the archive records it: from a torchvision builder's weights and model
(`weights`), or from a model file's --resize/--crop/--mean/--std (`custom`, duck-typed `CustomModel`)."""

from __future__ import annotations

from tsvk.common import INTERPOLATIONS, PreprocessSettings

from .. import defaults
from ..errors import UsageError


def preprocess_from_weights(meta_weights) -> PreprocessSettings:
    """Resize, crop, mean, std and interpolation exactly as the weights were trained with."""
    t = meta_weights.transforms()
    interpolation = t.interpolation.value
    if interpolation not in INTERPOLATIONS:
        raise UsageError(f"{meta_weights} uses {interpolation} interpolation; supported: {', '.join(INTERPOLATIONS)}")
    return PreprocessSettings(
        resize=int(t.resize_size[0]),
        crop=int(t.crop_size[0]) if hasattr(t, "crop_size") else 0,  # segmentation weights keep the whole image
        mean=tuple(float(v) for v in t.mean),
        std=tuple(float(v) for v in t.std),
        interpolation=interpolation,
        antialias=bool(t.antialias),
    )


def classifier_weights(model, meta_weights) -> PreprocessSettings:
    """The weights' transforms: resize, center crop, normalize."""
    return preprocess_from_weights(meta_weights)


def segmenter_weights(model, meta_weights) -> PreprocessSettings:
    """The weights' resize and normalization, the whole photo kept (no crop), up to SEGMENT_MAX_SIDE."""
    preprocess = preprocess_from_weights(meta_weights)
    return PreprocessSettings(resize=preprocess.resize, crop=0, max_size=defaults.SEGMENT_MAX_SIDE, mean=preprocess.mean,
                              std=preprocess.std, interpolation=preprocess.interpolation, antialias=preprocess.antialias)


def detector_weights(model, meta_weights=None) -> PreprocessSettings:
    """What the detector's GeneralizedRCNNTransform does first: normalize, then resize without antialias to
    min_size/max_size (or fixed_size); tsvk does the same before the model and maps boxes back after."""
    transform = model.transform
    fixed = tuple(int(v) for v in transform.fixed_size) if transform.fixed_size else ()
    return PreprocessSettings(resize=int(transform.min_size[-1]), crop=0, max_size=int(transform.max_size), fixed_size=fixed,
                              mean=tuple(float(v) for v in transform.image_mean), std=tuple(float(v) for v in transform.image_std),
                              interpolation="bilinear", antialias=False)


def classifier_custom(custom, model) -> PreprocessSettings:
    base = PreprocessSettings()
    preprocess = PreprocessSettings(resize=custom.resize or base.resize, crop=custom.crop or base.crop,
                                    mean=custom.mean or base.mean, std=custom.std or base.std)
    if preprocess.crop > preprocess.resize:
        raise UsageError(f"--crop ({preprocess.crop}) must not exceed --resize ({preprocess.resize})")
    return preprocess


def segmenter_custom(custom, model) -> PreprocessSettings:
    if custom.crop is not None:
        raise UsageError("--crop does not apply to --task segment: the whole photo is segmented")
    base = PreprocessSettings()
    return PreprocessSettings(resize=custom.resize or defaults.SEGMENT_RESIZE, crop=0, max_size=defaults.SEGMENT_MAX_SIDE,
                              mean=custom.mean or base.mean, std=custom.std or base.std)


def detector_custom(custom, model) -> PreprocessSettings:
    """A detector's own transform says it all: the flags that would contradict it are refused."""
    given = [flag for flag, value in (("--resize", custom.resize), ("--crop", custom.crop), ("--mean", custom.mean),
                                      ("--std", custom.std)) if value is not None]
    if given:
        raise UsageError(f"{', '.join(given)} do not apply to --task detect: a detector's transform (min_size, max_size, "
                         "image_mean, image_std) sets its preprocessing")
    return detector_weights(model)
