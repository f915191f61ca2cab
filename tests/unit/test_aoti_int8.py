"""--backend aoti --precision int8: PT2E quantization, a package that really runs int8 kernels, loaded as a worker loads it."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

from tsvk.model.loading import load_model
from tsvk_tools.archive.backends import pt2e
from tsvk_tools.archive.build import BuildRequest, build
from tsvk_tools.errors import UsageError
from tsvk_tools.archive.models import CustomModel

import torchao  # noqa: F401,E402  # pinned in requirements.txt: a broken install must fail the suite, not skip it

FIXTURES = Path(__file__).parent.parent / "fixtures"
TINY = CustomModel(FIXTURES / "tiny_model.py", "TinyNet", resize=40, crop=32)
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def int8_build(tmp_path_factory):
    from tsvk_tools.images import jpeg_bytes, photo_array

    root = tmp_path_factory.mktemp("aoti_int8")
    photos = root / "photos"
    photos.mkdir()
    for i in range(10):
        (photos / f"chelsea_{i}.jpg").write_bytes(jpeg_bytes(photo_array("chelsea")[10 * i:, 15 * i:], size=(64, 48)))
    (root / "out").mkdir()
    request = BuildRequest(model="tiny", backend="aoti", precision="int8", custom=TINY, max_batch=4, weights="none", calibration=photos)
    return build(request, root / "out")


def test_int8_package_runs_its_convolution_and_linear_in_int8(int8_build):
    counts = int8_build.settings.provenance["compile"]["int8_kernels"]
    assert counts == pt2e.kernel_counts(int8_build.artifact)
    assert counts["conv"]["int8"] >= 1 and counts["conv"]["fp32"] == 0
    assert "torchao" in int8_build.settings.provenance["built_with"]


def test_int8_package_takes_every_batch_as_a_worker_loads_it(int8_build):
    loaded = load_model(int8_build.settings.artifact, int8_build.artifact.parent, torch.device("cpu"))
    for batch in (1, 3, 4):
        assert loaded.forward(torch.randn(batch, 3, 32, 32)).shape == (batch, 3)


def test_a_worker_needs_no_torchao_to_run_the_int8_package(int8_build):
    """The package calls oneDNN's quantized kernels in libtorch: a stock worker (torch only) runs it."""
    script = (
        "import sys, torch; sys.modules['torchao'] = None\n"  # any import of torchao now fails
        "from torch._inductor import aoti_load_package\n"
        f"runner = aoti_load_package({str(int8_build.artifact)!r})\n"
        "print(list(runner(torch.randn(2, 3, 32, 32)).shape))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [2, 3]


def _package_with_wrapper(tmp_path: Path, source: str) -> Path:
    package = tmp_path / "model.pt2"
    with zipfile.ZipFile(package, "w") as archive:
        archive.writestr("model/data/aotinductor/model/abc.wrapper.cpp", source)
    return package


def test_a_package_whose_convolutions_stayed_fp32_is_refused(tmp_path):
    package = _package_with_wrapper(tmp_path, "aoti_torch_cpu_mkldnn__convolution_pointwise(x);\n" * 3)
    with pytest.raises(UsageError, match="runs all 3 convolutions in fp32.*--backend openvino --precision int8"):
        pt2e.check_quantized(package)


def test_kernel_counts_tell_int8_from_fp32_calls(tmp_path):
    source = "aoti_torch_cpu__qconv_pointwise_tensor(a);\naoti_torch_cpu__qconv2d_pointwise_binary_tensor(b);\n" \
             "aoti_torch_cpu__linear_pointwise(c);\n"
    counts = pt2e.check_quantized(_package_with_wrapper(tmp_path, source))
    assert counts == {"conv": {"int8": 2, "fp32": 0}, "linear": {"int8": 0, "fp32": 1}}
    assert pt2e.describe(counts) == "2 of 2 conv calls int8, 0 of 1 linear calls int8"


def test_int8_without_calibration_and_trained_weights_is_refused(tmp_path):
    weights = tmp_path / "tiny.pth"
    from tests.fixtures.tiny_model import make_tiny

    torch.save(make_tiny().state_dict(), weights)
    (tmp_path / "out").mkdir()
    with pytest.raises(UsageError, match="needs --calibration DIR"):
        build(BuildRequest(model="tiny", backend="aoti", precision="int8", custom=TINY, weights=str(weights)), tmp_path / "out")
    assert list((tmp_path / "out").iterdir()) == []
