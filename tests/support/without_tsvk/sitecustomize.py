"""Put this folder first on PYTHONPATH to hide the installed tsvk packages from a Python process.

The integration tests start TorchServe with it, so a worker can only import `tsvk` from the
archive itself: that is how a stock TorchServe image, without our package, would run it.
"""

import sys


def _is_tsvk_editable_hook(hook) -> bool:
    return str(getattr(hook, "__module__", "")).startswith("__editable___tsvk")


sys.meta_path[:] = [f for f in sys.meta_path if not _is_tsvk_editable_hook(f)]
sys.path_hooks[:] = [h for h in sys.path_hooks if not _is_tsvk_editable_hook(h)]
sys.path_importer_cache.clear()
