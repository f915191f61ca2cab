"""A multipart/form-data body read into the handler's named inputs, or refused 400 saying what is wrong with it.

Starlette's form parser answers a body it cannot parse with its own exception (which the engine would answer 500),
and it accepts a body cut short, dropping the part it was in the middle of, so a truncated upload would reach the
handler as a form without its image. Here the boundary is checked first, the body (already bounded by the guard in
front, tools/oip/bounded_body.py) must hold its closing delimiter, and a parse failure is said in tsvk's words.
"""

from __future__ import annotations

from typing import Any

from python_multipart.multipart import parse_options_header
from starlette.formparsers import MultiPartException
from starlette.requests import Request

from tsvk.common import BadRequest

MAX_PARTS = 64  # files and fields each: TorchServe's handler takes one image, with a few options beside it


async def read_form(request: Request, max_part_bytes: int) -> dict[str, bytes]:
    """The form's fields by name, each as the bytes received; BadRequest naming what is wrong with the body."""
    boundary = _boundary(request.headers.get("content-type", ""))
    body = await request.body()  # kept by the request: the parser below reads it from there
    if not _is_closed(body, boundary):
        raise BadRequest(f"the multipart/form-data body ends before its closing boundary (--{_shown(boundary)}--): "
                         "it was cut short, or its parts use another boundary than its Content-Type names")
    try:
        form = await request.form(max_files=MAX_PARTS, max_fields=MAX_PARTS, max_part_size=max_part_bytes)
    except MultiPartException as err:
        raise BadRequest(f"the multipart/form-data body cannot be read: {_reason(err, max_part_bytes)}") from None
    return {name: await _bytes(value) for name, value in form.multi_items()}


def _boundary(content_type: str) -> bytes:
    """The boundary parameter of the Content-Type; BadRequest when there is none."""
    _, params = parse_options_header(content_type)
    boundary = params.get(b"boundary", b"")
    if not boundary:
        raise BadRequest("the Content-Type multipart/form-data has no boundary parameter; send "
                         "`Content-Type: multipart/form-data; boundary=<the delimiter between the parts>`")
    return boundary


def _is_closed(body: bytes, boundary: bytes) -> bool:
    """Whether the body holds the closing delimiter (RFC 2046: `--boundary--`, at the start of a line)."""
    close = b"--" + boundary + b"--"
    return body.startswith(close) or b"\r\n" + close in body


def _shown(boundary: bytes) -> str:
    """The boundary as text for a message, at most 70 characters (RFC 2046's limit)."""
    return boundary[:70].decode("latin-1")


def _reason(err: MultiPartException, max_part_bytes: int) -> str:
    """What Starlette refused, in tsvk's words (its messages name its own limits and parser)."""
    if err.message.startswith("Too many"):
        return f"it has more than {MAX_PARTS} files or fields"
    if "exceeded maximum size" in err.message:
        return f"a part is larger than {max_part_bytes} bytes (max_request_size)"
    if "Content-Disposition" in err.message:
        return "a part has no name in its Content-Disposition header"
    return "its parts do not follow the multipart/form-data syntax for the boundary its Content-Type names"


async def _bytes(value: Any) -> bytes:
    if isinstance(value, str):
        return value.encode("utf-8")
    return await value.read()
