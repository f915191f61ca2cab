"""The Makefile, the `tsvk` CLI and the option tables of docs/commands.md agree.

OPTIONS is the one table: each row says which Make variable becomes which `tsvk` flag for which
targets. A new option (or target) is a row here, a `$(call opt,...)` in the Makefile and a row in
docs/commands.md; each check below then covers it:
- `make -n` of every target turns each of its variables into its flag with the value given, and passes
  none of them when they are empty (so `tsvk`, not Make, holds the defaults);
- every command line the Makefile runs parses with the real `tsvk` parser, and every flag of that
  command is in the table or in CLI_ONLY with a reason;
- every variable the Makefile uses is in the table or in MAKE_ONLY;
- each target takes on the command line its variables of the table (and of TAKEN_BESIDES_OPTIONS) and no
  other: real `make` calls with any other variable stop before anything runs, naming what the target takes;
- every target is in the targets table of docs/commands.md, and each option table there lists exactly
  the variables and flags of the targets in its heading, with `tsvk`'s defaults.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import pytest

from tsvk_tools import cli
from tsvk_tools.lab.bench import bench_cli as bench_run

ROOT = Path(__file__).resolve().parents[2]
MAKEFILE = ROOT / "Makefile"
HELM_MK = ROOT / "k8s" / "helm.mk"
README = ROOT / "README.md"
COMMANDS = ROOT / "docs" / "commands.md"  # the targets table and one option table per group of targets


@dataclass(frozen=True)
class Option:
    variable: str  # the Make variable
    flag: str  # the tsvk flag it becomes
    targets: str  # the make targets that take it, space-separated
    example: str = "1"  # a value for the dry run (any non-empty value turns a switch on)
    switch: bool = False  # a flag without a value: VAR=1 turns it on

    @property
    def target_list(self) -> list[str]:
        return self.targets.split()


BUILD = "archive compile"
BENCH = "bench bench-central bench-tuned"
OPTIONS = [
    Option(
        "MODEL",
        "--model",
        f"{BUILD} demo predict batch draw {BENCH} bench-compile bench-pinning bench-engines bench-protocol gpu-check robustness soak",
        "resnet50",
    ),
    Option("WEIGHTS", "--weights", f"{BUILD} gpu-check", "none"),
    Option("BACKEND", "--backend", BUILD, "export"),
    Option("DEVICE", "--device", BUILD, "cuda"),
    Option("CPU_ISA", "--cpu-isa", BUILD, "avx2"),
    Option("PRECISION", "--precision", BUILD, "bf16"),
    Option("MAX_BATCH", "--max-batch", BUILD, "16"),
    Option("BATCH", "--batch", f"{BUILD} config batch", "4"),
    Option("MAX_BATCH_DELAY", "--max-batch-delay", f"{BUILD} config", "20"),
    Option("WORKERS", "--workers", f"{BUILD} config batch bench-pinning bench-engines", "3"),
    Option("TOPK", "--topk", BUILD, "7"),
    Option("TASK", "--task", BUILD, "detect"),
    Option("SCORE_THRESHOLD", "--score-threshold", BUILD, "0.3"),
    Option("MAX_DETECTIONS", "--max-detections", BUILD, "20"),
    Option("FORCE", "--force", "archive", switch=True),
    Option("MODEL_FILE", "--model-file", BUILD, "src/mynet.py"),
    Option("MODEL_FACTORY", "--model-factory", BUILD, "MyNet"),
    Option("RESIZE", "--resize", BUILD, "232"),
    Option("CROP", "--crop", BUILD, "200"),
    Option("MEAN", "--mean", BUILD, "0.5,0.5,0.5"),
    Option("STD", "--std", BUILD, "0.25,0.25,0.25"),
    Option("LABELS", "--labels", BUILD, "labels.txt"),
    Option("TOLERANCE", "--tolerance", BUILD, "1e-2,1e-2,0.9"),
    Option("EXACT_JPEG", "--exact-jpeg-decode", BUILD, switch=True),
    Option("CALIBRATION", "--calibration", BUILD, "photos/"),
    Option("ACCURACY_PHOTOS", "--accuracy-photos", BUILD, "photos/"),
    Option("MAX_ACCURACY_DROP", "--max-accuracy-drop", BUILD, "0.02"),
    Option("VCPUS", "--vcpus", "config tune", "8"),
    Option("GPUS", "--gpus", "config", "2"),
    Option("MODELS", "--models", "config tune", "resnet50,vit_b_16"),
    Option("AUTH", "--auth", "config tune", "off"),
    Option("PINNING", "--core-pinning", "config", switch=True),
    Option("RESPONSE_TIMEOUT", "--response-timeout", "config", "300"),
    Option("CONCURRENCY", "--concurrency", f"config {BENCH} tune", "24"),
    Option("MAX_REQUEST_MB", "--max-request-mb", "config batch", "32"),
    Option("DEADLINE_MS", "--deadline-ms", "config", "2500"),
    Option("TOKEN_EXPIRY_MIN", "--token-expiry-min", "config", "30"),
    Option("PROTOCOL", "--protocol", "config serve", "oip"),
    Option("ALLOCATOR", "--allocator", "serve soak", "glibc"),
    Option("ENGINE", "--engine", "serve demo robustness bench-accuracy", "kserve"),
    Option("DRAIN_TIMEOUT", "--drain-timeout", "stop clean", "10"),
    Option("PREDICT_PROTOCOL", "--protocol", "predict", "oip-grpc"),
    Option("CONFIG", "--output", "config tune", "configs/other.properties"),
    Option("CONFIG", "--config", "serve", "configs/other.properties"),
    Option("IMAGE", "--image", f"predict draw demo {BENCH}", "cat.jpg"),
    Option("PHOTOS", "--photos", BENCH, "as-sent"),
    Option("OUTPUT", "--output", "draw batch", "docs/images/boxes.png"),
    Option("INPUT", "--input", "batch", "photos/"),
    Option("COLUMN", "--column", "batch", "url"),
    Option("RAY", "--ray", "batch", "local"),
    Option("QUICK", "--quick", BENCH, switch=True),
    Option("GPU", "--gpu", BENCH, switch=True),
    Option("JOBS", "--jobs", BENCH, "40"),
    Option("ROUNDS", "--rounds", f"{BENCH} bench-engines", "3"),
    Option("ROUND_SECONDS", "--round-seconds", BENCH, "20"),
    Option("FUZZ_INPUTS", "--fuzz-inputs", "robustness", "500"),
    Option("PARTS", "--parts", "robustness", "drain"),
    Option("MINUTES", "--minutes", "soak tune", "5"),
    Option("P99_MS", "--p99-ms", "tune", "1500"),
    Option("MIN_IMG_S", "--min-img-s", "tune", "5"),
    Option("MEMORY_MB", "--memory-mb", "config tune", "6000"),
    Option("IMAGES", "--images", "bench-accuracy", "photos/"),
    Option("AS_SENT", "--as-sent", "bench-accuracy", "24mp"),
    Option("ARCHIVE", "--archive", "bench-protocol", "model_store/resnet50.mar"),
    Option("INFERENCE_ADDRESS", "--inference-address", "config", "http://127.0.0.1:18080"),
    Option("MANAGEMENT_ADDRESS", "--management-address", "config", "http://127.0.0.1:18081"),
    Option("METRICS_ADDRESS", "--metrics-address", "config", "http://127.0.0.1:18082"),
    Option("GRPC_INFERENCE_PORT", "--grpc-inference-port", "config", "17070"),
    Option("GRPC_MANAGEMENT_PORT", "--grpc-management-port", "config", "17071"),
    Option("OIP_ADDRESS", "--oip-address", "config", "0.0.0.0"),
    Option("OIP_REST_PORT", "--oip-rest-port", "config", "18000"),
    Option("OIP_GRPC_PORT", "--oip-grpc-port", "config", "18001"),
    Option("TLS_KEY", "--tls-key", "config", "/etc/tsvk/key.pem"),
    Option("TLS_CERT", "--tls-cert", "config", "/etc/tsvk/cert.pem"),
]
# What a target takes on the command line beyond its OPTIONS rows: Make's own settings, passed to no tsvk flag.
TAKEN_BESIDES_OPTIONS = {
    "doctor": {"CONFIG"},  # the config to check, passed as tsvk doctor's argument
    "bench": {"TRITON_VENV", "TRITON_SYSTEM_PYTHON"},  # bench builds the triton row's venv first
    "triton-venv": {"TRITON_VENV", "TRITON_SYSTEM_PYTHON"},
    "test": {"PYTEST_ARGS", "HELM", "KUBERNETES_VALIDATE"},  # test installs helm first (k8s/helm.mk)
    "test-unit": {"PYTEST_ARGS"},
}
TAKEN_BY_ALL = {"VENV", "PYTHON", "SYSTEM_PYTHON", "TSVK"}

# Flags of the commands the Makefile runs that no Make variable sets, and why.
_PATHS = "paths: the Makefile works in the checkout (model_store/, build/, .tsvk/)"
_BENCH_TUNING = "benchmark tuning beyond the everyday runs: `tsvk bench --help`"
_ROBUSTNESS_TUNING = "the shape of the run beyond its size: `tsvk robustness --help`, `tsvk soak --help`"
_QUIET = "progress lines show on a terminal only; --quiet silences them there too"
CLI_ONLY = {
    "archive": {"--model-store": _PATHS, "--quiet": _QUIET},
    "compile": {"--output-dir": _PATHS, "--quiet": _QUIET},
    "config": {
        "--model-store": _PATHS,
        "--no-archive-check": "the Helm targets pass it (k8s/helm.mk)",
        "--tuned": "the Helm targets pass it (HELM_TUNED, k8s/helm.mk); `tsvk tune` writes a config `make serve` takes as it is",
    },
    "tune": {
        "--model-store": _PATHS,
        "--results-dir": _PATHS,
        "--work-dir": _PATHS,
        "--window-s": "the load window is sized from the budget; `tsvk tune --help`",
        "--quiet": _QUIET,
    },
    "serve": {"--run-dir": _PATHS, "--timeout": "how long to wait for the models; rarely changed", "--quiet": _QUIET},
    "stop": {"--run-dir": _PATHS},
    "status": {"--run-dir": _PATHS, "--json": "for scripts, which call tsvk directly"},
    "doctor": {
        "--json": "for scripts, which call tsvk directly",
        "--vcpus": "checks against another machine's vCPUs: `tsvk doctor --help`",
        "--engine": "`make doctor` finds the engine `make serve` runs on the config; naming another "
        "is for a config not yet served: `tsvk doctor --help`",
    },
    "predict": {"--run-dir": _PATHS},
    "draw": {"--run-dir": _PATHS},
    "batch": {
        "--archive": "an archive outside model_store/: `tsvk batch --help` (make names it by MODEL)",
        "--model-store": _PATHS,
        "--option": "answer options per input (NAME=VALUE, repeated): `tsvk batch --help`",
        "--quiet": _QUIET,
    },
    "demo": {"--model-store": _PATHS, "--config": _PATHS, "--run-dir": _PATHS, "--quiet": _QUIET},
    "bench": {
        flag: _BENCH_TUNING
        for flag in (
            "--decentralized-jobs",
            "--systems",
            "--central-figure",
            "--tuned-vs-generated",
            "--backend",
            "--precision",
            "--fast-backend",
            "--fast-precision",
            "--ours-workers",
            "--tuned-config",
            "--vcpus",
            "--quiet",
            "--warmup",
            "--warmup-seconds",
            "--ceiling-seconds",
            "--output-dir",
            "--cache-dir",
            "--tag",
            "--render",
            "--prepare-only",
        )
    },
    "bench preprocess": {flag: _BENCH_TUNING for flag in ("--batch-size", "--rounds", "--batches", "--threads", "--size")},
    "bench compile": {flag: _BENCH_TUNING for flag in ("--backends", "--weights", "--batches", "--repeats", "--output-dir")},
    "bench pinning": {flag: _BENCH_TUNING for flag in ("--requests", "--concurrency", "--rounds")},
    "bench accuracy": {**{flag: _BENCH_TUNING for flag in ("--variants", "--output-dir")}, "--cache-dir": _PATHS},
    "bench engines": {flag: _BENCH_TUNING for flag in ("--backend", "--rounds", "--shared", "--output-dir")},
    "bench protocol": {flag: _BENCH_TUNING for flag in ("--rounds", "--seconds", "--concurrency", "--output-dir")},
    "gpu-check": {"--steps": "a subset of the steps, for re-running one: `tsvk gpu-check --help`", "--output-dir": _PATHS},
    "robustness": {
        flag: _ROBUSTNESS_TUNING
        for flag in (
            "--model-store",
            "--seed",
            "--concurrency",
            "--overload-factor",
            "--kill-load-s",
            "--output-dir",
            "--work-dir",
            "--quiet",
            "--large-photos",
            "--large-side",
            "--detector",
            "--segmenter",
            "--slow-connections",
            "--slow-seconds",
            "--large-uploads",
        )
    },
    "soak": {
        flag: _ROBUSTNESS_TUNING
        for flag in (
            "--model-store",
            "--load",
            "--malformed",
            "--capacity-seconds",
            "--warmup-minutes",
            "--workers",
            "--seed",
            "--output-dir",
            "--work-dir",
            "--quiet",
        )
    },
}
# Make variables that are not options of a tsvk command.
MAKE_ONLY = {
    "VENV",
    "PYTHON",
    "TSVK",
    "SYSTEM_PYTHON",
    "PYTEST_ARGS",
    "MAKEFILE_LIST",
    "MAKE",
    "TRITON_VENV",
    "TRITON_SYSTEM_PYTHON",
    "MAKELEVEL",
    "MAKECMDGOALS",
}
SHELL_OPERATORS = {"&&", "||", ";", "|", ">"}


def _rows(target: str) -> list[Option]:
    return [o for o in OPTIONS if target in o.target_list]


def _variables() -> set[str]:
    return {o.variable for o in OPTIONS}


def _help_targets(path: Path) -> list[str]:
    return re.findall(r"^([a-z][a-z-]*):.*## ", path.read_text(), re.MULTILINE)


@pytest.fixture(scope="module")
def make():
    path = shutil.which("make")
    if path is None:
        pytest.skip("make is not installed")
    return path


@lru_cache(maxsize=None)
def _dry_run(make: str, target: str, variables: tuple[str, ...]) -> list[list[str]]:
    """The tsvk command lines (argv after `tsvk`) that `make -n target VAR=value ...` would run."""
    env = {k: v for k, v in os.environ.items() if k not in _variables() | {"MAKEFLAGS", "MFLAGS", "MAKELEVEL"}}
    done = subprocess.run(
        [make, "--no-print-directory", "-n", target, "TSVK=tsvk", *variables],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return [argv for line in done.stdout.splitlines() if (argv := _tsvk_argv(line))]


def _tsvk_argv(line: str) -> list[str] | None:
    tokens = shlex.split(line, posix=True) if "tsvk" in line else []
    commands = _subcommands()
    for i, token in enumerate(tokens[:-1]):
        if token == "tsvk" and tokens[i + 1] in commands:
            rest = tokens[i + 1 :]
            return rest[: next((j for j, t in enumerate(rest) if t in SHELL_OPERATORS), len(rest))]
    return None


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    return next(a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices


def _command(argv: list[str]) -> tuple[str, argparse.ArgumentParser, list[str]]:
    """The command's name (`config`, `bench compile`), its real parser, and its arguments."""
    if argv[0] == "bench" and len(argv) > 1 and argv[1] in bench_run.BENCHMARKS:
        return f"bench {argv[1]}", bench_run.benchmark_module(argv[1]).build_parser(), argv[2:]
    if argv[0] == "bench":
        return "bench", bench_run.build_parser(), argv[1:]
    return argv[0], _subcommands()[argv[0]], argv[1:]


def _flags(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {s: a for a in parser._actions for s in a.option_strings if s.startswith("--") and s != "--help"}


def _make_targets() -> list[str]:
    return _help_targets(MAKEFILE)


def _given(target: str) -> tuple[str, ...]:
    return tuple(f"{o.variable}={o.example}" for o in _rows(target))


def _commands_of(make, target: str) -> list[list[str]]:
    return _dry_run(make, target, _given(target))


def test_every_target_of_an_option_runs_tsvk(make):
    for target in sorted({t for o in OPTIONS for t in o.target_list}):
        assert target in _make_targets(), f"{target} is in OPTIONS but the Makefile has no such target with a help line"
        assert _commands_of(make, target), f"make {target} runs no tsvk command"


@pytest.mark.parametrize("target", _make_targets())
def test_each_variable_becomes_its_flag(make, target):
    for argv in _commands_of(make, target):
        for option in _rows(target):
            expected = [option.flag] if option.switch else [option.flag, option.example]
            assert any(argv[i : i + len(expected)] == expected for i in range(len(argv))), (
                f"make {target} {option.variable}={option.example} does not pass {' '.join(expected)}: tsvk {shlex.join(argv)}"
            )


@pytest.mark.parametrize("target", _make_targets())
def test_empty_variables_leave_the_defaults_to_tsvk(make, target):
    for argv in _dry_run(make, target, ()):
        passed = [o for o in _rows(target) if o.flag in argv]
        assert not passed, f"make {target} passes {[o.flag for o in passed]} with nothing set: tsvk {shlex.join(argv)}"


@pytest.mark.parametrize("target", _make_targets())
def test_the_command_parses_and_every_flag_has_a_variable_or_a_reason(make, target):
    for argv in _commands_of(make, target):
        name, parser, arguments = _command(argv)
        try:
            parser.parse_args(arguments)
        except SystemExit:
            pytest.fail(f"make {target} runs `tsvk {shlex.join(argv)}`, which tsvk refuses")
        covered = {o.flag for o in _rows(target)} | set(CLI_ONLY.get(name, {}))
        fixed = {t for t in argv if t.startswith("--")} - {o.flag for o in OPTIONS}  # flags the recipe always passes
        missing = set(_flags(parser)) - covered - fixed
        assert not missing, f"`tsvk {name}` flags without a Make variable for make {target} or a reason in CLI_ONLY: {sorted(missing)}"


def test_every_make_variable_is_an_option_or_make_only():
    used = set(re.findall(r"\$\(([A-Z][A-Z0-9_]*)\)", MAKEFILE.read_text()))
    unknown = used - _variables() - MAKE_ONLY
    assert not unknown, f"Makefile variables in neither OPTIONS nor MAKE_ONLY: {sorted(unknown)}"
    assert not (_variables() - used), f"OPTIONS the Makefile never uses: {sorted(_variables() - used)}"


def _option_tables() -> dict[tuple[str, ...], list[list[str]]]:
    """Each option table of docs/commands.md, keyed by the make targets its heading names: rows of cells."""
    tables: dict[tuple[str, ...], list[list[str]]] = {}
    for section in re.split(r"^## ", COMMANDS.read_text(), flags=re.MULTILINE)[1:]:
        heading, _, body = section.partition("\n")
        targets = tuple(re.findall(r"`make ([a-z-]+)`", heading))
        rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in body.splitlines() if line.startswith("| `")]
        if targets and rows:
            tables[targets] = rows
    return tables


def _code(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def test_the_commands_page_lists_every_target():
    listed = set()
    for line in COMMANDS.read_text().splitlines():
        if line.startswith("| `make "):
            listed |= set(re.findall(r"`make ([a-z-]+)`", line.split("|")[1]))
    targets = set(_make_targets()) | set(_help_targets(HELM_MK))
    assert targets - {"help"} <= listed, (
        f"targets missing from the targets table of docs/commands.md: {sorted(targets - listed - {'help'})}"
    )
    assert listed <= targets, f"the targets table of docs/commands.md names targets that do not exist: {sorted(listed - targets)}"


def test_every_target_with_options_has_an_option_table():
    documented = {t for targets in _option_tables() for t in targets}
    undocumented = {t for o in OPTIONS for t in o.target_list} - documented
    assert not undocumented, f"targets whose options no table of docs/commands.md lists: {sorted(undocumented)}"


@pytest.mark.parametrize("targets", sorted(_option_tables()), ids=" ".join)
def test_option_table_lists_the_variables_and_flags_of_its_targets(targets):
    rows = _option_tables()[targets]
    documented = {_code(row[0])[0].removesuffix("=1"): set(_code(row[1])) for row in rows}
    expected: dict[str, set[str]] = {}
    for option in (o for t in targets for o in _rows(t)):
        expected.setdefault(option.variable, set()).add(option.flag)
    assert documented == expected


@pytest.mark.parametrize("targets", sorted(_option_tables()), ids=" ".join)
def test_documented_defaults_are_tsvks(make, targets):
    """A default written as one code span is the flag's default in every command of the table's targets."""
    for row in _option_tables()[targets]:
        variable, default = _code(row[0])[0].removesuffix("=1"), row[-1]
        if not re.fullmatch(r"`[^`]+`", default):
            continue
        for target in targets:
            for argv in _dry_run(make, target, ()):
                name, parser, _ = _command(argv)
                for option in (o for o in _rows(target) if o.variable == variable):
                    action = _flags(parser)[option.flag]
                    said = action.type(default.strip("`")) if action.type else default.strip("`")
                    assert said == action.default, (
                        f"docs/commands.md: {variable} defaults to {default}; `tsvk {name} {option.flag}`: {action.default}"
                    )


def test_the_quick_benchmark_takes_as_long_everywhere():
    from tsvk_tools.lab.bench.options import QUICK

    for path in (README, COMMANDS, ROOT / "docs" / "benchmarks.md", MAKEFILE):
        for said in re.findall(r"(?:QUICK=1|--quick)[^\n]*?about ([\d-]+) min", path.read_text()):
            assert said == str(QUICK.minutes), f"{path.name} says the quick run takes about {said} minutes; QUICK says {QUICK.minutes}"
    assert f"about {QUICK.minutes} min" in bench_run.build_parser().format_help()


def _taken(target: str) -> set[str]:
    return {o.variable for o in _rows(target)} | TAKEN_BESIDES_OPTIONS.get(target, set())


def _refusal(make: str, *words: str, dry_run: bool = True) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in _variables() | {"MAKEFLAGS", "MFLAGS", "MAKELEVEL"}}
    return subprocess.run(
        [make, "--no-print-directory", *(["-n"] if dry_run else []), *words], cwd=ROOT, env=env, capture_output=True, text=True, check=False
    )


def _said(stderr: str) -> tuple[set[str], set[str]]:
    """The variables a refusal names as not taken, and those it says the goals take."""
    said = re.search(r"does not take (.*?); it takes (.*?) \(docs/commands.md", stderr)
    assert said, f"no refusal naming what is taken: {stderr}"
    refused = set(re.sub(r" \(did you mean [A-Z_ ]+\?\)", "", said.group(1)).split())
    return refused, set(said.group(2).split()) - {"no", "variables"}


@pytest.mark.parametrize("target", _make_targets())
def test_a_variable_the_target_does_not_take_stops_make_naming_what_it_takes(make, target):
    """Every Make variable of the table but the target's own, on one command line: each is named, and so is
    every variable the target takes (the check covers every target with a help line: none is left out)."""
    foreign = sorted(
        (_variables() | MAKE_ONLY | {h for t in TAKEN_BESIDES_OPTIONS.values() for h in t})
        - _taken(target)
        - TAKEN_BY_ALL
        - {"MAKEFILE_LIST", "MAKE", "MAKELEVEL", "MAKECMDGOALS"}
    )
    done = _refusal(make, target, "TSVK=tsvk", *(f"{name}=1" for name in foreign))
    assert done.returncode != 0 and not done.stdout, f"make -n {target} ran with variables it does not take: {done.stdout}"
    assert _said(done.stderr) == (set(foreign), _taken(target))


def test_the_misspelt_models_of_make_config_is_refused_before_anything_runs(make, tmp_path):
    """The plural the user meant is named; nothing is set up or written."""
    config = tmp_path / "generated.properties"
    done = _refusal(make, "config", "MODEL=resnet50", f"CONFIG={config}", dry_run=False)
    assert done.returncode != 0 and not done.stdout and not config.exists()
    assert "make config does not take MODEL (did you mean MODELS?); it takes" in done.stderr
    assert "does not take WORKER (did you mean WORKERS?)" in _refusal(make, "archive", "WORKER=2").stderr


def test_goals_together_take_what_each_takes_and_environment_variables_are_left_alone(make):
    assert _refusal(make, "archive", "config", "TSVK=tsvk", "MODEL=resnet18", "MODELS=resnet18").returncode == 0
    env = {k: v for k, v in os.environ.items() if k not in {"MAKEFLAGS", "MFLAGS", "MAKELEVEL"}}
    done = subprocess.run(
        [make, "--no-print-directory", "-n", "config", "TSVK=tsvk"],
        cwd=ROOT,
        env={**env, "MODEL": "resnet18"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_the_listening_addresses_reach_the_config_make_serve_starts(make, tmp_path):
    """`make config` with other ports writes them, where `make serve` (the same CONFIG) reads them."""
    config = tmp_path / "ports.properties"
    words = [
        "INFERENCE_ADDRESS=http://127.0.0.1:18380",
        "MANAGEMENT_ADDRESS=http://127.0.0.1:18381",
        "METRICS_ADDRESS=http://127.0.0.1:18382",
        "GRPC_INFERENCE_PORT=18383",
        "GRPC_MANAGEMENT_PORT=18384",
    ]
    argv = _dry_run(make, "config", ("AUTH=off", f"CONFIG={config}", *words))[0]
    name, parser, arguments = _command(argv)
    args = parser.parse_args([*arguments, "--no-archive-check", "--models", "resnet18"])  # no archive needed
    assert args.func(args) == 0
    written = dict(line.split("=", 1) for line in config.read_text().splitlines() if "=" in line and not line.startswith("#"))
    assert (written["inference_address"], written["management_address"], written["metrics_address"]) == (
        "http://127.0.0.1:18380",
        "http://127.0.0.1:18381",
        "http://127.0.0.1:18382",
    )
    assert (written["grpc_inference_port"], written["grpc_management_port"]) == ("18383", "18384")
    assert _dry_run(make, "serve", (f"CONFIG={config}",))[0] == ["serve", "--config", str(config)]
