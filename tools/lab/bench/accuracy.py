"""Top-1 / top-5 of every backend and precision, answered by a real TorchServe: EfficientNet-Lite0 with
its ImageNet weights on labelled photos.

Usage: tsvk bench accuracy [--images DIR] [--variants eager:fp32,aoti:int8,...]
Each variant is archived exactly as `tsvk archive` does (int8 calibrated on 2 of every 5 photos by
name, and refused by its own verification if it loses accuracy), served by a TorchServe of its own
with our generated config, and sent every held-out photo's JPEG bytes over HTTP.
So the figures include our decode and preprocessing, not only the model. Only held-out photos are
scored (never the ones int8 calibrated on), the same photos for every variant. A photo counts as
correct when the served label equals its class name (ImageNet names two pairs of classes alike).
Writes benchmarks/results/accuracy-<timestamp>.{json,md} and links accuracy-latest.{json,md} to them.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ... import defaults
from ...archive.pack import build_archive
from ...archive.calibration import imagenet_labels, list_photos, split
from ...errors import UsageError
from ...fsutil import atomic_path, point_latest
from ...config.ports import serving_on_free_ports
from ...engines.torchserve.server import start_torchserve
from ...config.serving_config import write_config
from ...client.demo import imagenet_categories, offline_request

VARIANTS = ("eager:fp32", "aoti:fp32", "aoti:bf16", "openvino:fp32", "openvino:int8", "aoti:int8")
CLIENTS = 4  # concurrent requests: enough for TorchServe to batch, few enough for a 2-core machine


def model_name(variant: str) -> str:
    return "lite0_" + variant.replace(":", "_")


def build_variants(variants: list[str], photos: Path, store: Path) -> tuple[dict, dict]:
    """Archive each variant into `store` as the offline demo archives EfficientNet-Lite0 (same weights,
    preprocessing and labels): (name -> its verification, name -> why it was refused)."""
    from dataclasses import replace

    labels = store.parent / "imagenet_labels.txt"
    labels.write_text("\n".join(imagenet_categories()) + "\n")
    built, refused = {}, {}
    for variant in variants:
        backend, precision = variant.split(":")
        request = replace(offline_request(labels), model=model_name(variant), backend=backend, precision=precision,
                          calibration=photos if precision == "int8" else None,
                          accuracy_photos=photos if precision == "bf16" else None)
        try:
            _, result = build_archive(request, store)
        except UsageError as err:  # int8 refused by its own accuracy check: the message carries the numbers
            refused[variant] = str(err)
            continue
        built[variant] = result.report.describe()
    return built, refused


def held_out_photos(photos: Path) -> list[tuple[Path, int]]:
    """The photos no int8 variant calibrated on, with their class index (from the directory's wnids.txt)."""
    files = split(list_photos(photos))[1]
    labels = imagenet_labels(files, photos)
    if labels is None:
        raise UsageError(f"{photos} must hold wnids.txt and photos named <wnid>_*.JPEG (like ../shared/imagenet-samples)")
    return list(zip(files, labels))


def served_top5(url: str, photo: Path) -> list[str] | str:
    """The served top-5 labels, best first, or the error text."""
    import requests

    answer = requests.post(url, data=photo.read_bytes(), timeout=120)
    if answer.status_code != 200:
        return f"{answer.status_code}: {answer.text[:200]}"
    scores = answer.json()
    return sorted(scores, key=scores.get, reverse=True)


def score(run, variant: str, photos: list[tuple[Path, int]], classes: list[str]) -> dict:
    url = f"{run.url('inference')}/predictions/{model_name(variant)}"
    with ThreadPoolExecutor(CLIENTS) as pool:
        answers = list(pool.map(lambda item: served_top5(url, item[0]), photos))
    ok = [(a, classes[label]) for a, (_, label) in zip(answers, photos) if isinstance(a, list)]
    errors = [a for a in answers if not isinstance(a, list)]
    return {"photos": len(photos), "answered": len(ok), "errors": len(errors), "first_error": errors[0] if errors else None,
            "top1": round(sum(a[0] == truth for a, truth in ok) / len(photos), 4),
            "top5": round(sum(truth in a[:5] for a, truth in ok) / len(photos), 4),
            "top1_labels": [a[0] if isinstance(a, list) else None for a in answers]}


def agreement(rows: dict, reference: str) -> None:
    """Each variant's top-1 agreement with the reference variant, photo by photo (in place)."""
    base = rows.get(reference, {}).get("top1_labels")
    for row in rows.values():
        if base:
            same = sum(a is not None and a == b for a, b in zip(row["top1_labels"], base))
            row["top1_agreement_with_" + reference.replace(":", "_")] = round(same / len(base), 4)


def serve_and_score(store: Path, variants: list[str], photos: list[tuple[Path, int]], classes: list[str], workdir: Path) -> dict:
    """Each variant served alone by its own TorchServe (our generated config for this machine), then scored."""
    rows = {}
    for variant in variants:
        folder = workdir / model_name(variant)
        folder.mkdir(parents=True)
        request = serving_on_free_ports(models=(model_name(variant),), model_store=store, auth=False)
        write_config(request, folder / "config.properties")
        run = start_torchserve(folder / "config.properties", folder / "run")
        try:
            run.wait_ready(timeout=defaults.READY_TIMEOUT_S)
            rows[variant] = score(run, variant, photos, classes)
        finally:
            run.stop()
    return rows


def render(result: dict) -> str:
    lines = [f"# Accuracy through TorchServe: EfficientNet-Lite0 (ImageNet weights), {result['photos']} held-out photos",
             "", f"{result['created']}; photos: `{result['images']}`; command: `{result['command']}`", "",
             "| variant | top-1 | top-5 | top-1 agreement with eager fp32 | errors | build verification |",
             "|---|---|---|---|---|---|"]
    for variant, row in result["variants"].items():
        agree = row.get("top1_agreement_with_eager_fp32")
        lines.append(f"| {variant} | {row['top1']:.1%} | {row['top5']:.1%} | {'-' if agree is None else f'{agree:.1%}'} | "
                     f"{row['errors']} | {result['built'][variant]} |")
    lines += [f"| {variant} | refused | | | | {why} |" for variant, why in result["refused"].items()]
    lines += ["", "Every photo was sent as its JPEG bytes to `/predictions/<model>` of a TorchServe serving that variant; "
              "int8 variants calibrated on the other photos of the directory (2 of every 5 by name)."]
    return "\n".join(lines) + "\n"


def write_result(result: dict, output_dir: Path) -> list[Path]:
    """accuracy-<timestamp>.{json,md}, and accuracy-latest.{json,md} linked to them."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    written = []
    for suffix, text in ((".json", json.dumps(result, indent=2) + "\n"), (".md", render(result))):
        path = Path(output_dir) / f"accuracy-{stamp}{suffix}"
        with atomic_path(path) as tmp:
            Path(tmp).write_text(text)
        point_latest(Path(output_dir) / f"accuracy-latest{suffix}", path)
        written.append(path)
    return written


def run(images: Path, variants: list[str], output_dir: Path, command: str) -> dict:
    photos = held_out_photos(images)
    classes = imagenet_categories()
    with tempfile.TemporaryDirectory(prefix="tsvk-accuracy-") as tmp:
        store = Path(tmp) / "store"
        built, refused = build_variants(variants, images, store)
        rows = serve_and_score(store, list(built), photos, classes, Path(tmp)) if built else {}
    agreement(rows, "eager:fp32")
    result = {"created": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "command": command, "images": str(images),
              "photos": len(photos), "built": built, "refused": refused, "variants": rows}
    for path in write_result(result, output_dir):
        print(f"wrote {path}")
    return result


def _variants(text: str) -> list[str]:
    chosen = [v.strip() for v in text.split(",") if v.strip()]
    unknown = [v for v in chosen if v not in VARIANTS]
    if unknown or not chosen:
        raise argparse.ArgumentTypeError(f"must be comma-separated names from {', '.join(VARIANTS)}; got {text!r}")
    return chosen


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tsvk bench accuracy", description=__doc__.splitlines()[0])
    p.add_argument("--images", type=Path, default=Path(defaults.ACCURACY_IMAGES),
                   help=f"labelled photos: a directory with wnids.txt and <wnid>_*.JPEG (default {defaults.ACCURACY_IMAGES})")
    p.add_argument("--variants", type=_variants, default=list(VARIANTS), help=f"backend:precision pairs (default {','.join(VARIANTS)})")
    p.add_argument("--output-dir", type=Path, default=Path("benchmarks/results"))
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    try:
        result = run(args.images, args.variants, args.output_dir, ("tsvk bench accuracy " + shlex.join(argv)).strip())
    except UsageError as err:
        print(f"tsvk bench accuracy: error: {err}", file=sys.stderr)
        return 2
    print(render(result))
    return 0 if result["variants"] and not any(r["errors"] for r in result["variants"].values()) else 1
