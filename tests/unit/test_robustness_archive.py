"""The archive robustness and soak runs serve: built once per handler version, a user's own left alone."""

from __future__ import annotations

import pytest
from tsvk_tools import archive as archive_module
from tsvk_tools.bench import assets
from tsvk_tools.robustness.run import ensure_archive


@pytest.fixture
def builds(monkeypatch):
    calls = []

    def fake_build(request, store, force=False):
        calls.append(force)
        store.mkdir(parents=True, exist_ok=True)
        (store / f"{request.model}.mar").write_text(f"build {len(calls)}")

    monkeypatch.setattr(archive_module, "build_archive", fake_build)
    monkeypatch.setattr(assets, "sources_digest", lambda: "handler-v1")
    return calls


def test_built_once_then_reused_while_the_handler_is_unchanged(tmp_path, builds):
    ensure_archive(tmp_path, "resnet18")
    ensure_archive(tmp_path, "resnet18")
    assert builds == [False] and (tmp_path / "resnet18.sources").read_text() == "handler-v1"


def test_rebuilt_when_the_handler_changed(tmp_path, builds, monkeypatch):
    ensure_archive(tmp_path, "resnet18")
    monkeypatch.setattr(assets, "sources_digest", lambda: "handler-v2")
    ensure_archive(tmp_path, "resnet18")
    assert builds == [False, True] and (tmp_path / "resnet18.mar").read_text() == "build 2"
    assert (tmp_path / "resnet18.sources").read_text() == "handler-v2"


def test_an_archive_put_there_by_the_user_is_served_as_it_is(tmp_path, builds):
    (tmp_path / "resnet18.mar").write_text("mine")
    ensure_archive(tmp_path, "resnet18")
    assert builds == [] and (tmp_path / "resnet18.mar").read_text() == "mine"
