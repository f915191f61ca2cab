"""LitServe with dynamic batching serving the OpenVINO IR, as a LitServe user would wrap it: base64 JPEG in a
JSON body, decoded and transformed per request with Pillow and NumPy (apps/openvino_classifier.py), the IR
run per batch. `--workers` inference workers per CPU, each with its own compiled IR and `--threads` threads.
"""

from __future__ import annotations

import argparse

import litserve as ls
import numpy as np

from .litserve_app import ClassifierAPI
from .openvino_classifier import add_model_arguments, classifier_from_args


class OpenVinoClassifierAPI(ClassifierAPI):
    stack = staticmethod(np.stack)

    def __init__(self, model_args: argparse.Namespace, **options):
        super().__init__(**options)
        self.model_args = model_args

    def setup(self, device):
        self.classifier = classifier_from_args(self.model_args)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    add_model_arguments(parser)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--workers", type=int, default=1, help="LitServe inference workers (workers_per_device on the CPU)")
    parser.add_argument("--max-batch-size", type=int, default=8)
    parser.add_argument("--batch-timeout", type=float, default=0.1)
    parser.add_argument("--timeout", type=float, default=300)
    args = parser.parse_args(argv)
    api = OpenVinoClassifierAPI(args, max_batch_size=args.max_batch_size, batch_timeout=args.batch_timeout, api_path="/predict")
    server = ls.LitServer(api, accelerator="cpu", workers_per_device=args.workers, timeout=args.timeout)
    server.run(host="127.0.0.1", port=args.port, generate_client_file=False, log_level="warning")


if __name__ == "__main__":
    main()
