"""What the `tsvk` commands share in parsing: argument types that say what is allowed, and one way from a
parsed command line to the request dataclass a command hands on.

A bad value is refused by argparse with the type's message ("must be a whole number >= 1, got '0'"),
before any work starts.
"""

from __future__ import annotations

import argparse
from dataclasses import fields

from . import defaults


def positive_int(text: str) -> int:
    return _int_at_least(text, 1)


def non_negative_int(text: str) -> int:
    return _int_at_least(text, 0)


def _int_at_least(text: str, minimum: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number >= {minimum}, got {text!r}") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"must be a whole number >= {minimum}, got {value}")
    return value


def name_list(text: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    if not names:
        raise argparse.ArgumentTypeError("must be one or more comma-separated model names")
    return names


def on_off(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("on", "true", "1", "yes"):
        return True
    if lowered in ("off", "false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"must be on or off, got {text!r}")


def triple(text: str) -> tuple[float, float, float]:
    try:
        values = tuple(float(v) for v in text.split(","))
    except ValueError:
        values = ()
    if len(values) != 3:
        raise argparse.ArgumentTypeError(f"must be three comma-separated numbers r,g,b, got {text!r}")
    return values  # type: ignore[return-value]


def fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be a number from 0 to 1, got {text!r}")
    return value


def add_protocol_argument(p: argparse.ArgumentParser, help_text: str | None = None) -> None:
    p.add_argument("--protocol", choices=defaults.PROTOCOLS, default=None if help_text else defaults.PROTOCOL,
                   help=help_text or "oip: also serve the Open Inference Protocol (KServe v2) over REST and gRPC, through a "
                   f"front `tsvk serve` starts (default {defaults.PROTOCOL}: TorchServe's /predictions only)")


def request_from(request_class: type, args: argparse.Namespace, **computed):
    """A request dataclass from the parsed arguments: each field takes the argument of its name (an option's
    `dest`), `computed` supplies the fields no single argument gives; fields neither names keep their default."""
    names = {f.name for f in fields(request_class) if f.init}
    given = {name: value for name, value in vars(args).items() if name in names}
    return request_class(**{**given, **computed})
