"""Which AOTInductor CPU packages a CPU can run, from the package's recorded target and the CPU's instructions."""

from tsvk.model.cpu_isa import cpu_mismatch, missing_instructions

AVX512_PACKAGE = {"AOTI_MACHINE": "x86_64", "AOTI_CPU_ISA": "AVX512 AVX512_VNNI", "AOTI_DEVICE_KEY": "cpu"}
EPYC_ZEN4 = {"avx2", "avx512", "avx512_vnni"}


def test_words_missing_from_the_cpu_are_named():
    assert missing_instructions("AVX512 AVX512_VNNI", {"avx2"}) == ["avx512", "avx512_vnni"]
    assert missing_instructions("AVX512 AVX512_VNNI", {"avx2", "avx512"}) == ["avx512_vnni"]  # a Skylake Xeon
    assert missing_instructions("AVX2", {"avx2"}) == []


def test_a_package_without_vector_code_runs_anywhere():
    assert missing_instructions("INVALID_VEC_ISA", set()) == []
    assert missing_instructions("", set()) == []


def test_an_avx512_package_on_an_avx2_cpu_is_refused_with_what_is_missing():
    reason = cpu_mismatch(AVX512_PACKAGE, {"avx2"}, "x86_64")
    assert "AVX512 AVX512_VNNI" in reason and "lacks AVX512 AVX512_VNNI" in reason and "has AVX2" in reason
    assert "SIGILL" in reason


def test_the_package_runs_on_a_cpu_with_its_instructions():
    assert cpu_mismatch(AVX512_PACKAGE, EPYC_ZEN4, "x86_64") is None
    assert cpu_mismatch({**AVX512_PACKAGE, "AOTI_CPU_ISA": "AVX2"}, {"avx2"}, "x86_64") is None


def test_a_package_for_another_architecture_is_refused():
    assert cpu_mismatch(AVX512_PACKAGE, set(), "aarch64") == "it was compiled for x86_64 and this machine is aarch64"


def test_a_package_without_metadata_is_not_refused():
    """Packages from a torch that recorded nothing: nothing to compare, the load goes on."""
    assert cpu_mismatch({}, {"avx2"}, "x86_64") is None
