"""Which backend a worker gets: auto, fallback with one warning, or a failed load when strict."""

import logging

import pytest
import torch

from tsvk.common import features
from tsvk.preprocess import build_preprocessor, choose_backend
from tsvk.common.settings import PreprocessSettings

CPU, GPU = torch.device("cpu"), torch.device("cuda", 0)


@pytest.fixture
def cvcuda_present(monkeypatch):
    monkeypatch.setattr(features, "has_cvcuda", lambda: True)


@pytest.fixture
def cvcuda_missing(monkeypatch):
    monkeypatch.setattr(features, "has_cvcuda", lambda: False)
    monkeypatch.setattr(features, "unavailable_reason", lambda name: "ImportError: libcuda.so.1")


def test_auto_on_a_cpu_worker_is_cpu(cvcuda_present):
    assert choose_backend("auto", CPU, strict=False).name == "cpu"


def test_auto_on_a_gpu_worker_prefers_cvcuda(cvcuda_present):
    assert choose_backend("auto", GPU, strict=False).name == "cvcuda"


def test_auto_on_a_gpu_worker_without_cvcuda_is_cuda(cvcuda_missing):
    assert choose_backend("auto", GPU, strict=False).name == "cuda"


def test_unavailable_backend_falls_back_with_one_warning(cvcuda_missing, caplog):
    with caplog.at_level(logging.WARNING):
        choice = choose_backend("cvcuda", GPU, strict=False)
    assert choice.name == "cuda"
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "libcuda.so.1" in warnings[0].getMessage()


@pytest.mark.parametrize("backend", ["cuda", "cvcuda"])
def test_gpu_backend_on_a_cpu_worker_falls_back_to_cpu(backend, cvcuda_present):
    choice = choose_backend(backend, CPU, strict=False)
    assert choice.name == "cpu" and "needs a CUDA device" in choice.reason


def test_strict_fails_the_load_saying_what_is_missing(cvcuda_missing):
    with pytest.raises(RuntimeError, match="'cvcuda' but cvcuda cannot be imported.*libcuda.so.1"):
        choose_backend("cvcuda", GPU, strict=True)


def test_build_preprocessor_on_this_machine_gives_cpu():
    preprocessor, choice = build_preprocessor(PreprocessSettings(), CPU)
    assert preprocessor.name == choice.name == "cpu"
