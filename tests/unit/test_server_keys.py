"""Reading TorchServe's token-auth key file, which TorchServe writes while our start-up poll reads it."""

import json

from tsvk_tools.engines.torchserve.server import KEY_FILE, TorchServeRun


def _run(tmp_path) -> TorchServeRun:
    return TorchServeRun(run_dir=tmp_path, config=tmp_path / "config.properties", pid=0)


def test_no_key_file_means_no_keys(tmp_path):
    assert _run(tmp_path).keys() == {} and _run(tmp_path).headers("inference") == {}


def test_a_key_file_still_being_written_reads_as_no_keys_yet(tmp_path):
    (tmp_path / KEY_FILE).write_text("")
    assert _run(tmp_path).keys() == {}
    (tmp_path / KEY_FILE).write_text('{"management": {"key": "ab')  # cut off mid-write
    assert _run(tmp_path).keys() == {}


def test_a_complete_key_file_gives_bearer_headers(tmp_path):
    keys = {"management": {"key": "m1"}, "inference": {"key": "i1"}, "API": {"key": "a1"}}
    (tmp_path / KEY_FILE).write_text(json.dumps(keys))
    assert _run(tmp_path).keys() == {"inference": "i1", "management": "m1"}
    assert _run(tmp_path).headers("inference") == {"Authorization": "Bearer i1"}
