"""What one load step observed, request by request, kept in columns.

A step can see hundreds of thousands of requests; appending floats to a few lists costs
far less than an object per request, and the statistics turn the columns into numpy
arrays once at the end.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from podserve.core.types import Array

# Outcomes that never reached an HTTP status are stored as negative codes.
CONNECT_ERROR = -1
TIMEOUT = -2
CONNECTION_CLOSED = -3
PROTOCOL_ERROR = -4
STREAM_INCOMPLETE = -5

OUTCOME_NAMES: dict[int, str] = {
    CONNECT_ERROR: "connect-error",
    TIMEOUT: "timeout",
    CONNECTION_CLOSED: "connection-closed",
    PROTOCOL_ERROR: "protocol-error",
    STREAM_INCOMPLETE: "stream-incomplete",
}


def outcome_name(code: int) -> str:
    return OUTCOME_NAMES.get(code, str(code))


@dataclass(frozen=True, slots=True)
class StepColumns:
    """The recorded columns as arrays (one row per measured request)."""

    start_s: Array
    latency_s: Array
    status: Array
    ttft_s: Array
    output_tokens: Array
    itl_s: Array
    send_lag_s: Array
    window_s: float
    # CPU time this process used over the step's wall time (1.0 = one core busy).
    client_cpu_fraction: float

    @property
    def count(self) -> int:
        return int(self.status.size)


class Recorder:
    """Appends one row per measured request. Not thread-safe: one event loop writes it."""

    __slots__ = (
        "_itl",
        "_latency",
        "_send_lag",
        "_start",
        "_status",
        "_tokens",
        "_ttft",
        "ok_count",
    )

    def __init__(self) -> None:
        self._start: list[float] = []
        self._latency: list[float] = []
        self._status: list[int] = []
        self._ttft: list[float] = []
        self._tokens: list[int] = []
        self._itl: list[float] = []
        self._send_lag: list[float] = []
        self.ok_count = 0

    def __len__(self) -> int:
        return len(self._status)

    def add(
        self,
        start_s: float,
        end_s: float,
        status: int,
        *,
        ttft_s: float = math.nan,
        token_times_s: list[float] | None = None,
        output_tokens: int = 0,
    ) -> None:
        self._start.append(start_s)
        self._latency.append(end_s - start_s)
        self._status.append(status)
        self._ttft.append(ttft_s)
        self._tokens.append(output_tokens)
        if token_times_s and len(token_times_s) > 1:
            self._itl.extend(b - a for a, b in itertools.pairwise(token_times_s))
        if 200 <= status < 300:
            self.ok_count += 1

    def add_send_lag(self, lag_s: float) -> None:
        """How late an open-loop request left against its scheduled arrival."""
        self._send_lag.append(lag_s)

    def latencies_since(self, index: int) -> list[float]:
        """Latencies recorded after row `index` (for live progress)."""
        return self._latency[index:]

    def columns(self, window_s: float, client_cpu_fraction: float) -> StepColumns:
        return StepColumns(
            start_s=np.asarray(self._start, dtype=np.float64),
            latency_s=np.asarray(self._latency, dtype=np.float64),
            status=np.asarray(self._status, dtype=np.int64),
            ttft_s=np.asarray(self._ttft, dtype=np.float64),
            output_tokens=np.asarray(self._tokens, dtype=np.int64),
            itl_s=np.asarray(self._itl, dtype=np.float64),
            send_lag_s=np.asarray(self._send_lag, dtype=np.float64),
            window_s=window_s,
            client_cpu_fraction=client_cpu_fraction,
        )
