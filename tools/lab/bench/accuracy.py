"""Top-1 / top-5 of every backend and precision, answered by a real server (TorchServe, or tsvk's engine):
EfficientNet-Lite0 with its ImageNet weights on labelled photos, and on the same photos as a phone sends them.

Usage: tsvk bench accuracy [--images DIR] [--variants eager:fp32,aoti:int8,...] [--engine kserve] [--as-sent [12mp]]
Each variant is archived exactly as `tsvk archive` does (int8 calibrated on 2 of every 5 photos by
name, and refused by its own verification if it loses accuracy), served by a server of its own
with our generated config, and sent every held-out photo's JPEG bytes over HTTP.
So the figures include our decode and preprocessing, not only the model. Only held-out photos are
scored (never the ones int8 calibrated on), the same photos for every variant. A photo counts as
correct when the served label equals its class name (ImageNet names two pairs of classes alike).

With --as-sent, the same server then scores each held-out photo upscaled to a phone's size (12 MP: 4032x3024 for
a 4:3 photo, the photo's proportions kept), with sensor noise, as a quality-90 JPEG (labelled_as_sent.py, made
once and cached): the handler decodes those at a reduced DCT scale, the originals whole, so the two differ only in
the photo's size and the decode it takes. Each variant's copies' top-1 must be within 0.5 points of its originals'
(either way; defaults.AS_SENT_MAX_TOP1_DIFFERENCE), or the command exits 1. Without --variants it scores one
variant, eager fp32 (AS_SENT_VARIANT).
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
from ...cpus import detect_vcpus
from ...engines.registry import add_engine_argument, engine_named
from ...config.serving_config import write_config
from ...client.demo import imagenet_categories, offline_request
from . import labelled_as_sent, sent_photos
from .result_document import machine_info

VARIANTS = ("eager:fp32", "aoti:fp32", "aoti:bf16", "openvino:fp32", "openvino:int8", "aoti:int8")
CLIENTS = 4  # concurrent requests: enough for TorchServe to batch, few enough for a 2-core machine
# --as-sent's variant when none is named: no compile step (the run is the decode's, not the model's), and the
# reference every other variant is checked against
AS_SENT_VARIANT = "eager:fp32"


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
    started = time.monotonic()
    with ThreadPoolExecutor(CLIENTS) as pool:
        answers = list(pool.map(lambda item: served_top5(url, item[0]), photos))
    seconds = time.monotonic() - started
    ok = [(a, classes[label]) for a, (_, label) in zip(answers, photos) if isinstance(a, list)]
    errors = [a for a in answers if not isinstance(a, list)]
    top1, top5 = sum(a[0] == truth for a, truth in ok), sum(truth in a[:5] for a, truth in ok)
    return {"photos": len(photos), "answered": len(ok), "errors": len(errors), "first_error": errors[0] if errors else None,
            "top1": round(top1 / len(photos), 4), "top5": round(top5 / len(photos), 4), "top1_correct": top1, "top5_correct": top5,
            "seconds": round(seconds, 1), "top1_labels": [a[0] if isinstance(a, list) else None for a in answers]}


def compare(original: dict, sent: dict, allowed: float = defaults.AS_SENT_MAX_TOP1_DIFFERENCE) -> dict:
    """The phone-size copies against the originals, both scored by one server: top-1 and top-5 differences in points
    (copies minus originals, from the counts of correct photos, not the rounded shares), top-1 agreement photo by
    photo, and whether top-1 is within `allowed` (a fraction) either way: a copy that gains is as much a sign that
    the photo's size changes answers as one that loses."""
    photos = original["photos"]
    if sent["photos"] != photos:
        raise ValueError(f"the copies must be the originals' {photos} photos, got {sent['photos']}")
    top1 = (sent["top1_correct"] - original["top1_correct"]) / photos
    top5 = (sent["top5_correct"] - original["top5_correct"]) / photos
    same = sum(a is not None and a == b for a, b in zip(sent["top1_labels"], original["top1_labels"]))
    return {"top1_difference_points": round(100 * top1, 2), "top5_difference_points": round(100 * top5, 2),
            "top1_agreement_with_originals": round(same / photos, 4), "allowed_top1_difference_points": round(100 * allowed, 2),
            "passed": abs(top1) <= allowed + 1e-12}


def agreement(rows: dict, reference: str) -> None:
    """Each variant's top-1 agreement with the reference variant, photo by photo (in place)."""
    base = rows.get(reference, {}).get("top1_labels")
    for row in rows.values():
        if base:
            same = sum(a is not None and a == b for a, b in zip(row["top1_labels"], base))
            row["top1_agreement_with_" + reference.replace(":", "_")] = round(same / len(base), 4)


def serve_and_score(store: Path, variants: list[str], photos: list[tuple[Path, int]], classes: list[str], workdir: Path,
                    engine: str = defaults.ENGINE, sent: list[tuple[Path, int]] | None = None) -> dict:
    """Each variant served alone by its own server of `engine` (our generated config for this machine), then scored:
    the originals, and the phone-size copies `sent` (when given) by the same server, under row["as_sent"]."""
    rows = {}
    for variant in variants:
        folder = workdir / model_name(variant)
        folder.mkdir(parents=True)
        request = serving_on_free_ports(models=(model_name(variant),), model_store=store, auth=False)
        write_config(request, folder / "config.properties")
        run = engine_named(engine).start(folder / "config.properties", folder / "run")
        try:
            run.wait_ready(timeout=defaults.READY_TIMEOUT_S)
            rows[variant] = score(run, variant, photos, classes)
            if sent is not None:
                rows[variant]["as_sent"] = score(run, variant, sent, classes)
        finally:
            run.stop()
    for row in rows.values():
        if "as_sent" in row:
            row["as_sent"].update(compare(row, row["as_sent"]))
    return rows


def render(result: dict) -> str:
    server = engine_named(result["engine"]).label
    lines = [f"# Accuracy through {server}: EfficientNet-Lite0 (ImageNet weights), {result['photos']} held-out photos",
             "", f"{result['created']}; photos: `{result['images']}`; command: `{result['command']}`", *machine_line(result), "",
             "| variant | top-1 | top-5 | top-1 agreement with eager fp32 | errors | build verification |",
             "|---|---|---|---|---|---|"]
    for variant, row in result["variants"].items():
        agree = row.get("top1_agreement_with_eager_fp32")
        lines.append(f"| {variant} | {row['top1']:.1%} | {row['top5']:.1%} | {'-' if agree is None else f'{agree:.1%}'} | "
                     f"{row['errors']} | {result['built'][variant]} |")
    lines += [f"| {variant} | refused | | | | {why} |" for variant, why in result["refused"].items()]
    lines += ["", f"Every photo was sent as its JPEG bytes to `/predictions/<model>` of {server} serving that variant alone; "
              "int8 variants calibrated on the other photos of the directory (2 of every 5 by name)."]
    if result.get("as_sent"):
        lines += render_as_sent(result)
    return "\n".join(lines) + "\n"


def machine_line(result: dict) -> list[str]:
    """The CPU behind the figures (vCPUs, model, the flags that decide a precision's speed), where the run recorded it."""
    machine = result.get("machine")
    if not machine:
        return []
    flags = ", ".join(machine["cpu_flags"]) or "none of AVX2, AVX-512, AMX"
    return ["", f"Machine: {machine['vcpus']} vCPUs, {machine['cpu']}, CPU flags {flags}; load average at the end "
                f"{machine['loadavg_end'][0]:.1f}."]


def render_as_sent(result: dict) -> list[str]:
    """The section comparing each variant's phone-size copies with its originals."""
    sent = result["as_sent"]
    lines = ["", f"## The same photos as sent: {sent['size']} ({sent['megapixels']:g} MP each, the photo's proportions kept)", "",
             f"Each held-out photo upscaled (Lanczos) to {sent['megapixels']:g} MP, with seeded sensor noise, as a "
             f"quality-{sent['quality']} baseline JPEG without EXIF (median {sent['median_mb']:g} MB; cached in `{sent['folder']}`), "
             "scored by the same server right after the originals. The handler decodes these at a reduced DCT scale "
             f"(`preprocess.jpeg_dct_scaling`), the originals whole. Top-1 must stay within "
             f"{sent['allowed_top1_difference_points']:g} points of the originals', either way.", "",
             "| variant | originals top-1 | originals top-5 | as sent top-1 | as sent top-5 | top-1 difference | "
             "top-5 difference | top-1 agreement | errors | seconds (originals, as sent) | within |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for variant, row in result["variants"].items():
        copy = row.get("as_sent")
        if copy is None:
            continue
        lines.append(f"| {variant} | {row['top1']:.1%} | {row['top5']:.1%} | {copy['top1']:.1%} | {copy['top5']:.1%} | "
                     f"{copy['top1_difference_points']:+.2f} points | {copy['top5_difference_points']:+.2f} points | "
                     f"{copy['top1_agreement_with_originals']:.1%} | {copy['errors']} | {row['seconds']:g}, {copy['seconds']:g} | "
                     f"{'PASS' if copy['passed'] else 'FAIL'} |")
    return lines


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


def as_sent_copies(photos: list[tuple[Path, int]], size: str, cache_dir: Path) -> tuple[list[tuple[Path, int]], dict]:
    """The phone-size copies of the held-out photos (made once, then read from the cache), and what the report says
    of them."""
    started = time.monotonic()
    copies = labelled_as_sent.upscaled_copies(photos, size, cache_dir)
    sizes = sorted(path.stat().st_size for path, _ in copies)
    about = {"size": size, "megapixels": labelled_as_sent.megapixels(size), "quality": sent_photos.QUALITY,
             "folder": str(labelled_as_sent.cache_folder(cache_dir, size)), "median_mb": round(sizes[len(sizes) // 2] / 1e6, 2),
             "allowed_top1_difference_points": round(100 * defaults.AS_SENT_MAX_TOP1_DIFFERENCE, 2),
             "made_or_read_s": round(time.monotonic() - started, 1)}
    return copies, about


def run(images: Path, variants: list[str], output_dir: Path, command: str, engine: str = defaults.ENGINE,
        as_sent: str | None = None, cache_dir: Path = Path(defaults.BENCH_CACHE_DIR)) -> dict:
    photos = held_out_photos(images)
    classes = imagenet_categories()
    sent, about = as_sent_copies(photos, as_sent, cache_dir) if as_sent else (None, None)
    with tempfile.TemporaryDirectory(prefix="tsvk-accuracy-") as tmp:
        store = Path(tmp) / "store"
        built, refused = build_variants(variants, images, store)
        rows = serve_and_score(store, list(built), photos, classes, Path(tmp), engine, sent) if built else {}
    agreement(rows, "eager:fp32")
    result = {"created": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "command": command, "images": str(images),
              "engine": engine, "machine": machine_info(detect_vcpus()), "photos": len(photos), "built": built, "refused": refused,
              "variants": rows, "as_sent": about}
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
    p.add_argument("--variants", type=_variants,
                   help=f"backend:precision pairs (default {','.join(VARIANTS)}; with --as-sent, {AS_SENT_VARIANT})")
    p.add_argument("--as-sent", nargs="?", const=labelled_as_sent.SIZES[0], choices=labelled_as_sent.SIZES, metavar="SIZE",
                   help=f"also score every photo upscaled to a phone's size, one of {', '.join(labelled_as_sent.SIZES)} "
                        f"({labelled_as_sent.SIZES[0]} when none is named), and check each variant's top-1 stays within "
                        f"{100 * defaults.AS_SENT_MAX_TOP1_DIFFERENCE:g} points of the originals'")
    p.add_argument("--cache-dir", type=Path, default=Path(defaults.BENCH_CACHE_DIR),
                   help=f"where --as-sent's copies are made once (default {defaults.BENCH_CACHE_DIR})")
    add_engine_argument(p)
    p.add_argument("--output-dir", type=Path, default=Path("benchmarks/results"))
    return p


def chosen_variants(args: argparse.Namespace) -> list[str]:
    """The variants named, else every one, or AS_SENT_VARIANT alone with --as-sent (the copies cost a decode each)."""
    if args.variants:
        return args.variants
    return [AS_SENT_VARIANT] if args.as_sent else list(VARIANTS)


def passed(result: dict) -> bool:
    """Every variant answered every photo, and every --as-sent comparison held."""
    rows = list(result["variants"].values())
    copies = [row["as_sent"] for row in rows if "as_sent" in row]
    return bool(rows) and not any(row["errors"] for row in rows + copies) and all(copy["passed"] for copy in copies)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    try:
        result = run(args.images, chosen_variants(args), args.output_dir, ("tsvk bench accuracy " + shlex.join(argv)).strip(),
                     args.engine, args.as_sent, args.cache_dir)
    except UsageError as err:
        print(f"tsvk bench accuracy: error: {err}", file=sys.stderr)
        return 2
    print(render(result))
    return 0 if passed(result) else 1
