"""One input's bytes, read from a path or fetched from a URL, or the error row it becomes.

A server never sees an input it cannot read, so these errors are the batch command's own, written in the
server's error shape (status, type, machine-readable code, message): an unreadable path or URL, or an input
larger than the request size `tsvk config` serves (TorchServe refuses those with 413 before any worker
reads them). Everything past reading (corrupt, truncated or unsupported images, bombs) is the service's to
answer, exactly as it answers a served request. Only the standard library here: worker processes import
this before the archive's own code.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

FETCH_TIMEOUT_S = 60.0
ERROR_SOURCE = "tsvk"  # as the service's own error bodies say


@dataclass(frozen=True)
class InputError:
    """Why an input was not read: the status and code a client would see, and what happened."""

    status: int
    kind: str
    code: str
    message: str

    def body(self) -> dict:
        return {"code": self.status, "type": self.kind, "error": self.code, "source": ERROR_SOURCE, "message": self.message}


def read_input(source: str, max_bytes: int) -> bytes | InputError:
    """The bytes of a path or an http(s)/file URL, at most `max_bytes`; an InputError otherwise."""
    try:
        data = _fetch(source, max_bytes) if "://" in source else _read_file(Path(source), max_bytes)
    except OSError as err:  # urllib's errors are OSErrors too
        return InputError(400, "InvalidInput", "unreadable_input", f"cannot read {source}: {_reason(err)}")
    if len(data) > max_bytes:
        return too_large(source, max_bytes)
    return data


def too_large(source: str, max_bytes: int) -> InputError:
    return InputError(413, "PayloadTooLarge", "request_too_large",
                      f"{source} is larger than {max_bytes} bytes, the largest request served (--max-request-mb)")


def _read_file(path: Path, max_bytes: int) -> bytes:
    """Reads one byte past the limit at most: a huge file is refused without reading it all."""
    with open(path, "rb") as handle:
        return handle.read(max_bytes + 1)


def _fetch(url: str, max_bytes: int) -> bytes:
    if not url.startswith(("http://", "https://", "file://")):
        raise OSError(f"unsupported URL scheme in {url!r}; http, https and file are read")
    with urllib.request.urlopen(url, timeout=FETCH_TIMEOUT_S) as response:  # noqa: S310 - schemes checked above
        return response.read(max_bytes + 1)


def _reason(err: OSError) -> str:
    if isinstance(err, urllib.error.HTTPError):
        return f"HTTP {err.code} {err.reason}"
    if isinstance(err, urllib.error.URLError):
        return str(err.reason)
    return err.strerror or str(err)
