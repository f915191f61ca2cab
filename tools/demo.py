"""`tsvk demo` (`make demo`): archive a model, generate a config, start TorchServe, classify a real photo, stop.

Completes on a machine that cannot download pretrained weights too: it then archives random weights
and says loudly that the predictions are meaningless.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from tsvk import defaults

from .archive import build_archive
from .archive_info import read_archive_settings
from .build import BuildRequest
from .errors import WeightsUnavailable
from .models import WEIGHTS_NONE
from .predict import predict
from .serving_config import ServingRequest, write_config
from .server import start_torchserve

DEMO_CONFIG = Path("configs/demo.properties")
DEMO_RUN_DIR = Path(".tsvk/demo")

RANDOM_BANNER = """
###########################################################################
#  DEMO WITH RANDOM WEIGHTS: pretrained weights could not be downloaded,  #
#  so the labels below are MEANINGLESS. The serving path is real. Give    #
#  real weights: `tsvk archive --model M --weights path/to/state.pth`.    #
###########################################################################"""


def ensure_archive(model: str, store: Path) -> bool:
    """Build the archive unless one exists; True when its weights are random."""
    mar = store / f"{model}.mar"
    if mar.exists():
        print(f"[demo] reusing {mar} (delete it, or `make clean`, to rebuild)")
    else:
        try:
            build_archive(BuildRequest(model=model), store)
        except WeightsUnavailable as err:
            print(f"[demo] {err}\n[demo] falling back to --weights none")
            build_archive(BuildRequest(model=model, weights=WEIGHTS_NONE), store)
    return bool(read_archive_settings(mar).provenance.get("weights", {}).get("random"))


def run_demo(model: str, image: str, store: Path, config: Path, run_dir: Path) -> int:
    print(f"[demo] 1/4 archive {model} into {store}")
    random_weights = ensure_archive(model, store)
    print(f"[demo] 2/4 generate {config}")
    plan = write_config(ServingRequest(models=(model,), model_store=store), config)
    print(f"[demo]     {plan.vcpus} vCPUs: {plan.models[0].workers} worker(s) x {plan.models[0].intra_op_threads} thread(s), batch {plan.models[0].batch}")
    print("[demo] 3/4 start TorchServe and wait for the model")
    run = start_torchserve(config, run_dir)
    try:
        run.wait_ready(timeout=defaults.READY_TIMEOUT_S)
        print(f"[demo] 4/4 classify {image}")
        if random_weights:
            print(RANDOM_BANNER)
        print(predict(run_dir, image, model))
    finally:
        run.stop()
        print("[demo] TorchServe stopped")
    return 0


def register(commands) -> None:
    p = commands.add_parser("demo", help="archive a model, generate a config, start TorchServe, classify a photo, stop")
    p.add_argument("--model", default=defaults.MODEL, help=f"a torchvision classification builder (default {defaults.MODEL})")
    p.add_argument("--image", default=defaults.IMAGE, help="an image file, or skimage:<name> (chelsea, coffee, astronaut)")
    p.add_argument("--model-store", type=Path, default=Path(defaults.MODEL_STORE))
    p.add_argument("--config", type=Path, default=DEMO_CONFIG, help="the config the demo writes")
    p.add_argument("--run-dir", type=Path, default=DEMO_RUN_DIR, help="working dir, logs and key file of the demo's TorchServe")
    p.set_defaults(func=cmd_demo)


def cmd_demo(args: argparse.Namespace) -> int:
    return run_demo(args.model, args.image, args.model_store, args.config, args.run_dir)
