"""What TorchServe 0.12.0 reads from config.properties, and its defaults, as its source says.

Read from pytorch/serve v0.12.0: frontend/server/src/main/java/org/pytorch/serve/util/ConfigManager.java
(the `private static final String TS_... = "..."` keys and the getters' defaults) and ts/model_server.py
(`vmargs`, `plugins_path`, read by the `torchserve` launcher before Java starts). Any other key is
kept in the Properties object and never looked at, so a misspelt key is silently ignored.
"""

from __future__ import annotations

from tsvk.common import TORCHSERVE

KEYS = frozenset({
    "debug", "inference_address", "management_address", "metrics_address", "load_models", "blacklist_env_vars",
    "default_workers_per_model", "default_response_timeout", "default_startup_timeout", "unregister_model_timeout",
    "number_of_netty_threads", "netty_client_threads", "job_queue_size", "number_of_gpu", "metrics_config", "metrics_mode",
    "model_metrics_auto_detect", "disable_system_metrics", "ipex_enable", "cpu_launcher_enable", "cpu_launcher_args",
    "ipex_gpu_enable", "async_logging", "cors_allowed_origin", "cors_allowed_methods", "cors_allowed_headers",
    "decode_input_request", "keystore", "keystore_pass", "keystore_type", "certificate_file", "private_key_file",
    "max_request_size", "max_response_size", "limit_max_image_pixels", "default_service_handler", "service_envelope",
    "model_server_home", "model_store", "prefer_direct_buffer", "allowed_urls", "install_py_dep_per_model",
    "enable_metrics_api", "grpc_inference_address", "grpc_management_address", "grpc_inference_port",
    "grpc_management_port", "enable_grpc_ssl", "initial_worker_port", "initial_distribution_port", "workflow_store",
    "cpp_log_config", "ts_open_inference_protocol", "token_expiration_min", "ts_header_key_sequence_id",
    "ts_header_key_sequence_start", "ts_header_key_sequence_end", "disable_token_authorization", "enable_model_api",
    "use_native_io", "io_ratio", "metric_time_interval", "enable_envvars_config", "model_snapshot", "models", "version",
    "system_metrics_cmd", "use_env_allowed_urls",
    "vmargs", "plugins_path",  # ts/model_server.py
})
# Keys TorchServe ignores but tsvk reads: its handler (threads, deadlines) and its OIP front.
TSVK_PREFIX = "tsvk."

# The per-model fields of `models=` (wlm/Model.java, ModelManager.java).
MODEL_FIELDS = frozenset({"defaultVersion", "marName", "minWorkers", "maxWorkers", "batchSize", "maxBatchDelay",
                          "responseTimeout", "startupTimeout", "parallelLevel", "runtimeType"})
# Fields of an archive's model-config.yaml that override the same model's `models=` entry (ModelConfig.java).
ARCHIVE_OVERRIDES = ("minWorkers", "maxWorkers", "batchSize", "maxBatchDelay", "responseTimeout", "startupTimeout")

DEFAULT_STARTUP_TIMEOUT_S = TORCHSERVE.startup_timeout_s  # getDefaultStartupTimeout
DEFAULT_RESPONSE_TIMEOUT_S = TORCHSERVE.response_timeout_s  # getDefaultResponseTimeout
DEFAULT_JOB_QUEUE_SIZE = TORCHSERVE.job_queue_size  # getJobQueueSize
DEFAULT_MAX_REQUEST_SIZE = TORCHSERVE.max_request_size  # getMaxRequestSize
DEFAULT_ALLOWED_URLS = "file://.*|http(s)?://.*"  # any http(s) URL
DEFAULT_ADDRESSES = {"management_address": "http://127.0.0.1:8081", "metrics_address": "http://127.0.0.1:8082",
                     "grpc_management_address": "127.0.0.1"}
# Handlers TorchServe 0.12 ships (ts/torch_handler/), named without a file.
BUILTIN_HANDLERS = frozenset({"image_classifier", "image_segmenter", "object_detector", "text_classifier", "dense_net_handler",
                              "base_handler", "vision_handler", "text_handler"})
