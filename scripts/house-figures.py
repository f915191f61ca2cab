#!/usr/bin/env python3
"""The figures of tsvk's design, read from a checkout's code (ast and text, nothing imported): the import graph of
tsvk_tools' packages (packages, dependencies, floors, any circle), the places that parse the served config's `models=`,
engine names compared outside the engine registry, the names the max batch delay goes by on its way from the CLI flag
to the batcher, and the lines of tools/ and of its lab.

    python scripts/house-figures.py [CHECKOUT]        (default: this checkout)

Run on two checkouts (a `git worktree add` of an older commit, say), it prints the same table for each, to set side by
side.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

# Parsing a config.properties value as JSON (what `models=` holds): json.loads of a value got from a properties mapping.
MODELS_READ = re.compile(r"""json\.loads\(\s*[\w.]*prop\w*\.get\(""")
# An engine's name compared with a string or the constants that held it: what a registry makes needless.
ENGINE_COMPARISON = re.compile(r"""(==|!=)\s*["'](kserve|torchserve)["']|["'](kserve|torchserve)["']\s*(==|!=)"""
                               r"""|(==|!=)\s*(ENGINE|KSERVE|TORCHSERVE|defaults\.ENGINE)\b|\bin\s*\(\s*["'](kserve|torchserve)["']""")
# The spellings the max batch delay takes in the product.
DELAY_NAME = re.compile(r"\b(max_batch_delay\w*|maxBatchDelay|max_delay\w*|batch_delay\w*|MAX_BATCH_DELAY\w*)\b")
LONG_MODULE, LONG_FUNCTION = 523, 80


def modules(tools: Path) -> dict[str, Path]:
    found = {}
    for path in tools.rglob("*.py"):
        parts = list(path.relative_to(tools).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(["tsvk_tools", *parts])] = path
    return found


def _targets(node: ast.ImportFrom | ast.Import, module: str, known: dict[str, Path]) -> set[str]:
    if isinstance(node, ast.Import):
        return {a.name for a in node.names if a.name in known}
    is_package = known[module].name == "__init__.py"
    base = module.split(".") if is_package else module.split(".")[:-1]
    if node.level:
        base = base[: len(base) - (node.level - 1)]
        source = ".".join(base + ([node.module] if node.module else []))
    else:
        source = node.module or ""
    names = {f"{source}.{a.name}" for a in node.names} | {source}
    return {n for n in names if n in known}


def package_of(module: str) -> str:
    parts = module.split(".")
    lab = len(parts) > 2 and parts[1] == "lab"
    return ".".join(parts[:3] if lab else parts[:2])


def package_graph(known: dict[str, Path]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for module, path in known.items():
        home = package_of(module)
        graph.setdefault(home, set())
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                graph[home] |= {package_of(t) for t in _targets(node, module, known) if package_of(t) not in (home, "tsvk_tools")}
    graph.pop("tsvk_tools", None)
    return graph


def floors(graph: dict[str, set[str]]) -> int | None:
    """How many floors the packages stand on (the longest chain of imports, plus one); None where there is a circle."""
    depth: dict[str, int] = {}

    def visit(node: str, path: tuple[str, ...]) -> int:
        if node in path:
            raise ValueError(node)
        if node not in depth:
            depth[node] = 1 + max((visit(n, path + (node,)) for n in graph.get(node, ())), default=0)
        return depth[node]

    try:
        return max(visit(node, ()) for node in graph)
    except ValueError:
        return None


def product_files(tools: Path) -> list[Path]:
    return [p for p in tools.rglob("*.py") if "lab" not in p.relative_to(tools).parts]


def long_parts(files: list[Path]) -> tuple[int, int]:
    long_modules = sum(1 for p in files if len(p.read_text().splitlines()) > LONG_MODULE)
    long_functions = 0
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > LONG_FUNCTION:
                long_functions += 1
    return long_modules, long_functions


def text_sites(files: list[Path], pattern: re.Pattern, root: Path, skip: tuple[str, ...] = ()) -> list[str]:
    found = []
    for path in files:
        relative = str(path.relative_to(root))
        if relative.endswith(skip):
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if pattern.search(line) and not line.lstrip().startswith("#"):
                found.append(f"{relative}:{number}")
    return found


def delay_names(files: list[Path], root: Path) -> tuple[set[str], set[str]]:
    names, where = set(), set()
    for path in files:
        for match in DELAY_NAME.finditer(path.read_text()):
            names.add(match.group(1))
            where.add(str(path.relative_to(root)))
    return names, where


def main(argv: list[str]) -> int:
    root = Path(argv[1] if len(argv) > 1 else Path(__file__).resolve().parents[1]).resolve()
    tools, handlers = root / "tools", root / "handlers"
    product = product_files(tools)
    graph = package_graph(modules(tools))
    product_graph = {p: {d for d in deps if ".lab" not in d} for p, deps in graph.items() if ".lab" not in p}
    handler_files = list(handlers.rglob("*.py"))
    models_sites = text_sites(product + handler_files, MODELS_READ, root)
    comparisons = text_sites(product, ENGINE_COMPARISON, root, skip=("engines/registry.py",))
    names, where = delay_names(product + handler_files, root)
    long_modules, long_functions = long_parts(product)
    lines = lambda files: sum(len(p.read_text().splitlines()) for p in files)  # noqa: E731
    lab = [p for p in tools.rglob("*.py") if "lab" in p.relative_to(tools).parts]
    print(f"checkout: {root}")
    print(f"product packages and top-level modules of tsvk_tools: {len(product_graph)}; dependencies between them: "
          f"{sum(len(d) for d in product_graph.values())}; floors: {floors(product_graph) or 'a circle'}")
    print(f"with the lab: {len(graph)} packages, {sum(len(d) for d in graph.values())} dependencies, floors: {floors(graph) or 'a circle'}")
    print(f"places parsing a properties value as JSON, models= ({len(models_sites)}): {', '.join(models_sites)}")
    print(f"engine-name comparisons outside the registry ({len(comparisons)}): {', '.join(comparisons) or '-'}")
    print(f"max batch delay: {len(names)} names ({', '.join(sorted(names))}) in {len(where)} modules")
    print(f"modules over {LONG_MODULE} lines: {long_modules}; functions over {LONG_FUNCTION} lines: {long_functions}")
    print(f"lines: tools/ {lines(product) + lines(lab)}, of which the lab {lines(lab)} ({lines(lab) / (lines(product) + lines(lab)):.0%})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
