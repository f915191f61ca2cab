"""Preprocessing throughput: each tsvk backend available here against TorchServe's built-in PIL path.

The images are real photographs (scikit-image's bundled samples) resized to 640x480 (`--size`) and
encoded as JPEG, sent in batches of 8 exactly as TorchServe hands them to a handler (a list of
{"data": bytes}). At phone-camera sizes our CPU path decodes at a reduced DCT scale; the same path
with that switched off runs beside it, so its gain is a ratio from the same run too.
The baseline is the `preprocess` of TorchServe's own `image_classifier` handler: per image PIL
decode, Resize(256), CenterCrop(224), ToTensor, Normalize, then stack. Every path does the same
work (same resize/crop/mean/std) and must produce a (batch, 3, 224, 224) tensor; on a GPU the
timing includes a synchronize. Rounds interleave the paths, so a noisy shared machine slows all
of them alike, and the ratios come from one run.
"""

from __future__ import annotations

import argparse
import io
import time
from dataclasses import dataclass
from typing import Callable, Sequence

from tsvk.common import PreprocessSettings, features
from tsvk.preprocess import DCT_OVERSAMPLE, build_preprocessor, probe
from tsvk.request import image_bytes

from ... import defaults

DEFAULT_SIZE = (640, 480)
PHOTOS = ("astronaut", "chelsea", "coffee", "rocket", "hubble_deep_field", "immunohistochemistry", "retina", "camera")
BASELINE = "torchserve-builtin (PIL)"


@dataclass(frozen=True)
class BenchResult:
    name: str
    images: int
    seconds: float

    @property
    def images_per_second(self) -> float:
        return self.images / self.seconds

    def ms_per_batch(self, batch_size: int) -> float:
        return 1000.0 * self.seconds * batch_size / self.images


def photo_jpegs(size: tuple[int, int] = DEFAULT_SIZE, quality: int = 90) -> list[bytes]:
    """The sample photographs as JPEG bytes of `size` (width, height)."""
    import skimage.data
    from PIL import Image

    payloads = []
    for name in PHOTOS:
        image = Image.fromarray(getattr(skimage.data, name)()).convert("RGB").resize(size, Image.BILINEAR)
        buffer = io.BytesIO()
        image.save(buffer, "JPEG", quality=quality)
        payloads.append(buffer.getvalue())
    return payloads


def torchserve_builtin_path() -> Callable[[list[dict]], object]:
    """TorchServe's own image_classifier preprocess (PIL per image), as its workers run it."""
    import torch
    from ts.torch_handler.image_classifier import ImageClassifier

    handler = ImageClassifier()
    handler.device = torch.device("cpu")
    return handler.preprocess


def tsvk_path(backend: str, resize: int = 256, crop: int = 224, jpeg_dct_scaling: bool = True) -> Callable[[list[dict]], object]:
    """Our handler's path for one backend: find the bytes, probe the header, preprocess the batch."""
    import torch

    settings = PreprocessSettings(resize=resize, crop=crop, backend=backend, strict=True, jpeg_dct_scaling=jpeg_dct_scaling)
    device = torch.device("cuda" if backend != "cpu" else "cpu")
    preprocessor, _ = build_preprocessor(settings, device)

    def run(rows: list[dict]) -> torch.Tensor:
        batch = preprocessor([probe(image_bytes(row), settings.max_pixels) for row in rows]).batch
        if batch.is_cuda:
            torch.cuda.synchronize(batch.device)
        return batch

    return run


def available_paths(size: tuple[int, int] = DEFAULT_SIZE) -> dict[str, Callable[[list[dict]], object]]:
    """The baseline plus every tsvk backend this machine can run (GPU ones only with CUDA)."""
    paths = {BASELINE: torchserve_builtin_path(), "tsvk cpu": tsvk_path("cpu")}
    if min(size) >= 2 * DCT_OVERSAMPLE * 256:  # large enough for a reduced scale: show what it buys
        paths["tsvk cpu, full-size decode"] = tsvk_path("cpu", jpeg_dct_scaling=False)
    if features.has_cuda():
        paths["tsvk cuda"] = tsvk_path("cuda")
    if features.has_cvcuda():
        paths["tsvk cvcuda"] = tsvk_path("cvcuda")
    return paths


def run_benchmark(
    batch_size: int = defaults.BATCH, rounds: int = 5, batches_per_round: int = 10, threads: int = 1,
    paths: dict[str, Callable[[list[dict]], object]] | None = None, size: tuple[int, int] = DEFAULT_SIZE,
) -> list[BenchResult]:
    """Time every path on the same batches, interleaved round by round; returns one result per path."""
    import torch

    torch.set_num_threads(threads)
    payloads = photo_jpegs(size)
    batches = [[{"data": payloads[(b * batch_size + i) % len(payloads)]} for i in range(batch_size)] for b in range(batches_per_round)]
    paths = paths or available_paths(size)
    for run in paths.values():  # warm up: lazy inits, allocator, CUDA context
        _check_output(run(batches[0]), batch_size)
    seconds = dict.fromkeys(paths, 0.0)
    for _ in range(rounds):
        for name, run in paths.items():
            started = time.perf_counter()
            for batch in batches:
                run(batch)
            seconds[name] += time.perf_counter() - started
    images = rounds * batches_per_round * batch_size
    return [BenchResult(name, images, seconds[name]) for name in paths]


def _check_output(batch, batch_size: int) -> None:
    if tuple(batch.shape) != (batch_size, 3, 224, 224):
        raise RuntimeError(f"preprocessing produced {tuple(batch.shape)}, expected ({batch_size}, 3, 224, 224)")


def format_results(results: Sequence[BenchResult], batch_size: int, threads: int, size: tuple[int, int] = DEFAULT_SIZE) -> str:
    baseline = next((r for r in results if r.name == BASELINE), results[0])
    lines = [
        f"preprocess throughput: {len(PHOTOS)} photos as {size[0]}x{size[1]} JPEG, batch {batch_size}, "
        f"resize 256 / crop 224, torch threads {threads}",
        f"{'path':<28}{'images/s':>10}{'ms/batch':>10}{'vs ' + 'PIL':>10}",
    ]
    for result in results:
        ratio = result.images_per_second / baseline.images_per_second
        lines.append(f"{result.name:<28}{result.images_per_second:>10.1f}{result.ms_per_batch(batch_size):>10.2f}{ratio:>9.2f}x")
    return "\n".join(lines)


def _size(text: str) -> tuple[int, int]:
    try:
        width, height = (int(part) for part in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be WIDTHxHEIGHT in pixels, e.g. 4032x3024; got {text!r}") from None
    if width < 224 or height < 224:
        raise argparse.ArgumentTypeError(f"both sides must be at least 224 (the crop), got {width}x{height}")
    return width, height


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tsvk bench preprocess", description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch-size", type=int, default=defaults.BATCH)
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds over all paths")
    parser.add_argument("--batches", type=int, default=10, help="batches per path per round")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (a worker's share)")
    parser.add_argument("--size", type=_size, default=DEFAULT_SIZE, metavar="WxH",
                        help="photo size, e.g. 4032x3024 for a 12 MP phone photo (default 640x480)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    results = run_benchmark(args.batch_size, args.rounds, args.batches, args.threads, size=args.size)
    print(format_results(results, args.batch_size, args.threads, args.size))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
