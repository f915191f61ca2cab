"""Files that appear whole or not at all: a failed build must never leave a half-written file."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

from .errors import UsageError


@contextlib.contextmanager
def atomic_path(target: Path, force: bool = True) -> Iterator[Path]:
    """Yield a temporary path beside `target`; rename it onto `target` only if the block succeeds."""
    target = Path(target)
    if target.exists() and not force:
        raise UsageError(f"{target} already exists; pass --force to replace it")
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.replace(tmp_path, target)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def write_text_atomic(target: Path, text: str, force: bool = True) -> None:
    with atomic_path(target, force=force) as tmp:
        tmp.write_text(text)


@contextlib.contextmanager
def scratch_dir(near: Path, prefix: str) -> Iterator[Path]:
    """A temporary directory on the same filesystem as `near`, removed whatever happens."""
    Path(near).mkdir(parents=True, exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=near))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def point_latest(link: Path, target: Path) -> None:
    """Make `link` a symlink to `target` (a file beside it), swapped in whole: a results folder keeps one file
    per run and a `latest` name that follows the newest, never a second copy of it."""
    link, target = Path(link), Path(target)
    part = link.with_name(f".{link.name}.part")
    part.unlink(missing_ok=True)
    os.symlink(target.name if target.parent.resolve() == link.parent.resolve() else target.resolve(), part)
    part.replace(link)
