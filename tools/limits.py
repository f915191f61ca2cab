"""What a TorchServe config may hold: the model-name grammar and the range of every number.

TorchServe parses ports, queue sizes and byte counts as Java ints, and its config is a Java
Properties file in which a newline starts a new key; so every name is checked against the
archiver's own grammar and every number against a range TorchServe accepts before anything is
written. One table, used by `tsvk config`, `tsvk archive` and the tests.
"""

from __future__ import annotations

import re

# torch-model-archiver's model-name rule: a letter or digit, then letters, digits, '_', '-', '.' (pytorch/serve
# model-archiver/model_archiver/model_packaging_utils.py, check_model_name_regex_or_exit); tsvk adds a length. A name
# so made holds no path separator and cannot be '.' or '..': the kserve engine unpacks each model under its name.
MODEL_NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
JAVA_INT_MAX = 2**31 - 1

# field -> (smallest, largest) allowed; None means the field may be left to the machine/archives.
BOUNDS: dict[str, tuple[int, int]] = {
    "vcpus": (1, 4096),
    "workers": (1, 1024),
    "gpus": (0, 256),
    "batch": (1, 4096),
    "max_batch_delay_ms": (0, 60_000),
    "response_timeout_s": (1, 86_400),
    "concurrency": (1, 1_000_000),  # job_queue_size = 2 x this, well inside a Java int
    "max_request_mb": (1, 1024),  # bytes = MiB x 2^20 must stay a Java int
    "grpc_inference_port": (1, 65_535),
    "grpc_management_port": (1, 65_535),
    "oip_rest_port": (1, 65_535),
    "oip_grpc_port": (1, 65_535),
    "deadline_ms": (1, 3_600_000),
    "token_expiry_min": (1, 525_600),  # at most a year
    "memory_mb": (256, 16_777_216),  # 256 MiB to 16 TiB
}
# The `tsvk config` flag of a field, where it is not the field's name in dashes.
FLAGS = {"max_batch_delay_ms": "--max-batch-delay", "response_timeout_s": "--response-timeout"}


def model_name_problem(name: object) -> str | None:
    """Why `name` cannot be a model name, or None when it can."""
    if isinstance(name, str) and MODEL_NAME_PATTERN.fullmatch(name):
        return None
    return (f"model name {name!r} is not allowed: use letters, digits, '_', '-' and '.', starting with a letter "
            "or digit, at most 128 characters")


def flag(name: str) -> str:
    """The `tsvk config` flag that sets the field `name`."""
    return FLAGS.get(name, "--" + name.replace("_", "-"))


def bound_problem(name: str, value: object) -> str | None:
    """Why `value` is out of range for `name` (named by its flag), or None when it fits."""
    low, high = BOUNDS[name]
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        return f"{flag(name)} must be a whole number from {low} to {high}, got {value!r}"
    return None
