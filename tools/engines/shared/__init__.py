"""What every engine reuses, whichever serves: a started server's run (run.py), the archives a config names opened
and unpacked for workers (archives.py), the dynamic batcher (batcher.py) and the metrics under TorchServe's names
(metrics.py). Nothing here imports an engine's package, and this file imports nothing at all: an engine's worker
imports the metrics before the archive's own copy of tsvk is on its path."""
