"""Loading each artifact format, and the device rules."""

import json
import os
import subprocess
import sys
import types
import zipfile
from pathlib import Path

import pytest
import torch

from tsvk.model import cpu_isa, loading
from tsvk.common import features
from tsvk.model.loading import ArtifactLoadError, load_model, model_device, worker_device
from tsvk.common.settings import ArtifactSettings, ModelSource

from tests.support.handler_fakes import tiny_module, write_tiny_eager_archive

torch.set_num_threads(1)
CPU, GPU = torch.device("cpu"), torch.device("cuda", 0)


@pytest.fixture(scope="module")
def archive(tmp_path_factory) -> Path:
    model_dir = tmp_path_factory.mktemp("archive")
    write_tiny_eager_archive(model_dir)
    return model_dir


@pytest.fixture(scope="module")
def tiny(archive):
    torch.manual_seed(0)
    model = tiny_module(archive).TinyNet(10).eval()
    model.load_state_dict(torch.load(archive / "model_state.pt"))
    return model


@pytest.fixture(scope="module")
def batch():
    return torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(1))


def _artifact(file, fmt, **kw):
    return ArtifactSettings(file=file, format=fmt, **kw)


def test_eager_file_model_loads_the_state_dict(archive, tiny, batch):
    artifact = _artifact("model_state.pt", "eager", source=ModelSource(kind="file", file="model.py", factory="build"))
    loaded = load_model(artifact, archive, CPU)
    assert torch.equal(loaded.forward(batch), tiny(batch))
    assert (loaded.device, loaded.input_dtype, loaded.format) == (CPU, torch.float32, "eager")


def test_eager_factory_can_be_a_class(archive, tiny, batch):
    artifact = _artifact("model_state.pt", "eager", source=ModelSource(kind="file", file="model.py", factory="TinyNet"))
    assert torch.equal(load_model(artifact, archive, CPU).forward(batch), tiny(batch))


def test_eager_model_takes_the_state_tensors_without_building_weights_first(archive):
    """Built on the meta device, the model's parameters are the loaded state's own tensors (no copy into
    randomly initialised ones); the answers equal the model built the ordinary way (the test above)."""
    state = loading.read_state_dict(archive / "model_state.pt")
    artifact = _artifact("model_state.pt", "eager", source=ModelSource(kind="file", file="model.py", factory="build"))
    model = loading.model_holding(state, artifact, archive, None, "classify")
    assert {name: tensor.data_ptr() for name, tensor in model.state_dict().items()} == {
        name: tensor.data_ptr() for name, tensor in state.items()}



@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads the process's mappings from /proc")
def test_eager_weights_are_mapped_from_the_archive_file_not_copied_into_the_heap(tmp_path, tiny, batch):
    """Mapped, the file's pages are shared by every worker serving the archive; the answers are the same."""
    write_tiny_eager_archive(tmp_path)
    artifact = _artifact("model_state.pt", "eager", source=ModelSource(kind="file", file="model.py", factory="build"))
    loaded = load_model(artifact, tmp_path, CPU)
    assert str(tmp_path / "model_state.pt") in Path("/proc/self/maps").read_text()
    assert torch.equal(loaded.forward(batch), tiny(batch))


def test_a_state_saved_in_the_legacy_format_cannot_be_mapped_and_is_read(tmp_path, tiny):
    weights = tmp_path / "model_state.pt"
    torch.save(tiny.state_dict(), weights, _use_new_zipfile_serialization=False)
    state = loading.read_state_dict(weights)
    assert all(torch.equal(state[name], tensor) for name, tensor in tiny.state_dict().items())
    assert str(weights) not in Path("/proc/self/maps").read_text()

COMPUTING_MODEL_CODE = """
import torch

class Scaled(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 2)
        self.register_buffer("offset", torch.arange(2.0) + 0.5, persistent=False)  # computed, not saved
        self.factor = float(torch.tensor(3.0).item())  # a value computed with a tensor at construction

    def forward(self, x):
        return self.linear(x) * self.factor + self.offset
"""


def test_eager_model_whose_constructor_computes_with_tensors_is_built_on_the_cpu(tmp_path):
    (tmp_path / "model.py").write_text(COMPUTING_MODEL_CODE)
    reference = tiny_module(tmp_path).Scaled().eval()
    torch.save(reference.state_dict(), tmp_path / "model_state.pt")
    artifact = _artifact("model_state.pt", "eager", source=ModelSource(kind="file", file="model.py", factory="Scaled"))
    x = torch.randn(3, 4)
    with torch.inference_mode():
        assert torch.equal(load_model(artifact, tmp_path, CPU).forward(x), reference(x))


def test_eager_model_with_a_buffer_the_state_lacks_is_built_on_the_cpu(tmp_path):
    """Only the unsaved buffer: meta construction succeeds, so the fallback is the check for meta tensors left."""
    (tmp_path / "model.py").write_text(COMPUTING_MODEL_CODE.replace("self.factor = float(torch.tensor(3.0).item())", "self.factor = 3.0"))
    reference = tiny_module(tmp_path).Scaled().eval()
    torch.save(reference.state_dict(), tmp_path / "model_state.pt")
    artifact = _artifact("model_state.pt", "eager", source=ModelSource(kind="file", file="model.py", factory="Scaled"))
    model = loading.model_holding(loading.read_state_dict(tmp_path / "model_state.pt"), artifact, tmp_path, None, "classify")
    assert torch.equal(model.offset, torch.tensor([0.5, 1.5]))


def test_eager_factory_missing_names_what_the_file_offers(archive):
    artifact = _artifact("model_state.pt", "eager", source=ModelSource(kind="file", file="model.py", factory="nope"))
    with pytest.raises(ArtifactLoadError, match="'nope' is not a class or function in model.py; found: TinyNet, build"):
        load_model(artifact, archive, CPU)


def test_eager_torchvision_builder_takes_num_classes_from_labels(tmp_path):
    torch.manual_seed(0)
    reference = __import__("torchvision").models.get_model("mobilenet_v3_small", weights=None, num_classes=7).eval()
    torch.save(reference.state_dict(), tmp_path / "model_state.pt")
    artifact = _artifact("model_state.pt", "eager", source=ModelSource(kind="torchvision", builder="mobilenet_v3_small"))
    loaded = load_model(artifact, tmp_path, CPU, num_classes=7)
    x = torch.randn(1, 3, 64, 64)
    with torch.inference_mode():
        assert torch.allclose(loaded.forward(x), reference(x))


def test_eager_bf16_model_takes_bf16_input(archive, batch):
    artifact = _artifact("model_state.pt", "eager", precision="bf16", source=ModelSource(kind="file", file="model.py", factory="build"))
    loaded = load_model(artifact, archive, CPU)
    assert loaded.input_dtype == torch.bfloat16
    assert loaded.forward(batch.to(torch.bfloat16)).dtype == torch.bfloat16


def test_torchscript_artifact(tmp_path, tiny, batch):
    torch.jit.save(torch.jit.trace(tiny, batch), tmp_path / "model.ts")
    loaded = load_model(_artifact("model.ts", "torchscript"), tmp_path, CPU)
    assert torch.allclose(loaded.forward(batch), tiny(batch), atol=1e-6)


def test_export_artifact_with_dynamic_batch(tmp_path, tiny, batch):
    batch_dim = torch.export.Dim("batch", min=1, max=8)
    torch.export.save(torch.export.export(tiny, (batch,), dynamic_shapes=({0: batch_dim},)), tmp_path / "model.pt2")
    loaded = load_model(_artifact("model.pt2", "export"), tmp_path, CPU)
    assert torch.allclose(loaded.forward(batch[:1]), tiny(batch[:1]), atol=1e-6)
    assert loaded.forward(batch).shape == (2, 10)


def test_aoti_artifact(tmp_path, tiny, batch):
    batch_dim = torch.export.Dim("batch", min=1, max=8)
    program = torch.export.export(tiny, (batch,), dynamic_shapes=({0: batch_dim},))
    torch._inductor.aoti_compile_and_package(program, package_path=str(tmp_path / "model.pt2"))
    loaded = load_model(_artifact("model.pt2", "aoti"), tmp_path, CPU)
    assert torch.allclose(loaded.forward(batch), tiny(batch), atol=1e-5)


@pytest.fixture(scope="module")
def packages(tmp_path_factory, tiny, batch) -> dict[str, Path]:
    """The tiny model as AOTInductor CPU packages: for this machine's widest vector instructions and for AVX2."""
    from tsvk_tools.archive.backends import CompileTarget
    from tsvk_tools.archive.backends.aoti import CPU_ISA_SIMDLEN, compile_aoti

    built = {}
    for isa in CPU_ISA_SIMDLEN:  # `tsvk archive --cpu-isa <isa>`'s compile
        folder = tmp_path_factory.mktemp(f"aoti-{isa}")
        compile_aoti(tiny, CompileTarget("cpu", "fp32", max_batch=8, crop=32, cpu_isa=isa), folder / "model.pt2")
        built[isa] = folder
    return built


def test_a_package_records_the_instructions_it_was_compiled_for(packages):
    from torch._inductor.cpu_vec_isa import pick_vec_isa

    assert cpu_isa.package_target(packages["native"] / "model.pt2")["AOTI_CPU_ISA"] == str(pick_vec_isa()).upper()
    assert cpu_isa.package_target(packages["avx2"] / "model.pt2")["AOTI_CPU_ISA"] == "AVX2"


def test_a_package_for_instructions_this_cpu_lacks_is_refused_at_load_by_name(packages, avx2_only_cpu):
    """What an AVX2-only CPU sees of a package built on an AVX-512 machine: a load error, not SIGILL at the first batch.
    The CPU is the seam (avx2_only_cpu)."""
    assert cpu_isa.host_instructions() == {"avx2"}
    native = cpu_isa.package_target(packages["native"] / "model.pt2")["AOTI_CPU_ISA"]
    if native == "AVX2":
        pytest.skip("this machine's widest vectors are AVX2: its native package runs on an AVX2-only CPU")
    with pytest.raises(ArtifactLoadError, match=f"compiled for the CPU instructions {native} and this CPU lacks AVX512.*"
                       "--cpu-isa avx2.*--backend openvino"):
        load_model(_artifact("model.pt2", "aoti"), packages["native"], CPU)


def test_an_avx2_package_loads_and_answers_as_the_model_does(packages, tiny, batch, avx2_only_cpu):
    loaded = load_model(_artifact("model.pt2", "aoti"), packages["avx2"], CPU)
    assert torch.allclose(loaded.forward(batch), tiny(batch), atol=1e-5)


class _MakesATensorInForward(torch.nn.Module):
    """export bakes the device of `torch.ones(..., device=x.device)` into the graph."""

    def __init__(self):
        super().__init__()
        self.head = torch.nn.Linear(4, 3)

    def forward(self, x):
        return self.head(x + torch.ones(x.shape[1], device=x.device))


def test_export_artifact_moves_the_devices_baked_into_its_graph(tmp_path):
    batch_dim = torch.export.Dim("batch", min=1, max=8)
    program = torch.export.export(_MakesATensorInForward(), (torch.randn(2, 4),), dynamic_shapes=({0: batch_dim},))
    torch.export.save(program, tmp_path / "model.pt2")
    meta = torch.device("meta")  # a device other than the one it was exported on, on any machine
    out = loading.load_export(tmp_path / "model.pt2", meta)(torch.randn(1, 4, device=meta))
    assert out.device == meta and out.shape == (1, 3)


_LOAD_AND_COUNT = """
import sys
from pathlib import Path
import torch
from tsvk.model import loading
library = sys.argv[2]
forward = loading.load_aoti(Path(sys.argv[1]), torch.device("cpu"))
assert forward(torch.randn(2, 4)).shape == (2, 3)
print(len({line.split()[4] for line in open("/proc/self/maps") if line.split()[-1].endswith(library)
           or line.rstrip().endswith(library + " (deleted)")}))
"""


def test_an_aoti_package_is_loaded_once_on_a_machine_without_a_cpp_compiler(tmp_path):
    """torch's loader probes the CPU's vector ISA by compiling a test program after loading the package; without
    a compiler (the serving image has none) the probe raised and the package was loaded a second time, the first
    copy of its library left mapped (about 100 MB more per ResNet-50 worker)."""
    batch_dim = torch.export.Dim("batch", min=1, max=8)
    program = torch.export.export(_MakesATensorInForward(), (torch.randn(2, 4),), dynamic_shapes=({0: batch_dim},))
    package = tmp_path / "model.pt2"
    torch._inductor.aoti_compile_and_package(program, package_path=str(package))
    library = next(Path(name).name for name in zipfile.ZipFile(package).namelist() if name.endswith(".so"))
    env = {**os.environ, "CXX": str(tmp_path / "no-such-compiler"), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache"),
           "PATH": "/nonexistent"}  # no g++ or conda to be found, and no ISA probe cached from an earlier run
    out = subprocess.run([sys.executable, "-c", _LOAD_AND_COUNT, str(package), library], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-1] == "1", out.stderr[-2000:]


def test_aoti_package_only_ever_sees_contiguous_batches(tmp_path, monkeypatch):
    """AOTInductor does not check input strides outside debug builds: a view would be misread."""
    seen = []
    monkeypatch.setattr(loading, "open_aoti_package", lambda path, device_index: seen.append)
    monkeypatch.setattr(loading, "check_package_runs_here", lambda path: None)  # no package file here
    forward = loading.load_aoti(tmp_path / "model.pt2", CPU)
    forward(torch.zeros(2, 3, 304, 304)[..., :299])
    assert seen[0].is_contiguous() and seen[0].shape == (2, 3, 304, 299)


def test_missing_artifact_file_names_the_setting(tmp_path):
    with pytest.raises(ArtifactLoadError, match="'absent.pt2' \\(artifact.file\\) is not in the archive"):
        load_model(_artifact("absent.pt2", "export"), tmp_path, CPU)


# --- devices -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "gpu_id, cuda, expected",
    [(None, True, CPU), (0, False, CPU), (1, True, torch.device("cuda", 1)), ("0", True, GPU), ("", True, CPU)],
)
def test_worker_device_follows_torchserve_gpu_id(gpu_id, cuda, expected):
    assert worker_device(gpu_id, cuda_available=cuda) == expected


@pytest.mark.parametrize("artifact", [_artifact("m.pt2", "aoti", device="cuda"), _artifact("m.ep", "tensorrt")])
def test_cuda_only_artifact_on_a_cpu_worker_fails_clearly(artifact):
    with pytest.raises(ArtifactLoadError, match="this worker has no GPU"):
        model_device(artifact, CPU)


def test_cpu_aoti_package_stays_on_cpu_on_a_gpu_worker_and_says_so():
    device, note = model_device(_artifact("m.pt2", "aoti", device="cpu"), GPU)
    assert device == CPU and "compiled for cpu runs on cpu" in note


def test_portable_formats_follow_the_worker_to_the_gpu():
    assert model_device(_artifact("m.pt2", "export"), GPU) == (GPU, "")


# --- tensorrt, up to the torch_tensorrt seam ---------------------------------------------------


def _recorded_on_gpu_0(program_file: Path) -> None:
    """Make a saved program say what one saved from GPU 0 says: each weight's device is cuda:0
    (torch 2.14.1 `torch/export/pt2_archive/_package.py` writes it into the payload configs)."""
    with zipfile.ZipFile(program_file) as archive:
        entries = {info.filename: archive.read(info) for info in archive.infolist()}
    for name in [n for n in entries if n.endswith("_weights_config.json")]:
        config = json.loads(entries[name])
        for payload in config["config"].values():
            payload["tensor_meta"]["device"] = {"type": "cuda", "index": 0}
        entries[name] = json.dumps(config).encode()
    with zipfile.ZipFile(program_file, "w", zipfile.ZIP_STORED) as archive:
        for name, data in entries.items():
            archive.writestr(name, data)


def test_an_artifact_saved_on_gpu_0_is_read_into_cpu_memory_never_onto_gpu_0(tmp_path, monkeypatch):
    torch.export.save(torch.export.export(torch.nn.Linear(4, 3).eval(), (torch.randn(2, 4),)), tmp_path / "model.pt2")
    _recorded_on_gpu_0(tmp_path / "model.pt2")
    asked, to = [], torch.Tensor.to
    monkeypatch.setattr(torch.Tensor, "to", lambda t, *a, **k: asked.append((a, k)) or to(t, *a, **k))
    meta = torch.device("meta")  # stands in for the worker's cuda:N
    model = loading.load_export(tmp_path / "model.pt2", meta)
    assert not any("cuda" in str(arg) for call in asked for arg in (*call[0], *call[1].values()))
    assert {p.device for p in model.parameters()} == {meta} and not torch.cuda.is_initialized()


def test_tensorrt_without_torch_tensorrt_says_what_is_missing(tmp_path, monkeypatch):
    (tmp_path / "model.ep").write_bytes(b"x")
    monkeypatch.setattr(features, "_probe_module", lambda name: (None, "ImportError: libcuda.so.1: cannot open shared object file"))
    with pytest.raises(ArtifactLoadError, match="needs torch_tensorrt.*libcuda.so.1.*pip install torch-tensorrt"):
        loading.load_tensorrt(tmp_path / "model.ep", CPU)


def test_tensorrt_exported_program_is_loaded_through_torch_tensorrt(tmp_path, monkeypatch, tiny):
    seen = []  # torch_tensorrt 2.14 `_compile.py` `load`: what torch.export.load returns, something with .module()
    fake_trt = types.SimpleNamespace(load=lambda path: seen.append(path) or types.SimpleNamespace(module=lambda: tiny))
    monkeypatch.setattr(features, "optional_module", lambda name: fake_trt)
    torch.export.save(torch.export.export(tiny, (torch.randn(1, 3, 32, 32),)), tmp_path / "model.ep")
    assert loading.load_tensorrt(tmp_path / "model.ep", CPU) is tiny
    assert seen == [str(tmp_path / "model.ep")]


def test_tensorrt_torchscript_engine_is_imported_before_jit_load(tmp_path, monkeypatch, tiny, batch):
    order = []
    monkeypatch.setattr(features, "optional_module", lambda name: order.append(name) or types.SimpleNamespace())
    torch.jit.save(torch.jit.trace(tiny, batch), tmp_path / "model.ts")
    real_load = torch.jit.load
    monkeypatch.setattr(torch.jit, "load", lambda *a, **k: order.append("jit.load") or real_load(*a, **k))
    loading.load_tensorrt(tmp_path / "model.ts", CPU)
    assert order == ["torch_tensorrt", "jit.load"]


def test_tensorrt_rejects_unknown_suffix(tmp_path, monkeypatch):
    monkeypatch.setattr(features, "optional_module", lambda name: types.SimpleNamespace())
    with pytest.raises(ArtifactLoadError, match=r"must end in \.ep or \.pt2.*or \.ts"):
        loading.load_tensorrt(tmp_path / "model.engine", CPU)


@pytest.mark.parametrize("fmt", ["tensorrt", "aoti"])
def test_an_archive_built_for_another_gpu_architecture_is_refused_before_loading(tmp_path, monkeypatch, cuda, fmt):
    cuda.architectures[1] = ("NVIDIA L4", (8, 9))
    (tmp_path / "model.ep").write_bytes(b"x")
    monkeypatch.setitem(loading._LOADERS, fmt, lambda *a, **k: pytest.fail("loaded onto the wrong GPU"))
    built = _artifact("model.ep", fmt, device="cuda", gpu="NVIDIA H100 80GB HBM3", compute_capability="9.0")
    with pytest.raises(ArtifactLoadError, match=r"built on NVIDIA H100 80GB HBM3 \(compute capability 9.0\).*"
                                                 r"cuda:1 is NVIDIA L4 \(compute capability 8.9\).*rebuild the archive"):
        load_model(built, tmp_path, torch.device("cuda", 1))


def test_an_archive_loads_on_a_gpu_of_the_architecture_it_was_built_for(tmp_path, monkeypatch, cuda):
    (tmp_path / "model.ep").write_bytes(b"x")
    monkeypatch.setitem(loading._LOADERS, "tensorrt", lambda *a, **k: "engine")
    built = _artifact("model.ep", "tensorrt", device="cuda", gpu="NVIDIA H100 PCIe", compute_capability="9.0")
    assert load_model(built, tmp_path, torch.device("cuda", 1)).forward == "engine"


def test_a_cuda_build_records_the_gpu_it_ran_on(cuda):
    from tsvk_tools.archive.build import built_on

    cuda.set_device(1)
    cuda.architectures[1] = ("NVIDIA L4", (8, 9))
    assert built_on("cuda") == {"gpu": "NVIDIA L4", "compute_capability": "8.9"} and built_on("cpu") == {}
