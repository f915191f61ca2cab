"""`tsvk demo` falls back to random weights only where pretrained weights cannot be downloaded."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tsvk_tools import demo
from tsvk_tools.errors import UsageError, WeightsUnavailable


@pytest.fixture
def builds(monkeypatch):
    """The weights of each archive the demo builds; `fail_with` makes the pretrained build fail."""
    calls = SimpleNamespace(weights=[], fail_with=None)

    def build_archive(request, store):
        calls.weights.append(request.weights)
        if request.weights == "DEFAULT" and calls.fail_with is not None:
            raise calls.fail_with

    monkeypatch.setattr(demo, "build_archive", build_archive)
    monkeypatch.setattr(demo, "read_archive_settings", lambda mar: SimpleNamespace(
        provenance={"weights": {"random": calls.weights[-1] == "none"}}))
    return calls


def test_pretrained_weights_are_used_where_they_download(builds, tmp_path):
    assert demo.ensure_archive("resnet18", tmp_path) is False
    assert builds.weights == ["DEFAULT"]


def test_weights_that_cannot_be_downloaded_fall_back_to_random(builds, tmp_path):
    builds.fail_with = WeightsUnavailable("no network")
    assert demo.ensure_archive("resnet18", tmp_path) is True
    assert builds.weights == ["DEFAULT", "none"]


def test_any_other_failure_stops_the_demo_whatever_its_message_says(builds, tmp_path):
    builds.fail_with = UsageError("cannot download: the disk is full")
    with pytest.raises(UsageError, match="the disk is full"):
        demo.ensure_archive("resnet18", tmp_path)
    assert builds.weights == ["DEFAULT"]


def test_the_demo_is_a_tsvk_subcommand():
    from tsvk_tools.cli import build_parser

    args = build_parser().parse_args(["demo", "--model", "resnet50"])
    assert args.func is demo.cmd_demo and args.model == "resnet50"
