"""What every GPU test leaves in the JUnit XML for `make gpu-check`: its GPU memory peak and CV-CUDA's cache.

Recorded with `record_property`, so the check's report lists them per test (tools/lab/gpu_check/steps.py,
`pytest_figures`). Nothing is recorded where there is no CUDA (the tests skip there anyway).
"""

from __future__ import annotations

import pytest
import torch

from tsvk.common import features

MIB = 1 << 20


@pytest.fixture(autouse=True)
def gpu_memory_and_cvcuda_cache(record_property):
    if not torch.cuda.is_available():
        yield
        return
    torch.cuda.reset_peak_memory_stats()
    yield
    record_property("cuda_max_allocated_mib", round(torch.cuda.max_memory_allocated() / MIB, 1))
    record_property("cuda_max_reserved_mib", round(torch.cuda.max_memory_reserved() / MIB, 1))
    if features.has_cvcuda():
        cvcuda = features.optional_module("cvcuda")
        record_property("cvcuda_cache_mib", round(cvcuda.current_cache_size_inbytes() / MIB, 1))
        record_property("cvcuda_cache_limit_mib", round(cvcuda.get_cache_limit_inbytes() / MIB, 1))
