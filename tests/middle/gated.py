"""A model whose calls wait at a gate the test opens: the way to hold a worker busy, so
that the next request queues, without timing anything.

Loaded through the `custom` runtime from this installed path, like a user's package."""

from __future__ import annotations

import threading

import numpy as np

from podserve.runtimes import LoadContext, ModelAPI
from podserve.runtimes.base import Payload


class Gate:
    def __init__(self) -> None:
        self.open = threading.Event()
        self.open.set()
        self.entered = threading.Event()  # a call is waiting at (or went through) the gate
        self.calls = 0
        self.rows = 0


GATES: dict[str, Gate] = {}


class GatedModel(ModelAPI):
    supports_batching = True

    def load(self, context: LoadContext) -> None:
        self.gate = GATES.setdefault(context.config.name, Gate())

    def predict(self, batch: Payload) -> Payload:
        gate = self.gate
        gate.calls += 1
        gate.rows += len(batch["x"])
        gate.entered.set()
        # bounded, so that a failing test cannot wedge the session
        gate.open.wait(30)
        return {"y": (batch["x"] * 2).astype(np.float32)}
