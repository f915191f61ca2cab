"""Which engine the config is for, and the findings that only tsvk's own engine (`tsvk serve --engine kserve`) has.

The engine refuses at start, in one line each, the archives it cannot serve (a stock TorchServe handler, a handler
that is not tsvk's, a missing artifact; tools/engines/kserve/archives.py) and serves the others: doctor asks the
engine's own check of each archive, so what it reports is what the engine would say. Which engine: `--engine`, else
the engine `tsvk serve` runs from the default run directory on this same config, else TorchServe.
"""

from __future__ import annotations

from pathlib import Path

from .. import defaults
from ..engines.kserve.archives import refusal_reason
from ..engines.running import engine_of, find_serving
from .findings import ERROR, Finding

KSERVE = "kserve"


def engine_for(config: Path, chosen: str | None) -> str:
    """`chosen`, else the engine serving `config` from the default run directory, else TorchServe."""
    if chosen:
        return chosen
    run = find_serving(Path(defaults.RUN_DIR))
    if run is not None and Path(run.config).resolve() == config.resolve():
        return engine_of(run)
    return defaults.ENGINE


def engine_findings(engine: str, archives: list[Path]) -> list[Finding]:
    """One error per archive the engine would refuse; none for TorchServe (its own rules are the others)."""
    if engine != KSERVE:
        return []
    findings = []
    for archive in archives:
        reason = refusal_reason(archive)
        if reason is not None:
            findings.append(Finding(ERROR, archive.name, f"the kserve engine refuses it: {reason}",
                                    "the engine starts without this model (the others still serve) and answers 404 for it",
                                    "serve it with TorchServe (--engine torchserve), or build it with `tsvk archive`"))
    return findings
