"""The archives robustness and soak runs serve: built here once per version of the handler's sources, with random
or seeded decisive weights; an archive the user put in the store is served as it is.

Building and reading archives imports torch (tools/archive's build), so the commands import this module when they
run, not when their parsers are built.
"""

from __future__ import annotations

from pathlib import Path

from ... import defaults
from ...archive.archive_info import handler_differences
from ...archive.build import BuildRequest
from ...archive.models import torchvision_builders
from ...archive.pack import build_archive, handler_sources
from ...fsutil import atomic_path
from ..bench.assets import sources_digest
from .task_weights import decisive_weights
from tsvk.common import task_kind

SOURCES_SUFFIX = ".sources"  # beside an archive built here: the digest of the handler sources it packs


TASK_BACKEND = "eager"  # the attacks aim at decoding, options and answers, not the compiled graph
# A detector with random weights scores every box about 1/91: an archive whose score threshold (and so
# the model's own floor) is below that answers every image with the model's cap of boxes, each with its
# mask, the most an answer can cost. (Decisive weights, as the segmenter gets, fail the R-CNN's
# box-matching verification: its many near-tied boxes are kept in a different order.)
DETECTOR_SCORE_THRESHOLD = 0.005


def ensure_task_archive(store: Path, builder: str) -> str:
    """A detector's archive with random weights answering every box it finds (see above), or a
    segmenter's with seeded decisive weights, on the eager backend; its name."""
    if task_kind(torchvision_builders().get(builder, defaults.TASK)).image_list:  # a detector
        ensure_archive(store, builder, "none", backend=TASK_BACKEND, score_threshold=DETECTOR_SCORE_THRESHOLD)
        return builder
    store.mkdir(parents=True, exist_ok=True)
    weights = store / f"{builder}.weights.pt"
    if not weights.is_file():
        with atomic_path(weights) as partial:  # an interrupted save must not be taken for the weights next time
            decisive_weights(builder, partial, std=1.0)
    ensure_archive(store, builder, str(weights), backend=TASK_BACKEND)
    return builder


def ensure_archive(store: Path, model: str, weights: str = "none", **options) -> Path:
    """The store holding `<model>.mar`: as given, or built here from torchvision with random weights
    (speed and robustness do not depend on the weights' values). An archive built here earlier is
    built again once the handler's sources have changed, so a run never measures yesterday's handler;
    an archive the user put there is served as it is, with a warning when it packs another handler."""
    archive, stamp = store / f"{model}.mar", store / f"{model}{SOURCES_SUFFIX}"
    digest = sources_digest()
    if archive.is_file() and not stamp.is_file():
        _warn_if_other_handler(archive)
        return store
    if archive.is_file() and stamp.read_text() == digest:
        return store

    why = "the handler changed since it was built" if archive.is_file() else f"weights: {weights}"
    print(f"robustness: building {archive} ({why})", flush=True)
    build_archive(BuildRequest(model=model, weights=weights, **options), store, force=archive.is_file())
    stamp.write_text(digest)
    return store


def served_handler_differences(store: Path, model: str) -> list[str]:
    """Files of the handler's package that differ between the served archive and this checkout."""
    return handler_differences(store / f"{model}.mar", handler_sources()[1])


def _warn_if_other_handler(archive: Path) -> None:
    differing = served_handler_differences(archive.parent, archive.stem)
    if differing:
        print(
            f"robustness: WARNING: {archive} was not built by this tool and packs a handler that differs from this "
            f"checkout's in {len(differing)} files ({', '.join(differing[:5])}{', ...' if len(differing) > 5 else ''}); "
            "the run measures that archive's handler. Delete it to have one built from this checkout.",
            flush=True,
        )
