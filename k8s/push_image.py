"""Push the serving image and an image holding the archives, and point the chart at the pushed one by digest.

    python k8s/push_image.py push --engine podman --image tsvk/torchserve:0.12.0-cpu --registry host:5000/ml \\
        --models resnet152 --model-store model_store --model-store-in-image /home/model-server/model-store \\
        --record build/helm/pushed.json
    python k8s/push_image.py values --registry host:5000/ml --models resnet152 --record build/helm/pushed.json \\
        --output build/helm/image-values.yaml

`push` tags the serving image with the revision it was built from (its org.opencontainers.image.revision
label) and pushes it, then builds k8s/image/Dockerfile.models on it with the archives and pushes that, and
records both digests. `values` writes the chart values naming that image by digest with
modelStore.source=image, after checking that the record is for this registry and these models and that
the archives in model_store/ are still the ones pushed. Each problem is one line saying what to run.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODELS_DOCKERFILE = REPO / "k8s" / "image" / "Dockerfile.models"
REPOSITORY_NAME = "tsvk-torchserve"
REVISION_LABEL = "org.opencontainers.image.revision"
VERSION_LABEL = "org.opencontainers.image.version"
# The engine an image was built for (k8s/image/Dockerfile's ARG ENGINE, torchserve unless told): the image without
# Java, for kserve, is pushed as ...-kserve, as `make image ENGINE=kserve` tags it, never over TorchServe's.
ENGINE_LABEL = "io.tsvk.engine"
DEFAULT_ENGINE = "torchserve"
ARCHIVES_LABEL = "io.tsvk.archives"


class PushError(Exception):
    """A problem the user fixes by running something: the message says what."""


def run(argv: list[str], capture: bool = True) -> str:
    """One engine command; a failure names it and what the engine answered."""
    try:
        result = subprocess.run(argv, capture_output=capture, text=True)
    except FileNotFoundError:
        raise PushError(f"{argv[0]} is not installed: install docker or podman (DOCKER=docker|podman)") from None
    if result.returncode != 0:
        detail = (result.stderr or "").strip()[-800:] if capture else "(its output is above)"
        raise PushError(f"`{' '.join(argv[:4])} ...` failed ({result.returncode}): {detail}")
    return result.stdout if capture else ""


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def archives(models: list[str], store: Path) -> dict[str, Path]:
    """model name -> its archive in the model store; every missing one named at once."""
    found = {name: store / f"{name}.mar" for name in models}
    missing = [f"{path.name}" for path in found.values() if not path.is_file()]
    if missing:
        present = sorted(p.name for p in store.glob("*.mar")) or ["no archive"]
        raise PushError(f"{', '.join(missing)} not in {store}/ (it holds: {', '.join(present)}): "
                        f"build it (make archive MODEL=...) or name other models (MODELS=...)")
    return found


def image_labels(engine: str, image: str) -> dict[str, str]:
    try:
        data = json.loads(run([engine, "image", "inspect", image]))[0]
    except PushError:
        raise PushError(f"no local image {image}: build it first (make image)") from None
    return (data.get("Config") or {}).get("Labels") or data.get("Labels") or {}


def pushed_version(labels: dict[str, str], image: str) -> str:
    """What the pushed tags start with: the image's version (0.12.0-cpu), then -kserve for the image without Java."""
    version = labels.get(VERSION_LABEL) or image.rpartition(":")[2]
    engine = labels.get(ENGINE_LABEL, DEFAULT_ENGINE)
    return version if engine == DEFAULT_ENGINE else f"{version}-{engine}"


def push(engine: str, reference: str, workdir: Path) -> str:
    """Push and return the digest the registry now knows the image by."""
    if Path(engine).name == "podman":
        digest_file = workdir / "digest"
        run([engine, "push", "--digestfile", str(digest_file), reference], capture=False)
        return digest_file.read_text().strip()
    run([engine, "push", reference], capture=False)
    repository = reference.rpartition(":")[0]
    for named in json.loads(run([engine, "image", "inspect", "--format", "{{json .RepoDigests}}", reference])):
        if named.startswith(f"{repository}@"):
            return named.partition("@")[2]
    raise PushError(f"{engine} pushed {reference} but reports no digest for {repository}")


def build_models_image(engine: str, serving: str, found: dict[str, Path], store_in_image: str, tag: str,
                       workdir: Path, label: str) -> None:
    context = workdir / "context"
    context.mkdir()
    for path in found.values():
        try:
            (context / path.name).hardlink_to(path.resolve())
        except OSError:
            shutil.copy2(path, context / path.name)
    run([engine, "build", "-f", str(MODELS_DOCKERFILE), "--build-arg", f"SERVING_IMAGE={serving}",
         "--build-arg", f"MODEL_STORE={store_in_image}", "--label", f"{ARCHIVES_LABEL}={label}", "-t", tag, str(context)],
        capture=False)


def cmd_push(args: argparse.Namespace) -> dict:
    found = archives(args.models, args.model_store)
    labels = image_labels(args.engine, args.image)
    revision = labels.get(REVISION_LABEL) or "unknown"
    version = pushed_version(labels, args.image)
    sums = {path.name: sha256_of(path) for path in found.values()}
    label = " ".join(f"{name}=sha256:{digest}" for name, digest in sorted(sums.items()))
    repository = f"{args.registry.rstrip('/')}/{REPOSITORY_NAME}"
    serving_tag = f"{repository}:{version}-{revision}"
    models_tag = f"{serving_tag}-models-{hashlib.sha256(label.encode()).hexdigest()[:12]}"
    with tempfile.TemporaryDirectory(prefix="tsvk-push-") as tmp:
        workdir = Path(tmp)
        run([args.engine, "tag", args.image, serving_tag])
        print(f"pushing {serving_tag} (the serving image, revision {revision})", flush=True)
        serving_digest = push(args.engine, serving_tag, workdir)
        print(f"building {models_tag}: {', '.join(sorted(sums))} in {args.model_store_in_image}", flush=True)
        build_models_image(args.engine, serving_tag, found, args.model_store_in_image, models_tag, workdir, label)
        print(f"pushing {models_tag}", flush=True)
        models_digest = push(args.engine, models_tag, workdir)
    record = {"registry": args.registry, "repository": repository, "tag": models_tag.rpartition(":")[2],
              "digest": models_digest, "models": sorted(args.models), "archives": sums,
              "serving": {"tag": serving_tag.rpartition(":")[2], "digest": serving_digest}}
    args.record.parent.mkdir(parents=True, exist_ok=True)
    args.record.write_text(json.dumps(record, indent=2) + "\n")
    print(f"pushed {repository}:{record['serving']['tag']}@{serving_digest}\n"
          f"pushed {repository}:{record['tag']}@{models_digest} (with {', '.join(sorted(sums))}); "
          f"recorded in {args.record}", flush=True)
    return record


def cmd_values(args: argparse.Namespace) -> dict:
    again = f"make image-push REGISTRY={args.registry}"
    if not args.record.is_file():
        raise PushError(f"no image pushed to {args.registry} from here yet ({args.record} is missing): run `{again}` first")
    record = json.loads(args.record.read_text())
    if record["registry"] != args.registry:
        raise PushError(f"the last push went to {record['registry']}, not {args.registry}: run `{again}`")
    if sorted(args.models) != record["models"]:
        raise PushError(f"the pushed image holds {','.join(record['models'])}, the config serves {','.join(sorted(args.models))}: "
                        f"run `{again}` (it takes the same MODELS)")
    changed = [name for name, digest in record["archives"].items()
               if not (args.model_store / name).is_file() or sha256_of(args.model_store / name) != digest]
    if changed:
        raise PushError(f"{', '.join(changed)} in {args.model_store}/ changed since it was pushed: run `{again}`")
    values = {"image": {"repository": record["repository"], "tag": record["tag"], "digest": record["digest"]},
              "modelStore": {"source": "image"}}
    args.output.write_text(json.dumps(values, indent=2) + "\n")  # JSON is YAML: helm -f reads it
    print(f"the chart runs {record['repository']}:{record['tag']}@{record['digest']} "
          f"(archives in the image: {', '.join(sorted(record['archives']))})", flush=True)
    return values


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="k8s/push_image.py", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    models = {"type": lambda text: [m for m in text.split(",") if m], "required": True, "help": "comma-separated model names"}
    p = commands.add_parser("push", help="push the serving image and one holding the archives; record the digests")
    p.add_argument("--engine", required=True, help="docker or podman")
    p.add_argument("--image", required=True, help="the local serving image, e.g. tsvk/torchserve:0.12.0-cpu")
    p.add_argument("--registry", required=True, help="host[:port]/path")
    p.add_argument("--models", **models)
    p.add_argument("--model-store", type=Path, required=True)
    p.add_argument("--model-store-in-image", required=True)
    p.add_argument("--record", type=Path, required=True)
    p.set_defaults(func=cmd_push)
    v = commands.add_parser("values", help="chart values naming the pushed image by digest (modelStore.source=image)")
    v.add_argument("--registry", required=True)
    v.add_argument("--models", **models)
    v.add_argument("--model-store", type=Path, default=REPO / "model_store")
    v.add_argument("--record", type=Path, required=True)
    v.add_argument("--output", type=Path, required=True)
    v.set_defaults(func=cmd_values)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        args.func(args)
    except PushError as err:
        print(f"{Path(sys.argv[0]).name} {args.command}: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
