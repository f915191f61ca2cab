"""Classes of hostile requests, each aimed at one bound the service promises, for every task and protocol.

The Hypothesis corpus (corpus.py) mutates small images; these classes are built to cost: a progressive
JPEG whose AC scan is repeated thousands of times (decoding work without pixels), headers declaring
billions of pixels in every format, JSON nested thousands deep or expanding `[[],[],...]` near the
request size limit, Open Inference Protocol documents with every field of the wrong type or size,
malformed binary-extension headers, per-request options of each task pushed to their extremes, and
large but allowed photos sent together. Each input says which transport carries it:

- `predictions`: a POST to TorchServe's /predictions/<model> (raw, JSON, multipart, or an OIP document);
- `front-rest`: a POST to the OIP front's /v2/models/<model>/infer (JSON, or the binary extension);
- `front-grpc`: a serialized ModelInferRequest (tritonclient's own protobuf) to the front's gRPC port.

Generation is deterministic: the same seed gives the same bytes.
"""

from __future__ import annotations

import base64
import io
import json
import random
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable, Iterator

import numpy as np
from PIL import Image


from .corpus import BOMB_FORMATS, declare_size, seed_images

PREDICTIONS, FRONT_REST, FRONT_GRPC = "predictions", "front-rest", "front-grpc"
TRANSPORTS = (PREDICTIONS, FRONT_REST, FRONT_GRPC)
JSON = "application/json"
SCAN_BOMB_SIDE = 4000  # a 16 MP progressive JPEG: within the pixel bound, so only the scan count can refuse it
SCAN_BOMB_REPEATS = 4000  # copies of its smallest AC scan: ~6 s of decoding on an unbounded handler
EXPANSION_BYTES = 15 * 2**20  # `[[],[],...]` just under the JSON body limit (MAX_JSON_MB, 16 MiB), within max_request_size
LARGE_PHOTO_SIDE = 6000  # 36 MP: allowed (the pixel bound is 40 MP), solid colour so a PNG is ~100 kB
LARGE_BURST = 8  # large photos sent at once to one model
BOMB_SIDE = 12_000  # a pixel bomb's declared side: 144 MP, over preprocess.max_jpeg_pixels (128 MP) and max_pixels


@dataclass(frozen=True)
class Attack:
    """One request of a class: its body (or a maker for a body too large to keep), how it travels."""

    klass: str
    transport: str
    content_type: str = "application/octet-stream"
    body: bytes = b""
    make_body: Callable[[], bytes] | None = field(default=None, compare=False)
    headers: tuple[tuple[str, str], ...] = ()
    hostile: bool = True

    @property
    def payload(self) -> bytes:
        return self.make_body() if self.make_body else self.body


# Images that cost


@lru_cache(maxsize=2)
def progressive_jpeg(side: int = SCAN_BOMB_SIDE) -> bytes:
    """A solid-colour progressive JPEG of side x side: tiny scans, many of them."""
    buffer = io.BytesIO()
    Image.new("RGB", (side, side), (120, 130, 140)).save(buffer, "JPEG", progressive=True, quality=90)
    return buffer.getvalue()


def jpeg_scans(data: bytes) -> list[tuple[int, int, int]]:
    """(start, end, spectral start Ss) of each scan: its SOS marker up to the next marker that is not
    a stuffed byte or a restart marker."""
    scans, i = [], 2
    while i < len(data) - 4:
        if data[i] != 0xFF:
            raise ValueError(f"no JPEG marker at byte {i}")
        marker, length = data[i + 1], int.from_bytes(data[i + 2:i + 4], "big")
        if marker == 0xD9:
            break
        end = i + 2 + length
        if marker == 0xDA:
            components = data[i + 4]
            spectral_start = data[i + 5 + 2 * components]
            while not (data[end] == 0xFF and data[end + 1] not in (0x00, *range(0xD0, 0xD8))):
                end += 1
            scans.append((i, end, spectral_start))
        i = end
    return scans


@lru_cache(maxsize=4)
def scan_bomb(repeats: int = SCAN_BOMB_REPEATS, side: int = SCAN_BOMB_SIDE) -> bytes:
    """The progressive JPEG with its smallest AC scan repeated `repeats` times: a few hundred kB that
    cost blocks x scans of decoding work (decoders warn of the bogus progression and go on)."""
    data = progressive_jpeg(side)
    start, end, _ = min((s for s in jpeg_scans(data) if s[2] > 0), key=lambda s: s[1] - s[0])
    return data[:end] + data[start:end] * repeats + data[end:]


@lru_cache(maxsize=2)
def large_png(side: int = LARGE_PHOTO_SIDE) -> bytes:
    """A solid-colour PNG of side x side: allowed pixels, ~100 kB on the wire, 108 MB decoded at 36 MP."""
    buffer = io.BytesIO()
    Image.new("RGB", (side, side), (90, 140, 60)).save(buffer, "PNG", compress_level=9)
    return buffer.getvalue()


def pixel_bombs() -> dict[str, bytes]:
    """A header declaring 12,000 x 12,000 (144 MP: past even a baseline JPEG's bound at a reduced scale) in each
    allowed format, and a progressive JPEG's (which counts whole at any scale)."""
    bombs = {fmt: declare_size(seed_images()[fmt], fmt, BOMB_SIDE, BOMB_SIDE) for fmt in BOMB_FORMATS}
    progressive = progressive_jpeg(64)
    at = progressive.index(b"\xff\xc2") + 5  # SOF2: marker, length, precision, then height, width
    side = BOMB_SIDE.to_bytes(2, "big")
    bombs["jpeg-progressive"] = progressive[:at] + side + side + progressive[at + 4:]
    return bombs


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _oip_document(value, name="images", datatype="BYTES", shape=None, **extra) -> dict:
    tensor = {"name": name, "datatype": datatype, "shape": [1] if shape is None else shape, "data": value, **extra}
    return {"inputs": [tensor]}


def _json(document) -> bytes:
    return json.dumps(document, allow_nan=True).encode()


# Each class: a generator of Attacks for one task


def image_classes(name: str, image: bytes) -> Iterator[Attack]:
    """One costly image over every transport: raw, JSON, multipart, an OIP document, the front's REST
    (JSON and binary extension) and gRPC."""
    yield Attack(name, PREDICTIONS, body=image)
    yield Attack(name, PREDICTIONS, JSON, _json({"image": _b64(image)}))
    yield Attack(name, PREDICTIONS, JSON, _json(_oip_document([_b64(image)])))
    yield Attack(name, FRONT_REST, JSON, _json(_oip_document([_b64(image)])))
    yield binary_extension(name, image)
    yield Attack(name, FRONT_GRPC, body=grpc_request([image]))


def binary_extension(name: str, image: bytes, header_length: str | None = None, size: int | str | None = None,
                     hostile: bool = True) -> Attack:
    """An OIP REST request in the binary extension: a JSON header, then the raw tensor bytes."""
    tensor = {"name": "images", "datatype": "BYTES", "shape": [1],
              "parameters": {"binary_data_size": len(image) + 4 if size is None else size}}
    header = _json({"inputs": [tensor]})
    body = header + len(image).to_bytes(4, "little") + image  # BYTES elements: 4-byte length, then the bytes
    length = str(len(header)) if header_length is None else header_length
    return Attack(name, FRONT_REST, "application/octet-stream", body, headers=(("Inference-Header-Content-Length", length),),
                  hostile=hostile)


def grpc_request(images: list[bytes] | None = None, name: str = "images", datatype: str = "BYTES",
                 shape: list[int] | None = None, contents: list[bytes] | None = None) -> bytes:
    """A serialized ModelInferRequest (model name filled in when sent), with any field as given."""
    from tritonclient.grpc import service_pb2

    request = service_pb2.ModelInferRequest()
    tensor = request.inputs.add()
    tensor.name, tensor.datatype = name, datatype
    tensor.shape.extend([len(images or [])] if shape is None else shape)
    if contents is None:
        contents = [b"".join(len(i).to_bytes(4, "little") + i for i in images or [])]
    request.raw_input_contents.extend(contents)
    return request.SerializeToString()


def nested_json(rng: random.Random) -> Iterator[Attack]:
    """Arrays and objects nested deep enough to exhaust a recursive parser (about 1 KB and up)."""
    for depth in (600, 3_000, 50_000):
        yield Attack("nested json", PREDICTIONS, JSON, b'{"inputs":' + b"[" * depth + b"]" * depth + b"}")
        yield Attack("nested json", PREDICTIONS, JSON, b'{"image":' + b"[" * depth + b"]" * depth + b"}")
        yield Attack("nested json", PREDICTIONS, JSON, b'{"a":' * depth + b"1" + b"}" * depth)
        yield Attack("nested json", FRONT_REST, JSON, b'{"inputs":[{"name":"images","datatype":"BYTES","shape":[1],"data":'
                     + b"[" * depth + b"]" * depth + b"}]}")
    depth = rng.randint(1_000, 2_000)
    yield Attack("nested json", PREDICTIONS, JSON, _json(_oip_document([_b64(seed_images()["png"])])).replace(
        b'"shape": [1]', b'"shape": ' + b"[" * depth + b"1" + b"]" * depth))


def oip_wrong_type_documents(image: bytes) -> list:
    """OIP JSON documents with each field of the wrong type, shape or size."""
    text = _b64(image)
    return [
        _oip_document([text], name=["images"]), _oip_document([text], name=7), _oip_document([text], name=None),
        _oip_document([text], shape=["1"]), _oip_document([text], shape="1"), _oip_document([text], shape=[-1]),
        _oip_document([text], shape=[2**62]), _oip_document([text], shape=[[1]]), _oip_document([text], shape=[1.5]),
        _oip_document([text], datatype="FP64"), _oip_document([text], datatype=["BYTES"]), _oip_document([text], datatype=None),
        _oip_document([text], name="pixels", datatype="FP32", shape=[1, 3, 2**20, 2**20]),
        _oip_document([float("nan")] * 12, name="pixels", datatype="FP32", shape=[1, 3, 2, 2]),
        _oip_document([text] * 1_000, shape=[1_000]), _oip_document(text), _oip_document({"b64": text}),
        _oip_document([[text]]), _oip_document([None]), _oip_document([12345]), _oip_document([]),
        _oip_document([text], parameters=["x"]), _oip_document([text], parameters={"binary_data_size": -1}),
        {"inputs": {"name": "images"}}, {"inputs": []}, {"inputs": [None]}, {"inputs": ["images"]}, {"inputs": 5},
        {"inputs": [{"name": "images"}]}, {"inputs": [{"name": "images", "datatype": "BYTES", "shape": [1]} for _ in range(5_000)]},
        {"inputs": [{"name": "images", "datatype": "BYTES", "shape": [1], "data": ["x" * (4 * 2**20)]}]},
        {"id": ["x"], "inputs": [{"name": "images", "datatype": "BYTES", "shape": [1], "data": [text]}], "outputs": "all"},
    ]


def oip_wrong_types(image: bytes) -> Iterator[Attack]:
    """OIP documents with each field of the wrong type, shape or size: to the handler and the front."""
    for document in oip_wrong_type_documents(image):
        yield Attack("oip wrong types", PREDICTIONS, JSON, _json(document))
        yield Attack("oip wrong types", FRONT_REST, JSON, _json(document))
    for args in ({"name": "pixels"}, {"datatype": "FP32"}, {"shape": [-1]}, {"shape": [2**40]}, {"shape": [1, 2, 3]},
                 {"name": "images", "contents": []}, {"contents": [b"\x00" * 3]}, {"contents": [(2**31).to_bytes(4, "little")]},
                 {"name": "pixels", "datatype": "FP32", "shape": [1, 3, 4096, 4096], "contents": [b"\x00" * 64]},
                 {"name": "\u202e" * 1000}):
        yield Attack("oip wrong types", FRONT_GRPC, body=grpc_request([image], **args))


def malformed_binary_headers(image: bytes) -> Iterator[Attack]:
    """The binary extension with a header length or binary_data_size that lies, or is not a number."""
    for length in ("abc", "-1", "99999999999999999999", "0", str(10**9), "1e3", "0x10"):  # values an HTTP client sends
        yield binary_extension("malformed binary header", image, header_length=length)
    for size in (-1, 0, 10**12, "big", 1.5, 3):
        yield binary_extension("malformed binary header", image, size=size)


def json_expansion(size: int = EXPANSION_BYTES) -> Iterator[Attack]:
    """`[[],[],...]` of `size` bytes (just under the request limit): every 3 bytes a list when parsed."""
    def body(prefix: bytes, suffix: bytes) -> Callable[[], bytes]:
        return lambda: prefix + b"[]," * ((size - len(prefix) - len(suffix) - 2) // 3) + b"[]" + suffix

    for transport, prefix, suffix in ((PREDICTIONS, b"[", b"]"), (PREDICTIONS, b'{"image":[', b"]}"),
                                      (PREDICTIONS, b'{"inputs":[{"name":"images","datatype":"BYTES","shape":[1],"data":[', b"]}]}"),
                                      (FRONT_REST, b'{"inputs":[{"name":"images","datatype":"BYTES","shape":[1],"data":[', b"]}]}")):
        yield Attack("json expansion", transport, JSON, make_body=body(prefix, suffix))


OPTION_VALUES = {
    "score_threshold": ("0", "0.05", "-1", "NaN", "inf", "-inf", "1e309", "0.0000001", "abc", "", "[]"),
    "max_detections": ("1000000000", "1000", "0", "-5", "1.5", "NaN", "99999999999999999999", "1e9", "abc"),
    "topk": ("1000000", "0", "-1", "NaN", "abc"),
    "label_map": ("maybe", "2", "", "null"),
    "label_map_max_side": ("70000", "0", "-1", "1e9", "NaN", "99999999999999999999"),
}
TASK_OPTIONS = {"classify": ("topk",), "detect": ("score_threshold", "max_detections"), "segment": ("label_map", "label_map_max_side")}


def option_fields(task: str, image: bytes) -> Iterator[Attack]:
    """Each of the task's options at each extreme, in a JSON body and as a multipart field, beside a
    valid photo; both options of a detector at once at their most expensive (every box, every mask)."""
    for option in TASK_OPTIONS[task]:
        for value in OPTION_VALUES[option]:
            as_json = value if value in ("", "abc", "maybe") else json.loads(value) if _is_json(value) else value
            yield Attack(f"options {task}", PREDICTIONS, JSON, _json({"image": _b64(image), option: as_json}))
            yield Attack(f"options {task}", PREDICTIONS, *multipart(image, {option: value}))
    if task == "detect":
        yield Attack("options detect", PREDICTIONS, *multipart(image, {"score_threshold": "0", "max_detections": "1000"}))
        yield Attack("options detect", PREDICTIONS, *multipart(image, {"score_threshold": "0.05", "max_detections": "1000"}))
        yield Attack("options detect", PREDICTIONS, JSON, _json({"image": _b64(image), "score_threshold": 0, "max_detections": 10**9}))


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def multipart(image: bytes, fields: dict[str, str]) -> tuple[str, bytes]:
    """(content type, body) of a form with the image as a file and each option as a text field."""
    boundary = "tsvkattackboundary"
    parts = [f"--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n".encode()
             for name, value in fields.items()]
    parts.append(
        f'--{boundary}\r\nContent-Disposition: form-data; name="data"; filename="photo.jpg"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n".encode()
        + image
        + b"\r\n"
    )
    return f"multipart/form-data; boundary={boundary}", b"".join(parts) + f"--{boundary}--\r\n".encode()


def hostile_classes(task: str, photo: bytes, seed: int = 0) -> dict[str, list[Attack]]:
    """Every hostile class for a model of `task`: class name -> its inputs (deterministic for a seed)."""
    rng = random.Random(seed)
    classes: dict[str, list[Attack]] = {"scan bomb": list(image_classes("scan bomb", scan_bomb()))}
    for fmt, bomb in pixel_bombs().items():
        classes[f"pixel bomb {fmt}"] = list(image_classes(f"pixel bomb {fmt}", bomb))
    classes["nested json"] = list(nested_json(rng))
    classes["oip wrong types"] = list(oip_wrong_types(seed_images()["jpeg"]))
    classes["malformed binary header"] = list(malformed_binary_headers(seed_images()["jpeg"]))
    classes["json expansion"] = list(json_expansion())
    classes[f"options {task}"] = list(option_fields(task, photo))
    return classes


def large_burst(count: int = LARGE_BURST, side: int = LARGE_PHOTO_SIDE) -> list[Attack]:
    """`count` large but allowed photos, to be sent at once (not hostile: each must be answered)."""
    return [Attack("large allowed burst", PREDICTIONS, body=large_png(side), hostile=False) for _ in range(count)]


def noise_photo(seed: int, size: tuple[int, int] = (640, 480)) -> bytes:
    """A seeded noise JPEG: a valid, ordinary-sized image (when no real photograph is at hand)."""
    rng = np.random.default_rng(seed)
    buffer = io.BytesIO()
    Image.fromarray(rng.integers(0, 255, (size[1], size[0], 3), dtype=np.uint8)).save(buffer, "JPEG")
    return buffer.getvalue()
