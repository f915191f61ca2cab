"""Every engine tsvk serves archives on, by name: the one place that knows which engines there are. Commands take an
engine from here (`engine_named`, `engine_of`, `find_serving`) and ask it what it does; none compares engine names."""

from __future__ import annotations

import argparse
from pathlib import Path

from .. import defaults
from ..errors import UsageError
from .base import Engine
from .kserve.engine import KServeEngine
from .torchserve.engine import TorchServeEngine

_ENGINES: dict[str, Engine] = {}


def register(engine: Engine) -> Engine:
    """Make `engine` one of the engines `--engine` accepts (the two of tsvk at import; a test may add a stand-in)."""
    _ENGINES[engine.name] = engine
    return engine


def unregister(name: str) -> None:
    _ENGINES.pop(name, None)


def engine_names() -> tuple[str, ...]:
    return tuple(_ENGINES)


def engine_named(name: str) -> Engine:
    try:
        return _ENGINES[name]
    except KeyError:
        raise UsageError(f"--engine must be one of {', '.join(_ENGINES)}, got {name!r}") from None


def default_engine() -> Engine:
    return engine_named(defaults.ENGINE)


def engine_of(run) -> Engine:
    """The engine a run (what an engine's `start` or `find` gave) belongs to."""
    return engine_named(run.engine)


def add_engine_argument(p: argparse.ArgumentParser, help_text: str | None = None, default: str | None = defaults.ENGINE) -> None:
    """`--engine`, one of the registered engines (`default` None: the command works the engine out itself)."""
    p.add_argument("--engine", choices=engine_names(), default=default,
                   help=help_text or f"what serves the archives (default {defaults.ENGINE}): torchserve (Java), or kserve: tsvk's own "
                                     "worker processes behind KServe's model server, no Java, on the same config and model store")


def find_serving(run_dir: Path):
    """The run of whichever engine `tsvk serve` started from `run_dir` and is still ours; None when none is."""
    for engine in _ENGINES.values():
        run = engine.find(Path(run_dir))
        if run is not None:
            return run
    return None


register(TorchServeEngine())
register(KServeEngine())
