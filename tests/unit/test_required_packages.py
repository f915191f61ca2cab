"""A pinned package that does not import fails the tests in CI and skips them elsewhere (tests/support/required.py)."""

from __future__ import annotations

import pytest

from tests.support.required import pinned

MISSING = "tsvk_no_such_package"


def test_a_missing_pin_fails_in_ci(monkeypatch):
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="pinned in requirements.txt"):
        pinned(MISSING, "make setup")


def test_a_missing_pin_skips_on_a_developers_machine_saying_how_to_install_it(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="make setup"):
        pinned(MISSING, "make setup")


def test_a_present_package_is_returned():
    assert pinned("json", "none").dumps([]) == "[]"
