"""Startup probe: exit 0 once every named model has at least minWorkers READY workers.

TorchServe answers /ping "Healthy" even when an archive failed to load (the model is then simply
absent), so /ping alone would let a pod without its model take traffic. This asks the management API,
which listens on the pod's loopback, instead. The kserve engine has no management API: it keeps the
same facts in engine-status.json in its run dir (a model it refused is absent there too), read instead.

    python models-ready.py http://127.0.0.1:8081 resnet50 [more models...]
    python models-ready.py /home/model-server/run/engine-status.json resnet50 [more models...]
"""

import json
import ssl
import sys
import urllib.request

TIMEOUT_S = 4


def ready_workers(management_url: str, model: str) -> tuple[int, int]:
    """(READY workers, minWorkers) of a model, over all its versions."""
    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler({}),  # loopback: never through a proxy from the environment
        urllib.request.HTTPSHandler(context=ssl._create_unverified_context()),  # loopback: no name to verify
    )
    with opener.open(f"{management_url}/models/{model}", timeout=TIMEOUT_S) as response:
        versions = json.load(response)
    ready = sum(1 for version in versions for worker in version.get("workers", []) if worker.get("status") == "READY")
    wanted = max((version.get("minWorkers", 1) for version in versions), default=1)
    return ready, max(1, wanted)


def engine_ready_workers(status_file: str, model: str) -> tuple[int, int]:
    """(READY workers, planned workers) of a model, from the kserve engine's status file: a worker is READY there
    once it has loaded the archive, as in TorchServe's management API."""
    with open(status_file, encoding="utf-8") as status:
        entries = [entry for entry in json.load(status)["models"] if entry["name"] == model]
    if not entries:
        raise LookupError("not served (not loaded yet, or refused: see the container's log)")
    ready = sum(1 for worker in entries[0]["workers"] if worker.get("status") == "READY")
    return ready, max(1, entries[0]["min_workers"])


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: models-ready.py MANAGEMENT_URL|ENGINE_STATUS_FILE MODEL [MODEL...]", file=sys.stderr)
        return 2
    source, models = argv[0].rstrip("/"), argv[1:]
    ask = ready_workers if source.startswith(("http://", "https://")) else engine_ready_workers
    waiting = []
    for model in models:
        try:
            ready, wanted = ask(source, model)
        except Exception as err:  # noqa: BLE001 - not registered (404), not up yet, bad JSON: all mean "not ready"
            waiting.append(f"{model}: {err}")
            continue
        if ready < wanted:
            waiting.append(f"{model}: {ready} of {wanted} workers ready")
    if waiting:
        print("; ".join(waiting), file=sys.stderr)
        return 1
    print(f"ready: {', '.join(models)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
