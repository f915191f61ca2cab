"""The error types the CLI turns into a clean message and exit status 2 (no traceback)."""


class UsageError(Exception):
    """A bad argument or a precondition the user can fix; the message says what is allowed."""


class WeightsUnavailable(UsageError):
    """Pretrained weights cannot be downloaded here (no network, a proxy, a hash mismatch)."""


class PortTaken(UsageError):
    """A port of the config was taken by another process before TorchServe could bind it."""
