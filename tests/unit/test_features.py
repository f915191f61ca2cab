"""Feature probes: cached, never raising, and honest on this CPU-only machine."""

import sys
import types

import pytest

from tsvk.common import features


@pytest.fixture(autouse=True)
def fresh_probes():
    features.reset_cache()
    yield
    features.reset_cache()


def test_probes_return_booleans_and_describe_lists_them_all():
    found = features.describe()
    assert set(found) == {"cuda", "nvjpeg", "cvcuda", "torch_tensorrt", "openvino", "heif", "avif", "spng"}
    assert all(isinstance(value, bool) for value in found.values())


def test_gpu_features_are_false_without_cuda(monkeypatch):
    monkeypatch.setattr(features, "has_cuda", lambda: False)
    assert not features.has_nvjpeg()
    assert not features.has_cvcuda()


def test_a_module_that_fails_to_import_is_reported_not_raised(monkeypatch):
    monkeypatch.setitem(sys.modules, "tsvk_broken_gpu_lib", None)  # import raises ImportError
    assert "ModuleNotFoundError" in features.unavailable_reason("tsvk_broken_gpu_lib")
    with pytest.raises(ImportError, match="tsvk_broken_gpu_lib is not usable.*pip install tsvk_broken_gpu_lib"):
        features.optional_module("tsvk_broken_gpu_lib")


def test_import_errors_other_than_importerror_count_as_missing(monkeypatch):
    """cvcuda and torch_tensorrt raise OSError-like errors when libcuda is missing."""
    import importlib

    real_import = importlib.import_module

    def import_module(name):
        if name == "fake_trt":
            raise OSError("libcuda.so.1")
        return real_import(name)

    monkeypatch.setattr(importlib, "import_module", import_module)
    assert features.unavailable_reason("fake_trt") == "OSError: libcuda.so.1"


def test_probe_result_is_cached(monkeypatch):
    monkeypatch.setitem(sys.modules, "tsvk_fake_present", types.ModuleType("tsvk_fake_present"))
    first = features.optional_module("tsvk_fake_present")
    monkeypatch.setitem(sys.modules, "tsvk_fake_present", None)
    assert features.optional_module("tsvk_fake_present") is first


def test_torch_tensorrt_is_not_usable_here():
    """torch-tensorrt may be installed here, but without a GPU driver it cannot be imported."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA machine may have a working torch_tensorrt")
    assert not features.has_torch_tensorrt()
