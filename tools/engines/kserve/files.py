"""The engine's names, defined once for the server, the CLI and `tsvk status`: its files in the run directory, and
the module its workers run."""

PID_FILE = "engine.pid"  # the server's pid, config and start time (tools/processes.py)
LOG = "engine.log"  # under logs/: the server's output, its refusals included
WORKER_LOG = "model_log.log"  # under logs/: the workers' output, as TorchServe names its workers' log
STATUS_FILE = "engine-status.json"  # the models and their workers, rewritten when a worker starts or dies
MODELS_DIR = "models"  # the archives, unpacked

WORKER_MODULE = "tsvk_tools.engines.kserve.worker"
WORKER_MARKER = WORKER_MODULE  # the command-line word that tells the engine's workers apart
