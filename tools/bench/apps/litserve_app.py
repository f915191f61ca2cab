"""LitServe with dynamic batching (max_batch_size 8, batch_timeout 0.1 s), as its docs show it:
base64 JPEG in a JSON body, decoded and transformed per request, the model run per batch."""

from __future__ import annotations

import argparse
import base64
from pathlib import Path

import torch

from .eager import EagerClassifier


def make_api(model: str, weights: Path, max_batch_size: int, batch_timeout: float):
    import litserve as ls

    class ImageClassifierAPI(ls.LitAPI):
        def setup(self, device):
            self.classifier = EagerClassifier(model, weights)

        def decode_request(self, request):
            return self.classifier.tensor(base64.b64decode(request["image"]))

        def batch(self, inputs):
            return torch.stack(inputs)

        def predict(self, batch):
            return self.classifier.logits(batch)

        def unbatch(self, output):
            return self.classifier.answers(output)

        def encode_response(self, output):
            return output

    return ImageClassifierAPI(max_batch_size=max_batch_size, batch_timeout=batch_timeout, api_path="/predict")


def main(argv: list[str] | None = None) -> None:
    import litserve as ls

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", required=True)
    parser.add_argument("--weights", type=Path, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--max-batch-size", type=int, default=8)
    parser.add_argument("--batch-timeout", type=float, default=0.1)
    parser.add_argument("--timeout", type=float, default=300)
    args = parser.parse_args(argv)
    api = make_api(args.model, args.weights, args.max_batch_size, args.batch_timeout)
    server = ls.LitServer(api, accelerator="cpu", timeout=args.timeout)
    server.run(host="127.0.0.1", port=args.port, generate_client_file=False, log_level="warning")


if __name__ == "__main__":
    main()
