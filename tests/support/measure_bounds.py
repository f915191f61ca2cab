"""Measure what the request bounds cost: `python -m tests.support.measure_bounds` writes
benchmarks/results/<UTC time>-bounds.json (docs/robustness.md quotes it).

Each measurement runs in a fresh process, so its RSS growth is its own: the JPEG marker walk on 12 MP
photos, the scan bomb decoded (the path before the bound) and refused, and a 16 MiB JSON body of
`[[],[],...]` through TorchServe 0.12's worker parse, the handler's bounded parse, FastAPI's parse with
KServe's pydantic request, and the front's guard.
"""

from __future__ import annotations

import asyncio
import io
import json
import multiprocessing
import platform
import time
import tracemalloc
from pathlib import Path

JSON_BOMB_MIB = 16
RESULTS = Path("benchmarks/results")


def _rss_kib(field: str = "VmRSS") -> int:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith(field + ":"))


def _measured(work) -> dict:
    """`work()` run twice: untraced for its seconds and RSS growth (peak RSS over the RSS before; tracing
    would add its own), then under tracemalloc for the peak of what Python allocated. In MiB."""
    rss = _rss_kib()
    started = time.perf_counter()
    outcome = work()
    seconds = time.perf_counter() - started
    growth = (_rss_kib("VmHWM") - rss) / 1024
    tracemalloc.start()
    work()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return {"outcome": outcome, "seconds": round(seconds, 4), "rss_growth_mib": round(growth, 1),
            "traced_peak_mib": round(peak / 2**20, 1)}


def _json_bomb(prefix: bytes = b"", suffix: bytes = b"") -> bytes:
    return prefix + b"[" + b"[]," * (JSON_BOMB_MIB * 2**20 // 3 - 10) + b"[]]" + suffix


def torchserve_worker_parse() -> dict:
    """TorchServe 0.12.0's worker before the handler runs (otf_message_handler._retrieve_input_data)."""
    import os
    import struct

    from ts.protocol.otf_message_handler import _retrieve_input_data

    os.environ.pop("TS_DECODE_INPUT_REQUEST", None)
    frame = b"".join(struct.pack("!i", len(p)) + p for p in (b"body", b"application/json", _json_bomb()))

    class Socket:
        def __init__(self):
            self.data = memoryview(frame)

        def recv(self, length):
            chunk, self.data = self.data[:length], self.data[length:]
            return bytes(chunk)

    return _measured(lambda: type(_retrieve_input_data(Socket())["value"]).__name__)


def handler_bounded_parse() -> dict:
    """The handler with TorchServe's parse off: the body arrives as bytes and is refused from its counts."""
    from tsvk.request import read_request

    body = bytearray(_json_bomb())
    return _measured(lambda: read_request({"body": body}, crop=224).error.code)


def handler_parse_at_the_limit() -> dict:
    """The costliest bodies a classifier's worker (crop 224) still parses: as many values as its limit allows
    (room for one image of pixels), of the kinds that cost the most memory per value counted."""
    from tsvk.request.json_body import limits_for_pixels, parse_json

    limits = limits_for_pixels(3 * 224 * 224)
    found = {"max_values": limits.max_values}
    for name, item, counted in (("strings", b'"ab"', 1), ("floats", b"0.5", 1), ("objects", b"{}", 2)):
        count = (limits.max_values - 2) // counted
        body = bytearray(b"[" + b",".join([item] * count) + b"]")
        found[name] = {"bytes": len(body), **_measured(lambda: len(parse_json(body, limits)))}
    return found


def kserve_front_parse() -> dict:
    """What the front did before its guard: FastAPI's json.loads, then KServe's pydantic InferenceRequest."""
    from kserve.protocol.rest.v2_datamodels import InferenceRequest

    body = _json_bomb(b'{"id": "x", "inputs": [{"name": "images", "datatype": "BYTES", "shape": [1], "data": ', b"}]}")

    def parse():
        request = InferenceRequest.model_validate(json.loads(body))
        return len(request.inputs[0].data)

    return _measured(parse)


def front_guard() -> dict:
    from tsvk_tools.oip.server import Guard

    body = _json_bomb(b'{"inputs": [{"name": "images", "datatype": "BYTES", "shape": [1], "data": ', b"}]}")
    parts = [body[i:i + 65536] for i in range(0, len(body), 65536)]
    messages = []
    sent = []

    def post():
        messages[:] = [{"type": "http.request", "body": part, "more_body": i < len(parts) - 1} for i, part in enumerate(parts)]
        sent.clear()
        asyncio.run(Guard(app, 2**25)(scope, receive, send))
        return sent[0]["status"]

    async def receive():
        return messages.pop(0)

    async def send(message):
        sent.append(message)

    async def app(scope, receive, send):
        raise AssertionError("the body reached the app")

    scope = {"type": "http", "method": "POST", "path": "/v2/models/m/infer", "headers": [(b"content-length", str(len(body)).encode())]}
    return _measured(post)


def _photo_12mp(progressive: bool) -> bytes:
    import numpy as np
    from PIL import Image

    from tests.support.handler_fakes import photo

    base = np.asarray(photo("astronaut", (4000, 3000))).astype(np.int16)
    grain = np.random.default_rng(0).integers(-24, 24, base.shape, dtype=np.int16)  # sensor noise: camera-sized file
    buffer = io.BytesIO()
    Image.fromarray(np.clip(base + grain, 0, 255).astype(np.uint8)).save(buffer, "JPEG", quality=92, progressive=progressive)
    return buffer.getvalue()


def jpeg_walk() -> dict:
    from tsvk.preprocess.decode import probe
    from tsvk.preprocess.jpeg_scans import scan_work

    found = {}
    for progressive in (False, True):
        data = _photo_12mp(progressive)
        probe(data, 40_000_000)
        times = []
        for _ in range(20):
            started = time.perf_counter()
            work = scan_work(data, 4000, 3000, 256)
            times.append(time.perf_counter() - started)
        found["progressive" if progressive else "baseline"] = {"bytes": len(data), "scans": work.scans, "blocks": work.blocks,
                                                               "walk_ms": round(min(times) * 1e3, 2)}
    return found


def scan_bomb_decode() -> dict:
    """The 4000x4000 bomb (2,000 repeats) as the handler decoded it before the bound, and its refusal now."""
    import torch
    from PIL import Image
    from torchvision.io import decode_jpeg

    from tests.support.jpeg_bombs import gradient_jpeg, scan_bomb
    from tsvk.preprocess.decode import probe
    from tsvk.common.errors import DecodeTooCostly

    found = {}
    for name, data in (("plain", gradient_jpeg(4000, 4000)), ("bomb", scan_bomb(4000, 4000, 2000))):
        started = time.perf_counter()
        decode_jpeg(torch.frombuffer(bytearray(data), dtype=torch.uint8))
        turbo = time.perf_counter() - started
        started = time.perf_counter()
        with Image.open(io.BytesIO(data)) as image:
            image.draft("RGB", (1024, 1024))  # the CPU backend's DCT-scaled decode of a large JPEG
            image.load()
        found[name] = {"bytes": len(data), "turbo_s": round(turbo, 2), "pillow_draft_s": round(time.perf_counter() - started, 2)}
    probe(gradient_jpeg(64, 48), 40_000_000)  # plugins registered, as in a warm worker
    started = time.perf_counter()
    try:
        probe(data, 40_000_000)
    except DecodeTooCostly as err:
        found["bomb"]["refused_ms"] = round((time.perf_counter() - started) * 1e3, 2)
        found["bomb"]["refusal"] = err.message
    return found


MEASUREMENTS = (jpeg_walk, scan_bomb_decode, torchserve_worker_parse, handler_bounded_parse, handler_parse_at_the_limit,
                kserve_front_parse, front_guard)


def _run(name: str) -> dict:
    return globals()[name]()


def main() -> None:
    results = {"cpu": _cpu_model(), "python": platform.python_version()}
    for measurement in MEASUREMENTS:
        with multiprocessing.get_context("spawn").Pool(1) as pool:
            results[measurement.__name__] = pool.apply(_run, (measurement.__name__,))
        print(measurement.__name__, json.dumps(results[measurement.__name__]), flush=True)
    path = RESULTS / time.strftime("%Y%m%dT%H%M%SZ-bounds.json", time.gmtime())
    path.write_text(json.dumps(results, indent=2) + "\n")
    print("written", path)


def _cpu_model() -> str:
    with open("/proc/cpuinfo") as info:
        return next((line.split(":", 1)[1].strip() for line in info if line.startswith("model name")), platform.processor())


if __name__ == "__main__":
    main()
