"""A served config.properties read once into one value: each `models=` field with TorchServe 0.12's own default where
the entry leaves it out, the version TorchServe serves by default, KServe's `model_snapshot`, and a value TorchServe
would refuse reported as a problem, never raised, so a reader that wants only the addresses still has them."""

from __future__ import annotations

import json

import pytest

from tsvk.common import ServedConfig


def _config(models, **properties) -> ServedConfig:
    return ServedConfig.of({"models": json.dumps(models) if not isinstance(models, str) else models, **properties})


def test_an_entry_is_read_with_the_configs_defaults_and_torchserves_for_what_it_leaves_out():
    config = _config({"a": {"1.0": {"marName": "x.mar", "batchSize": 8}}}, default_response_timeout="30",
                     default_startup_timeout="300", default_workers_per_model="2", model_store="/store")
    (model,) = config.models
    assert (model.name, model.version, model.mar_name, model.workers, model.batch_size) == ("a", "1.0", "x.mar", 2, 8)
    assert (model.max_batch_delay_ms, model.response_timeout_s, model.startup_timeout_s) == (100, 30, 300)
    assert str(config.archive_of(model)) == "/store/x.mar" and config.problem is None


def test_an_entry_without_a_mar_name_names_the_models_archive_and_strings_are_numbers():
    (model,) = _config({"b": {"2.0": {"maxBatchDelay": "50"}}}).models
    assert (model.mar_name, model.max_batch_delay_ms) == ("b.mar", 50)


def test_the_default_version_is_the_one_marked_so_else_the_first():
    versions = {"1.0": {"batchSize": 1}, "2.0": {"batchSize": 4, "defaultVersion": True}}
    assert _config({"a": versions}).model("a").version == "2.0"
    assert _config({"a": {"1.0": {"batchSize": 1}, "2.0": {"batchSize": 4}}}).model("a").version == "1.0"


def test_kserves_model_snapshot_is_read_where_models_is_absent():
    snapshot = json.dumps({"models": {"a": {"1.0": {"marName": "a.mar", "minWorkers": 3}}}})
    config = ServedConfig.of({"model_snapshot": snapshot})
    assert config.models_key == "model_snapshot" and config.model("a").workers == 3


@pytest.mark.parametrize("models, says", [("{not json", "is not valid JSON"), ("[1, 2]", "must be a JSON object"),
                                          ({"a": 3}, "entry 'a' must map a version to its settings"),
                                          ({"a": {"1.0": {"batchSize": "eight"}}}, "entry 'a': batchSize must be a whole number")])
def test_a_models_value_torchserve_refuses_is_a_problem_the_rest_still_read(models, says):
    config = _config(models, inference_address="http://127.0.0.1:8080")
    assert says in config.problem
    assert config.get("inference_address") == "http://127.0.0.1:8080"


def test_one_bad_entry_leaves_the_others_read():
    config = _config({"good": {"1.0": {"batchSize": 2}}, "bad": {"1.0": {"batchSize": True}}})
    assert config.model_names == ("good",) and "entry 'bad'" in config.problem


def test_limits_auth_and_tuned_provenance_are_fields():
    config = ServedConfig.of({"max_request_size": "1048576", "job_queue_size": "", "disable_token_authorization": "TRUE",
                              "tsvk.tuned.a": "1 worker: 9.0 img/s"})
    assert (config.max_request_bytes(), config.job_queue_size, config.auth_enabled) == (1048576, 100, False)
    assert config.tuned("a") == "1 worker: 9.0 img/s" and config.tuned("b") is None
    assert ServedConfig.of({}).auth_enabled and ServedConfig.of({}).max_request_bytes() == 6_553_500


def test_read_from_a_file_as_java_reads_it(tmp_path):
    path = tmp_path / "config.properties"
    path.write_text('models={"a": {"1.0": {"marName": "a.mar",\\\n    "minWorkers": 2}}}\n')
    assert ServedConfig.read(path).model("a").workers == 2


def test_a_worker_gets_its_own_model_entry_and_tsvk_keys_and_nothing_of_the_other_models():
    config = ServedConfig.of({
        "models": json.dumps({"a": {"1.0": {"marName": "a.mar", "batchSize": 4, "responseTimeout": 30}},
                              "b": {"1.0": {"marName": "b.mar"}}}),
        "tsvk.threads.a": "2,1", "tsvk.deadline.a": "500", "tsvk.threads.b": "1,1", "default_response_timeout": "90",
        "inference_address": "http://0.0.0.0:8080", "private_key_file": "/keys/server.key"})
    own = config.for_worker("a")
    assert set(own) == {"models", "tsvk.threads.a", "tsvk.deadline.a", "default_response_timeout"}
    assert ServedConfig.of(own).model("a") == config.model("a") and ServedConfig.of(own).model_names == ("a",)
