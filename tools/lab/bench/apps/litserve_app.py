"""LitServe with dynamic batching (max_batch_size 8, batch_timeout 0.1 s), as its docs show it:
base64 JPEG in a JSON body, decoded and transformed per request, the model run per batch."""

from __future__ import annotations

import argparse
import base64
from pathlib import Path

import litserve as ls
import torch

from .eager import EagerClassifier


class ClassifierAPI(ls.LitAPI):
    """A photo decoded per request, the model run per batch, through `self.classifier` (tensor, logits, answers),
    which `setup` builds. Module level: LitServe pickles the API into its inference worker processes."""

    stack = staticmethod(torch.stack)  # per-request tensors -> one batch

    def decode_request(self, request):
        return self.classifier.tensor(base64.b64decode(request["image"]))

    def batch(self, inputs):
        return self.stack(inputs)

    def predict(self, batch):
        return self.classifier.logits(batch)

    def unbatch(self, output):
        return self.classifier.answers(output)

    def encode_response(self, output):
        return output


class ImageClassifierAPI(ClassifierAPI):
    def __init__(self, model: str, weights: Path, **options):
        super().__init__(**options)
        self.model_name, self.weights = model, weights

    def setup(self, device):
        """LitServe names the device of this inference worker: "cpu", or "cuda:N" with accelerator="cuda"."""
        self.classifier = EagerClassifier(self.model_name, self.weights, device)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", required=True)
    parser.add_argument("--weights", type=Path, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--max-batch-size", type=int, default=8)
    parser.add_argument("--batch-timeout", type=float, default=0.1)
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    args = parser.parse_args(argv)
    api = ImageClassifierAPI(args.model, args.weights, max_batch_size=args.max_batch_size,
                             batch_timeout=args.batch_timeout, api_path="/predict")
    server = ls.LitServer(api, accelerator=args.device, timeout=args.timeout)
    server.run(host="127.0.0.1", port=args.port, generate_client_file=False, log_level="warning")


if __name__ == "__main__":
    main()
