"""The worker's heap trimming: at most once per interval, after a batch, off at 0, real on glibc."""

from __future__ import annotations

import platform

import pytest
from support.handler_fakes import FakeContext, encode, noise_image, write_tiny_eager_archive
from tsvk.heap import HeapTrimmer, glibc_malloc_trim
from tsvk.service import VisionService
from tsvk.settings import HandlerSettings, SettingsError


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_trims_at_most_once_per_interval():
    clock, calls = Clock(), []
    trimmer = HeapTrimmer(2000, trim=lambda: calls.append(clock.now), clock=clock)
    assert not trimmer.after_batch()  # the interval counts from the worker's start
    clock.now += 1.9
    assert not trimmer.after_batch()
    clock.now += 0.2
    assert trimmer.after_batch()
    assert not trimmer.after_batch()
    clock.now += 2.0
    assert trimmer.after_batch()
    assert calls == pytest.approx([102.1, 104.1]) and trimmer.trims == 2


def test_zero_interval_never_trims():
    clock, calls = Clock(), []
    trimmer = HeapTrimmer(0, trim=lambda: calls.append(1), clock=clock)
    clock.now += 3600
    assert not trimmer.after_batch() and calls == []


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_glibc_trim_is_found_and_runs():
    trim = glibc_malloc_trim()
    assert trim is not None
    trim()


def test_interval_is_a_runtime_setting(tmp_path):
    section = write_tiny_eager_archive(tmp_path)
    section["tsvk"]["runtime"] = {"heap_trim_interval_ms": 0}
    assert HandlerSettings.from_model_yaml(section).runtime.heap_trim_interval_ms == 0
    section["tsvk"]["runtime"] = {"heap_trim_interval_ms": -1}
    with pytest.raises(SettingsError, match="heap_trim_interval_ms"):
        HandlerSettings.from_model_yaml(section)


def test_the_service_trims_after_answering(tmp_path):
    section = write_tiny_eager_archive(tmp_path)
    service = VisionService.from_context(FakeContext(tmp_path, section))
    clock, calls = Clock(), []
    service.heap = HeapTrimmer(1000, trim=lambda: calls.append(clock.now), clock=clock)
    request = {"body": encode(noise_image())}
    service.handle([request], FakeContext(tmp_path, section))
    assert calls == []
    clock.now += 1.0
    answers = service.handle([request, request], FakeContext(tmp_path, section))
    assert len(answers) == 2 and calls == [101.0]
