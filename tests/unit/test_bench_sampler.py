"""The process-tree sampler sees a child's memory and CPU, splits the CPU by kind of process, and notices when
a process is gone."""

import subprocess
import sys
import time

import psutil

from tsvk_tools.measure.sampler import LOAD_GENERATOR, Sample, TreeSampler, leftover, process_kind, window_stats

BUSY_CHILD = "import time\nblob = bytearray(64 * 2**20)\nend = time.time() + 1.5\nwhile time.time() < end: pass\n"


def test_sampler_measures_a_busy_child_and_its_exit():
    with TreeSampler(interval=0.1) as sampler:
        child = subprocess.Popen([sys.executable, "-c", BUSY_CHILD])
        child.wait()
        time.sleep(0.2)
    assert child.pid in sampler.seen_pids
    stats = window_stats(sampler.samples)
    assert stats["peak_rss_mb"] >= 64
    assert sampler.peak_rss_mb_by_pid[child.pid] >= 64  # each process's own peak, too
    assert stats["peak_cpu_pct"] >= 25  # a spinning child; well above 0 even on a machine busy with other work
    assert leftover(list(sampler.seen.values())) == []


def test_sampler_splits_cpu_by_process_kind_and_keeps_the_load_generator_beside_the_system(tmp_path):
    script = tmp_path / "spinner.py"
    script.write_text(BUSY_CHILD)
    with TreeSampler(interval=0.1) as sampler:
        child = subprocess.Popen([sys.executable, str(script)])
        end = time.time() + 1.2
        while time.time() < end:  # this process works too: the load generator's share
            pass
        child.wait()
    by_kind = window_stats(sampler.samples)["mean_cpu_pct_by_process"]
    assert by_kind["spinner.py"] >= 10 and by_kind[LOAD_GENERATOR] >= 10
    assert all(sample.cpu_pct == sum(v for k, v in sample.cpu_pct_by_process.items() if k != LOAD_GENERATOR)
               for sample in sampler.samples)  # the system's total leaves the load generator out


def test_process_kind_names_the_script_module_or_program():
    assert (
        process_kind(["/venv/bin/python", "/venv/lib/ts/model_service_worker.py", "--sock-type", "unix"], "python")
        == "model_service_worker.py"
    )
    assert (
        process_kind(["python3.11", "-u", "-m", "tsvk_tools.lab.bench.apps.litserve_openvino_app", "--port", "1"], "python3.11")
        == "litserve_openvino_app"
    )
    assert process_kind(["/usr/lib/jvm/bin/java", "-cp", "x", "org.pytorch.serve.ModelServer"], "java") == "java"
    assert process_kind(["/opt/tritonserver/bin/tritonserver", "--model-repository", "/m"], "tritonserver") == "tritonserver"
    assert process_kind(["python3", "-c", "print(1)"], "python3") == "python3"
    assert process_kind([], "zombie") == "zombie"  # no command line readable: its name


def test_leftover_lists_running_processes():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    process = psutil.Process(child.pid)
    try:
        assert [p.pid for p in leftover([process])] == [child.pid]
    finally:
        child.kill()
        child.wait()
    assert leftover([process]) == []


def test_leftover_does_not_mistake_a_reused_pid_for_the_process_it_saw():
    """A Process object whose pid now names a younger process (pid reuse) counts as gone, so the
    benchmark never kills it."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        seen = psutil.Process(child.pid)
        seen._create_time = seen.create_time() - 1000  # as if the pid had belonged to an older process
        seen._ident = (seen.pid, seen._create_time)
        assert leftover([seen]) == []
    finally:
        child.kill()
        child.wait()


def test_window_stats_uses_only_samples_inside_the_window():
    samples = [
        Sample(1.0, 10.0, 100.0, 1),
        Sample(2.0, 150.0, 300.0, 2, {"java": 30.0, "worker.py": 120.0}),
        Sample(2.4, 90.0, 200.0, 2, {"worker.py": 90.0}),
        Sample(3.0, 20.0, 900.0, 1),
    ]
    assert window_stats(samples, 1.5, 2.5) == {
        "peak_cpu_pct": 150.0,
        "mean_cpu_pct": 120.0,
        "peak_rss_mb": 300.0,
        "mean_cpu_pct_by_process": {"java": 15.0, "worker.py": 105.0},
    }
    assert window_stats(samples)["peak_rss_mb"] == 900.0
    assert window_stats(samples, 5.0)["peak_cpu_pct"] is None


def test_a_process_that_execs_another_program_is_counted_as_the_program_it_became(tmp_path):
    """TorchServe starts each worker through Java's jspawnhelper, which then execs Python: same pid, another program."""
    script = tmp_path / "spinner.py"
    script.write_text(BUSY_CHILD)
    with TreeSampler(interval=0.1) as sampler:
        child = subprocess.Popen(["/bin/sh", "-c", f"sleep 0.5; exec {sys.executable} {script}"])
        child.wait()
    kinds = [set(sample.cpu_pct_by_process) for sample in sampler.samples]
    as_shell = [i for i, names in enumerate(kinds) if "sh" in names]
    as_script = [i for i, names in enumerate(kinds) if "spinner.py" in names]
    assert as_shell and as_script and max(as_shell) < min(as_script)  # the same pid, first the shell, then the script
    assert window_stats(sampler.samples)["mean_cpu_pct_by_process"]["spinner.py"] >= 10
