"""Each task is one entry of the run-time registry (tsvk.tasks) and one of the build-time one
(tsvk_tools.archive.task_builds); the rest of the code asks them instead of comparing task names."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tsvk.common.task_kinds import TASKS, task_kind
from tsvk.tasks import task_class
from tsvk_tools.archive.pack import handler_sources
from tsvk_tools.archive.task_builds import TASK_BUILDS, check_task, task_backends, task_build
from tsvk_tools.errors import UsageError

ROOT = Path(__file__).resolve().parents[2]
REGISTRIES = {ROOT / "handlers/tsvk/common/task_kinds.py", ROOT / "tools/archive/task_builds.py"}
# `== "detect"`, `!= 'classify'`, `in ("segment", ...)`: a comparison with a task's name
NAME_CHECK = re.compile(r"""(==|!=|\bin)\s*\(?\s*["'](%s)["']""" % "|".join(TASKS))
MOST_NAME_CHECKS = 3  # left where a tool tests a task for a reason of its own (a robustness attack, a bench quirk)


def test_both_registries_name_the_same_tasks():
    assert list(TASK_BUILDS) == list(TASKS)
    assert all(build.kind is TASKS[name] for name, build in TASK_BUILDS.items())


@pytest.mark.parametrize("name", TASKS)
def test_a_task_entry_names_its_handler_module_and_task_class(name):
    kind = task_kind(name)
    handler = handler_sources(name)[0]
    classes = [node.name for node in ast.parse(handler.read_text()).body if isinstance(node, ast.ClassDef)]
    assert handler.name == kind.handler_file and len(classes) == 1  # TorchServe loads the one class a handler defines
    assert task_class(name).name == name


@pytest.mark.parametrize("name", TASKS)
def test_a_tasks_default_backend_can_build_it(name):
    build = task_build(name)
    assert build.default_backend in task_backends(name) and build.default_backend not in build.unsupported
    check_task(build.default_backend, name)


def test_a_backend_that_cannot_build_a_task_is_refused_with_the_ones_that_can():
    with pytest.raises(UsageError, match=r"--backend aoti cannot build a detect model: torch.export .*use --backend"):
        check_task("aoti", "detect")


def test_an_unknown_task_says_which_there_are():
    with pytest.raises(ValueError, match="task must be one of classify, detect, segment, got 'pose'"):
        task_kind("pose")


def test_code_asks_the_registry_instead_of_comparing_task_names():
    sources = [p for folder in ("handlers", "tools") for p in (ROOT / folder).rglob("*.py") if p not in REGISTRIES]
    checks = [f"{p.relative_to(ROOT)}: {line.strip()}" for p in sources for line in p.read_text().splitlines()
              if NAME_CHECK.search(line)]
    assert len(checks) <= MOST_NAME_CHECKS, "\n".join(checks)
