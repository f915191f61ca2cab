"""k8s/sync_default_config.py replaces the config block of values.yaml and nothing else."""

from __future__ import annotations

import importlib.util

import pytest
import yaml
from tests.support.helm import CHART, REPO

pytestmark = pytest.mark.helm

spec = importlib.util.spec_from_file_location("sync_default_config", REPO / "k8s" / "sync_default_config.py")
sync = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sync)

NEW_CONFIG = "# why\ninference_address=http://0.0.0.0:8080\n\n# why not\ntsvk.threads.m=2,1\n"


def test_replaces_only_the_config_block():
    before = (CHART / "values.yaml").read_text()
    after = sync.replace_block(before, NEW_CONFIG)
    old, new = yaml.safe_load(before), yaml.safe_load(after)
    assert new["torchserve"]["configProperties"] == NEW_CONFIG
    new["torchserve"]["configProperties"] = old["torchserve"]["configProperties"]
    assert new == old
    assert "# Extra environment variables" in after, "comments after the block survive"


def test_replacing_with_the_same_config_changes_nothing():
    before = (CHART / "values.yaml").read_text()
    current = yaml.safe_load(before)["torchserve"]["configProperties"]
    assert sync.replace_block(before, current) == before


def test_a_values_file_without_the_block_is_named():
    with pytest.raises(ValueError, match="configProperties"):
        sync.replace_block("torchserve:\n  vcpus: 2\n", NEW_CONFIG)
