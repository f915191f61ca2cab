"""The preprocessing benchmark runs every path on the same batches and reports ratios to the PIL path."""

import pytest
import torch

from tsvk_tools.lab.bench import preprocess as bench


def test_one_tiny_round_reports_every_available_path():
    results = bench.run_benchmark(batch_size=2, rounds=1, batches_per_round=1, threads=1)
    names = [r.name for r in results]
    assert names[:2] == [bench.BASELINE, "tsvk cpu"]
    assert all(r.images == 2 and r.seconds > 0 for r in results)
    report = bench.format_results(results, batch_size=2, threads=1)
    assert "1.00x" in report.splitlines()[2] and "tsvk cpu" in report


def test_both_paths_produce_the_same_batch_shape():
    rows = [{"data": payload} for payload in bench.photo_jpegs()[:2]]
    ours = bench.tsvk_path("cpu")(rows)
    builtin = bench.torchserve_builtin_path()(rows)
    assert ours.shape == builtin.shape == (2, 3, 224, 224)
    assert (ours - builtin).abs().mean().item() < 0.02  # same work: Resize(256), CenterCrop(224), Normalize


def test_main_prints_the_table(capsys):
    assert bench.main(["--batch-size", "2", "--rounds", "1", "--batches", "1"]) == 0
    assert "images/s" in capsys.readouterr().out
    torch.set_num_threads(1)


def test_at_phone_camera_sizes_the_full_size_decode_runs_beside_ours(capsys):
    results = bench.run_benchmark(batch_size=2, rounds=1, batches_per_round=1, threads=1, size=(2048, 1536))
    assert [r.name for r in results][:3] == [bench.BASELINE, "tsvk cpu", "tsvk cpu, full-size decode"]
    assert "2048x1536 JPEG" in bench.format_results(results, 2, 1, (2048, 1536))


def test_a_bad_size_says_what_is_allowed(capsys):
    with pytest.raises(SystemExit):
        bench.main(["--size", "big"])
    assert "must be WIDTHxHEIGHT in pixels, e.g. 4032x3024" in capsys.readouterr().err
