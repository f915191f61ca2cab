"""One decentralized job: a fresh process loads the model, classifies one photo with one thread,
prints one JSON line with its timings, and exits."""

from __future__ import annotations

import time

STARTED = time.monotonic()  # before the heavy imports: they are part of every job's cost

import argparse  # noqa: E402
import json  # noqa: E402
from pathlib import Path  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", required=True)
    parser.add_argument("--weights", type=Path, required=True)
    parser.add_argument("--image", type=Path, required=True)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    args = parser.parse_args(argv)

    import torch

    torch.set_num_threads(args.threads)
    from .eager import EagerClassifier  # timed: the job's import time includes the model code's

    imported = time.monotonic()
    classifier = EagerClassifier(args.model, args.weights, args.device)
    loaded = time.monotonic()
    answer = classifier.classify(args.image.read_bytes())
    done = time.monotonic()
    print(json.dumps({
        "top1": max(answer, key=answer.get),
        "import_s": round(imported - STARTED, 3),
        "load_s": round(loaded - imported, 3),
        "classify_s": round(done - loaded, 3),
        "threads": torch.get_num_threads(),
        "device": str(classifier.device),
    }))


if __name__ == "__main__":
    main()
