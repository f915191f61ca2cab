"""The archive robustness and soak runs serve: built once per handler version, a user's own left alone."""

from __future__ import annotations

import pytest
from tsvk_tools.lab.robustness import archives as run
from tsvk_tools.lab.robustness.archives import ensure_archive


@pytest.fixture
def builds(monkeypatch):
    calls = []

    def fake_build(request, store, force=False):
        calls.append(force)
        store.mkdir(parents=True, exist_ok=True)
        (store / f"{request.model}.mar").write_text(f"build {len(calls)}")

    monkeypatch.setattr(run, "build_archive", fake_build)  # patched where ensure_archive looks them up
    monkeypatch.setattr(run, "sources_digest", lambda: "handler-v1")
    return calls


def test_built_once_then_reused_while_the_handler_is_unchanged(tmp_path, builds):
    ensure_archive(tmp_path, "resnet18")
    ensure_archive(tmp_path, "resnet18")
    assert builds == [False] and (tmp_path / "resnet18.sources").read_text() == "handler-v1"


def test_rebuilt_when_the_handler_changed(tmp_path, builds, monkeypatch):
    ensure_archive(tmp_path, "resnet18")
    monkeypatch.setattr(run, "sources_digest", lambda: "handler-v2")
    ensure_archive(tmp_path, "resnet18")
    assert builds == [False, True] and (tmp_path / "resnet18.mar").read_text() == "build 2"
    assert (tmp_path / "resnet18.sources").read_text() == "handler-v2"


def test_an_archive_put_there_by_the_user_is_served_as_it_is(tmp_path, builds):
    mine = _archive_with(tmp_path / "resnet18.mar", {"model-config.yaml": b"mine"}).read_bytes()
    ensure_archive(tmp_path, "resnet18")
    assert builds == [] and (tmp_path / "resnet18.mar").read_bytes() == mine


def _archive_with(path, files: dict[str, bytes]):
    import zipfile

    with zipfile.ZipFile(path, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return path


def _package(root, files: dict[str, bytes]):
    package = root / "tsvk"
    for name, data in files.items():
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_bytes(data)
    (package / "__pycache__").mkdir(exist_ok=True)
    (package / "__pycache__" / "stale.py").write_bytes(b"compiled leftovers are not sources")
    return package


def test_handler_differences_name_changed_missing_and_extra_files(tmp_path):
    from tsvk_tools.archive.archive_info import handler_differences

    package = _package(tmp_path / "checkout", {"a.py": b"same", "b.py": b"new", "sub/c.py": b"only here"})
    mar = _archive_with(tmp_path / "m.mar", {"tsvk/a.py": b"same", "tsvk/b.py": b"old", "tsvk/d.py": b"only packed",
                                             "model-config.yaml": b"other files are not the handler"})
    assert handler_differences(mar, package) == ["tsvk/b.py", "tsvk/d.py", "tsvk/sub/c.py"]
    same = _archive_with(tmp_path / "same.mar", {"tsvk/a.py": b"same", "tsvk/b.py": b"new", "tsvk/sub/c.py": b"only here"})
    assert handler_differences(same, package) == []


def test_a_user_archive_with_another_handler_is_served_with_a_warning(tmp_path, builds, capsys):
    from tsvk_tools.archive.pack import handler_sources

    package = handler_sources()[1]
    files = {f"tsvk/{p.relative_to(package).as_posix()}": p.read_bytes() for p in package.rglob("*.py") if "__pycache__" not in p.parts}
    _archive_with(tmp_path / "resnet18.mar", files)
    ensure_archive(tmp_path, "resnet18")
    assert "WARNING" not in capsys.readouterr().out
    files["tsvk/worker/service.py"] = b"# yesterday's handler"
    _archive_with(tmp_path / "resnet18.mar", files)
    ensure_archive(tmp_path, "resnet18")
    out = capsys.readouterr().out
    assert builds == [] and "WARNING" in out and "tsvk/worker/service.py" in out and "Delete it" in out
