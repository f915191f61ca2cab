"""A model as a worker runs it: what `loading.load_model` returns and every task calls."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch


@dataclass
class LoadedModel:
    forward: Callable[[torch.Tensor], Any]
    device: torch.device
    input_dtype: torch.dtype
    format: str
    note: str = ""  # anything the load log line should say (e.g. a CPU package on a GPU worker)
