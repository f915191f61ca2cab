"""Send one image to the running TorchServe, with the inference key when token auth is on."""

from __future__ import annotations

import argparse
import json
import ssl
import time
import urllib.error
import urllib.request
from pathlib import Path

from tsvk.common import ServedConfig
from tsvk.worker import ARRIVAL_HEADER

from .. import defaults
from ..errors import UsageError
from ..images import image_bytes
from ..keys import call_with_fresh_key
from ..engines.registry import find_serving
from ..oip.client import predict_oip
from ..tls import raise_if_unverified


PREDICT_PROTOCOLS = ("predictions", "oip-rest", "oip-grpc")


def predict(run_dir: Path, image: str, model: str | None = None, protocol: str = "predictions") -> str:
    if protocol != "predictions":
        run, model = _running_model(run_dir, model)
        return predict_oip(run, model, image_bytes(image), grpc=protocol == "oip-grpc")
    _, answer = ask(run_dir, image, model)
    return json.dumps(answer, indent=2)


def ask(run_dir: Path, image: str, model: str | None = None) -> tuple[bytes, object]:
    """The image's bytes as sent, and the running model's answer to them (parsed JSON)."""
    run, model = _running_model(run_dir, model)
    url, body = f"{run.url('inference')}/predictions/{model}", image_bytes(image)
    status, answer = call_with_fresh_key(lambda auth: _post(url, body, auth, run.client_tls), run.run_dir)
    if status != 200:
        raise UsageError(f"{model} answered {status}: {answer.decode(errors='replace')}")
    return body, json.loads(answer)


def _running_model(run_dir: Path, model: str | None):
    """The server `tsvk serve` started from `run_dir` (either engine), and the model to ask (the first configured one by default)."""
    run = find_serving(run_dir)
    if run is None:
        raise UsageError(f"no server started from {run_dir} is running; `tsvk serve` first")
    model = model or next(iter(ServedConfig.of(run.properties).model_names), None)
    if not model:
        raise UsageError("no model named and none configured; pass --model <name>")
    return run, model


def _post(url: str, body: bytes, auth: dict[str, str], tls: ssl.SSLContext) -> tuple[int, bytes]:
    """One POST stamped with its start time (X-Request-Start), so a server deadline can apply; `tls` verifies an https
    server (the run's certificate_file: tools/tls.py)."""
    headers = {"Content-Type": "application/octet-stream", ARRIVAL_HEADER: f"t={time.time():.6f}", **auth}
    request = urllib.request.Request(url, data=body, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=120, context=tls) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()
    except urllib.error.URLError as err:
        raise_if_unverified(url, err)
        raise UsageError(f"{url} did not answer: {err.reason}") from None


def register(commands) -> None:
    p = commands.add_parser("predict", help="classify an image with the running TorchServe")
    p.add_argument("--image", default=defaults.IMAGE, help="an image file, or skimage:<name> (chelsea, coffee, astronaut)")
    p.add_argument("--model", help="model name (default: the first in the running config)")
    p.add_argument("--run-dir", type=Path, default=Path(defaults.RUN_DIR))
    p.add_argument("--protocol", choices=("predictions", "oip-rest", "oip-grpc"), default="predictions",
                   help="predictions (TorchServe's /predictions, default), or the Open Inference Protocol front over REST "
                        "or gRPC (tritonclient; the server must run a config from `tsvk config --protocol oip`)")
    p.set_defaults(func=cmd_predict)


def cmd_predict(args: argparse.Namespace) -> int:
    print(predict(args.run_dir, args.image, args.model, args.protocol))
    return 0
