"""Payload logging for drift monitoring: sampled request/response pairs, written by a
background thread so that the request path never waits on a sink.

The request path does one cheap thing: if a sample is taken, it appends a reference to
the request and response to a bounded buffer, or drops the record (and counts it) when
the buffer is full. Serialising, redaction and I/O happen on the writer thread. A slow or
dead sink therefore costs records, never latency or errors.
"""

from __future__ import annotations

import collections
import logging
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from podserve.core.tensors import Datatype, InferRequest, InferResponse, Tensor
from podserve.obs.redaction import REDACTED, Redactor

log = logging.getLogger("podserve.payloads")


@dataclass(frozen=True, slots=True)
class PayloadRecord:
    request: InferRequest
    response: InferResponse
    request_id: str
    endpoint: str
    time_s: float


class PayloadSink(Protocol):
    def write(self, events: Sequence[dict[str, Any]]) -> None:
        """Write a batch of CloudEvents (dicts); raise on failure."""
        ...

    def close(self) -> None: ...


Counter = Callable[[str, int], None]


class PayloadLogger:
    def __init__(
        self,
        *,
        sinks: Sequence[PayloadSink],
        sample_rate: float,
        redact: Iterable[str] = (),
        buffer_records: int = 1024,
        batch_records: int = 64,
        count: Counter | None = None,
    ) -> None:
        self._sinks = list(sinks)
        self._sample_rate = sample_rate
        # Patterns (see obs/redaction.py): names at any depth, dotted paths, globs, `re:`.
        self._redact = Redactor(redact)
        self._buffer: collections.deque[PayloadRecord] = collections.deque()
        self._capacity = buffer_records
        self._batch = batch_records
        self._count = count or (lambda result, n: None)
        self._wake = threading.Condition()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="podserve-payloads", daemon=True)
        self._thread.start()

    # --- request path ------------------------------------------------------------------
    def offer(
        self, request: InferRequest, response: InferResponse, request_id: str, endpoint: str
    ) -> None:
        """Never blocks on I/O: a sampled record is queued, or dropped if the buffer is full."""
        if self._sample_rate < 1 and random.random() >= self._sample_rate:
            return
        if len(self._buffer) >= self._capacity:
            self._count("dropped", 1)
            return
        self._buffer.append(PayloadRecord(request, response, request_id, endpoint, time.time()))
        with self._wake:
            self._wake.notify()

    # --- writer thread -----------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._buffer and not self._stopping:
                    self._wake.wait()
                if not self._buffer and self._stopping:
                    return
            records = [self._buffer.popleft() for _ in range(min(self._batch, len(self._buffer)))]
            events = [self._event(r) for r in records]
            for sink in self._sinks:
                try:
                    sink.write(events)
                    self._count("written", len(events))
                except Exception as exc:  # a sink failure costs records, never requests
                    self._count("sink_error", len(events))
                    log.warning(
                        "payload sink failed",
                        extra={"sink": type(sink).__name__, "error": repr(exc)},
                    )

    def close(self, timeout_s: float = 5.0) -> None:
        """Flush what is buffered (bounded by `timeout_s`), then close the sinks."""
        with self._wake:
            self._stopping = True
            self._wake.notify()
        self._thread.join(timeout=timeout_s)
        for sink in self._sinks:
            try:
                sink.close()
            except Exception as exc:
                log.warning("payload sink failed to close", extra={"error": repr(exc)})

    def _event(self, record: PayloadRecord) -> dict[str, Any]:
        """One CloudEvent (structured mode, spec 1.0) per request/response pair."""
        request, response = record.request, record.response
        return {
            "specversion": "1.0",
            "id": str(uuid.uuid4()),
            "source": f"podserve/{response.model_name}",
            "type": "dev.podserve.inference",
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.time_s))
            + f".{int(record.time_s * 1000) % 1000:03d}Z",
            "datacontenttype": "application/json",
            "subject": record.request_id,
            "data": {
                "model": response.model_name,
                "version": response.model_version,
                "request_id": record.request_id,
                "endpoint": record.endpoint,
                "parameters": self._redact.redact(dict(request.parameters)),
                "inputs": [self._tensor(t) for t in request.inputs],
                "outputs": [self._tensor(t) for t in response.outputs],
            },
        }

    def _tensor(self, tensor: Tensor) -> dict[str, Any]:
        data: Any
        if self._redact.matches((tensor.name,)):
            data = REDACTED
        else:
            data = _json_data(tensor.data)
            if tensor.datatype is Datatype.BYTES and self._redact:
                # A BYTES element often carries a whole JSON record; its fields are
                # named from that record's root (`customer.ssn`).
                data = [self._redact.redact_json_text(v) if isinstance(v, str) else v for v in data]
        return {
            "name": tensor.name,
            "datatype": tensor.datatype.value,
            "shape": list(tensor.shape),
            "data": data,
        }


def _json_data(array: np.ndarray[Any, Any]) -> Any:
    if array.dtype == object:
        return [
            v.decode("utf-8", "replace") if isinstance(v, bytes) else v
            for v in array.reshape(-1).tolist()
        ]
    return array.reshape(-1).tolist()
