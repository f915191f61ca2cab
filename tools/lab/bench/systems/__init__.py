"""The systems under test, one module per family; `registry()` maps each name to its runner."""

from __future__ import annotations

from .batch import BatchLocal, BatchLocalFast, BatchRay, BatchRayFast
from .ceiling import ComputeCeiling, FastCeiling, FastPipelineCeiling, PipelineCeiling
from .decentralized import Decentralized
from .engine import OursKserve, OursKserveFast, OursKserveOipGrpc, OursKserveOipRest
from .oip import OursOipGrpc, OursOipRest
from .peers import LitServeDraft, LitServeFast, TorchServeBest, TorchServeDraft, Triton
from .torchserve import Ours, OursFast, OursTuned, TorchServeDefault, TorchServeTuned
from .webapps import FlaskGunicorn, LitServeBatched


def registry() -> dict:
    systems = [Decentralized(), TorchServeDefault(), TorchServeTuned(), Ours(), OursTuned(), OursFast(), OursOipRest(), OursOipGrpc(),
               FlaskGunicorn(), LitServeBatched(), ComputeCeiling(), FastCeiling(),
               TorchServeBest(), Triton(), LitServeFast(), FastPipelineCeiling(), PipelineCeiling(), BatchLocal(), BatchLocalFast(),
               BatchRay(), BatchRayFast(), OursKserve(), OursKserveFast(), OursKserveOipRest(), OursKserveOipGrpc(), TorchServeDraft(),
               LitServeDraft()]
    return {system.name: system for system in systems}
