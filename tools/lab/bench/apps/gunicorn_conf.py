"""gunicorn settings for the Flask system: each worker marks itself ready once its model is loaded,
so the benchmark starts timing only when every worker can answer."""

import os
from pathlib import Path

from tsvk_tools.lab.bench.apps.environment import READY_DIR_ENV


def post_worker_init(worker):
    ready_dir = os.environ.get(READY_DIR_ENV)
    if ready_dir:
        Path(ready_dir, str(worker.pid)).touch()
