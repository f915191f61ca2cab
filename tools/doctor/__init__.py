"""`tsvk doctor [CONFIG] [ARCHIVES...]`: every problem of a TorchServe config and its archives, one line each; for
tsvk's own engine (`--engine kserve`, or the engine serving the config) also the archives it would refuse.

Reads any config.properties and any .mar, tsvk's or hand-written, and applies the rules `tsvk config`
follows when it writes a config (config_rules.py) and those a worker's load depends on
(archive_rules.py). Exit status: 0 nothing found, 1 warnings only, 2 at least one error.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import psutil

from .. import defaults
from ..cpus import detect_vcpus

from ..engines.registry import add_engine_argument
from ..errors import UsageError
from . import torchserve as ts
from .archive_rules import Archive, check_archive, check_served, install_deps, read_archive
from .config_rules import RULES, Context, ServedModel, parse_models
from .engine_rules import engine_findings, engine_for, tls_findings
from .findings import ERROR, Finding, exit_status
from .properties import Properties, read


def register(commands) -> None:
    p = commands.add_parser("doctor", help="check a TorchServe config.properties and its .mar archives (tsvk's or any): "
                                           "one line per problem, why it matters and the fix")
    p.add_argument("paths", nargs="*", type=Path, metavar="CONFIG [ARCHIVES...]",
                   help=f"a config.properties (default {defaults.CONFIG}) and .mar files (default: those the config serves, "
                        "from its model_store)")
    p.add_argument("--vcpus", type=int, help="check against this many vCPUs (default: this machine's, from the cgroup CPU "
                                             "quota and affinity mask)")
    add_engine_argument(p, f"the engine the config is for (default: the one `tsvk serve` runs on this config from "
                           f"{defaults.RUN_DIR}, else {defaults.ENGINE}); kserve: also the archives tsvk's own engine would refuse",
                        default=None)
    p.add_argument("--json", action="store_true", help="the findings as JSON, for scripts")
    p.set_defaults(func=cmd_doctor)


def cmd_doctor(args: argparse.Namespace) -> int:
    config, archives = _split_paths(args.paths)
    engine = engine_for(config, args.engine)
    findings, checked = diagnose(config, archives, args.vcpus, engine)
    if args.json:
        print(json.dumps({"checked": checked, "engine": engine, "findings": [f.to_dict() for f in findings]}, indent=2))
    else:
        print("\n".join(f.line() for f in findings) or f"no problems found in {', '.join(checked)}")
        if findings:
            errors = sum(f.severity == ERROR for f in findings)
            print(f"{errors} error(s), {len(findings) - errors} warning(s) in {', '.join(checked)}")
    return exit_status(findings)


def _split_paths(paths: list[Path]) -> tuple[Path, list[Path]]:
    archives = [p for p in paths if p.suffix == ".mar"]
    configs = [p for p in paths if p.suffix != ".mar"]
    if len(configs) > 1:
        raise UsageError(f"one config at a time, got {', '.join(map(str, configs))} (archives end in .mar)")
    config = configs[0] if configs else Path(defaults.CONFIG)
    if not config.is_file():
        raise UsageError(f"config {config} not found; name a TorchServe config.properties, or write one with `tsvk config`")
    missing = [str(p) for p in archives if not p.is_file()]
    if missing:
        raise UsageError(f"archive(s) not found: {', '.join(missing)}")
    return config, archives


def diagnose(config: Path, archive_paths: list[Path], vcpus: int | None = None,
             engine: str = defaults.ENGINE) -> tuple[list[Finding], list[str]]:
    """Every finding for `config` and the archives it serves (or `archive_paths`) on `engine`, and what was checked."""
    props = read(config)
    entries, findings = parse_models(props)
    store = _model_store(props, config)
    archives = {a.manifest.get("model", {}).get("modelName") or a.path.stem: a for a in map(read_archive, archive_paths)}
    names = list(dict.fromkeys([*entries, *_load_models(props, store, archives)]))
    if not archive_paths:
        archives, missing = _archives_in_store(names, entries, store)
        findings += missing
    vcpus = vcpus or detect_vcpus()
    models = [_served(name, entries.get(name, {}), archives.get(name), props, vcpus) for name in names]
    ctx = Context(props, vcpus, psutil.cpu_count(logical=False) or psutil.cpu_count() or 1, models, _fix_command(vcpus, names))
    for rule in RULES:
        findings += rule(ctx)
    for model in models:
        archive = archives.get(model.name)
        if archive is not None:
            findings += check_archive(archive, install_deps(ctx)) + check_served(ctx, model, archive)
    findings += engine_findings(engine, [archive.path for archive in archives.values()]) + tls_findings(engine, props)
    return findings, [str(config)] + [str(a.path) for a in archives.values()]


def _served(name: str, entry: dict, archive: Archive | None, props: Properties, vcpus: int) -> ServedModel:
    overrides = archive.model_config if archive is not None and isinstance(archive.model_config, dict) else {}
    workers = overrides.get("minWorkers", entry.get("minWorkers")) or _default_workers(props, vcpus)
    return ServedModel(name, entry, int(workers) if str(workers).isdigit() else 1,
                       settings=archive.settings if archive else None,
                       overrides={k: overrides[k] for k in ts.ARCHIVE_OVERRIDES if k in overrides},
                       foreign=archive is not None and archive.settings is None)


def _default_workers(props: Properties, vcpus: int) -> int:
    """ConfigManager.getDefaultWorkers: default_workers_per_model, else number_of_gpu, else the processors Java sees."""
    for key in ("default_workers_per_model", "number_of_gpu"):
        value = props.get(key, "0")
        if value.isdigit() and int(value) > 0:
            return int(value)
    return vcpus


def _model_store(props: Properties, config: Path) -> Path | None:
    store = props.get("model_store")
    if not store:
        return None
    path = Path(store)
    return path if path.is_absolute() or path.is_dir() else config.parent / path


def _load_models(props: Properties, store: Path | None, given: dict[str, Archive]) -> list[str]:
    """Model names `load_models` starts: `all` (every archive), or name=file.mar / file.mar entries."""
    value = (props.get("load_models") or "").strip()
    if value == "all":
        in_store = sorted(p.stem for p in store.glob("*.mar")) if store and store.is_dir() else []
        return list(given) or in_store
    names = []
    for item in filter(None, (part.strip() for part in value.split(","))):
        name, _, file = item.partition("=")
        names.append(name if file else Path(item).stem)
    return names or list(given)


def _archives_in_store(names: list[str], entries: dict[str, dict], store: Path | None) -> tuple[dict[str, Archive], list[Finding]]:
    archives, findings = {}, []
    for name in names:
        file = entries.get(name, {}).get("marName") or f"{name}.mar"
        path = store / file if store else None
        if path is not None and path.is_file():
            archives[name] = read_archive(path)
        else:
            findings.append(Finding(ERROR, "model_store", f"{name}: no {file} in {store or 'the model store (model_store is not set)'}",
                                    "TorchServe cannot start the model", "build it (`tsvk archive`) or fix model_store / marName"))
    return archives, findings


def _fix_command(vcpus: int, names: list[str]) -> str:
    models = f" --models {','.join(names)}" if names else ""
    return f"tsvk config --vcpus {vcpus}{models}"
