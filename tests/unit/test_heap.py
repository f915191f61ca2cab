"""The worker's heap trimming: at most once per interval and per so many batches' time, after a batch, off at 0,
real on glibc."""

from __future__ import annotations

import platform

import pytest
from support.handler_fakes import FakeContext, encode, noise_image, write_tiny_eager_archive
from tsvk.worker.heap import HeapTrimmer, glibc_malloc_trim
from tsvk.worker.service import VisionService
from tsvk.common.settings import HandlerSettings, SettingsError


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


def test_a_long_batch_stretches_the_interval_to_so_many_batches():
    """A model whose batch takes 0.5 s under load is trimmed once per 20 batches' time (10 s), not every 2 s:
    the batch after each trim pays to map its memory back."""
    clock, calls = Clock(), []
    trimmer = HeapTrimmer(2000, trim=lambda: calls.append(clock.now), clock=clock, batches=20)
    clock.now += 2.1
    assert trimmer.after_batch(0.05)  # a fast model: the interval decides
    clock.now += 2.1
    assert not trimmer.after_batch(0.5)
    clock.now += 7.9
    assert trimmer.after_batch(0.5)
    assert calls == pytest.approx([102.1, 112.1])


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
    durations = []

    class Recording(HeapTrimmer):
        def after_batch(self, batch_s: float = 0.0) -> bool:
            durations.append(batch_s)
            return super().after_batch(0.0)  # the interval alone, whatever this machine's speed

    service.heap = Recording(1000, trim=lambda: calls.append(clock.now), clock=clock)
    request = {"body": encode(noise_image())}
    service.handle([request], FakeContext(tmp_path, section))
    assert calls == []
    clock.now += 1.0
    answers = service.handle([request, request], FakeContext(tmp_path, section))
    assert len(answers) == 2 and calls == [101.0]
    assert len(durations) == 2 and all(0 < d < 60 for d in durations)  # each batch's own duration is passed on


_DECODES = """
import io, resource, sys
import numpy as np
from PIL import Image
from tsvk.preprocess import decode_rgb, probe
from tsvk.worker.heap import glibc_malloc_trim, reuse_freed_heap

if sys.argv[1] == "reuse":
    assert reuse_freed_heap()
rows = np.arange(2400, dtype=np.uint8)[:, None]
image = Image.fromarray(np.broadcast_to(rows, (2400, 3200)).copy())  # grey: Pillow decodes it (libspng takes 8-bit RGB)
out = io.BytesIO()
image.save(out, "PNG", compress_level=1)
photo = probe(out.getvalue(), 10**9)
decode_rgb(photo)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(3):
    decode_rgb(photo)
faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 3


def rss_mib():
    return int(open("/proc/self/statm").read().split()[1]) * resource.getpagesize() / 2**20


held = rss_mib()
glibc_malloc_trim()()
print(faults, held, rss_mib())
"""


def _decoding(heap: str) -> tuple[float, float, float]:
    """Page faults per decode of a 7.7 MP grey PNG (Pillow's decoder, then RGB) after the first, then the process's RSS
    (MiB) before and after a trim."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _DECODES, heap], capture_output=True, text=True, check=True)
    faults, held, trimmed = map(float, done.stdout.split())
    return faults, held, trimmed


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_a_heap_kept_for_reuse_decodes_photo_after_photo_without_faulting_its_pages_in_again():
    faults, _, _ = _decoding("default")
    kept_faults, held, trimmed = _decoding("reuse")
    assert faults > 2000, faults  # glibc's defaults: each decode maps its buffers (~30 MiB) and unmaps them again
    assert kept_faults < faults / 10, (kept_faults, faults)
    assert held - trimmed > 20, (held, trimmed)  # the trimmer still hands the kept pages back
