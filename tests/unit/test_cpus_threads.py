"""vCPU detection from cgroups and the affinity mask; worker thread resolution from the config."""

from __future__ import annotations

import os

import pytest

from tsvk_tools.cpus import cgroup_cpu_quota, detect_vcpus
from tsvk.common.settings import RuntimeSettings
from tsvk.common.properties import read_properties
from tsvk.worker.threads import find_torchserve_config, resolve_threads


@pytest.mark.parametrize("content, expected", [("200000 100000", 2.0), ("max 100000", None), ("150000 100000", 1.5)])
def test_cgroup_v2_quota(tmp_path, content, expected):
    (tmp_path / "cpu.max").write_text(content + "\n")
    assert cgroup_cpu_quota(tmp_path) == expected


def test_cgroup_v1_quota(tmp_path):
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("300000")
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000")
    assert cgroup_cpu_quota(tmp_path) == 3.0
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1")
    assert cgroup_cpu_quota(tmp_path) is None


def test_container_limit_beats_host_cores(tmp_path, monkeypatch):
    """A 2-CPU container on a 64-core host plans for 2."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(64)))
    (tmp_path / "cpu.max").write_text("200000 100000")
    assert detect_vcpus(tmp_path) == 2


def test_affinity_mask_beats_quota(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2})
    (tmp_path / "cpu.max").write_text("800000 100000")
    assert detect_vcpus(tmp_path) == 3


def test_fractional_quota_rounds_up(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)))
    (tmp_path / "cpu.max").write_text("50000 100000")
    assert detect_vcpus(tmp_path) == 1


def test_threads_come_from_the_config_torchserve_started_on(tmp_path, monkeypatch):
    config = tmp_path / "c.properties"
    config.write_text("# why\ntsvk.threads.resnet18=3,1\n")
    monkeypatch.setenv("TS_CONFIG_FILE", str(config))
    plan = resolve_threads(RuntimeSettings(intra_op_threads=7), "resnet18")
    assert (plan.intra_op, plan.inter_op) == (3, 1) and str(config) in plan.source


def test_threads_the_server_handed_over_are_taken_without_a_file(tmp_path, monkeypatch):
    monkeypatch.setenv("TS_CONFIG_FILE", str(tmp_path / "absent.properties"))  # never read: the server's values come first
    plan = resolve_threads(RuntimeSettings(intra_op_threads=7), "resnet18", {"tsvk.threads.resnet18": "2,1"}, "the server")
    assert (plan.intra_op, plan.inter_op, plan.source) == (2, 1, "the server")


def test_archive_threads_when_config_has_none():
    plan = resolve_threads(RuntimeSettings(intra_op_threads=2, inter_op_threads=1), "resnet18", {"tsvk.threads.other": "3,1"}, "x")
    assert (plan.intra_op, plan.source) == (2, "archive settings")


def test_bad_config_value_is_ignored():
    assert resolve_threads(RuntimeSettings(), "resnet18", {"tsvk.threads.resnet18": "lots"}, "x").intra_op == 0


def test_config_found_through_ts_config_file(tmp_path, monkeypatch):
    monkeypatch.setenv("TS_CONFIG_FILE", str(tmp_path / "x.properties"))
    assert find_torchserve_config() == tmp_path / "x.properties"


def test_no_torchserve_ancestor_means_no_config(monkeypatch):
    monkeypatch.delenv("TS_CONFIG_FILE", raising=False)
    assert find_torchserve_config() is None


def test_properties_reader_skips_comments(tmp_path):
    path = tmp_path / "c.properties"
    path.write_text("# a=b\n! c=d\nkey = value=with=equals\n\n")
    assert read_properties(path) == {"key": "value=with=equals"}
