"""`make gpu-check` without a GPU: the refusal, the runner on stand-in steps, the report, the figures."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from tsvk_tools.cli import main
from tsvk_tools.lab.gpu_check import gpu_report as report, step_runner as run, steps
from tsvk_tools.lab.gpu_check.steps import Step

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
PREPROCESS_OUTPUT = """preprocess throughput: 8 photos as 640x480 JPEG, batch 8, resize 256 / crop 224, torch threads 1
path                          images/s  ms/batch    vs PIL
torchserve-builtin (PIL)         272.0     29.42     1.00x
tsvk cuda                       2450.5      3.26     9.01x
"""


def test_refuses_without_cuda_in_one_message_and_writes_nothing(tmp_path, monkeypatch, capsys):
    import torch

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["gpu-check", "--output-dir", str(tmp_path / "out")]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert err.startswith("tsvk gpu-check: error: no CUDA device here") and "on a machine with an NVIDIA GPU" in err
    assert list(tmp_path.iterdir()) == []


def test_make_help_lists_gpu_check():
    listed = subprocess.run(["make", "-s", "help"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert "make gpu-check" in listed


def _step(name: str, code: str, figures=steps.preprocess_figures) -> Step:
    return Step(name, f"stand-in for {name}", (sys.executable, "-c", code), 60, figures, f"make {name}")


def test_a_check_runs_every_step_even_after_a_failure_and_reports_each(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(run, "require_cuda", lambda: None)
    monkeypatch.setattr(report, "environment", lambda: {"git": {"commit": "abc"}})
    monkeypatch.setattr(run, "gpu_memory_used", lambda: {"0": 512})
    monkeypatch.setattr(run, "plan", lambda work_dir, model, weights: [
        _step("breaks", "import sys; print('boom: no kernel image'); sys.exit(3)"),
        _step("measures", f"print({PREPROCESS_OUTPUT!r})"),
    ])
    result, written = run.check("resnet50", "none", tmp_path / "results", log=lambda line: None)
    broken, measured = result["steps"]
    assert (broken["status"], broken["exit_status"], measured["status"], measured["exit_status"]) == ("failed", 3, "passed", 0)
    assert "boom: no kernel image" in broken["error_tail"] and measured["error_tail"] == ""
    assert measured["figures"]["paths"]["tsvk cuda"] == {"images_per_s": 2450.5, "ms_per_batch": 3.26, "vs_pil": 9.01}
    assert broken["command"].endswith("sys.exit(3)'") and broken["duration_s"] >= 0
    assert result["summary"] == {"passed": 1, "incomplete": 0, "failed": 1, "timed out": 0}
    assert broken["gpu_memory_peak_mib"] == measured["gpu_memory_peak_mib"] == {"0": 512}
    assert "| measures | passed | 0 |" in written["md"].read_text() and "GPU 0: 512" in written["md"].read_text()
    assert json.loads(written["json"].read_text()) == result
    assert written["json"].name.startswith("gpu-check-") and (tmp_path / ".tsvk/gpu-check").is_dir()


def test_a_step_over_its_limit_is_stopped_and_reported(tmp_path):
    slow = Step("slow", "sleeps", (sys.executable, "-c", "import time; print('started'); time.sleep(60)"), 1,
                steps.preprocess_figures)
    result = run.run_step(slow, tmp_path)
    assert result["status"] == "timed out" and "stopped after its 1 s limit" in result["error_tail"]


def _results() -> list[dict]:
    base = {"purpose": "p", "same_as": "", "timeout_s": 60, "log": "/tmp/x.log"}
    return [
        {**base, "name": "gpu-tests", "command": "python -m pytest tests/gpu", "status": "passed", "exit_status": 0,
         "duration_s": 12.5, "figures": {"headline": "14 passed, 0 failed, 2 skipped", "passed": 14}, "error_tail": ""},
        {**base, "name": "archive-tensorrt-fp16", "command": "python -m tsvk_tools.cli archive ...", "status": "failed",
         "exit_status": 2, "duration_s": 3.0, "figures": {"headline": "no figures: FileNotFoundError"},
         "error_tail": "tsvk archive: error: BACKEND=tensorrt needs an importable torch-tensorrt"},
    ]


def test_report_holds_every_step_in_json_and_markdown(tmp_path):
    started = datetime(2027, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    built = report.build_report(_results(), started, started + timedelta(seconds=20), {"model": "resnet50"})
    built["environment"] = {"nvidia_smi": ["0, NVIDIA H100, 580.1, 81559 MiB"], "cuda": {"torch_cuda": "13.0"},
                            "software": {"torch": "2.14.1"}, "git": {"commit": "0123456789abcdef", "dirty": True}}
    written = report.write_report(built, tmp_path)
    assert written["json"].name == "gpu-check-20270102T030405Z.json" and written["md"].suffix == ".md"
    saved = json.loads(written["json"].read_text())
    assert saved["summary"] == {"passed": 1, "incomplete": 0, "failed": 1, "timed out": 0} and saved["duration_s"] == 20.0
    assert [s["exit_status"] for s in saved["steps"]] == [0, 2]
    markdown = written["md"].read_text()
    assert "| gpu-tests | passed | 0 | 12.5 | - | 14 passed, 0 failed, 2 skipped |" in markdown
    assert "needs an importable torch-tensorrt" in markdown and "NVIDIA H100" in markdown
    assert "0123456789ab (uncommitted changes)" in markdown


def test_environment_is_recorded_on_any_machine():
    env = report.environment()
    assert {"machine", "cuda", "software", "features", "git"} <= set(env)
    assert "cvcuda" in env["software"] and set(env["features"]) >= {"cuda", "nvjpeg", "cvcuda", "torch_tensorrt"}


def test_pytest_figures_count_and_name_failures_skips_and_measurements(tmp_path):
    (tmp_path / "gpu-handler.xml").write_text(
        '<testsuites><testsuite tests="3" failures="1" errors="0" skipped="1">'
        '<testcase classname="tests.gpu.t" name="a"><properties><property name="max_levels" value="3.0"/></properties></testcase>'
        '<testcase classname="tests.gpu.t" name="b"><failure message="assert 7.0 &lt;= 6&#10;more"/></testcase>'
        '<testcase classname="tests.gpu.t" name="c"><skipped message="needs cvcuda: ImportError"/></testcase>'
        '</testsuite></testsuites>')
    figures = steps.pytest_figures(tmp_path / "gpu-handler.xml", "", tmp_path)
    assert figures["headline"] == "1 passed, 1 failed, 1 skipped"
    assert figures["failed_tests"] == ["tests.gpu.t::b: assert 7.0 <= 6"]
    assert figures["skipped_tests"] == ["tests.gpu.t::c: needs cvcuda: ImportError"]
    assert figures["measured"] == {"tests.gpu.t::a": {"max_levels": "3.0"}}


def test_a_test_file_that_crashes_loses_only_its_own_results(tmp_path, monkeypatch):
    """A segfault in a CUDA library kills its pytest process: the next file's process still reports."""
    monkeypatch.setattr(run, "gpu_memory_used", lambda: {})
    (tmp_path / "test_crashes_gpu.py").write_text("import os\n\ndef test_crash():\n    os.abort()\n")
    (tmp_path / "test_passes_gpu.py").write_text("def test_fine():\n    assert True\n")
    planned = [steps.gpu_test_step(tmp_path, path, sys.executable) for path in steps.gpu_test_files(tmp_path)]
    crashed, passed = run.run_steps(planned, tmp_path, log=lambda line: None, on_step=list)
    assert (crashed["name"], crashed["status"]) == ("gpu-crashes", "failed") and crashed["exit_status"] != 0
    assert crashed["figures"]["headline"].startswith("no figures")
    assert (passed["name"], passed["status"], passed["figures"]["headline"]) == ("gpu-passes", "passed", "1 passed, 0 failed, 0 skipped")


def test_the_report_is_rewritten_after_each_step(tmp_path, monkeypatch):
    """A check stopped half way (the machine lost, Ctrl-C) leaves the report of the steps that ran."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(run, "require_cuda", lambda: None)
    monkeypatch.setattr(run, "gpu_memory_used", lambda: {})
    monkeypatch.setattr(report, "environment", lambda: {"git": {"commit": "abc"}})
    seen = []
    monkeypatch.setattr(run, "plan", lambda work_dir, model, weights: [
        _step("first", "print('one')"),
        _step("second", "import glob, json; print([json.load(open(f))['summary'] for f in glob.glob('out/*.json')])"),
    ])
    result, written = run.check("resnet50", "none", tmp_path / "out", log=seen.append)
    assert "{'passed': 1, 'incomplete': 0, 'failed': 0, 'timed out': 0}" in (tmp_path / ".tsvk/gpu-check").joinpath(
        next(p.name for p in (tmp_path / ".tsvk/gpu-check").iterdir()), "second.log").read_text()
    assert result["summary"]["passed"] == 2 and json.loads(written["json"].read_text())["summary"]["passed"] == 2


def test_memory_peaks_keep_the_most_each_gpu_held_while_a_step_ran():
    samples = iter([{"0": 900, "1": 10}, {"0": 4200, "1": 12}, {"0": 1000}])
    with run.MemoryPeaks(lambda: next(samples, {}), interval_s=0.01) as memory:
        time.sleep(0.2)
    assert memory.peaks == {"0": 4200, "1": 12}


def test_a_report_with_a_broken_environment_probe_still_holds_the_steps(monkeypatch):
    monkeypatch.setattr(report, "environment", lambda: 1 / 0)
    started = datetime(2027, 1, 2, tzinfo=timezone.utc)
    built = report.build_report(_results(), started, started, {})
    assert built["environment"] == {"error": "ZeroDivisionError: division by zero"} and len(built["steps"]) == 2
    assert "gpu-tests" in report.render_markdown(built)


def test_bench_figures_read_the_result_this_run_wrote(tmp_path):
    result = {"systems": {"ours": {"throughput_ips": 812.5, "latency_ms": {"p50": 70.0, "p99": 90.0}},
                          "litserve": {"error": "CUDA out of memory\ntraceback"}},
              "ratios": {"ours_vs_torchserve_default": 3.1, "ours_vs_torchserve_tuned": 1.2},
              "options": {"backend": "tensorrt"}, "machine": {"gpus": ["NVIDIA H100"]}}
    (tmp_path / "r.json").write_text(json.dumps(result))
    figures = steps.bench_figures(f"| table |\nwrote {tmp_path / 'r.json'}, {tmp_path / 'r.md'}\n", tmp_path)
    assert figures["systems"]["ours"] == {"throughput_ips": 812.5, "p50_ms": 70.0, "p99_ms": 90.0}
    assert figures["systems"]["litserve"]["error"] == "CUDA out of memory"
    assert figures["headline"] == "ours 812.5 img/s, 3.1x stock defaults, 1.2x hand-tuned"
    assert steps.bench_figures("tsvk bench: error: no GPU", tmp_path)["headline"] == "no benchmark result written"


def test_archive_figures_read_the_verification_the_archive_carries(tmp_path):
    args = ["archive", "--model", "tiny", "--model-file", str(FIXTURES / "tiny_model.py"), "--model-factory", "TinyNet",
            "--resize", "40", "--crop", "32", "--labels", str(FIXTURES / "tiny_labels.txt"), "--weights", "none",
            "--max-batch", "2", "--backend", "eager", "--model-store", str(tmp_path)]
    assert main(args) == 0
    figures = steps.archive_figures(tmp_path / "tiny.mar", "", tmp_path)
    assert figures["verification"]["passed"] is True and figures["headline"].startswith("verification PASS")
    assert figures["archive_mib"] >= 0 and "random" in figures["weights"]


def test_the_plan_covers_what_a_first_gpu_run_must_measure(tmp_path):
    planned = steps.plan(tmp_path, "resnet50", "seeded")
    assert [s.name for s in planned] == ["gpu-packages", "gpu-backends", "gpu-handler", "preprocess-bench",
                                         "archive-tensorrt-fp16", "archive-aoti-fp32", "bench-gpu-quick"]
    assert planned[0].argv[-2:] == ("-r", str(ROOT / "requirements-gpu.txt")) and planned[-1].same_as == "make bench GPU=1 QUICK=1"
    assert all("--device" in s.argv and "cuda" in s.argv for s in planned if s.name.startswith("archive-"))
    assert all(s.argv[s.argv.index("--weights") + 1] == str(tmp_path / "resnet50-seeded.pth")
               for s in planned if s.name.startswith("archive-"))
    with pytest.raises(Exception, match="unknown step.*choose from gpu-packages"):
        run.select(planned, ("gpu-test",))


def test_the_worst_case_fits_in_an_hour(tmp_path):
    planned = steps.plan(tmp_path)
    worst = sum(step.timeout_s + run.STOP_GRACE_S for step in planned)
    assert worst <= steps.WORST_CASE_S == 3600, f"{worst / 60:.1f} min"


def test_the_gpu_packages_are_the_cuda_13_builds_pinned():
    pins = dict(line.split("==") for line in (ROOT / "requirements-gpu.txt").read_text().splitlines()
                if line and not line.startswith("#"))
    assert set(pins) >= {"cvcuda-cu13", "torch-tensorrt", "tensorrt-cu13"} and not any("cu12" in name for name in pins)
    assert pins["torch-tensorrt"].startswith("2.14.") and pins["tensorrt-cu13"].startswith("11.1.")


def test_make_gpu_check_needs_no_java():
    recipe = subprocess.run(
        ["make", "--no-print-directory", "-n", "-B", "gpu-check", "TSVK=tsvk"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    assert "java" not in recipe and recipe.rstrip().splitlines()[-1].startswith("tsvk gpu-check")


def test_seeded_weights_are_decisive_and_the_same_every_time(tmp_path):
    import torch
    import torchvision

    from tsvk_tools.lab.gpu_check.weights import write_seeded_weights

    first = torch.load(write_seeded_weights("resnet18", tmp_path / "a.pth"))
    second = torch.load(write_seeded_weights("resnet18", tmp_path / "b.pth"))
    assert all(torch.equal(first[k], second[k]) for k in first)
    model = torchvision.models.resnet18()
    model.load_state_dict(first)
    torch.manual_seed(1)
    with torch.no_grad():
        top2 = model.eval()(torch.randn(4, 3, 224, 224)).topk(2).values
    assert ((top2[:, 0] - top2[:, 1]) > 1).all()  # no near tie for a compiler's rounding to swap


def test_an_unknown_model_is_refused_before_any_step(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(run, "require_cuda", lambda: None)
    with pytest.raises(Exception, match="--model resnet5: .*seeded weights are made for torchvision's classifiers"):
        run.check("resnet5", "seeded", tmp_path / "out", log=lambda line: None)
    assert not (tmp_path / "out").exists()


def test_a_step_whose_tests_skipped_is_incomplete_and_names_what_skipped(tmp_path, monkeypatch):
    """pytest exits 0 when tests skip (a GPU package missing): such a step must not count as passed."""
    monkeypatch.setattr(run, "gpu_memory_used", lambda: {})
    (tmp_path / "test_skips_gpu.py").write_text(
        "import pytest\n\ndef test_runs():\n    assert True\n\n"
        "def test_needs_trt():\n    pytest.skip('needs torch_tensorrt: ImportError')\n"
    )
    (tmp_path / "test_passes_gpu.py").write_text("def test_fine():\n    assert True\n")
    planned = [steps.gpu_test_step(tmp_path, path, sys.executable) for path in steps.gpu_test_files(tmp_path)]
    results = {step["name"]: step for step in run.run_steps(planned, tmp_path, log=lambda line: None, on_step=list)}
    skipped, passed = results["gpu-skips"], results["gpu-passes"]
    assert (skipped["exit_status"], skipped["status"]) == (0, "incomplete")
    assert "test_needs_trt: needs torch_tensorrt: ImportError" in skipped["error_tail"]
    assert (passed["status"], passed["error_tail"]) == ("passed", "")
    summary = report.build_report(list(results.values()), datetime.now(timezone.utc), datetime.now(timezone.utc), {})
    assert summary["summary"]["incomplete"] == 1 and summary["summary"]["passed"] == 1
    assert "What it skipped" in report.render_markdown({**summary, "environment": {}})


def test_only_a_step_that_ran_everything_passes():
    assert run.step_status(0, False, {"skipped": 0}) == "passed"
    assert run.step_status(0, False, {"skipped": 2}) == "incomplete"
    assert run.step_status(0, False, {"headline": "no figures"}) == "passed"
    assert run.step_status(1, False, {"skipped": 0}) == "failed"
    assert run.step_status(None, True, {}) == "timed out"
