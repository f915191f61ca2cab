"""The malloc the server and its workers run with, TorchServe's or tsvk's engine's.

A process picks its allocator when it starts, so it is set in the environment the server is started
with (LD_PRELOAD), and every worker inherits it (TorchServe's frontend starts them; the engine's fork server,
started with the engine's environment, forks them). glibc's malloc is the default:
workers trim its heap after batches (tsvk/worker/heap.py) and `make soak` measures that. jemalloc is there
for deployments that standardise on it (it decays freed pages back to the system on its own);
`tsvk soak --allocator jemalloc` measures a worker on it the same way.
"""

from __future__ import annotations

import ctypes.util
import os
from pathlib import Path

from .. import defaults
from ..errors import UsageError

JEMALLOC_SONAME = "libjemalloc.so.2"
# Where Debian/Ubuntu (multiarch), Fedora/RHEL and source builds put it.
_JEMALLOC_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/local/lib")
INSTALL_HINT = "install it (Debian/Ubuntu: apt-get install libjemalloc2; Fedora: dnf install jemalloc)"


def find_jemalloc() -> Path | None:
    """The path of libjemalloc.so.2 on this machine, or None."""
    for folder in _JEMALLOC_DIRS:
        candidate = Path(folder) / JEMALLOC_SONAME
        if candidate.is_file():
            return candidate
    found = ctypes.util.find_library("jemalloc")  # a name the loader resolves, e.g. from ldconfig's cache
    return Path(found) if found else None


def resolve(choice: str) -> tuple[str, Path | None]:
    """(the allocator that will run, jemalloc's path when it is jemalloc). `auto` falls back to glibc;
    an explicit `jemalloc` that is not installed is an error naming how to install it."""
    if choice not in defaults.ALLOCATORS:
        raise UsageError(f"allocator must be one of {', '.join(defaults.ALLOCATORS)}, got {choice!r}")
    if choice == "glibc":
        return "glibc", None
    library = find_jemalloc()
    if library is not None:
        return "jemalloc", library
    if choice == "jemalloc":
        raise UsageError(f"allocator jemalloc asked for, but {JEMALLOC_SONAME} is not installed: {INSTALL_HINT}, "
                         "or pass --allocator glibc")
    return "glibc", None


def allocator_env(choice: str, environ: dict[str, str] | None = None) -> dict[str, str]:
    """The variables to add to TorchServe's environment for `choice`: LD_PRELOAD with jemalloc first
    (anything already preloaded is kept after it), or nothing for glibc."""
    _, library = resolve(choice)
    if library is None:
        return {}
    current = (os.environ if environ is None else environ).get("LD_PRELOAD", "")
    kept = [entry for entry in current.replace(":", " ").split() if Path(entry).name != JEMALLOC_SONAME]
    return {"LD_PRELOAD": " ".join([str(library), *kept])}


def describe(choice: str) -> str:
    """One line for the log: which allocator the servers get, and why."""
    name, library = resolve(choice)
    if library is not None:
        return f"allocator: jemalloc ({library})"
    if choice == "auto":
        return f"allocator: glibc ({JEMALLOC_SONAME} not found; {INSTALL_HINT} to use jemalloc)"
    return "allocator: glibc (asked for)"


def add_allocator_argument(parser) -> None:
    """`--allocator` for the commands that start a server (TorchServe, or either engine for `tsvk serve`)."""
    parser.add_argument("--allocator", choices=defaults.ALLOCATORS, default=defaults.ALLOCATOR,
                        help=f"malloc for the server and its workers: glibc, jemalloc (LD_PRELOAD), or auto = jemalloc where "
                             f"{JEMALLOC_SONAME} is installed (default {defaults.ALLOCATOR})")
