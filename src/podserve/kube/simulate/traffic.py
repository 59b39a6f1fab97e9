"""Traffic: a `seconds,requests_per_second` trace (a step function: each row's rate holds
until the next row) or a constant rate, replayed as a Poisson process for a seed; the
arrivals of every second are drawn at once (numpy), not request by request."""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass

import numpy as np

from podserve.core.errors import InvalidInput

Array = np.ndarray


@dataclass(frozen=True, slots=True)
class Trace:
    points: tuple[tuple[float, float], ...]  # (second, requests per second), sorted

    @property
    def end_s(self) -> float:
        return self.points[-1][0]

    def rates(self, duration_s: int) -> Array:
        """Offered rate for each second 0..duration-1."""
        out = np.zeros(duration_s, dtype=np.float64)
        for i, (start, rate) in enumerate(self.points):
            stop = self.points[i + 1][0] if i + 1 < len(self.points) else duration_s
            lo, hi = max(0, int(start)), min(duration_s, int(stop))
            if hi > lo:
                out[lo:hi] = rate
        return out


def constant(rate: float) -> Trace:
    if rate < 0:
        raise InvalidInput("--rate must be >= 0")
    return Trace(((0.0, rate),))


def parse_trace(text: str, source: str = "<trace>") -> Trace:
    """Rows `seconds,requests_per_second`; a header row and blank lines are skipped."""
    points: list[tuple[float, float]] = []
    for number, row in enumerate(csv.reader(io.StringIO(text)), start=1):
        cells = [c.strip() for c in row]
        if not cells or not any(cells) or cells[0].startswith("#"):
            continue
        if len(cells) < 2:
            raise InvalidInput(f"{source}:{number}: expected `seconds,requests_per_second`")
        try:
            second, rate = float(cells[0]), float(cells[1])
        except ValueError:
            if not points and number == 1:
                continue  # header
            raise InvalidInput(f"{source}:{number}: not numbers: {','.join(cells)}") from None
        if second < 0 or rate < 0:
            raise InvalidInput(f"{source}:{number}: seconds and rate must be >= 0")
        if points and second <= points[-1][0]:
            raise InvalidInput(f"{source}:{number}: seconds must increase")
        points.append((second, rate))
    if not points:
        raise InvalidInput(f"{source}: no rows (expected `seconds,requests_per_second`)")
    return Trace(tuple(points))


def arrivals(trace: Trace, duration_s: int, seed: int) -> Array:
    rng = np.random.default_rng(seed)
    return rng.poisson(trace.rates(duration_s)).astype(np.int64)


def split(total: Array, shares: list[float], seed: int) -> list[Array]:
    """Arrivals per workload: each request goes to one backend with its weight."""
    if len(shares) <= 1:
        return [total] * len(shares)
    rng = np.random.default_rng(seed + 1)
    left = total.copy()
    out: list[Array] = []
    remaining = 1.0
    for share in shares[:-1]:
        p = 0.0 if remaining <= 0 else min(1.0, share / remaining)
        part = rng.binomial(left, p).astype(np.int64)
        out.append(part)
        left = left - part
        remaining -= share
    out.append(left)
    return out
