"""A deterministic model for tests and demos: `y = x * scale + offset` on input "x".

Its parameters make the failure modes of real models reproducible:
  scale, offset          the arithmetic
  delay_s                seconds each batch takes (a slow but progressing model)
  hang_value             a batch containing this value blocks until the process exits
                         (a wedged model; the watchdog must notice)
  fail_value             a batch containing this value raises (a bad item)
  load_delay_s           seconds `load` takes (a big model)
  load_error             if set, `load` raises with this message
"""

from __future__ import annotations

import threading
import time

import numpy as np

from podserve.core.errors import InferenceFailed, ModelLoadFailed
from podserve.runtimes.base import LoadContext, ModelAPI, Payload
from podserve.runtimes.parameters import FakeParameters

# Never set: a hung predict waits on it forever, like a wedged device call.
_NEVER = threading.Event()


class FakeModel(ModelAPI):
    Parameters = FakeParameters

    def __init__(self) -> None:
        super().__init__()
        self.scale = 2.0
        self.offset = 0.0
        self.delay_s = 0.0
        self.hang_value: float | None = None
        self.fail_value: float | None = None

    def load(self, context: LoadContext) -> None:
        params = context.options_as(FakeParameters)
        time.sleep(params.load_delay_s)
        if params.load_error:
            raise ModelLoadFailed(params.load_error)
        self.scale = params.scale
        self.offset = params.offset
        self.delay_s = params.delay_s
        self.hang_value = params.hang_value
        self.fail_value = params.fail_value

    def predict(self, batch: Payload) -> Payload:
        x = batch["x"]
        if self.hang_value is not None and bool(np.any(x == self.hang_value)):
            _NEVER.wait()
        if self.fail_value is not None and bool(np.any(x == self.fail_value)):
            raise InferenceFailed(f"fake model refuses the value {self.fail_value}")
        if self.delay_s:
            time.sleep(self.delay_s)
        y = (x.astype(np.float64) * self.scale + self.offset).astype(x.dtype)
        return {"y": y}
