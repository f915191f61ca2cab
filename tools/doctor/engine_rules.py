"""Which engine the config is for, and the findings an engine has beyond TorchServe's rules (tsvk's own engine: the
archives and TLS settings it would refuse at start; tools/engines/base.py `archive_refusal`, `tls_problems`).

An engine refuses at start, in one line each, the archives it cannot serve and serves the others: doctor asks the
engine's own check of each archive, so what it reports is what the engine would say. Which engine: `--engine`, else
the engine `tsvk serve` runs from the default run directory on this same config, else TorchServe.
"""

from __future__ import annotations

from pathlib import Path

from .. import defaults
from ..engines.registry import engine_named, engine_of, find_serving
from .findings import ERROR, WARNING, Finding
from .properties import Properties


def engine_for(config: Path, chosen: str | None) -> str:
    """`chosen`, else the engine serving `config` from the default run directory, else TorchServe."""
    if chosen:
        return chosen
    run = find_serving(Path(defaults.RUN_DIR))
    if run is not None and Path(run.config).resolve() == config.resolve():
        return engine_of(run).name
    return defaults.ENGINE


def engine_findings(engine: str, archives: list[Path]) -> list[Finding]:
    """One error per archive the engine would refuse; none for TorchServe (its own rules are the others)."""
    findings = []
    for archive in archives:
        reason = engine_named(engine).archive_refusal(archive)
        if reason is not None:
            findings.append(Finding(ERROR, archive.name, f"the {engine} engine refuses it: {reason}",
                                    "the engine starts without this model (the others still serve) and answers 404 for it",
                                    "serve it with TorchServe (--engine torchserve), or build it with `tsvk archive`"))
    return findings


def tls_findings(engine: str, props: Properties) -> list[Finding]:
    """The engine's own start-up check of the config's TLS (tools/tls.py): an error where it would not start, a
    warning per line it would log; none for TorchServe, which serves what it is given (a made-up certificate too)."""
    refused, warnings = engine_named(engine).tls_problems(props.values)
    if refused is not None:
        return [Finding(ERROR, props.path.name, f"the {engine} engine does not start: {refused}",
                        "it serves no TLS it was not given and never falls back to plain HTTP", "set what the line says")]
    return [Finding(WARNING, props.where("private_key_file"), line, "the engine serves it, and says so in its log", "see the line")
            for line in warnings]
