"""Before serving: does this machine's CPU run each archive's precision at the speed it was built for?

A bf16 archive built where the CPU multiplies bf16 in hardware serves on a CPU without AMX or AVX-512 BF16 too,
but every bf16 product is then emulated in fp32: slower than the fp32 archive would be, with nothing failing.
`tsvk config` and `tsvk serve` (either engine) say so before the workers start, each worker logs it too, and
`tsvk doctor` lists it as a warning.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

from tsvk.common import read_properties
from tsvk.model import BF16_REMEDY, cpu_flags, emulated_bf16

from ..archive.archive_info import read_archive_settings
from ..errors import UsageError
from .store_check import archives_loaded


def emulated_precision_lines(archives: Iterable[Path], flags: Iterable[str] | None = None) -> list[str]:
    """One warning line for each archive whose precision this CPU (or the CPU with `flags`) would emulate."""
    flags = cpu_flags() if flags is None else frozenset(flags)
    lines = []
    for path in archives:
        try:
            artifact = read_archive_settings(path).artifact
        except UsageError:  # not a tsvk archive, or a broken one: the store check and the workers name it
            continue
        problem = emulated_bf16(artifact.precision, artifact.device, flags)
        if problem:
            lines.append(f"tsvk: warning: {path.name} holds {problem}; {BF16_REMEDY}")
    return lines


def served_archives(config: Path) -> list[Path]:
    """The archive files a config.properties loads that are in its model store."""
    props = read_properties(config)
    store = Path(props.get("model_store", ""))
    return [store / name for name in archives_loaded(props) if (store / name).is_file()]
