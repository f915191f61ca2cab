"""Send one image to the running TorchServe, with the inference key when token auth is on."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

from .errors import UsageError
from .images import image_bytes
from .server import find_running


def predict(run_dir: Path, image: str, model: str | None = None) -> str:
    run = find_running(run_dir)
    if run is None:
        raise UsageError(f"no TorchServe started from {run_dir} is running; `make serve` first")
    model = model or next(iter(json.loads(run.properties.get("models", "{}"))), None)
    if not model:
        raise UsageError("no model named and none configured; pass MODEL=<name>")
    request = urllib.request.Request(
        f"{run.url('inference')}/predictions/{model}", data=image_bytes(image), method="POST",
        headers={"Content-Type": "application/octet-stream", **run.headers("inference")},
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return json.dumps(json.loads(response.read()), indent=2)
    except urllib.error.HTTPError as err:
        raise UsageError(f"{model} answered {err.code}: {err.read().decode(errors='replace')}") from err
