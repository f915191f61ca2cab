"""The systems under test, one module per family; `registry()` maps each name to its runner."""

from __future__ import annotations


def registry() -> dict:
    from .ceiling import ComputeCeiling
    from .decentralized import Decentralized
    from .oip import OursOipGrpc, OursOipRest
    from .torchserve import Ours, TorchServeDefault, TorchServeTuned
    from .webapps import FlaskGunicorn, LitServeBatched

    systems = [Decentralized(), TorchServeDefault(), TorchServeTuned(), Ours(), OursOipRest(), OursOipGrpc(), FlaskGunicorn(), LitServeBatched(), ComputeCeiling()]
    return {system.name: system for system in systems}
