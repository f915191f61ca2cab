"""Run-time half of the toolkit: everything a TorchServe worker needs, packed into each .mar.

Nothing in this package imports TorchServe (`ts`) or the build-time tools, so it can be unit
tested and reused outside a worker, and it runs on a stock TorchServe image.
"""

__version__ = "0.1.0"
