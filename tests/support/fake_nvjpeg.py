"""nvJPEG where torchvision reaches it, `torch.ops.image.decode_jpegs_cuda(images, mode, device)`, on the CPU.

Follows torchvision 0.29 `torchvision/csrc/io/image/cuda/decode_jpegs_cuda.cpp`:
- `prepare_buffers` reads every image's header first (`nvjpegGetImageInfo`) and refuses a chroma
  subsampling `nvjpegChromaSubsampling_t` has no name for ("Unknown chroma subsampling"); nvJPEG decodes
  Huffman-coded JPEGs only, so an arithmetic-coded one is refused too (status 4,
  NVJPEG_STATUS_JPEG_NOT_SUPPORTED; at which call nvJPEG reports it is not documented: here, the header).
- One refused image fails the whole call, "Error while decoding JPEG images: ...", with no partial result.
- The outputs are allocated on the caller's current stream and written on the decoder's private stream
  without waiting for it (torchvision pull request #9606). The fake records, per call, whether the
  caller's stream had been synchronized since the previous call (`FakeCuda.events`), which is what
  makes that safe.
The pixels are libjpeg-turbo's (torchvision's CPU decoder); the real nvJPEG differs from it by a few
levels (torchvision's own CUDA test bounds the mean difference under 2). Install with `install(monkeypatch)`.
"""

from __future__ import annotations

import struct

import torch
import torchvision.io

# Sampling factors (h, v) of Y, Cb, Cr that nvJPEG names (nvjpeg.h, nvjpegChromaSubsampling_t), chroma at 1x1.
KNOWN_LUMA_SAMPLING = {(1, 1), (2, 1), (2, 2), (1, 2), (4, 1), (4, 2), (2, 4)}
ARITHMETIC_SOF = {0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}
UNSUPPORTED = 4  # NVJPEG_STATUS_JPEG_NOT_SUPPORTED


def frame_header(data: bytes) -> tuple[int, list[tuple[int, int]]]:
    """(SOF marker, [(h, v) sampling factors per component]) of a JPEG."""
    at = 2
    while at + 4 <= len(data):
        marker, length = data[at + 1], struct.unpack(">H", data[at + 2 : at + 4])[0]
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            count = data[at + 9]
            factors = [data[at + 11 + 3 * i] for i in range(count)]
            return marker, [(f >> 4, f & 15) for f in factors]
        at += 2 + length
    raise ValueError("no frame header")


def refusal(data: bytes) -> str:
    """'' where nvJPEG decodes this JPEG, else what decode_jpegs_cuda.cpp says."""
    try:
        marker, sampling = frame_header(data)
    except (ValueError, IndexError, struct.error):
        return "Failed to get image info: 3"  # NVJPEG_STATUS_BAD_JPEG
    if marker in ARITHMETIC_SOF:
        return f"Failed to get image info: {UNSUPPORTED}"
    if len(sampling) == 3 and (sampling[1:] != [(1, 1), (1, 1)] or sampling[0] not in KNOWN_LUMA_SAMPLING):
        return "Unknown chroma subsampling"
    return ""


class FakeNvjpeg:
    def __init__(self, cuda):
        self.cuda = cuda  # FakeCuda: the current device, and the events a synchronize leaves
        self.calls: list[int] = []  # images per call
        self.unsynchronized: list[int] = []  # calls (by number) made while the caller's stream had pending work
        self._seen_events = 0

    def install(self, monkeypatch) -> "FakeNvjpeg":
        monkeypatch.setattr(torch.ops.image, "decode_jpegs_cuda", self.decode_jpegs_cuda, raising=False)
        return self

    def decode_jpegs_cuda(self, images: list[torch.Tensor], mode: int, device: torch.device) -> list[torch.Tensor]:
        self.calls.append(len(images))
        index = self.cuda.index(device)
        recent = self.cuda.events[self._seen_events:]
        self._seen_events = len(self.cuda.events)
        if ("synchronize", index) not in recent:
            self.unsynchronized.append(len(self.calls))
        for image in images:
            reason = refusal(bytes(image.numpy()))
            if reason:
                raise RuntimeError(f"Error while decoding JPEG images: {reason}")
        return [torchvision.io.decode_jpeg(image, mode=torchvision.io.ImageReadMode.RGB) for image in images]
