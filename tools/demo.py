"""`make demo`: archive a model, generate a config, start TorchServe, classify a real photo, stop.

Completes on a machine that cannot download pretrained weights too: it then archives random weights
and says loudly that the predictions are meaningless.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .archive import build_archive
from .archive_info import read_archive_settings
from .build import BuildRequest
from .errors import UsageError
from .predict import predict
from .serving_config import ServingRequest, write_config
from .server import start_torchserve

RANDOM_BANNER = """
###########################################################################
#  DEMO WITH RANDOM WEIGHTS: pretrained weights could not be downloaded,  #
#  so the labels below are MEANINGLESS. The serving path is real. Give    #
#  real weights with `make archive MODEL=... WEIGHTS=path/to/state.pth`.  #
###########################################################################"""


def ensure_archive(model: str, store: Path) -> bool:
    """Build the archive unless one exists; True when its weights are random."""
    mar = store / f"{model}.mar"
    if mar.exists():
        print(f"[demo] reusing {mar} (make clean to rebuild)")
    else:
        try:
            build_archive(BuildRequest(model=model, weights="DEFAULT"), store)
        except UsageError as err:
            if "cannot download" not in str(err):
                raise
            print(f"[demo] {err}\n[demo] falling back to WEIGHTS=none")
            build_archive(BuildRequest(model=model, weights="none"), store)
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
        run.wait_ready(timeout=600)
        print(f"[demo] 4/4 classify {image}")
        if random_weights:
            print(RANDOM_BANNER)
        print(predict(run_dir, image, model))
    finally:
        run.stop()
        print("[demo] TorchServe stopped")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tsvk-demo")
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--image", default="skimage:chelsea")
    parser.add_argument("--model-store", type=Path, default=Path("model_store"))
    parser.add_argument("--config", type=Path, default=Path("configs/demo.properties"))
    parser.add_argument("--run-dir", type=Path, default=Path(".tsvk/demo"))
    args = parser.parse_args(argv)
    try:
        return run_demo(args.model, args.image, args.model_store, args.config, args.run_dir)
    except UsageError as err:
        print(f"[demo] error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
