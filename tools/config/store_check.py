"""Before TorchServe starts in a container: is every archive the config loads in its model store?

TorchServe 0.12 starts without an archive it was told to load: it logs the failure, serves the rest and
answers /ping "Healthy". In a pod the startup probe then waits out its whole budget (ten minutes by
default) before anything says why. Checking first turns that into one line naming the archive and an exit,
which the kubelet shows as the container's last state and restarts with a back-off.
"""

from __future__ import annotations

from pathlib import Path

from tsvk.common import ServedConfig, read_properties

# load_models values that name no archive: TorchServe's own keywords.
_KEYWORDS = {"", "all", "standalone"}


def archives_loaded(props: dict[str, str]) -> list[str]:
    """The archive files the config starts, by file name: load_models' entries and the models' marName."""
    files = []
    for item in (part.strip() for part in props.get("load_models", "").split(",")):
        if item in _KEYWORDS or "://" in item:
            continue
        files.append(item.partition("=")[2] or item)
    files += [model.mar_name for model in ServedConfig.of(props).models if model.fields.get("marName")]
    return sorted(set(files))


def missing_archives_message(config: Path, server: str = "TorchServe") -> str | None:
    """A line naming every archive the config loads that its model store lacks; None when all are there."""
    props = read_properties(config)
    store = Path(props.get("model_store", ""))
    missing = [name for name in archives_loaded(props) if not (store / name).is_file()]
    if not missing:
        return None
    present = sorted(p.name for p in store.glob("*.mar")) if store.is_dir() else []
    return (f"tsvk: archive missing: {', '.join(missing)} not in the model store {store} "
            f"(it holds: {', '.join(present) or 'no archive'}); {server} is not started. Deploy an image or a "
            f"volume that holds it (k8s/README.md, \"Deploying to a cluster\").")
