"""`make gpu-check` (`tsvk gpu-check`): every GPU measurement the project lacks, in one run and one report.

No machine this project was built on had a GPU, so none of its GPU code has run on one yet. This is the
command for the first person who has one. It runs, each as its own process and in this order, the GPU
tests, the preprocessing benchmark (the GPU backends join it where CUDA is present), a TensorRT and an
AOTInductor-on-CUDA archive with their verification, and `make bench GPU=1 QUICK=1`, then writes
benchmarks/results/gpu-check-<UTC time>.json and .md: every step's command, exit status, duration, key
figures, and the tail of its output when it failed. A failed step does not stop the others. Without a
CUDA device it refuses before doing anything.

`steps.py` says what runs and what each step measured, `step_runner.py` runs them, `gpu_report.py` writes the report.
"""

from .step_runner import check, require_cuda

__all__ = ["check", "require_cuda"]
