"""The worker-side memory of large but allowed work, in-process: eight 36 MP PNGs through a segmenter's
or a detector's `prepare` and `answer`, 100 instance masks on a 12 MP photo, and 100 masks each covering a
40 MP photo (the most one answer may hold: pasted on a grid reduced to `detect.max_mask_pixels`).

    .venv/bin/python -m tests.support.memory_burst [--handlers DIR]   # writes benchmarks/results/memory-<time>.md

Each case runs in its own process (one torch thread, eager models with random weights, solid-colour
PNGs), and reports its resident high-water growth (tests/support/peak_memory.py). `--handlers` runs
another checkout's `handlers/` (the code before a change) with these same cases.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PHOTO, COUNT = (7200, 5000), 8
MASK_PHOTO, MASKS = (3000, 4000), 100
WORST_MASK_PHOTO = (5200, 7700)  # ~40 MP, the most pixels a photo may have (MAX_PIXELS)
BUILDERS = {"detect": "fasterrcnn_mobilenet_v3_large_320_fpn", "segment": "lraspp_mobilenet_v3_large"}
PREPROCESS = {"detect": {"crop": 0, "resize": 320, "max_size": 640}, "segment": {"crop": 0, "resize": 520, "max_size": 2048}}
CASES = ("segment", "detect", "masks-random", "masks-whole", "masks-worst")


def _pngs(store: Path) -> list[bytes]:
    from PIL import Image

    store.mkdir(parents=True, exist_ok=True)
    payloads = []
    for index in range(COUNT):
        path = store / f"{index}.png"
        if not path.exists():
            Image.new("RGB", PHOTO, (30 * index, 120, 250 - 30 * index)).save(path.with_suffix(".tmp"), "PNG", compress_level=1)
            path.with_suffix(".tmp").rename(path)
        payloads.append(path.read_bytes())
    return payloads


def burst(task: str, store: Path) -> str:
    import torch

    from tests.support import peak_memory
    from tsvk.preprocess.decode import probe
    from tsvk.tasks.loaded_model import LoadedModel
    from tsvk.preprocess.cpu import CpuPreprocessor
    from tsvk.common.settings import HandlerSettings
    from tsvk.tasks import task_class, torchvision_model

    payloads = _pngs(store)
    settings = HandlerSettings.from_dict({"model_name": "m", "task": task, "preprocess": PREPROCESS[task],
                                          "artifact": {"file": "m.pt", "format": "eager", "source": {"builder": BUILDERS[task]}}})
    model = LoadedModel(torchvision_model(task, BUILDERS[task]), torch.device("cpu"), torch.float32, "eager")
    worker = task_class(task)(settings, model, CpuPreprocessor(settings.preprocess), None)
    worker.answer(worker.prepare([probe(payloads[0], settings.preprocess.max_pixels)]).batch, [worker.options({})])
    images = [probe(p, settings.preprocess.max_pixels) for p in payloads]
    start = time.perf_counter()
    with peak_memory.peak_growth() as peak:
        result = worker.prepare(images)
        worker.answer(result.batch, [worker.options({})] * len(result.kept))
    return (f"{task} ({BUILDERS[task]}): eight {PHOTO[0]}x{PHOTO[1]} PNGs ({sum(map(len, payloads)) / 1e6:.1f} MB), "
            f"peak +{peak['mib']:.0f} MiB, {time.perf_counter() - start:.1f} s")


def masks(boxes_kind: str) -> str:
    import torch

    from tests.support import peak_memory
    from tsvk.common.settings import DetectSettings
    from tsvk.tasks.detect import DetectTask

    height, width = MASK_PHOTO
    generator = torch.Generator().manual_seed(0)
    if boxes_kind == "whole":
        boxes = torch.tensor([[0.0, 0.0, width, height]] * MASKS)
    else:  # 5-60% of each side, anywhere in the photo
        sides = torch.rand(MASKS, 2, generator=generator) * 0.55 + 0.05
        corners = torch.rand(MASKS, 2, generator=generator) * (1 - sides)
        boxes = torch.cat([corners, corners + sides], 1) * torch.tensor([width, height, width, height])
    found = {"scores": torch.linspace(0.99, 0.1, MASKS), "labels": torch.ones(MASKS, dtype=torch.int64), "boxes": boxes,
             "masks": torch.rand(MASKS, 1, 28, 28, generator=generator)}
    task = type("Task", (), {"settings": type("S", (), {"detect": DetectSettings(masks=True)})(), "labels": None})()
    start = time.perf_counter()
    with peak_memory.peak_growth() as peak:
        answers = DetectTask.describe(task, found, MASK_PHOTO, MASK_PHOTO, {"score_threshold": 0.05, "max_detections": MASKS})
    return (f"{len(answers)} masks on a {width}x{height} photo, {boxes_kind} boxes: peak +{peak['mib']:.0f} MiB, "
            f"{time.perf_counter() - start:.1f} s")


def worst_masks() -> tuple[int, list | None, float, float]:
    """The masks, the mask of the first box's `photo_size`, CPU seconds and peak memory growth (MiB) of an
    answer whose 100 boxes each cover a 40 MP photo: what `score_threshold` at the model's floor may give on a
    crowd. One torch thread; CPU time, not wall time, since the machine may be shared."""
    import torch

    from tests.support import peak_memory
    from tsvk.common.settings import DetectSettings
    from tsvk.tasks.detect import DetectTask

    torch.set_num_threads(1)
    height, width = WORST_MASK_PHOTO
    found = {"scores": torch.linspace(0.99, 0.06, MASKS), "labels": torch.ones(MASKS, dtype=torch.int64),
             "boxes": torch.tensor([[0.0, 0.0, width - 1.0, height - 1.0]] * MASKS),
             "masks": torch.rand(MASKS, 1, 28, 28, generator=torch.Generator().manual_seed(0))}
    task = type("Task", (), {"settings": type("S", (), {"detect": DetectSettings(masks=True)})(), "labels": None})()
    options = {"score_threshold": 0.05, "max_detections": MASKS}
    DetectTask.describe(task, {k: v[:1] for k, v in found.items()}, (80, 120), (80, 120), options)  # first-call allocations
    with peak_memory.peak_growth() as peak:
        started = time.process_time()
        answers = DetectTask.describe(task, found, (800, 1200), WORST_MASK_PHOTO, options)
        seconds = time.process_time() - started
    return len(answers), answers[0]["mask"].get("photo_size"), seconds, peak["mib"]


def run_case(case: str, store: Path) -> str:
    import torch

    torch.set_num_threads(1)
    if case == "masks-worst":
        count, photo_size, seconds, mib = worst_masks()
        height, width = WORST_MASK_PHOTO
        grid = "at the photo's size" if photo_size is None else "on a reduced grid"
        return f"{count} masks, each box a whole {width}x{height} photo, {grid}: peak +{mib:.0f} MiB, {seconds:.2f} s of CPU"
    return burst(case, store) if case in BUILDERS else masks(case.split("-", 1)[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--handlers", type=Path, default=ROOT / "handlers", help="the handlers/ to measure")
    parser.add_argument("--case", choices=CASES, help="run one case in this process and print its line")
    parser.add_argument("--store", type=Path, default=Path("/tmp/tsvk-memory-burst"), help="where the PNGs are kept")
    args = parser.parse_args()
    if args.case:
        sys.path[:0] = [str(args.handlers.resolve()), str(ROOT)]
        print(run_case(args.case, args.store))
        return
    lines = [subprocess.run([sys.executable, "-m", "tests.support.memory_burst", "--case", case, "--handlers", str(args.handlers),
                             "--store", str(args.store)], cwd=ROOT, check=True, capture_output=True, text=True).stdout.strip()
             for case in CASES]
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    lines = Path("/proc/cpuinfo").read_text().splitlines()
    cpu = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), "?")
    out = ROOT / "benchmarks" / "results" / f"memory-{stamp}.md"
    out.write_text(f"# Worker-side memory, in-process ({cpu}; handlers: {args.handlers})\n\n" + "".join(f"- {line}\n" for line in lines))
    print(out.read_text())


if __name__ == "__main__":
    main()
