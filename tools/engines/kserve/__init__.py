"""tsvk's own engine: the archives a TorchServe config names, served without TorchServe (`tsvk serve --engine kserve`).

One server process (server.py) speaks TorchServe's inference API (`/predictions`, `/ping`) and the Open Inference
Protocol through KServe's SDK; worker processes (worker.py), one per planned TorchServe worker, each load one
archive's own `tsvk` package and artifact and answer batches that tsvk's batcher (batcher.py) forms.

Nothing here is imported by the package: worker.py runs as `python -m tsvk_tools.engines.kserve.worker` and must
import nothing of tsvk's before the archive's copy is on its path.
"""
