"""Token authorization as tsvk's TorchServe config sets it: keys written to the run directory's key_file.json in
TorchServe 0.12's format, and every inference call (/predictions, /ping, /v2) needs `Authorization: Bearer <key>`.

`tsvk keys` and every client that reads TorchServe's key file read this one the same way. The keys are made at start
and kept while the engine runs (no expiry, so nothing to renew); `tsvk keys --renew` is TorchServe's alone.
"""

from __future__ import annotations

import hmac
import json
import os
import secrets
from pathlib import Path

from ...keys import KEY_FILE, read_key_file

API_KEY = "API"
# What a request without the key is told, on every path and RPC (TorchServe's own words, after its exception's name).
KEY_REFUSED = "Token Authorization failed. Token either incorrect, expired, or not provided correctly"
SHARED_WRITE = 0o022  # group or others may write: they could replace the key file between its writing and its reading


def run_dir_problem(run_dir: Path) -> str | None:
    """Why the keys may not be written to `run_dir`: it is another user's (who could read or replace them), or its group
    or others may write it (and so swap the key file for one whose key they know). None: it is safe for them.
    `tsvk serve` narrows a run directory of its user's to 0700 before the engine starts; this holds for any start."""
    info = Path(run_dir).stat()
    if info.st_uid != os.geteuid():
        return (f"the run directory {run_dir} belongs to uid {info.st_uid}, not to this user (uid {os.geteuid()}): "
                "its owner could read or replace the keys kept there; choose a --run-dir of your own")
    if info.st_mode & SHARED_WRITE:
        return (f"the run directory {run_dir} may be written by its group or others (mode {info.st_mode & 0o777:o}): "
                f"they could replace the keys kept there; run `chmod 700 {run_dir}` or choose another --run-dir")
    return None


def auth_enabled(properties: dict[str, str]) -> bool:
    """TorchServe 0.12's rule: on unless disable_token_authorization=true."""
    return properties.get("disable_token_authorization", "false").strip().lower() != "true"


def write_keys(run_dir: Path) -> None:
    """A fresh key for each API, owner-only from the first byte."""
    path = Path(run_dir) / KEY_FILE
    keys = {kind: {"key": secrets.token_urlsafe(12)} for kind in ("management", "inference", API_KEY)}
    path.unlink(missing_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as out:
        json.dump(keys, out, indent=2)


class InferenceKey:
    """The inference key on file, read again only when the file changes."""

    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / KEY_FILE
        self._stamp: float | None = None
        self._key: str | None = None

    def current(self) -> str | None:
        try:
            stamp = self.path.stat().st_mtime
        except OSError:
            return None
        if stamp != self._stamp:
            self._key = read_key_file(self.path.parent).get("inference", {}).get("key")
            self._stamp = stamp
        return self._key

    def allows(self, authorization: bytes | str | None) -> bool:
        """Whether the header carries the key, compared as bytes in constant time: a header holds whatever bytes the
        client sent, and comparing text that is not ASCII raises (a 500) where the answer is simply no."""
        key = self.current()
        if key is None or authorization is None:
            return False
        given = authorization.encode("utf-8", "surrogatepass") if isinstance(authorization, str) else authorization
        return hmac.compare_digest(given.strip(), f"Bearer {key}".encode())
