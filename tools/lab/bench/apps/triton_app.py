"""Triton Inference Server through PyTriton, as its docs show a Python model: one bound function per model
instance, dynamic batching on, the client sends raw JPEG bytes (BYTES [1] per request) and gets the top-5
labels and probabilities back. The bound function decodes, resizes, crops and normalizes each photo with
Pillow and NumPy and runs the OpenVINO IR (apps/openvino_classifier.py) on the batch Triton formed.

Run with the Python of the venv `make triton-venv` builds (Debian's own python3): PyTriton's Triton
Python stub fails at model load under other CPython 3.11 builds. Started as a script, not a module, so it
imports openvino_classifier from its own folder and needs nothing else of tsvk.
"""

from __future__ import annotations

import argparse

import numpy as np

if __package__:
    from .openvino_classifier import TOPK, add_model_arguments, classifier_from_args
else:  # `python tools/lab/bench/apps/triton_app.py` from the Triton venv, where tsvk is not installed
    from openvino_classifier import TOPK, add_model_arguments, classifier_from_args

IMAGES, LABELS, PROBABILITIES = "images", "labels", "probabilities"  # the names tsvk's Open Inference Protocol front uses


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__)
    add_model_arguments(parser)
    parser.add_argument("--model-name", required=True)
    parser.add_argument("--http-port", type=int, required=True)
    parser.add_argument("--grpc-port", type=int, required=True)
    parser.add_argument("--metrics-port", type=int, required=True)
    parser.add_argument("--instances", type=int, default=1, help="model instances (bound functions), each with its own IR")
    parser.add_argument("--max-batch-size", type=int, default=8)
    parser.add_argument("--max-queue-delay-ms", type=int, default=100)
    return parser


def make_infer(classifier):
    """The bound function: a batch of JPEG bytes in, top-k labels and probabilities out."""
    from pytriton.decorators import batch

    @batch
    def infer(images: np.ndarray):
        pixels = np.stack([classifier.tensor(bytes(row[0])) for row in images])
        probabilities, indices = classifier.top(classifier.logits(pixels))
        labels = np.array([[classifier.labels[i].encode() for i in row] for row in indices], dtype=np.object_)
        return {PROBABILITIES: probabilities.astype(np.float32), LABELS: labels}

    return infer


def main(argv: list[str] | None = None) -> None:
    from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
    from pytriton.triton import Triton, TritonConfig

    args = build_parser().parse_args(argv)
    functions = [make_infer(classifier_from_args(args)) for _ in range(args.instances)]
    config = TritonConfig(http_address="127.0.0.1", http_port=args.http_port, grpc_address="127.0.0.1", grpc_port=args.grpc_port,
                          metrics_address="127.0.0.1", metrics_port=args.metrics_port)
    batcher = DynamicBatcher(max_queue_delay_microseconds=args.max_queue_delay_ms * 1000)
    with Triton(config=config) as triton:
        triton.bind(model_name=args.model_name, infer_func=functions,
                    inputs=[Tensor(name=IMAGES, dtype=np.bytes_, shape=(1,))],
                    outputs=[Tensor(name=PROBABILITIES, dtype=np.float32, shape=(TOPK,)),
                             Tensor(name=LABELS, dtype=np.bytes_, shape=(TOPK,))],
                    config=ModelConfig(max_batch_size=args.max_batch_size, batcher=batcher))
        triton.serve()


if __name__ == "__main__":
    main()
