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
from ..tls import TlsError, served_tls, tls_warnings
from .findings import ERROR, WARNING, Finding
from .properties import Properties

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


def tls_findings(engine: str, props: Properties) -> list[Finding]:
    """The engine's own start-up check of the config's TLS (tools/tls.py): an error where it would not start, a
    warning per line it would log; none for TorchServe, which serves what it is given (a made-up certificate too)."""
    if engine != KSERVE:
        return []
    try:
        tls = served_tls(props.values)
    except TlsError as err:
        return [Finding(ERROR, props.path.name, f"the kserve engine does not start: {err}",
                        "it serves no TLS it was not given and never falls back to plain HTTP", "set what the line says")]
    return [Finding(WARNING, props.where("private_key_file"), line, "the engine serves it, and says so in its log", "see the line")
            for line in tls_warnings(tls, props.values)]
