"""Open Inference Protocol calls over gRPC in flight while a server stops: what each got.

Each ModelInfer call runs on a thread and a tritonclient (the real client) of its own, so one slow or refused call
holds no other; `outcomes()` says, per call, "OK" or the gRPC status it failed with, and whether it was answered after
a given moment (the stop's start): the calls a drain must answer are those in flight when the stop came.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass

import numpy as np

CALL_TIMEOUT_S = 120.0  # a call's own deadline: far beyond any drain measured here
OK = "OK"


@dataclass
class Outcome:
    status: str = ""  # OK, or the gRPC status code's name it failed with ("" while in flight)
    answered_at: float = 0.0


class CallsInFlight:
    """`count` ModelInfer calls of one image to `model` at `target` (host:port), started at once."""

    def __init__(self, target: str, model: str, image: bytes, count: int, headers: dict[str, str] | None = None):
        self.outcomes = [Outcome() for _ in range(count)]
        self._threads = [threading.Thread(target=self._call, args=(target, model, image, headers or {}, o), daemon=True)
                         for o in self.outcomes]
        for thread in self._threads:
            thread.start()

    @staticmethod
    def _call(target: str, model: str, image: bytes, headers: dict[str, str], outcome: Outcome) -> None:
        from tritonclient.grpc import InferenceServerClient, InferInput  # the lab's gRPC client: only where calls are made
        from tritonclient.utils import InferenceServerException

        client = InferenceServerClient(target)
        tensor = InferInput("images", [1], "BYTES")
        tensor.set_data_from_numpy(np.array([image], dtype=np.object_))
        try:
            client.infer(model, [tensor], headers=headers, client_timeout=CALL_TIMEOUT_S)
            outcome.status = OK
        except InferenceServerException as err:
            outcome.status = str(err.status()).removeprefix("StatusCode.") or "failed"
        finally:
            outcome.answered_at = time.monotonic()
            client.close()

    def wait(self, timeout: float) -> list[Outcome]:
        """Every call's outcome once all have ended (or `timeout` s, after which those left say "")."""
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        return list(self.outcomes)

    def ended(self) -> int:
        return sum(1 for outcome in self.outcomes if outcome.status)


def summary(outcomes: list[Outcome], stop_began: float) -> dict:
    """The figures of a drain report: calls sent, answered OK, answered OK after the stop began, and every status."""
    return {"sent": len(outcomes), "answered": sum(o.status == OK for o in outcomes),
            "answered_after_stop_began": sum(o.status == OK and o.answered_at >= stop_began for o in outcomes),
            "statuses": dict(Counter(o.status or "no end" for o in outcomes))}
