"""What an engine is to the commands that start, watch and stop it: one interface that TorchServe and tsvk's own engine
each implement (tools/engines/torchserve/engine.py, tools/engines/kserve/engine.py), so that `tsvk serve`, `stop`,
`status`, `keys`, `doctor`, `demo`, the container's PID 1 and the lab ask an engine what it does instead of asking
which engine it is. Adding an engine is adding one more implementation to the registry (docs/adding-an-engine.md)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from .. import defaults
from .shared.drain import DrainReport


@dataclass(frozen=True)
class StopResult:
    """What stopping a server did, the same for every engine: whether it answered what it had taken in (None where it
    cannot tell), and one sentence saying so."""

    drained: bool | None
    said: str
    account: DrainReport | None = None  # the drain's counts where the engine keeps them (TorchServe's), else None


@dataclass(frozen=True)
class ServeOutcome:
    """What `tsvk serve` prints once an engine is ready: its lines, in order."""

    lines: tuple[str, ...]


class Engine(ABC):
    """One way to serve the archives of a config.properties. The class attributes are what the commands ask of it."""

    name: ClassVar[str]  # what --engine and the chart's `engine` value call it
    label: ClassVar[str]  # what a person is told is starting
    running_label: ClassVar[str]  # what status and stop call a running one
    needs_java: ClassVar[bool]  # whether a JDK must be installed for it (system-deps, the image)
    keys_expire: ClassVar[bool]  # whether its token-auth keys lapse and `tsvk serve` renews them
    serves_protocol_itself: ClassVar[bool]  # the Open Inference Protocol without tsvk's front process
    worker_marker: ClassVar[str]  # a word on its workers' command lines (memory and worker counts find them by it)
    management_api: ClassVar[bool]  # TorchServe's management API (models, workers, registration) on its own address

    @abstractmethod
    def start(self, config: Path, run_dir: Path, allocator: str = defaults.ALLOCATOR, env: dict[str, str] | None = None):
        """Start it in the background on `config` from `run_dir`; its run answers wait_ready, url, keys and stop."""

    @abstractmethod
    def find(self, run_dir: Path):
        """Its run started from `run_dir` and still ours; None when none is."""

    @abstractmethod
    def serve(self, config: Path, run_dir: Path, allocator: str, timeout_s: float, oip: bool) -> ServeOutcome:
        """`tsvk serve`: start it, wait until every model is ready (stopping what it started if that fails), and say
        where it answers."""

    @abstractmethod
    def start_in_container(self, config: Path, run_dir: Path, drain_timeout_s: float, front: bool):
        """`tsvk run-container`: start it as a container's only server (the pod's PID 1 supervises it)."""

    @abstractmethod
    def stop(self, run, drain_timeout_s: float) -> StopResult:
        """Drain (answer what was taken in, within `drain_timeout_s`) and stop its run."""

    @abstractmethod
    def status(self, run) -> dict[str, Any]:
        """`tsvk status`'s engine-specific parts: `addresses`, `models` (as `models`), `oip_front`."""

    @abstractmethod
    def models(self, run) -> list[dict] | dict:
        """Each served model with its workers ({"name", "workers": [{"id", "status", "pid", ...}], "ready", ...}), or
        {"error": why} when the engine did not say."""

    def renew_keys(self, run) -> None:
        """Replace its token-auth keys now; an engine whose keys do not expire refuses (UsageError)."""
        raise NotImplementedError

    def archive_refusal(self, archive: Path) -> str | None:
        """Why it would refuse to serve `archive` at start, beyond what TorchServe's rules say; None: it would serve it."""
        return None

    def tls_problems(self, properties: dict[str, str]) -> tuple[str | None, list[str]]:
        """What it would say of the config's TLS at start: why it would not start (None: it would), and the warnings it
        would log. TorchServe serves what it is given (a certificate it makes up too): nothing."""
        return None, []
