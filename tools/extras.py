"""tsvk's optional parts (setup.cfg's extras) and the one line that installs each.

A plain `pip install tsvk` builds, configures and serves on tsvk's own engine; what needs more (TorchServe's engine,
Ray, OpenVINO, the lab, ...) is an extra. A command that meets one missing says which, in one line, instead of
a traceback: tests/unit/test_extras.py holds these names to setup.cfg's.
"""

from __future__ import annotations

from .errors import UsageError

EXTRAS = ("torchserve", "ray", "parquet", "openvino", "int8", "gpu", "tune", "lab")


class MissingExtra(UsageError):
    """A command needs an extra that is not installed; the message is the pip line that installs it."""


def install_line(extra: str) -> str:
    """The command a user types: quoted, as a shell would otherwise expand the brackets."""
    if extra not in EXTRAS:
        raise ValueError(f"extra must be one of {', '.join(EXTRAS)}, got {extra!r}")
    return f"pip install 'tsvk[{extra}]'"


def missing_extra(what: str, extra: str, err: BaseException | None = None) -> MissingExtra:
    """The error for `what` needing `extra`, naming the module that failed to import when there was one."""
    module = getattr(err, "name", None)
    because = f" ({module} is not installed)" if module else (f" ({err})" if err else "")
    return MissingExtra(f"{what} needs tsvk's {extra} extra{because}: {install_line(extra)}")
