"""What every engine reuses, whichever serves: a started server's run (run.py), the archives a config names opened
and unpacked for workers (archives.py), an archive's service loaded in a worker (service.py), the dynamic batcher
(batcher.py), the metrics under TorchServe's names (metrics.py) and a stop that answers what was taken in (drain.py,
listeners.py). Nothing here imports an engine's package, and this file imports nothing at all: an engine's worker
imports the metrics before the archive's own copy of tsvk is on its path."""
