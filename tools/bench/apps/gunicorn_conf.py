"""gunicorn settings for the Flask system: each worker marks itself ready once its model is loaded,
so the benchmark starts timing only when every worker can answer."""

import os
from pathlib import Path


def post_worker_init(worker):
    ready_dir = os.environ.get("TSVK_BENCH_READY_DIR")
    if ready_dir:
        Path(ready_dir, str(worker.pid)).touch()
