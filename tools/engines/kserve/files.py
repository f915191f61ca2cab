"""The engine's files in its run directory, named once for the server, the CLI and `tsvk status`."""

PID_FILE = "engine.pid"  # the server's pid, config and start time (tools/processes.py)
LOG = "engine.log"  # under logs/: the server's output, its refusals included
WORKER_LOG = "model_log.log"  # under logs/: the workers' output, as TorchServe names its workers' log
STATUS_FILE = "engine-status.json"  # the models and their workers, rewritten when a worker starts or dies
MODELS_DIR = "models"  # the archives, unpacked
