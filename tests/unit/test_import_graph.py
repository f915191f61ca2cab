"""tsvk's own import graph, drawn from the code (ast), not from what happens to be imported.

Module-level imports of tsvk and tsvk_tools form no circle (a circle makes what a module holds depend on
which one was imported first); imports under `if TYPE_CHECKING:` count as module-level here, since a circle
of types is still a circle. Imports of tsvk's own modules inside functions are few, and each says why
in a comment on its line or the line above (an optional or heavy dependency such as torch behind it).

tsvk's rooms (`tsvk.ROOM_LAYERS`) form layers: a room imports only rooms below it, at any level. tools/
imports tsvk only through its declared surface (`tsvk.TOOLS_SURFACE`, and of a room only the names in its
`__all__`); tests may import anything.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest
import tsvk

from tsvk_tools.engines.registry import engine_named, engine_names

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {"tsvk": ROOT / "handlers" / "tsvk", "tsvk_tools": ROOT / "tools"}
MAX_FUNCTION_LEVEL_IMPORTS = 25


def _modules() -> dict[str, Path]:
    found = {}
    for package, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join([package, *parts])] = path
    return found


MODULES = _modules()


def _is_package(name: str) -> bool:
    return MODULES.get(name, Path()).name == "__init__.py"


def _targets(node: ast.Import | ast.ImportFrom, module: str) -> list[str]:
    """The modules of tsvk's own packages that one import statement imports."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        source = _source_of(node, module)
        submodules = [f"{source}.{alias.name}" for alias in node.names if f"{source}.{alias.name}" in MODULES]
        # `from package import module` needs the module; the package's __init__ only when a name is taken from it
        names = submodules + ([source] if len(submodules) < len(node.names) else [])
    return [name for name in names if name in MODULES]


def _module_level_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Imports outside functions: those that run when the module is imported, and those under
    `if TYPE_CHECKING:` (a type checker follows them, and a circle of types is a circle)."""
    found, pending = [], list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        elif not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            pending.extend(child for child in ast.iter_child_nodes(node) if isinstance(child, ast.stmt))
    return found


def _function_level_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    found = []
    for function in ast.walk(tree):
        if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found += [n for n in ast.walk(function) if isinstance(n, (ast.Import, ast.ImportFrom))]
    return list({id(n): n for n in found}.values())  # a nested function's imports are counted once


def _graph() -> dict[str, set[str]]:
    graph = {}
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text(), str(path))
        graph[module] = {t for node in _module_level_imports(tree) for t in _targets(node, module) if t != module}
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each one circle or more."""
    index, low, stack, on_stack, circles, counter = {}, {}, [], set(), [], [0]

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return circles


def test_module_level_imports_of_tsvk_and_tsvk_tools_form_no_circle():
    circles = _circles(_graph())
    assert not circles, "module-level import circles: " + "; ".join(" <-> ".join(c) for c in circles)


def test_tsvk_tools_has_no_circle_even_through_imports_inside_functions():
    """A circle hidden by moving one of its imports into a function is still a circle: tools/ has none."""
    graph = {}
    for module, path in MODULES.items():
        if module.startswith("tsvk_tools"):
            nodes = [n for n in ast.walk(ast.parse(path.read_text(), str(path))) if isinstance(n, (ast.Import, ast.ImportFrom))]
            graph[module] = {t for node in nodes for t in _targets(node, module) if t != module and t.startswith("tsvk_tools")}
    circles = _circles(graph)
    assert not circles, "import circles in tsvk_tools: " + "; ".join(" <-> ".join(c) for c in circles)


def _all_imports(path: Path) -> list[ast.Import | ast.ImportFrom]:
    return [n for n in ast.walk(ast.parse(path.read_text(), str(path))) if isinstance(n, (ast.Import, ast.ImportFrom))]


def _full_graph(package: str) -> dict[str, set[str]]:
    """Every import of `package`'s own modules by its modules: in functions and under TYPE_CHECKING too."""
    return {module: {t for node in _all_imports(path) for t in _targets(node, module) if t != module and t.startswith(package)}
            for module, path in MODULES.items() if module == package or module.startswith(package + ".")}


def test_tsvk_has_no_circle_even_through_imports_inside_functions_or_for_types():
    circles = _circles(_full_graph("tsvk"))
    assert not circles, "import circles in tsvk: " + "; ".join(" <-> ".join(c) for c in circles)


def test_the_circle_finder_finds_a_circle():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def _own_function_level_imports() -> list[tuple[str, int, bool]]:
    """(file, line, has a reason comment) for each import of tsvk's own modules inside a function."""
    found = []
    for module, path in MODULES.items():
        lines = path.read_text().splitlines()
        tree = ast.parse("\n".join(lines), str(path))
        for node in _function_level_imports(tree):
            if not _targets(node, module):
                continue
            own_line, above = lines[node.lineno - 1], lines[node.lineno - 2].strip() if node.lineno > 1 else ""
            found.append((str(path.relative_to(ROOT)), node.lineno, "#" in own_line or above.startswith("#")))
    return found


def test_few_imports_of_tsvk_modules_inside_functions_each_saying_why():
    found = _own_function_level_imports()
    unexplained = [f"{path}:{line}" for path, line, reason in found if not reason]
    assert not unexplained, "function-level imports of tsvk's own modules without a reason comment: " + ", ".join(unexplained)
    assert len(found) <= MAX_FUNCTION_LEVEL_IMPORTS, (
        f"{len(found)} function-level imports of tsvk's own modules (at most {MAX_FUNCTION_LEVEL_IMPORTS}): "
        + ", ".join(f"{path}:{line}" for path, line, _ in found))


# --- tsvk's rooms and the surface tools/ may import -----------------------------------------------------------------

TOP = len(tsvk.ROOM_LAYERS)  # tsvk.handler, TorchServe's entry point, sits above every room


def _layer(module: str) -> int:
    """The layer of a tsvk module: its room's, -1 for the package itself (its version), TOP for the handler."""
    parts = module.split(".")
    if len(parts) == 1:
        return -1
    if parts[1] == "handler" and len(parts) == 2:
        return TOP
    return next((i for i, rooms in enumerate(tsvk.ROOM_LAYERS) if parts[1] in rooms), None)


def _room(module: str) -> str:
    return module.split(".")[1] if "." in module else ""


def _layer_breaches(graph: dict[str, set[str]]) -> list[str]:
    """'a -> b' for each import of a room by a room that is not below it."""
    return [f"{module} -> {target}" for module, targets in sorted(graph.items()) for target in sorted(targets)
            if _room(module) != _room(target) and not _layer(target) < _layer(module)]


def test_every_tsvk_module_is_in_a_room():
    outside = [m for m in MODULES if m.startswith("tsvk.") and _layer(m) is None]
    assert not outside, f"tsvk modules in no room of tsvk.ROOM_LAYERS: {outside}"


def test_tsvk_rooms_import_only_rooms_below_them():
    breaches = _layer_breaches(_full_graph("tsvk"))
    assert not breaches, "a tsvk room imports a room not below it (tsvk.ROOM_LAYERS): " + ", ".join(breaches)


def test_the_layer_check_finds_an_import_upwards():
    graph = {"tsvk.common.settings": {"tsvk.tasks.base"}, "tsvk.tasks.base": {"tsvk.common.settings"},
             "tsvk.request.oip": {"tsvk.preprocess.decode"}, "tsvk.worker.service": {"tsvk.model.loading", "tsvk.worker.heap"}}
    assert _layer_breaches(graph) == ["tsvk.common.settings -> tsvk.tasks.base", "tsvk.request.oip -> tsvk.preprocess.decode"]


def _exports(package: str) -> set[str]:
    """The names a room's `__init__` lists in `__all__`."""
    tree = ast.parse(MODULES[package].read_text())
    found = [n.value for n in tree.body if isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "__all__" for t in n.targets)]
    return set(ast.literal_eval(found[0])) if found else set()


def _outside_surface(path: Path, module: str) -> list[str]:
    """What one tools/ module imports of tsvk beyond its declared surface, as 'tools/x.py imports tsvk.y'."""
    where = str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)
    found = []
    for node in _all_imports(path):
        if isinstance(node, ast.Import):
            wrong = [a.name for a in node.names if a.name.split(".")[0] == "tsvk" and a.name not in tsvk.TOOLS_SURFACE]
        elif node.level or (node.module or "").split(".")[0] != "tsvk":
            continue
        elif node.module not in tsvk.TOOLS_SURFACE:
            wrong = [node.module]
        elif node.module == "tsvk" or MODULES.get(node.module, Path()).name != "__init__.py":
            wrong = []
        else:
            wrong = [f"{node.module}.{a.name}" for a in node.names if a.name not in _exports(node.module)]
        found += [f"{where}:{node.lineno} imports {name}" for name in wrong]
    return found


def test_tools_import_tsvk_only_through_its_declared_surface():
    found = [line for module, path in MODULES.items() if module.startswith("tsvk_tools") for line in _outside_surface(path, module)]
    assert not found, ("tools/ imports tsvk beyond tsvk.TOOLS_SURFACE (and the rooms' __all__): " + "; ".join(found))


def test_the_surface_check_names_the_tools_module_and_the_internal_it_imports(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from tsvk.common import read_properties\nfrom tsvk.tasks.rle import decode_mask\n"
                   "from tsvk.worker import _private\nimport tsvk.model.loading\n")
    assert _outside_surface(bad, "tsvk_tools.bad") == [
        f"{bad}:2 imports tsvk.tasks.rle", f"{bad}:3 imports tsvk.worker._private", f"{bad}:4 imports tsvk.model.loading"]


@pytest.mark.parametrize("room", [m for m in tsvk.TOOLS_SURFACE if MODULES.get(m, Path()).name == "__init__.py" and m != "tsvk"])
def test_each_name_a_room_declares_is_there(room):
    module = importlib.import_module(room)
    missing = sorted(name for name in _exports(room) if not hasattr(module, name))
    assert not missing, f"{room}.__all__ names what it does not have: {missing}"


LAB = "tsvk_tools.lab"


def _is_lab(module: str) -> bool:
    return module == LAB or module.startswith(LAB + ".")


def _all_tool_imports() -> dict[str, set[str]]:
    """Each module of tsvk_tools -> the modules of tsvk_tools it imports anywhere (module level, functions,
    TYPE_CHECKING): a lazy import is still a dependency."""
    graph = {}
    for module, path in MODULES.items():
        if module.startswith("tsvk_tools"):
            nodes = [n for n in ast.walk(ast.parse(path.read_text(), str(path))) if isinstance(n, (ast.Import, ast.ImportFrom))]
            graph[module] = {t for node in nodes for t in _targets(node, module) if t != module and t.startswith("tsvk_tools")}
    return graph


def _product_imports_of_the_lab(graph: dict[str, set[str]]) -> list[str]:
    return sorted(f"{module} imports {target}" for module, targets in graph.items() if not _is_lab(module)
                  for target in targets if _is_lab(target))


def test_the_product_never_imports_the_lab():
    """The product (build, serve, engines, oip, client, doctor, tune, batch, the CLI) runs without the lab
    (bench, robustness, kube-check, gpu-check); the CLI finds the lab's commands by name (tools/lab/commands.py)."""
    found = _product_imports_of_the_lab(_all_tool_imports())
    assert not found, "product modules import the lab: " + "; ".join(found)


def test_a_product_module_importing_the_lab_is_named_with_what_it_imports():
    graph = {"tsvk_tools.tune.measure": {"tsvk_tools.lab.bench.harness", "tsvk_tools.measure.loadgen"},
             "tsvk_tools.lab.bench.harness": {"tsvk_tools.measure.loadgen"}}
    assert _product_imports_of_the_lab(graph) == ["tsvk_tools.tune.measure imports tsvk_tools.lab.bench.harness"]


def _tools_package(module: str) -> str:
    """The package a module belongs to: tsvk_tools.<room>, or tsvk_tools.lab.<room> in the lab."""
    parts = module.split(".")
    return ".".join(parts[:3] if _is_lab(module) and len(parts) > 2 else parts[:2])


def _tools_packages(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    rooms: dict[str, set[str]] = {}
    for module, targets in graph.items():
        home = _tools_package(module)
        rooms.setdefault(home, set()).update(_tools_package(t) for t in targets if _tools_package(t) != home and t != "tsvk_tools")
    return rooms


def test_the_packages_of_tsvk_tools_stand_on_floors():
    """Packages (and top-level modules) of tsvk_tools form no circle even counted whole: each imports only from
    the floors below it (errors, processes and keys at the bottom; archive; config; oip; engines; the commands on top)."""
    circles = _circles(_tools_packages(_all_tool_imports()))
    assert not circles, "tsvk_tools packages that import each other: " + "; ".join(" <-> ".join(c) for c in circles)


def test_a_package_importing_back_up_its_floors_is_found():
    graph = {"tsvk_tools.oip.client": {"tsvk_tools.config.ports"}, "tsvk_tools.config.serving_config": {"tsvk_tools.oip.process"}}
    assert _circles(_tools_packages(graph)) == [["tsvk_tools.config", "tsvk_tools.oip"]]


def _engine_package(module: str, engines: set[str]) -> str | None:
    """The engine package (tsvk_tools.engines.<engine>) a module lies in, if any."""
    parts = module.split(".")
    package = ".".join(parts[:3])
    return package if len(parts) > 2 and package in engines else None


def _engines_standing_on_another(graph: dict[str, set[str]], engines: set[str]) -> list[str]:
    found = set()
    for module, targets in graph.items():
        home = _engine_package(module, engines)
        for target in targets:
            other = _engine_package(target, engines)
            if home and other and other != home:
                found.add(f"{module} imports {target}")
    return sorted(found)


def _registered_engine_packages() -> set[str]:
    return {".".join(type(engine_named(name)).__module__.split(".")[:3]) for name in engine_names()}


def test_no_engine_package_imports_another_engine():
    """Each engine is a package of tools/engines/ beside the others, over tools/engines/shared/ (what every engine
    reuses): an engine's modules never import another engine's, so a third engine needs neither."""
    engines = _registered_engine_packages()
    assert {"tsvk_tools.engines.torchserve", "tsvk_tools.engines.kserve"} <= engines
    found = _engines_standing_on_another(_all_tool_imports(), engines)
    assert not found, "an engine's package imports another engine's: " + "; ".join(found)


def test_an_engine_importing_another_is_found():
    engines = {"tsvk_tools.engines.torchserve", "tsvk_tools.engines.kserve"}
    graph = {"tsvk_tools.engines.kserve.engine_process": {"tsvk_tools.engines.torchserve.server", "tsvk_tools.engines.shared.run"},
             "tsvk_tools.engines.torchserve.server": {"tsvk_tools.engines.shared.run"}}
    assert _engines_standing_on_another(graph, engines) == [
        "tsvk_tools.engines.kserve.engine_process imports tsvk_tools.engines.torchserve.server"]


def _source_of(node: ast.ImportFrom, module: str) -> str:
    """The module an `import from` statement reads, its relative dots resolved against `module`."""
    if not node.level:
        return node.module or ""
    base = module.split(".") if _is_package(module) else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _private_names_across_packages(sources: dict[str, str]) -> list[str]:
    """`from X import _name` where X lies in another package than the importing module: a private reached into."""
    found = []
    for module, text in sources.items():
        home = module.rsplit(".", 1)[0] if not _is_package(module) else module
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ImportFrom) and node.module != "__future__":
                source = _source_of(node, module)
                package = source if _is_package(source) else source.rsplit(".", 1)[0]
                private = [a.name for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
                if private and package != home:
                    found.append(f"{module} imports {', '.join(private)} from {source}")
    return sorted(found)


def test_no_private_name_is_imported_from_another_package():
    """A name with a leading underscore is its package's own; another package imports only what is public (a
    library's private, where one must be touched, sits in one adapter module that says why: tools/oip/kserve_private.py)."""
    found = _private_names_across_packages({module: path.read_text() for module, path in MODULES.items()})
    assert not found, "private names imported across packages: " + "; ".join(found)


def test_a_private_import_across_packages_is_found():
    sources = {"tsvk_tools.engines.kserve.server": "from ...oip.server import _guard, serve\n",
               "tsvk_tools.oip.client": "from .process import _front_pid\n"}
    assert _private_names_across_packages(sources) == ["tsvk_tools.engines.kserve.server imports _guard from tsvk_tools.oip.server"]
